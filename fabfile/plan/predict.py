"""Predict a chain-draft (topk 1) sweep from three measurements: pure functions, no I/O.

With topk 1 the drafter proposes the same tokens at positions 1..k whatever the step count (it drafts one token at a
time from the same context), and the target accepts the longest correct prefix. So one run at the largest step count
S gives the distribution of correct drafts J per verify pass, and a run at k ≤ S would accept min(J, k) of them: its
accept length is ``1 + E[min(J, k)]``. SGLang reports that distribution per request (``spec_accept_histogram`` /
``spec_correct_drafts_histogram``, 0.5.9+) and, for older versions, the agent derives it from the tokens each verify
pass streamed (``fabfile/remote/metrics.py``).

The cycle (draft + verify) time is fitted as ``a + b·steps`` from two speculative runs (``analysis.fit_cycle``), at
each concurrency. A request of N output tokens then takes ``TTFT + (N − 1) / accept_len(k) · cycle(k)`` (the prefill
brings the first token), and C requests in flight serve ``C·N / that`` tok/s. The formula's error at the measured
step counts (prefill interleaving under load, client overhead) is taken out by one factor per concurrency, fitted on
the measured speculative runs, so the prediction goes through what was measured and interpolates between.

Configurations this cannot predict are measured: topk > 1 (tree drafts: the accepted path depends on the tree), and
draft-token counts other than steps + 1.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from fabfile.plan.analysis import CycleFit


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


def predict_level(hist: list[int], max_steps: int, fit: CycleFit, measured: list[Measured], steps: list[int], *,
                  output_len: int, concurrency: int) -> tuple[list[Predicted], float]:
    """tok/s at each of ``steps`` (all ≤ ``max_steps``, the run the histogram came from) at one concurrency, and
    the calibration factor used (measured over formula at the measured step counts, geometric mean)."""
    if any(k > max_steps for k in steps):
        raise ValueError(f"cannot predict beyond the measured {max_steps} steps")
    if not measured:
        raise ValueError("no measured speculative run at this concurrency")
    ttft = sum(m.ttft_ms for m in measured) / len(measured)

    def formula(k: int) -> float:
        return request_tok_s(accept_len=accept_len_at(hist, k), cycle_ms=max(fit.at(k), 1e-6), ttft_ms=ttft,
                             output_len=output_len, concurrency=concurrency)

    logs = [math.log(m.tok_s / formula(m.steps)) for m in measured if m.tok_s > 0]
    calib = math.exp(sum(logs) / len(logs)) if logs else 1.0
    out = [Predicted(steps=k, concurrency=concurrency, accept_len=accept_len_at(hist, k), cycle_ms=fit.at(k),
                     tok_s=formula(k) * calib) for k in steps]
    return out, calib


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
