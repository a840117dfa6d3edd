"""What a sweep prints and what its ``report.md`` says: the table, the conclusion, the lines under it (winners per
level, prediction against measurement, NCCL candidates, measured phases, break-even). The sweep document itself is
the JSON form; ``plot`` draws ``sweep.png``; the sweep command writes the files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from fabfile.plan import ranking
from fabfile.plan.analysis import analyze_sweep
from fabfile.plan.sweep_doc import Decision, LevelFigures, SweepDocument, SweepRow
from fabfile.present.output import out
from fabfile.present.tables import DASH, Col, cell, print_table

COLUMNS = ("config", "how", "tok/s", "speedup", "accept len", "drafts accepted", "ms/token", "cycle ms",
           "needs accept len", "verdict")


def concurrency_levels(doc: SweepDocument) -> list[int]:
    return [int(c) for c in doc.get("concurrency_levels") or []]


def columns(doc: SweepDocument) -> list[str]:
    """The table's columns: with several concurrency levels, one tok/s column per level."""
    levels = concurrency_levels(doc)
    if len(levels) <= 1:
        return list(COLUMNS)
    return ["config", "how", *[f"tok/s @{c}" for c in levels], *COLUMNS[3:]]


def _tok_cell(lv: LevelFigures | None, measured: bool, star: bool, tie: bool = False) -> str:
    if not lv or lv.get("tok_s") is None:
        return DASH
    text = f"{lv['tok_s']:.1f}"
    if measured and lv.get("tok_s_ci") is not None:
        text += f" ±{lv['tok_s_ci']:.1%}"
    # One tok/s per row: measured rows show the measurement only (their prediction is a labelled line under the
    # table: three figures for one configuration read as three measurements). A tie is marked on every row in it:
    # ★ alone is a winner beyond its interval.
    return text + (" ★" if star else "") + (" tie" if tie else "")


def decision(doc: SweepDocument, level: int | None = None) -> Decision | None:
    """The ranking at ``level`` (default the first): ``plan.ranking.rank``'s dict, None for an older document."""
    levels = concurrency_levels(doc)
    key = str(level if level is not None else (levels[0] if levels else 1))
    ranks = doc.get("ranking") or {}
    return ranks.get(key) or (next(iter(ranks.values()), None) if level is None else None)


def _tied(doc: SweepDocument, level: int | None, name: str) -> bool:
    d = decision(doc, level)
    return bool(d and not d["clear"] and name in d["tied"])


def table_rows(doc: SweepDocument) -> list[list[str]]:
    """One row of strings per configuration: the same cells in the terminal table and in report.md. Each row says
    whether it was measured or predicted; ★ marks the (measured) winner, per level with several levels."""
    analysis = doc.get("analysis") or analyze_sweep(doc.get("rows") or [])
    by_config = {r["config"]: r for r in analysis.get("rows") or []}
    levels = concurrency_levels(doc)
    winners = doc.get("winners") or {}
    rows = []
    base = next((r for r in doc.get("rows") or [] if r.get("steps") == 0 and r.get("ok")), None)
    for r in doc.get("rows") or []:
        be = by_config.get(r["config"]) or {}
        measured = bool(r.get("measured", True))
        n_tok = max(1, len(levels))
        if not r.get("ok"):
            msg = str((r.get("error") or {}).get("message", ""))
            rows.append([r["config"], "measured", f"{r.get('phase', '')} failed", *[DASH] * (n_tok - 1),
                         DASH, DASH, DASH, DASH, DASH, DASH, msg[:60]])
            continue
        verdict = "baseline" if r["steps"] == 0 else be.get("verdict", DASH)
        if not measured:
            verdict = "predicted"
        verdict += sla_mark(r, levels)
        if len(levels) <= 1:
            tok = [_tok_cell(r, measured, r["config"] == doc.get("winner"), _tied(doc, None, r["config"]))]
        else:
            by_level = {int(lv["concurrency"]): lv for lv in r.get("levels") or []}
            tok = [_tok_cell(by_level.get(c), measured, winners.get(str(c)) == r["config"],
                             _tied(doc, c, r["config"])) for c in levels]
        speedup = r.get("speedup")
        if speedup is None and base and r.get("tok_s") and base.get("tok_s"):
            speedup = ranking.tok_s(r) / ranking.tok_s(base)
        rows.append([
            r["config"], "measured" if measured else "predicted", *tok, cell(speedup, "×{:.2f}"),
            cell(r.get("accept_len"), "{:.2f}"), cell(r.get("draft_acceptance"), "{:.0%}"),
            cell(r.get("decode_ms_per_token") if r["steps"] == 0 else r.get("ms_per_token"), "{:.1f}"),
            cell(r.get("cycle_ms"), "{:.1f}"), cell(be.get("needed_accept_len"), "{:.2f}"), verdict,
        ])
    for sk in doc.get("nccl_skipped") or []:  # not loaded: the NCCL skip rule (its reason is under the table)
        why = ("skipped: TP 1, no NCCL communicator" if sk.get("optimistic_tok_s") is None else
               f"skipped: cannot win (≤ {sk['optimistic_tok_s']:.1f} tok/s, derived)")
        for name in sk.get("configs") or []:
            rows.append([name, "skipped", *[DASH] * max(1, len(levels)), DASH, DASH, DASH, DASH, DASH, DASH,
                         why])
    return rows


