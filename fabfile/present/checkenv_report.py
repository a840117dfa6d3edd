"""Rendering of a ``check-env`` evaluation (:func:`fabfile.remote.evidence.judge.evaluate`): the matrix, the table
(its JSON form: ``fabfile.results.hosts.evaluation_document``).

The evaluation and facts are the plain dicts the host-side agent and ``evaluate`` produce; this module only
reads them, so it works the same on a live result and on a saved ``--json`` file. Text that came from the host
is escaped before it reaches rich's markup parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.text import Text

from fabfile.present.tables import DASH, Col, cell, fit_table, print_table

STATUS_STYLE: dict[str, str] = {
    "proven": "bold green",
    "overridden": "bold red",
    "sglang_overrides": "bold red",
    "different": "bold red",
    "unconfirmed": "yellow",
    "missing": "red",
    "launcher_only": "magenta",
}
# How a status reads in words (the rest: its name with spaces).
STATUS_LABEL: dict[str, str] = {"sglang_overrides": "overridden by SGLang"}


def status_label(status: str) -> str:
    return STATUS_LABEL.get(status, status.replace("_", " "))


EVIDENCE_LABEL: dict[str, str] = {
    "nccl_log": "NCCL log",
    "marker": "patch marker",
    "environ": "start environ",
}
SEVERITY_STYLE: dict[str, str] = {"error": "red", "warning": "yellow", "info": "cyan"}


def _rank_label(row: Mapping[str, Any]) -> str:
    label = row.get("label")
    if label:
        return str(label)
    rank = row.get("rank")
    return cell(rank, "TP{}")


def _facts_lines(facts: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    gpus: Mapping[str, Any] = facts.get("gpus") or {}
    server: Mapping[str, Any] = facts.get("server") or {}
    if server.get("is_recorded_deploy") is True:
        out.append(f"server: deploy {cell(server.get('recorded_deploy'))} (judged by what its record asked for)")
    elif server.get("is_recorded_deploy") is False:
        out.append(f"server: NOT the recorded deploy {cell(server.get('recorded_deploy'))} "
                   f"({cell(server.get('why'))}); launch flags from {cell(facts.get('launch_argv_source'))}")
    out.append(f"SGLang version: {cell(facts.get('sglang_version'))}")
    names = gpus.get("names") or []
    gpu_desc = f"{cell(gpus.get('count'))}"
    if names:
        gpu_desc += f" x {names[0]}" if len(set(names)) == 1 else f" ({', '.join(names)})"
    out.append(f"GPUs: {gpu_desc}; interconnect: {cell(gpus.get('interconnect'))}")
    car: Mapping[str, Any] = facts.get("custom_all_reduce") or {}
    enabled = car.get("enabled")
    state = "unknown" if enabled is None else ("on" if enabled else "off")
    reasons = "; ".join(str(r) for r in car.get("reasons") or [])
    out.append(f"custom all-reduce: {state}" + (f" ({reasons})" if reasons else ""))
    flagged = facts.get("flagged_expected_vars") or []
    if flagged:
        out.append(f"SGLang itself sets (in some cases): {', '.join(str(v) for v in flagged)}")
    draft: Mapping[str, Any] = facts.get("draft_worker") or {}
    if draft.get("note"):
        out.append(f"draft worker: {draft['note']}")
    return out


def render_table(evaluation: Mapping[str, Any], facts: Mapping[str, Any], console: Console) -> None:
    """One table (rank, pid, variable, expected, observed, evidence, status), then the facts and the hints."""
    cols = [Col("rank"), Col("pid"), Col("variable"), Col("expected"), Col("observed"),
            Col("evidence", key=False), Col("status")]
    rows: list[Mapping[str, Any]] = list(evaluation.get("rows") or [])
    cells: list[list[Any]] = []
    for row in rows:
        status = str(row.get("status") or "")
        style = STATUS_STYLE.get(status, "")
        evidence = row.get("evidence")
        # Text cells: what the host said is never read as markup.
        cells.append([_rank_label(row), cell(row.get("pid")), Text(cell(row.get("var"))),
                      Text(cell(row.get("expected"))),
                      Text(cell(row.get("observed")), style="red" if status == "different" else ""),
                      EVIDENCE_LABEL.get(str(evidence), cell(evidence)), Text(status_label(status), style=style)])
    if rows:
        print_table(console, cols, cells, title="NCCL environment per scheduler process")
    else:
        console.print("[bold red]no scheduler rows[/]: nothing could be checked")

    notes = [r for r in rows if r.get("note")]
    for r in notes:
        text = f"{_rank_label(r)} pid {cell(r.get('pid'))} {r.get('var')}: {r.get('note')}"
        console.print(f"  [dim]{escape(text)}[/]", highlight=False)
    _verdict_facts_hints(evaluation, facts, console)


# One mark per cell of the compact matrix; the legend under it says what each one means.
MARK: dict[str, str] = {"proven": "ok", "overridden": "OVERRIDDEN", "sglang_overrides": "SGLANG",
                        "different": "DIFF", "unconfirmed": "?",
                        "missing": "MISSING", "launcher_only": "launcher"}
EVIDENCE_LETTER: dict[str, str] = {"nccl_log": "L", "marker": "M", "environ": "E"}


def render_matrix(evaluation: Mapping[str, Any], facts: Mapping[str, Any], console: Console) -> None:
    """The default check-env view: ranks × variables, one mark per cell, the evidence in a legend, details only
    for the cells that are not proven. Plain columns sized to their content: nothing is cut at any width (when
    the variables do not fit the terminal, the heads become numbers explained under the matrix)."""
    rows: list[Mapping[str, Any]] = list(evaluation.get("rows") or [])
    if not rows:
        console.print("[bold red]no scheduler rows[/]: nothing could be checked")
        _verdict_facts_hints(evaluation, facts, console)
        return
    variables: list[str] = list(dict.fromkeys(str(r.get("var")) for r in rows))
    ranks: list[tuple[str, str]] = list(dict.fromkeys((_rank_label(r), cell(r.get("pid"))) for r in rows))
    at: dict[tuple[str, str, str], Mapping[str, Any]] = {(_rank_label(r), cell(r.get("pid")), str(r.get("var"))): r
                                                        for r in rows}
    heads = [v[5:] if v.startswith("NCCL_") else v for v in variables]
    body = [[label, pid, *(_mark(at.get((label, pid, v))) for v in variables)] for label, pid in ranks]

    def widths(h: list[str]) -> list[int]:
        return [max(len(x[i]) for x in [h, *body]) for i in range(len(h))]

    full = ["rank", "pid", *heads]
    numbered = len(" ".join("x" * w for w in widths(full))) + 2 > console.width
    if numbered:
        full = ["rank", "pid", *(str(i + 1) for i in range(len(variables)))]
    _print_grid(full, body, console)
    _matrix_notes(rows, variables, numbered, console)
    _verdict_facts_hints(evaluation, facts, console)


def _mark(r: Mapping[str, Any] | None) -> str:
    """A cell of the matrix: its status mark, and the evidence letter when it is proven."""
    if r is None:
        return DASH
    status = str(r.get("status") or "")
    m = MARK.get(status, status or DASH)
    return m + (f" {EVIDENCE_LETTER[str(r.get('evidence'))]}" if status == "proven"
                and str(r.get("evidence")) in EVIDENCE_LETTER else "")


def _print_grid(full: list[str], body: list[list[str]], console: Console) -> None:
    console.print("[bold]NCCL environment per scheduler process[/] (ranks × variables)")
    bad = ("DIFF", "MISSING", "OVERRIDDEN", "SGLANG")
    cells = [[Text(v, style="" if i < 2 else "green" if v.startswith("ok") else "red" if v in bad else "yellow")
              for i, v in enumerate(line)] for line in body]
    # Indented under its heading, two spaces between columns, every mark whole.
    grid = fit_table(console.width - 2, [Col(h) for h in full], cells, boxed=False)
    console.print(Padding(grid, (0, 0, 0, 2), expand=False), soft_wrap=False)


def _matrix_notes(rows: list[Mapping[str, Any]], variables: list[str], numbered: bool, console: Console) -> None:
    """Under the matrix: the expected values, the numbered columns' names, the legend, each unproven cell."""
    expected = {str(r.get("var")): cell(r.get("expected")) for r in rows}
    console.print("  expected: " + "  ".join(f"{v}={expected[v]}" for v in variables), markup=False,
                  highlight=False)
    if numbered:
        console.print("  columns: " + "  ".join(f"{i + 1} = {v}" for i, v in enumerate(variables)), markup=False,
                      highlight=False)
    used = sorted({str(r.get("evidence")) for r in rows if r.get("status") == "proven"} & set(EVIDENCE_LETTER))
    legend = ", ".join(f"{EVIDENCE_LETTER[e]} {EVIDENCE_LABEL[e]}" for e in used)
    # "ok = proven (no evidence)" read as "proven without evidence": with no proven cell, say that none is.
    proven = f"ok = proven by {legend}" if legend else "ok = proven (no cell here is)"
    console.print(f"  legend: {proven}; ? unconfirmed; DIFF a different value; "
                  "MISSING not set; OVERRIDDEN taken but NCCL chose around it; SGLANG overridden by SGLang itself; "
                  "launcher = only in the launcher; "
                  "`inv check-env --verbose` lists every cell",
                  markup=False, highlight=False, soft_wrap=False)
    # One line per unproven cause: the ranks where a variable is unproven the same way share it (a failed deploy
    # printed the same line once per rank).
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("status") != "proven":
            key = tuple(cell(r.get(k)) for k in ("var", "status", "expected", "observed", "note"))
            groups.setdefault(key, []).append(r)
    for (var, status, want, observed, note), same in groups.items():
        evs = ", ".join(dict.fromkeys(EVIDENCE_LABEL.get(str(r.get("evidence")), cell(r.get("evidence")))
                                      for r in same))
        who = (f"{_rank_label(same[0])} pid {cell(same[0].get('pid'))}" if len(same) == 1 else
               f"{len(same)} ranks ({', '.join(_rank_label(r) for r in same)}; pids "
               f"{', '.join(cell(r.get('pid')) for r in same)})")
        said = status_label(status)
        detail = (f"{who} {var}: {said}, expected {want}, observed {observed} ({evs})"
                  + (f"; {note}" if note != DASH else ""))
        console.print(f"  {escape(detail)}", highlight=False, soft_wrap=False)


