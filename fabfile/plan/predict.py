"""Predict a chain-draft (topk 1) sweep from three measurements: pure functions, no I/O.

With topk 1 the drafter proposes the same tokens at positions 1..k whatever the step count (it drafts one token at a
time from the same context), and the target accepts the longest correct prefix. So one run at the largest step count
S gives the distribution of correct drafts J per verify pass, and a run at k ≤ S would accept min(J, k) of them: its
accept length is ``1 + E[min(J, k)]``. SGLang reports that distribution per request (``spec_accept_histogram`` /
``spec_correct_drafts_histogram``, 0.5.9+) and, for older versions, the agent derives it from the tokens each verify
pass streamed (``fabfile/remote/measure/metrics.py``).

The cycle (draft + verify) time is fitted as ``a + b·steps`` from two speculative runs (``analysis.fit_cycle``), at
each concurrency. A request of N output tokens then takes ``TTFT + (N − 1) / accept_len(k) · cycle(k)`` (the prefill
brings the first token), and C requests in flight serve ``C·N / that`` tok/s. The formula's error at the measured
step counts (prefill interleaving under load, client overhead) is taken out by one factor per concurrency, fitted on
the measured speculative runs, so the prediction goes through what was measured and interpolates between.

With SGLang's device timer on (measured phases, ``bench``'s ``phases``), two loads predict every step count: the
baseline (the target's decode forward, ms per pass) and one EAGLE-3 load at the largest step count S (the histogram;
ms per draft forward; ms per verify pass of D = S + 1 draft tokens). A cycle at k steps is the one at S less the
draft forwards it does not run and less what verifying fewer tokens saves::

    cycle(k) = cycle(S) − (S − k)·draft_step − (verify(D) − verify(k + 1))

The verify model (``verify_at``), stated: a verify pass's cost is linear in the draft tokens it checks per sequence
and never grows as they fall. With one measured count D the slope is not measured, only bounded: at most the line
from the target's decode forward at one token (the baseline measured it at the same concurrency) to verify(D),
``verify(d) = decode + (verify(D) − decode)·(d − 1)/(D − 1)``, at least no saving at all. Neither end is the truth in
general: a verify pass carries a fixed cost of its own beyond a decode forward (the simulator's defaults: 14.2 ms +
1.5 ms per token against a 12.2 ms decode, so the line is too cheap at small counts), and on the H200 (real SGLang
0.5.16, CUDA graphs on) it is below the decode forward (0.540 ms at 4 tokens, 0.524 at 3, decode 0.592: the line
would rise as tokens fall, so it is flat there, 3 % above the 3-token pass; over the whole grid later, 0.50–0.54 ms
from 2 to 8 tokens against a 0.66 ms decode: "no saving" is the true end there). So the two-load prediction is a range
(``blend`` weighs its ends for the point figure: a prior, not a measurement); the third load measures the point
winner, and then the line goes through the two measured verify passes, exact wherever verify is linear in its
tokens, and the decode anchor is no longer used. ``tests/unit/plan/test_predict.py`` holds the model against the
simulator's cost models and the H200's two counts.

Which configuration the third load measures (``sweep_plan``): the best point figure over the measured rows and the
predicted ones. When that is a measured row (the baseline, when every step count loses), nothing more is loaded
(two loads, and the baseline deployed again to be left running: three), unless a held-back figure is within the
best measured row's own interval (its tok/s ± CI: prediction cannot tell them apart). A held-back configuration
whose optimistic figure cannot beat every pessimistic one is never loaded.

Configurations this cannot predict are measured: topk > 1 (tree drafts: the accepted path depends on the tree), and
draft-token counts other than steps + 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

# The most draft steps the tuner proposes (the real H200 grid's widest, steps 1-7 with 2-8 draft tokens, is inside
# it), and so the horizon of a longer chain's prediction (``longer_chain``); `inv sweep` measures more. The SLA the
# tune is asked to meet is judged against it (plan/sla.unmeetable).
TUNE_MAX_STEPS = 8


def correct_drafts_pmf(hist: list[int]) -> list[float]:
    """P(J = j) from a histogram whose index j counts the verify passes that accepted j drafts."""
    total = sum(hist)
    if total <= 0:
        raise ValueError("the accepted-drafts histogram is empty")
    return [c / total for c in hist]


def accept_len_at(hist: list[int], k: int) -> float:
    """Tokens per verify pass at ``k`` steps: 1 + E[min(J, k)] (the bonus token plus the accepted drafts)."""
    pmf = correct_drafts_pmf(hist)
    return 1.0 + sum(p * min(j, k) for j, p in enumerate(pmf))


def request_tok_s(*, accept_len: float, cycle_ms: float, ttft_ms: float, output_len: int, concurrency: int) -> float:
    """Served tok/s of ``concurrency`` requests in flight, each ``output_len`` tokens (the first from the prefill)."""
    per_request_ms = ttft_ms + max(0, output_len - 1) / accept_len * cycle_ms
    return 1000.0 * concurrency * output_len / per_request_ms


@dataclass(frozen=True)
class Predicted:
    steps: int
    concurrency: int
    accept_len: float
    cycle_ms: float
    tok_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Measured:
    """What the prediction needs of one measured speculative run at one concurrency."""

    steps: int
    tok_s: float
    cycle_ms: float
    ttft_ms: float


def predict_level(hist: list[int], max_steps: int, cycle_at: Callable[[int], float], measured: list[Measured],
                  steps: list[int], *, output_len: int, concurrency: int) -> tuple[list[Predicted], float]:
    """tok/s at each of ``steps`` (all ≤ ``max_steps``, the run the histogram came from) at one concurrency, and
    the calibration factor used (measured over formula at the measured step counts, geometric mean)."""
    if any(k > max_steps for k in steps):
        raise ValueError(f"cannot predict beyond the measured {max_steps} steps")
    if not measured:
        raise ValueError("no measured speculative run at this concurrency")
    ttft = sum(m.ttft_ms for m in measured) / len(measured)

    def formula(k: int) -> float:
        return request_tok_s(accept_len=accept_len_at(hist, k), cycle_ms=max(cycle_at(k), 1e-6), ttft_ms=ttft,
                             output_len=output_len, concurrency=concurrency)

    logs = [math.log(m.tok_s / formula(m.steps)) for m in measured if m.tok_s > 0]
    calib = math.exp(sum(logs) / len(logs)) if logs else 1.0
    out = [Predicted(steps=k, concurrency=concurrency, accept_len=accept_len_at(hist, k), cycle_ms=cycle_at(k),
                     tok_s=formula(k) * calib) for k in steps]
    return out, calib


@dataclass(frozen=True)
class PhaseCosts:
    """What the phase model needs at one concurrency, each measured by SGLang's device timer: the baseline's decode
    forward, and per measured chain configuration (steps, ms per draft forward, ms per verify pass, the tool's
    cycle)."""

    decode_ms: float | None
    runs: tuple[tuple[int, float, float, float], ...]  # (steps, draft_step_ms, verify_ms, cycle_ms)

    @property
    def two_counts(self) -> bool:
        return len({s for s, *_ in self.runs}) >= 2

    def verify_at(self, draft_tokens: int, pessimistic: bool = False) -> float:
        """ms of a verify pass over ``draft_tokens`` per sequence: the line through the measured verify passes
        (least squares over their draft-token counts), or with one measured count the line from the decode forward
        at one token to it (the model in the module's docstring); ``pessimistic`` with one count: no saving at all
        (a pass over fewer tokens costs what the measured one did), the other bound."""
        pts = sorted({(s + 1, v) for s, _, v, _ in self.runs})
        if not self.two_counts:
            if self.decode_ms is None:
                raise ValueError("one measured verify count and no baseline decode forward")
            big_d, big_v = pts[-1]
            if pessimistic or self.decode_ms >= big_v:
                # A verify over fewer tokens never costs more: where the decode forward costs more than the
                # measured verify pass (the H200, CUDA graphs on: decode 0.59 ms, 4-token verify 0.540 ms), the
                # anchored line would rise as tokens fall; it is flat instead (0.540 against 0.524 measured at 3).
                return big_v
            pts = [(1, self.decode_ms), (big_d, big_v)]
        n = len(pts)
        mx = sum(d for d, _ in pts) / n
        my = sum(v for _, v in pts) / n
        slope = sum((d - mx) * (v - my) for d, v in pts) / sum((d - mx) ** 2 for d, _ in pts)
        return my + slope * (draft_tokens - mx)

    def cycle_at(self, steps: int, pessimistic: bool = False) -> float:
        """ms of one cycle at ``steps`` (draft tokens steps + 1): from the measured cycle of the nearest measured
        step count, less (or plus) its draft forwards and the verify model's difference."""
        s, _, _, cyc = min(self.runs, key=lambda r: (abs(r[0] - steps), -r[0]))
        draft = sum(r[1] for r in self.runs) / len(self.runs)  # one draft forward costs the same at any count
        return cyc - (s - steps) * draft - (self.verify_at(s + 1, pessimistic) -
                                            self.verify_at(steps + 1, pessimistic))

    @property
    def model(self) -> str:
        if self.two_counts:
            return "verify line through the measured verify passes"
        return ("verify between the line from the baseline's decode forward to the measured verify pass and no "
                "saving at all")


# With one measured count the prediction is a range (the anchored line: optimistic where a verify pass costs more
# than a decode forward; no saving: pessimistic). The point figure, and so the third load, weighs them 3:1. The
# weight is a choice made on the simulator's cost models (every one tested, 1..32 in flight, then finds its winner
# in three loads; bench/sweep_predict.py): it picks which candidate to measure, never a figure left unmeasured.
OPTIMISTIC_WEIGHT = 0.75


def blend(optimistic: float, pessimistic: float) -> float:
    return OPTIMISTIC_WEIGHT * optimistic + (1 - OPTIMISTIC_WEIGHT) * pessimistic


def unpredictable_reason(steps: int, topk: int, draft_tokens: int | None) -> str | None:
    """Why a configuration must be measured rather than predicted (None: predictable)."""
    if steps == 0:
        return None
    if topk > 1:
        return f"topk {topk}: tree drafts, the accepted path depends on the tree, not on a chain's prefix"
    if draft_tokens is not None and draft_tokens != steps + 1:
        return f"{draft_tokens} draft tokens at {steps} steps: only steps+1 (a chain) is predicted"
    return None


def plan_runs(chain_steps: list[int]) -> tuple[int, int] | None:
    """The two speculative step counts to measure: the smallest (the longest lever for the cycle fit) and the
    largest (its histogram covers every k below it). None when there are fewer than three chain step counts (then
    measuring them all costs no more)."""
    s = sorted(set(chain_steps))
    if len(s) < 3:
        return None
    return s[0], s[-1]


# -- a longer chain: what one more draft position (or several) would buy -------------------------------------------

@dataclass(frozen=True)
class Chain:
    """One measured chain (topk 1, steps + 1 draft tokens): its step count, its histogram of correct drafts per
    verify pass (index j: the passes that accepted j drafts), and its verify pass (ms [timer]) where measured."""

    steps: int
    hist: tuple[int, ...]
    verify_ms: float | None = None


@dataclass(frozen=True)
class Longer:
    """The step count the tail model predicts best above the measured one, and the model's figures [derived]."""

    steps: int
    accept_len: float
    cycle_ms: float
    saving_ms: float  # cycle ms saved at the measured accept length: cycle − cycle(k) · accept ÷ accept(k)
    share: float  # the passes a longer chain accepts more in (the rule's evidence)
    rate: float  # the acceptance the tail continues at, per position past the histogram's chain
    chain: int  # the longer chain measured whose histogram was read (0: the measured chain's own)
    draft_ms: float  # one more draft forward
    verify_growth_ms: float  # verify's growth per extra draft token
    gain: float  # tokens per ms at ``steps`` over the measured chain's, less 1


def _reached(hist: tuple[int, ...] | list[int], n: int) -> Callable[[int], float]:
    """P(J ≥ i) for the chain of ``n`` steps whose histogram this is: read for i ≤ n, beyond it the last position's
    acceptance P(J ≥ n) ÷ P(J ≥ n − 1) continued geometrically (the tail model, stated in ``longer_chain``)."""
    pmf = correct_drafts_pmf(list(hist))

    def at_least(i: int) -> float:
        return sum(p for j, p in enumerate(pmf) if j >= i)

    last, before = at_least(n), at_least(n - 1) if n >= 1 else 1.0
    rate = last / before if before > 0 else 0.0

    def reached(i: int) -> float:
        return at_least(i) if i <= n else last * rate ** (i - n)
    return reached


def tail_rate(hist: tuple[int, ...] | list[int], n: int) -> float:
    """The last position's acceptance of an ``n``-step chain: P(J ≥ n) ÷ P(J ≥ n − 1)."""
    reached = _reached(hist, n)
    return reached(n + 1) / reached(n) if reached(n) > 0 else 0.0


def longer_chain(*, steps: int, accept_len: float, cycle_ms: float, hist: tuple[int, ...] | list[int],
                 draft_ms: float, verify_ms: float, max_steps: int, decode_ms: float | None = None,
                 longer: Chain | None = None) -> Longer | None:
    """The step count above ``steps`` (at most ``max_steps``) with the most tokens per ms by the tail model, or
    None when none beats the measured chain. The model, stated:

    * **acceptance**: the accept length at k is the measured one plus P(J ≥ i) for each position i past ``steps``
      (1 + E[min(J, k)], the sweep predictor's truncation, added onto what was measured): P(J ≥ i) is read from the
      histogram of a longer chain measured (``longer``: the same draft, so its passes show how far acceptance goes),
      else from the measured chain's own, whose last position's acceptance P(J ≥ n) ÷ P(J ≥ n − 1) is continued
      geometrically past it (a draft that was right at its last position is as likely right at the next);
    * **cost**: each extra step runs one more draft forward (``draft_ms``, measured) and verify checks one more
      token per sequence: its growth is the line through the two measured verify passes where a longer chain's was
      measured; else the predictor's bounds weighted as it weighs them (``blend``: 3 to 1 for the optimistic end,
      no growth, against the steepest line the measured pass allows: from the baseline's decode forward at one
      token where one was measured on the same clock, else through zero, a verify with no fixed part).
    """
    if steps < 1 or steps >= max_steps or accept_len <= 0 or cycle_ms <= 0 or not hist or sum(hist) <= 0:
        return None
    from_longer = longer is not None and longer.steps > steps and bool(longer.hist) and sum(longer.hist) > 0
    src, n = (longer.hist, longer.steps) if from_longer and longer is not None else (tuple(hist), steps)
    reached = _reached(src, n)
    tokens = steps + 1
    if from_longer and longer is not None and longer.verify_ms is not None:
        growth = max(0.0, (longer.verify_ms - verify_ms) / (longer.steps - steps))
    else:
        steepest = (verify_ms - decode_ms) / (tokens - 1) if decode_ms is not None and 0 < decode_ms < verify_ms \
            else verify_ms / tokens
        growth = blend(0.0, steepest)
    now = accept_len / cycle_ms
    best: tuple[float, int, float, float] | None = None
    accept = accept_len
    for k in range(steps + 1, max_steps + 1):
        accept += reached(k)
        cycle = cycle_ms + (k - steps) * (draft_ms + growth)
        rate = accept / cycle
        if rate > now and (best is None or rate > best[0]):
            best = (rate, k, accept, cycle)
    if best is None:
        return None
    rate, k, accept, cycle = best
    return Longer(steps=k, accept_len=accept, cycle_ms=cycle, saving_ms=cycle_ms - cycle * accept_len / accept,
                  share=reached(steps + 1) if from_longer else reached(steps),
                  rate=tail_rate(src, n), chain=n if from_longer else 0, draft_ms=draft_ms,
                  verify_growth_ms=growth, gain=rate / now - 1)