def sla_mark(r: SweepRow, levels: list[int]) -> str:
    """``; broke TTFT 212.0`` (per level with several levels) for a configuration that broke a sweep limit."""
    if len(levels) <= 1:
        broke = r.get("sla_broke") or []
        return f"; broke {', '.join(broke)}" if broke else ""
    parts = [f"@{lv['concurrency']}: {', '.join(lv['sla_broke'])}" for lv in r.get("levels") or []
             if lv.get("sla_broke")]
    return f"; broke {'; '.join(parts)}" if parts else ""


def conclusion(doc: SweepDocument) -> str:
    winner, kept = doc.get("winner"), doc.get("running")
    sla = doc.get("sla") or {}
    if winner is None and sla and kept:
        return f"no configuration meets {sla['describe']} (measured by the benchmark); left running the fastest, {kept}"
    if winner is None:
        return "no configuration could be measured"
    rows = {r["config"]: r for r in doc.get("rows") or []}
    w = rows[winner]
    d = decision(doc)
    if d and not d["clear"]:
        text = ("speculation does not beat the baseline beyond the noise: " if doc.get("baseline_wins") else "") + \
            ranking.sentence(d) + (f" (meeting {sla['describe']})" if sla else "")
        if w.get("speedup") and not doc.get("baseline_wins"):
            text += f", ×{w['speedup']:.2f} over the baseline ({doc.get('baseline_tok_s') or 0:.1f} tok/s)"
    elif doc.get("baseline_wins"):
        best_spec = max((r for r in rows.values() if r.get("ok") and r["steps"] > 0 and r.get("tok_s") and
                         r.get("measured", True)), key=ranking.tok_s, default=None)
        text = f"speculation loses to the baseline on this host: baseline {w['tok_s']:.1f} tok/s"
        if best_spec is not None:
            text += (f", best speculative {best_spec['config']} {best_spec['tok_s']:.1f} tok/s "
                     f"(×{best_spec['speedup']:.2f})")
    else:
        text = f"winner: {winner}, {w['tok_s']:.1f} tok/s" + (f" (meeting {sla['describe']})" if sla else "")
        if d:
            text += f", beyond its ±{d['within']:.1%} interval"
        if w.get("speedup"):
            text += f", ×{w['speedup']:.2f} over the baseline ({doc.get('baseline_tok_s') or 0:.1f} tok/s)"
    if kept:
        text += f"; left running: {kept}"
    else:
        text += "; nothing left running (the final deploy failed)"
    if doc.get("keep_note"):
        text += f" ({doc['keep_note']})"
    return text


