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
