"""Winners under service limits (``inv sweep --max-ttft-ms --max-tpot-ms --min-tok-s``): which limit a measured
configuration broke at a concurrency level, judged on the figures the sweep measured there (median TTFT and TPOT
from the benchmark's per-request timings, output tok/s). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Limits:
    max_ttft_ms: float | None = None
    max_tpot_ms: float | None = None
    min_tok_s: float | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in asdict(self).values())

    def as_dict(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def describe(self) -> str:
        parts = []
        if self.max_ttft_ms is not None:
            parts.append(f"TTFT ≤ {self.max_ttft_ms:g} ms")
        if self.max_tpot_ms is not None:
            parts.append(f"TPOT ≤ {self.max_tpot_ms:g} ms")
        if self.min_tok_s is not None:
            parts.append(f"≥ {self.min_tok_s:g} tok/s")
        return ", ".join(parts)


def broken(fig: Mapping[str, object], limits: Limits) -> list[str]:
    """The limits ``fig`` (one configuration at one level) broke, each as a short phrase; a figure the
    benchmark did not measure breaks its limit too (nothing shows it is met)."""
    out: list[str] = []
    for key, limit, name, upper in (("ttft_ms", limits.max_ttft_ms, "TTFT", True),
                                    ("tpot_ms", limits.max_tpot_ms, "TPOT", True),
                                    ("tok_s", limits.min_tok_s, "tok/s", False)):
        if limit is None:
            continue
        v = fig.get(key)
        if not isinstance(v, (int, float)):
            out.append(f"{name} not measured")
        elif (float(v) > limit) if upper else (float(v) < limit):
            out.append(f"{name} {float(v):.1f}")
    return out


# The bound below which no limit can be met, stated and conservative (it refuses only what no server could do, never
# a limit a fast one might meet). A speculative cycle runs at least one forward of the target (verify), and the
# fastest forward measured in this project is 0.565 ms of GPU time (a small target on one H200, CUDA graphs on, real
# SGLang 0.5.16, SGLang's device timer: docs/real-sglang.md; its wall-clock cycle was 4.38 ms), so 0.1 ms is under a
# fifth of it. A cycle gives each request at most steps + 1 tokens (the accepted drafts and verify's own), so per
# request a token takes at least CYCLE_FLOOR_MS ÷ (steps + 1), and C requests in flight serve at most
# C × (steps + 1) × 1000 ÷ CYCLE_FLOOR_MS tok/s. TTFT has no such floor here: a prefill of one short prompt can be
# far under a millisecond on a small model, so any positive TTFT limit is taken.
CYCLE_FLOOR_MS = 0.1


def unmeetable(limits: Limits, concurrency: int, max_steps: int) -> list[str]:
    """The limits no configuration of at most ``max_steps`` draft steps could meet at ``concurrency`` requests in
    flight, each as a sentence naming its flag and the bound (``CYCLE_FLOOR_MS``'s reasoning)."""
    out: list[str] = []
    per_cycle = max(max_steps, 0) + 1
    tpot_floor = CYCLE_FLOOR_MS / per_cycle
    if limits.max_tpot_ms is not None and limits.max_tpot_ms < tpot_floor:
        out.append(f"--max-tpot-ms {limits.max_tpot_ms:g}: no server can meet it; a token takes at least "
                   f"{tpot_floor:.3g} ms [derived: a cycle of at least {CYCLE_FLOOR_MS:g} ms gives each request at "
                   f"most {per_cycle} tokens at {max_steps} draft steps]")
    ceiling = concurrency * per_cycle * 1000.0 / CYCLE_FLOOR_MS
    if limits.min_tok_s is not None and limits.min_tok_s > ceiling:
        out.append(f"--min-tok-s {limits.min_tok_s:g}: no server can meet it at --concurrency {concurrency}; "
                   f"{concurrency} requests in flight serve at most {ceiling:g} tok/s [derived: {per_cycle} tokens "
                   f"per request per cycle of at least {CYCLE_FLOOR_MS:g} ms]")
    return out