def details(doc: SweepDocument) -> list[str]:
    """Sentences under the table: winners per level, the prediction against the measurement, model loads."""
    lines: list[str] = []
    levels = concurrency_levels(doc)
    winners = doc.get("winners") or {}
    if len(levels) > 1:
        def named(c: int) -> str:
            d = decision(doc, c)
            tie = f" (tie within ±{d['within']:.1%} with {len(d['tied']) - 1} more; tie-break: {d['tie_break']})" \
                if d and not d["clear"] else ""
            return f"{c}: {winners.get(str(c)) or '-'}{tie}"

        lines.append("winner per concurrency: " + ", ".join(named(c) for c in levels))
    pred = doc.get("prediction") or {}
    if pred.get("rows"):
        methods = sorted(set((pred.get("methods") or {}).values())) or ["the cycle fit"]
        lines.append(f"predicted from {pred['histogram_config']}'s accepted-drafts histogram "
                     f"({sum(pred['histogram'])} verify passes, from {pred.get('histogram_source')}) and "
                     f"{'; '.join(methods)}; predicted winner "
                     + ", ".join(f"@{c}: {n}" for c, n in pred["winners"].items()))
        checked = [(r["config"], r.get("predicted_tok_s"), r.get("tok_s")) for r in doc.get("rows") or []
                   if r.get("measured", True) and r.get("ok") and r.get("predicted_tok_s") is not None]
        if checked:
            lines.append("prediction against measurement (tok/s, measured by the tool's benchmark): " + ", ".join(
                f"{n} predicted {p:.1f}, measured {m:.1f}" for n, p, m in checked if m is not None))
        predicted, measured = doc.get("predicted_tok_s"), doc.get("measured_tok_s")
        if predicted is not None and measured:
            err = predicted / measured - 1
            lines.append(f"{doc['winner']}: predicted {doc['predicted_tok_s']:.1f} tok/s, measured "
                         f"{doc['measured_tok_s']:.1f} tok/s ({err:+.1%})")
    if doc.get("predict") or doc.get("model_loads"):
        lines.append(loads_sentence(doc))
    lines += nccl_lines(doc)
    lines += adaptive_lines(doc)
    lines += list(doc.get("notes") or [])
    return lines


def loads_sentence(doc: SweepDocument) -> str:
    """The model loads the sweep took, on the same terms as the count it gave before the first load (the loads to
    measure against the grid's; the winner's redeploy apart, since a grid needs it as much)."""
    total = int(doc.get("model_loads") or 0)
    redeploy = int(doc.get("redeploy_loads") or 0)
    text = f"model loads: {total - redeploy} to measure (the full grid: {doc.get('grid_loads')}"
    plan = doc.get("planned_loads")
    if plan:
        said = f"{plan['least']} to {plan['most']}" if plan["least"] != plan["most"] else f"{plan['most']}"
        text += f"; planned: {said}"
    text += ")"
    if redeploy:
        text += f", and {redeploy} to leave the winner running (a grid in this order needs it too)"
    return text


def adaptive_lines(doc: SweepDocument) -> list[str]:
    """Where SGLang's adaptive mode settled, per level (its ``sglang:spec_num_steps`` gauge at the end of the
    benchmark: measured by SGLang; absent before 0.5.13)."""
    out = []
    for r in doc.get("rows") or []:
        if not (r.get("adaptive") and r.get("ok")):
            continue
        settled = ", ".join(f"@{lv['concurrency']}: {cell(lv.get('spec_num_steps'), '{:.0f}')}"
                            for lv in r.get("levels") or [])
        out.append(f"{r['config']} started at steps {r['steps']} and settled on steps {settled} "
                   "(sglang:spec_num_steps, measured by SGLang; - where this release has no such gauge)")
    return out