USED_STYLE: dict[str, str] = {"proven": "green", "overridden": "bold red", "observed": "cyan", "unseen": "yellow"}


def render_used(used: Mapping[str, Any], console: Console) -> None:
    """What NCCL chose per rank for decode's, verify's and prefill's all-reduce (its TUNING lines, rank 0's)."""
    rows: list[Mapping[str, Any]] = list(used.get("rows") or [])
    if not rows and not used.get("note"):
        return
    console.print("[bold]What NCCL used[/] (its TUNING lines: algorithm/protocol per all-reduce size)")
    if used.get("note"):
        console.print(f"  {escape(str(used['note']))}", highlight=False)
    if rows:
        cols = [Col(c) for c in ("rank", "phase", "tokens", "bytes", "algo", "proto", "calls logged", "status")]
        cells = []
        for r in rows:
            st = str(r.get("status") or "")
            said = (Text(cell(r.get(k))) for k in ("phase", "tokens", "bytes", "algo", "proto"))
            cells.append([_rank_label(r), *said, cell(r.get("count") or None), Text(st, style=USED_STYLE.get(st, ""))])
        print_table(console, cols, cells, boxed=False)
        sizes = {str(s.get("phase")): str(s.get("how")) for s in used.get("sizes") or []}
        console.print("  sizes (derived by the tool): " + "; ".join(f"{k} = {v}" for k, v in sizes.items()),
                      markup=False, highlight=False)
        for r in rows:
            if r.get("status") == "overridden":
                line = f"{_rank_label(r)} {r.get('phase')}: {r.get('note')}"
                console.print(f"  {escape(line)}", highlight=False)


