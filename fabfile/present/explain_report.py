"""What ``inv explain`` (and ``--explain`` on bench and sweep) prints: per configuration and rank, the measured
phases on one line, then each rule's sentence with the rule's id; ``--rules`` prints the rule table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

from fabfile.plan.explain import Finding, Subject, fmt, rules_table, verdict
from fabfile.present.profile_report import rank_span
from fabfile.present.tables import Col, print_table

_PHASES = (("draft", "draft"), ("draft_step", "per draft step"), ("verify", "verify"),
           ("draft_extend", "draft-extend"), ("other", "other"), ("cycle", "cycle"), ("decode", "decode"))


def phase_line(a: Mapping[str, Any]) -> str:
    """``draft 1.20 ms [timer] · verify 5.2 ms [timer] · ... · accept length 2.37 [meta]``: every figure sourced."""
    parts = [f"{label} {fmt(a.get(k))}" for k, label in _PHASES if isinstance(a.get(k), Mapping)]
    if isinstance(a.get("accept_length"), Mapping):
        parts.append(f"accept length {fmt(a.get('accept_length'), '')}")
    return " · ".join(parts) if parts else "no phase measured"


def document(pairs: list[tuple[Subject, list[Finding]]]) -> dict[str, Any]:
    """The JSON form: per subject its anatomy and findings."""
    return {"subjects": [{"config": s.config, "rank": s.rank, "predicted": bool(s.anatomy.get("predicted")),
                          "anatomy": dict(s.anatomy),
                          "baseline_decode": dict(s.decode() or {}) or None, "baseline_from": s.baseline_from or None,
                          "findings": [{"rule": f.rule, "sentence": f.sentence, "figures": f.figures} for f in found],
                          "verdict": verdict(s)}
                         for s, found in pairs],
            "rules": [r["id"] for r in rules_table()]}


def _said(s: Subject, found: list[Finding]) -> tuple[str, ...]:
    decode = s.decode()
    return (s.host, s.config, phase_line(s.anatomy), fmt(decode) if decode else "", s.baseline_from or "",
            *(f"{f.rule}: {f.sentence}" for f in found))


def same_ranks_together(pairs: list[tuple[Subject, list[Finding]]]) -> list[tuple[Subject, list[Finding], list[Any]]]:
    """A configuration's ranks that would print the same line and findings, as one entry with their ranks (eight
    identical lines, each followed by the same finding, said nothing the first did not)."""
    merged: list[tuple[Subject, list[Finding], list[Any]]] = []
    for s, found in pairs:
        if merged and _said(merged[-1][0], merged[-1][1]) == _said(s, found):
            merged[-1][2].append(s.rank)
        else:
            merged.append((s, found, [s.rank]))
    return merged


def print_explained(pairs: list[tuple[Subject, list[Finding]]], console: Console) -> None:
    if not pairs:
        console.print("nothing to explain: the document has no configuration with measured figures")
        return
    # Several hosts' ranks are never merged into one entry (a host is part of what a line says), and each entry
    # names its host: two hosts measuring the same figures are still two verdicts.
    hosts = len({s.host for s, _ in pairs}) > 1
    for s, found, ranks in same_ranks_together(pairs):
        where = f" ranks {rank_span(ranks)} (the same figures and findings)" if len(ranks) > 1 \
            else f" rank {s.rank}" if s.rank else ""
        label = " (predicted, never deployed)" if s.anatomy.get("predicted") else ""
        head = f"{escape(s.host)} " if hosts and s.host else ""
        console.print(f"{head}[bold]{escape(s.config)}[/bold]{label}{where}: {escape(phase_line(s.anatomy))}",
                      markup=True)
        decode = s.decode()
        if decode:
            console.print(f"  baseline decode step {fmt(decode)}"
                          + (f" ({s.baseline_from})" if s.baseline_from else ""), markup=False)
        if not found and not s.anatomy.get("predicted"):
            console.print("  [dim]no rule fired (`inv explain --rules` lists them and their thresholds)[/dim]")
        for f in found:
            console.print(f"  [cyan]{f.rule}[/cyan]: {escape(f.sentence)}", markup=True)
        console.print(f"  [bold]{escape(verdict(s))}[/bold]", markup=True)  # always one concluding sentence


def print_rules(console: Console) -> None:
    print_table(console, [Col("rule"), Col("fires when", key=False), Col("points at", key=False)],
                [[r["id"], escape(r["fires_when"]), escape(r["says"])] for r in rules_table()], boxed=False)
    console.print(escape("Every figure in a sentence names its source: [timer] SGLang's device timer, [trace] its "
                         "profiler trace, [tool] the tool's per-request arithmetic, [meta] SGLang's per-request "
                         "counters, [derived] TPOT × accept length."))
