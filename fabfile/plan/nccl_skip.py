"""Which NCCL candidates a ``--predict`` sweep need not load (``inv sweep --nccl pcie,none --predict``). Pure.

The rule (said in the sweep's notes with each skip): NCCL settings change only all-reduce time. From the first
candidate's measured rows and its measured all-reduce ms per pass (``SGLang profiler trace``: the all-reduce
kernels of decode's and verify's passes), another candidate's tok/s in each configuration is the first one's with
the all-reduce part replaced by the candidate's own: its predicted all-reduce ms per pass where the tool has a
per-candidate model (``model``, optimistic end), else zero (the upper bound no NCCL setting can beat). A
candidate is loaded only when its optimistic figure in some configuration beats the best pessimistic measured
one (tok/s × (1 − its 95 % interval)); at TP 1 there is no NCCL communicator, so no other candidate can differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SOURCE_AR = "SGLang profiler trace"
DEFAULT_CI = 0.02  # a measured row without its interval (a fixed --num-prompts): as sweep_plan takes it


@dataclass(frozen=True)
class Skip:
    candidate: str
    reason: str
    optimistic_tok_s: float | None  # the candidate's best optimistic figure (derived), None at TP 1
    best_pessimistic_tok_s: float | None
    source: str
    modelled: bool = False  # the optimistic figure is the tool's NCCL model's (else the zero-all-reduce bound)
    best_config: str | None = None  # the measured row the candidate cannot beat

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"candidate": self.candidate, "reason": self.reason,
                               "optimistic_tok_s": self.optimistic_tok_s,
                               "best_pessimistic_tok_s": self.best_pessimistic_tok_s, "source": self.source}
        if self.optimistic_tok_s is not None:
            out["figures"] = {
                "optimistic_tok_s": "derived: the first candidate's measured tok/s with its all-reduce time ("
                                    f"measured by the {SOURCE_AR}) replaced by "
                                    + ("the tool's NCCL model's at its optimistic end" if self.modelled else "zero"),
                "best_pessimistic_tok_s": f"derived: {self.best_config}'s tok/s (measured by the tool's benchmark) "
                                          "× (1 − its 95 % interval)"}
            out["best_config"] = self.best_config
        return out


def pessimistic(row: Mapping[str, Any]) -> float:
    ci = row.get("tok_s_ci")
    ci = float(ci) if isinstance(ci, (int, float)) and 0 <= ci < 1 else DEFAULT_CI
    return float(row["tok_s"]) * (1.0 - ci)


def optimistic(row: Mapping[str, Any], ar_ms: float, pass_ms: float, cand_ar_ms: float,
               period_ms: float | None = None) -> float:
    """``row``'s tok/s with its all-reduce ms per pass (``ar_ms`` of ``pass_ms``) replaced by ``cand_ar_ms``.

    With ``period_ms`` (what the pass repeats at: the cycle, or the decode step) the larger of the two figures: the
    time per token lies between the pass's GPU span and the period, and the bound must hold for either end (a
    shorter span overstates a gain, a longer period understates a loss)."""
    figs = []
    for span in (pass_ms, period_ms):
        if span and span > 0:
            figs.append(float(row["tok_s"]) * span / (max(span - ar_ms, 1e-9) + max(0.0, cand_ar_ms)))
    return max(figs)


def skips(first: Sequence[Mapping[str, Any]], others: list[str], tp: int,
          model: Callable[[str, Mapping[str, Any]], float | None] | None = None) -> list[Skip]:
    """The candidates of ``others`` not to load, each with why. ``first``: the first candidate's measured rows,
    each with ``allreduce`` = {"ms_per_pass", "pass_ms"} (from the trace; a row without it bounds nothing and
    keeps every candidate). ``model(candidate, row)``: that candidate's optimistic all-reduce ms per pass in
    that row's configuration, None where the tool has no model (then zero: the bound)."""
    if tp <= 1:  # known before anything is measured
        return [Skip(c, "TP 1: the server builds no NCCL communicator, so NCCL settings change nothing; the first "
                        "candidate's measurements hold for it", None, None, "the tool (TP size)")
                for c in others]
    rows = [r for r in first if r.get("ok") and r.get("tok_s")]
    if not rows:
        return []
    best_row = max(rows, key=pessimistic)
    best = pessimistic(best_row)
    if any(not isinstance(r.get("allreduce"), Mapping) for r in rows):
        return []
    out = []
    for c in others:
        figs = []
        modelled = True
        for r in rows:
            ar = r["allreduce"]
            cand = model(c, r) if model is not None else None
            modelled = modelled and cand is not None
            figs.append(optimistic(r, float(ar["ms_per_pass"]), float(ar["pass_ms"]), cand or 0.0,
                                   ar.get("period_ms")))
        top = max(figs)
        if top < best:
            how = ("its predicted all-reduce ms per pass (derived: the tool's NCCL model, calibrated on the "
                   f"{SOURCE_AR})" if modelled else
                   f"all-reduce time set to zero (the bound; measured by the {SOURCE_AR})")
            out.append(Skip(c, f"cannot win: with {how} its best figure is {top:.1f} tok/s, below the best measured "
                               f"row's pessimistic {best:.1f} tok/s ({best_row.get('config')})", round(top, 2),
                            round(best, 2), f"derived from the {SOURCE_AR}", modelled, best_row.get("config")))
    return out