def _verdict_facts_hints(evaluation: Mapping[str, Any], facts: Mapping[str, Any], console: Console) -> None:
    render_used(evaluation.get("used") or {}, console)
    verdict = evaluation.get("ok")
    summary: Mapping[str, Any] = evaluation.get("summary") or {}
    counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in summary.items() if v)
    gone = (evaluation.get("ranks") or {}).get("verdict")
    if verdict:
        console.print(f"[bold green]OK[/]: every expected variable is proven in every rank ({counts})")
    elif gone:
        # the rows' counts are of the ranks that run: the missing rank is the verdict
        console.print(f"[bold red]NOT PROVEN[/]: {escape(str(gone))}" + (f" ({counts})" if counts else ""))
    elif evaluation.get("recorded_deploy") is False:
        console.print("[bold red]NOT PROVEN[/]: the running server is not the recorded deploy"
                      + (f" ({counts})" if counts else ""))
    else:
        console.print("[bold red]NOT PROVEN[/]" + (f" ({counts})" if counts else ""))
    for o in evaluation.get("sglang_overwrites") or []:
        # The inventory's own variables SGLang assigns itself (not NCCL's: no row above proves them either way).
        console.print(f"  {o['var']}: {STATUS_LABEL['sglang_overrides']}, expected {cell(o.get('expected'))}, "
                      f"observed {cell(o.get('observed'))} ({o.get('note')})", markup=False, highlight=False)

    console.print("[bold]Host facts[/]")
    for line in _facts_lines(facts):
        console.print(f"  {escape(line)}", highlight=False)

    hints = one_per_cause(list(evaluation.get("hints") or []))
    if hints:
        console.print("[bold]Hints[/]")
    for h in hints:
        sev = str(h.get("severity") or "info")
        where = []
        if h.get("vars"):
            where.append(", ".join(str(v) for v in h["vars"]))
        if h.get("pids"):
            where.append("pids " + ", ".join(str(p) for p in h["pids"]))
        suffix = f" [dim]({escape('; '.join(where))})[/]" if where else ""
        style = SEVERITY_STYLE.get(sev, "default")
        console.print(
            f"  [{style}]{escape(sev)}[/] {escape(str(h.get('message')))}{suffix}",
            highlight=False,
        )


def one_per_cause(hints: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Hints that say the same thing but for a pid or a rank (one per scheduler: 16 near-identical lines on a
    failed deploy) merged into one, with every variable and pid they name."""
    import re

    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for h in hints:
        key = (str(h.get("severity") or "info"), re.sub(r"\d+", "#", str(h.get("message"))))
        m = merged.get(key)
        if m is None:
            merged[key] = {**h, "vars": list(h.get("vars") or []), "pids": list(h.get("pids") or [])}
            continue
        m["vars"] += [v for v in h.get("vars") or [] if v not in m["vars"]]
        m["pids"] += [p for p in h.get("pids") or [] if p not in m["pids"]]
    return list(merged.values())
