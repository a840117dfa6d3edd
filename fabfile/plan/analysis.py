"""Break-even analysis of speculative decoding: pure functions, no I/O.

A speculative cycle drafts ``steps`` tokens and verifies them in one target-model pass; it costs
``cycle_ms = steps · draft_ms_per_step + verify_ms`` and emits ``accept_len`` tokens on average (accepted drafts plus
the bonus token). Baseline decoding costs ``baseline_ms`` per token. Speculation wins iff
``accept_len / cycle_ms > 1 / baseline_ms``, i.e. iff the accept length beats the break-even
``needed = cycle_ms / baseline_ms``. With topk 1 a cycle can emit at most ``steps + 1`` tokens, so a configuration
whose ``needed`` exceeds that can never win, whatever the drafter.

The seed case: baseline 12.2 ms/token; EAGLE-3 2-step verify measured at 29 ms (untuned) vs 18.7 ms (tuned).
With 29 ms it needs an accept length above 29 / 12.2 ≈ 2.38 (of at most 3) and, at the ≈1.75 it got
(60.5 tok/s × 29 ms), loses (−27 %); with 18.7 ms it needs ≈1.53 and wins (≈94 tok/s, +14 %).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fabfile.plan.sweep_doc import SweepRow


@dataclass(frozen=True)
class BreakEven:
    baseline_ms: float              # baseline time per generated token
    cycle_ms: float                 # one draft+verify cycle
    needed_accept_len: float        # accept length at which speculation ties the baseline
    max_accept_len: float | None    # what the configuration could emit per cycle at best (steps+1 for topk 1)
    accept_len: float | None        # what it got
    baseline_tok_s: float
    predicted_tok_s: float | None   # accept_len / cycle_ms, one request at a time
    speedup: float | None           # predicted over baseline (= accept_len / needed)
    verdict: str                    # "wins" | "loses" | "cannot win" | "unknown"
    max_cycle_ms_to_win: float | None  # with the accept length it got, the cycle must be shorter than this
    steps: int | None = None
    draft_ms_per_step: float | None = None
    verify_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        need = f"needs accept length > {self.needed_accept_len:.2f}"
        if self.max_accept_len is not None:
            need += f" (at most {self.max_accept_len:g} possible)"
        if self.accept_len is None:
            return f"cycle {self.cycle_ms:.1f} ms vs {self.baseline_ms:.1f} ms/token baseline: {need}"
        got = f"got {self.accept_len:.2f}"
        if self.verdict == "wins":
            return (f"{need}, {got}: wins, {self.predicted_tok_s:.1f} vs {self.baseline_tok_s:.1f} tok/s "
                    f"(×{self.speedup:.2f})")
        tail = f"; to win at {self.accept_len:.2f} the cycle must drop below {self.max_cycle_ms_to_win:.1f} ms" \
            if self.max_cycle_ms_to_win is not None else ""
        if self.verdict == "cannot win":
            return f"{need}, {got}: cannot win at this cycle cost{tail}"
        return (f"{need}, {got}: loses, {self.predicted_tok_s:.1f} vs {self.baseline_tok_s:.1f} tok/s "
                f"(×{self.speedup:.2f}){tail}")


def cycle_ms(verify_ms: float, steps: int = 0, draft_ms_per_step: float = 0.0) -> float:
    """The cost of one draft+verify cycle. Leave ``draft_ms_per_step`` 0 when ``verify_ms`` already includes it."""
    return steps * draft_ms_per_step + verify_ms


def needed_accept_len(cycle: float, baseline_ms: float) -> float:
    """The accept length at which a cycle of ``cycle`` ms produces tokens exactly as fast as the baseline."""
    if baseline_ms <= 0:
        raise ValueError(f"baseline time per token must be positive, got {baseline_ms}")
    return cycle / baseline_ms


def break_even(*, baseline_ms: float, cycle: float, accept_len: float | None = None, steps: int | None = None,
               draft_tokens: int | None = None, draft_ms_per_step: float | None = None,
               verify_ms: float | None = None) -> BreakEven:
    """Compare one speculative configuration with the baseline. ``draft_tokens`` (topk > 1) bounds the accept
    length like ``steps + 1`` does for topk 1."""
    if cycle <= 0:
        raise ValueError(f"cycle time must be positive, got {cycle}")
    needed = needed_accept_len(cycle, baseline_ms)
    max_len: float | None = None
    if steps is not None:
        max_len = float(steps + 1)
        if draft_tokens is not None:
            max_len = float(min(steps + 1, draft_tokens))
    base_tok_s = 1000.0 / baseline_ms
    predicted = speedup = max_cycle = None
    if accept_len is not None:
        predicted = 1000.0 * accept_len / cycle
        speedup = accept_len / needed
        max_cycle = accept_len * baseline_ms
    if accept_len is None:
        verdict = "cannot win" if max_len is not None and needed >= max_len else "unknown"
    elif accept_len > needed:
        verdict = "wins"
    elif max_len is not None and needed >= max_len:
        verdict = "cannot win"
    else:
        verdict = "loses"
    return BreakEven(baseline_ms=baseline_ms, cycle_ms=cycle, needed_accept_len=needed, max_accept_len=max_len,
                     accept_len=accept_len, baseline_tok_s=base_tok_s, predicted_tok_s=predicted, speedup=speedup,
                     verdict=verdict, max_cycle_ms_to_win=max_cycle, steps=steps,
                     draft_ms_per_step=draft_ms_per_step, verify_ms=verify_ms)


def from_numbers(*, baseline_ms: float, verify_ms: float, steps: int | None = None, draft_ms: float = 0.0,
                 accept_len: float | None = None) -> BreakEven:
    """``inv analyze --baseline-ms … --verify-ms … [--draft-ms …] [--steps …] [--accept-len …]``."""
    return break_even(baseline_ms=baseline_ms, cycle=cycle_ms(verify_ms, steps or 0, draft_ms),
                      accept_len=accept_len, steps=steps, draft_ms_per_step=draft_ms, verify_ms=verify_ms)


@dataclass(frozen=True)
class CycleFit:
    """cycle_ms ≈ base_ms + per_step_ms · steps, least squares over the measured topk-1 configurations."""

    base_ms: float
    per_step_ms: float
    points: int

    def at(self, steps: int) -> float:
        return self.base_ms + self.per_step_ms * steps


def fit_cycle(points: list[tuple[int, float]]) -> CycleFit | None:
    """Fit cycle time against steps; None with fewer than two distinct step counts."""
    if len({s for s, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(s for s, _ in points) / n
    my = sum(c for _, c in points) / n
    sxx = sum((s - mx) ** 2 for s, _ in points)
    slope = sum((s - mx) * (c - my) for s, c in points) / sxx
    return CycleFit(base_ms=my - slope * mx, per_step_ms=slope, points=n)


def analyze_sweep(rows: Sequence[SweepRow]) -> dict[str, Any]:
    """Break-even for each measured row of a sweep (``config``, ``steps``, ``topk``, ``draft_tokens``, ``tok_s``,
    ``accept_len``, ``cycle_ms``, ``decode_ms_per_token``); the baseline row gives the per-token time."""
    base = next((r for r in rows if r.get("steps") == 0 and r.get("ok")), None)
    if base is None:
        return {"baseline_ms": None, "rows": [], "fit": None, "note": "no baseline measurement"}
    base_tok_s = base.get("tok_s")
    baseline_ms = base.get("decode_ms_per_token") or (1000.0 / base_tok_s if base_tok_s else None)
    if not baseline_ms:
        return {"baseline_ms": None, "rows": [], "fit": None, "note": "the baseline has no per-token time"}
    rows = [r for r in rows if r.get("measured", True)]  # predicted rows are not evidence
    out_rows = []
    for r in rows:
        cycle = r.get("cycle_ms")
        if not r.get("ok") or r.get("steps") == 0 or not cycle:
            continue
        be = break_even(baseline_ms=float(baseline_ms), cycle=float(cycle), accept_len=r.get("accept_len"),
                        steps=r.get("steps"), draft_tokens=r.get("draft_tokens") if (r.get("topk") or 1) > 1
                        else None)
        out_rows.append({"config": r["config"], **be.as_dict(), "sentence": be.sentence()})
    fit = fit_cycle([(int(r["steps"]), float(c)) for r in rows
                     if r.get("ok") and r.get("steps") and (c := r.get("cycle_ms")) and (r.get("topk") or 1) == 1])
    return {"baseline_ms": baseline_ms, "rows": out_rows, "fit": asdict(fit) if fit else None}