def nccl_lines(doc: SweepDocument) -> list[str]:
    """With NCCL candidates: the best candidate per speculative configuration (its tok/s, measured by the
    benchmark) and each candidate's median TTFT, where a protocol forced for small messages shows its prefill cost."""
    rows = [r for r in doc.get("rows") or [] if r.get("nccl") and r.get("ok") and r.get("measured", True)]
    if not rows:
        return []
    groups: dict[str, list[SweepRow]] = {}
    for r in rows:
        groups.setdefault(str(r["config"]).rsplit("@", 1)[0], []).append(r)
    said = []
    for spec, group in groups.items():
        d = ranking.rank(group, doc.get("running"))
        if d is None:
            continue
        by_name = {r["config"]: r for r in group}
        w = by_name[d["winner"]]
        if d["clear"]:
            said.append(f"{spec} → {w['nccl']} ({w['tok_s']:.1f}, beyond ±{d['within']:.1%})")
        else:
            said.append(f"{spec} → tie within ±{d['within']:.1%} (" + ", ".join(
                f"{by_name[n]['nccl']} {by_name[n]['tok_s']:.1f}" for n in d["tied"])
                + f"); chose {w['nccl']} (tie-break: {d['tie_break']})")
    out = ["best NCCL candidate per configuration (tok/s measured by the benchmark): " + ", ".join(said)]
    out.append("median TTFT per NCCL candidate (measured by the benchmark): " + ", ".join(
        f"{r['config']} {cell(r.get('ttft_ms'), '{:.0f}')} ms" for r in rows))
    return out


def print_sweep(doc: SweepDocument, *, console: Console | None = None) -> None:
    """The sweep's table and its conclusion, for people (``--json`` prints the document instead: the command line's
    one output switch)."""
    _sweep_table(doc, console or out)


def _sweep_table(doc: SweepDocument, c: Console) -> None:
    # Every cell but the free-text "how" is a key value: never cut (a list layout when they do not fit).
    cols = [Col(col, key=col != "how", justify="left" if col in ("config", "how", "verdict") else "right")
            for col in columns(doc)]
    print_table(c, cols, [[escape(x) for x in row] for row in table_rows(doc)],
                title=f"{doc['host']} sweep {doc['sweep_id']}")
    c.print(f"[bold]{conclusion(doc)}[/bold]")
    for line in details(doc) + phase_lines(doc):
        c.print(f"  {line}", markup=False)
    a = doc.get("analysis") or {}
    if a.get("rows"):
        # Its tok/s are derived (accept length ÷ the measured cycle), not a third measurement: said as such.
        c.print("  break-even (derived from each configuration's measured cycle and accept length; its tok/s are "
                "that model's, the table's are measured):", markup=False, soft_wrap=False)
    for r in a.get("rows") or []:
        c.print(f"  {r['config']}: {r['sentence']}", markup=False, soft_wrap=False)
    if a.get("fit"):
        f = a["fit"]
        c.print(f"  cycle ≈ {f['base_ms']:.1f} ms + {f['per_step_ms']:.2f} ms × steps "
                f"(fit over {f['points']} topk-1 configurations)")
    for key, label in (("report", "report"), ("plot", "plot"), ("json", "data")):
        if (doc.get("paths") or {}).get(key):
            c.print(f"  {label}: {doc['paths'][key]}", markup=False)
    if doc.get("plot_missing"):
        c.print(f"  {doc['plot_missing']}", markup=False, soft_wrap=False)  # one line within 80 columns


