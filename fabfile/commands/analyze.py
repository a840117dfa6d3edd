"""``inv analyze``: the break-even of speculative decoding, from a sweep's result file or from numbers given on the
command line (``fabfile.plan.analysis`` does the maths; ``fabfile.present.analyze_report`` prints it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, cast

from fabfile.commands.result import CommandResult
from fabfile.errors import FlagError
from fabfile.plan.analysis import analyze_sweep, from_numbers
from fabfile.plan.ranking import rank
from fabfile.present.analyze_report import print_analysis, print_break_even

if TYPE_CHECKING:
    from fabfile.plan.sweep_doc import SweepRow


def analyze_numbers(*, baseline_ms: float, verify_ms: float, draft_ms: float, steps: int | None,
                    accept_len: float | None) -> CommandResult:
    be = from_numbers(baseline_ms=baseline_ms, verify_ms=verify_ms, steps=steps, draft_ms=draft_ms,
                      accept_len=accept_len)
    return CommandResult({**be.as_dict(), "sentence": be.sentence()},
                         lambda: print_break_even(be, baseline_ms=baseline_ms, verify_ms=verify_ms, draft_ms=draft_ms,
                                                  steps=steps))


def analyze_file(path: str) -> CommandResult:
    p = Path(path)
    if p.is_dir():
        p = p / "sweep.json"
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise FlagError(f"--sweep: cannot read a sweep result from {path}: {e}") from None
    if not isinstance(doc, dict) or "rows" not in doc:
        raise FlagError(f"--sweep: {path} is not a sweep result (no rows)")
    doc.setdefault("host", "?")
    doc.setdefault("sweep_id", p.parent.name)
    analysis = analyze_sweep(doc["rows"])
    # the same decision as the sweep's: a winner beyond its interval, else a tie and its stated tie-break
    # A saved sweep.json's rows, read as the sweep wrote them (``plan.sweep_doc.SweepRow``).
    measured = cast("list[SweepRow]", [r for r in doc["rows"] if isinstance(r, dict) and r.get("ok")
                                       and r.get("measured", True)])
    analysis["ranking"] = rank(measured, doc.get("running"))
    doc["analysis"] = analysis
    return CommandResult(analysis, lambda: print_analysis(analysis))
