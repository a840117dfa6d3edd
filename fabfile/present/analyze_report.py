"""What ``inv analyze`` prints for a person: the break-even accept length from numbers, or each configuration's
break-even against what it got in a sweep. ``BreakEven.as_dict`` and ``analyze_sweep``'s dict are the JSON forms."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from fabfile.plan import ranking
from fabfile.plan.analysis import BreakEven
from fabfile.present.output import out
from fabfile.present.tables import Col, cell, print_table


def print_break_even(be: BreakEven, *, baseline_ms: float, verify_ms: float, draft_ms: float,
                     steps: int | None) -> None:
    """``inv analyze`` from numbers: the baseline, the cycle, the break-even accept length and the verdict."""
    cyc = f"{steps} × {draft_ms:g} ms draft + {verify_ms:g} ms verify = " if steps and draft_ms else ""
    out.print(f"baseline {baseline_ms:g} ms/token ({be.baseline_tok_s:.1f} tok/s); cycle {cyc}{be.cycle_ms:.1f} ms")
    out.print(f"break-even accept length: [bold]{be.needed_accept_len:.2f}[/bold]"
              + (f" (at most {be.max_accept_len:g} with {steps} steps)" if be.max_accept_len else ""))
    out.print(be.sentence())


def print_analysis(analysis: dict[str, Any]) -> None:
    """``inv analyze --sweep``: each configuration's break-even against what it got."""
    if not analysis.get("baseline_ms"):
        out.print(analysis.get("note", "no baseline"))
        return
    out.print(f"baseline {analysis['baseline_ms']:.2f} ms/token ({1000 / analysis['baseline_ms']:.1f} tok/s)")
    # Config names and figures are never cut (at 80 columns rich cut them to `eagl…`); the verdict wraps.
    cols = [Col("config"), Col("cycle ms", justify="right"), Col("needs accept len", justify="right"),
            Col("max", justify="right"), Col("got", justify="right"), Col("tok/s predicted", justify="right"),
            Col("verdict", key=False)]
    rows = [[escape(r["config"]), cell(r["cycle_ms"], "{:.1f}"), cell(r["needed_accept_len"], "{:.2f}"),
             cell(r["max_accept_len"], "{:g}"), cell(r["accept_len"], "{:.2f}"), cell(r["predicted_tok_s"], "{:.1f}"),
             escape(str(r["verdict"]))] for r in analysis["rows"]]
    print_table(out, cols, rows)
    for r in analysis["rows"]:
        out.print(f"  {r['config']}: {r['sentence']}", markup=False, soft_wrap=False)
    d = analysis.get("ranking")
    if d:
        out.print(f"measured tok/s (the sweep's benchmark): {ranking.sentence(d)}",
                  markup=False, soft_wrap=False)