def markdown(doc: SweepDocument) -> str:
    p = doc.get("params") or {}
    lines = [f"# Sweep {doc['sweep_id']} on {doc['host']}", "",
             f"Started {doc.get('started_at')}, took {doc.get('elapsed_s', 0):.1f} s. Benchmark: concurrency "
             f"{', '.join(str(c) for c in concurrency_levels(doc)) or p.get('concurrency')}, input "
             f"{p.get('input_len')} tokens, output {p.get('output_len')} tokens, "
             + (f"adaptive length (95 % interval within ±{p['target_ci']:.0%}, {p.get('min_requests')}–"
                f"{p.get('num_prompts')} requests)" if p.get("target_ci") else f"{p.get('num_prompts')} prompts")
             + f", client {p.get('client')}; run from the host itself.", "",
             f"**{conclusion(doc)}**", "", *[f"- {x}" for x in details(doc) + phase_lines(doc)], "",
             "| " + " | ".join(columns(doc)) + " |", "|" + "---|" * len(columns(doc))]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in table_rows(doc)]
    lines += ["", "`ms/token` is the baseline's decode step (TPOT) and, for speculative configurations, "
              "1000 / tok/s; `cycle ms` is one draft+verify cycle; `drafts accepted` is (accept len − 1) / "
              "(draft tokens − 1) on every SGLang version. `±` is the 95 % confidence interval of the measured "
              "tok/s; `(pred …)` the prediction for a measured configuration; `predicted` rows were not deployed.",
              ""]
    a = doc.get("analysis") or {}
    lines += ["## Break-even", ""]
    if a.get("baseline_ms"):
        lines += [f"Baseline: {a['baseline_ms']:.2f} ms per token ({1000 / a['baseline_ms']:.1f} tok/s). A speculative "
                  "configuration beats it when its accept length exceeds cycle time / baseline time per token.", ""]
        for r in a.get("rows") or []:
            lines.append(f"- **{r['config']}**: {r['sentence']}")
        if a.get("fit"):
            f = a["fit"]
            lines += ["", f"Cycle time against steps (least squares over {f['points']} topk-1 configurations): "
                      f"{f['base_ms']:.1f} ms + {f['per_step_ms']:.2f} ms × steps."]
    else:
        lines.append(a.get("note") or "no baseline measurement")
    failed = [r for r in doc.get("rows") or [] if not r.get("ok")]
    if failed:
        lines += ["", "## Failed configurations", ""]
        for r in failed:
            e = r.get("error") or {}
            lines.append(f"- {r['config']} ({r.get('phase')}): {e.get('message')}" +
                         (f" — {e.get('hint')}" if e.get("hint") else ""))
    if (doc.get("paths") or {}).get("plot"):
        lines += ["", "![tok/s and accept length against steps](sweep.png)"]
    elif doc.get("plot_missing"):
        lines += ["", f"_{doc['plot_missing']}_"]
    lines += ["", "Per-configuration benchmark files: " +
              ", ".join(f"`{Path(r['bench_path']).name}`" for r in doc.get("rows") or [] if r.get("bench_path")), ""]
    return "\n".join(lines)


# -- measured phases (issue 26): per configuration (the stacked bars of the PNG: ``plot.phase_bars``) -----------------
def baseline_step(doc: SweepDocument, like: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The baseline's decode step as the break-even compares it with a cycle (``like``; None: a wall-clock one, its
    TPOT): GPU time against GPU time, wall clock against wall clock."""
    from fabfile.plan.explain import baseline_of, step_like

    fig = step_like(baseline_of(doc), like)
    return dict(fig) if fig else None


def phase_lines(doc: SweepDocument) -> list[str]:
    """One sentence per speculative configuration: draft ms per step, verify ms, draft-extend ms (SGLang's device
    timer, where the deploy measured), the cycle and the break-even accept length = cycle ÷ the baseline's decode
    step; without measured phases the cycle is the derived one, and says so."""
    from fabfile.plan.explain import fmt, row_anatomy

    lines = []
    for r in doc.get("rows") or []:
        if not r.get("ok") or not r.get("steps") or not r.get("measured", True):
            continue
        a = row_anatomy(r)
        parts = [f"{label} {fmt(a.get(k))}" for k, label in (("draft_step", "draft/step"), ("verify", "verify"),
                                                               ("draft_extend", "draft-extend")) if a.get(k)]
        cycle = a.get("cycle")
        if not parts and not cycle:
            continue
        text = f"{r['config']}: " + (" · ".join(parts) if parts else "no measured phase")
        if cycle:
            text += f"; cycle {fmt(cycle)}"
            base = baseline_step(doc, cycle)
            if base:
                text += (f"; break-even accept length {float(cycle['ms']) / float(base['ms']):.2f} (cycle ÷ "
                         f"baseline decode {fmt(base)})")
        lines.append(text)
    return lines


