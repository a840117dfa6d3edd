"""``inv tune``'s decision rule: whether a change is kept, from deploys of the incumbent and the challenger measured
in the same run, and when the loop stops. Pure: figures in, verdicts out.

The rule (``../shared/reference/tune.md`` §5.2): a deploy is the unit of replication, so each arm's figure is a list
of per-deploy values, interleaved A B B A (``schedule``). The spread of an arm is (max − min) ÷ median over its
deploys. A challenger is kept only when

- every challenger deploy beats every incumbent deploy (the distribution-free rule: 3 against 3 gives p = 1/20),
  and its median gain exceeds the larger arm's spread — **end to end**; or
- the same holds for the **mechanism figure** its rule predicts (a phase's ms from the device timer, lower is better)
  while end to end is not worse beyond its spread;

and the guards hold: it engaged on every deploy (else it is never scored), every deploy meets the SLA, accept length
did not move (beyond its spread, at least 3 %) for a change that should not move it, GPU memory stayed under the
limit. A loop that keeps a change on one measurement each by a strict ``>`` keeps a no-op half the time.

With the SLA as the objective (``sla_first``) meeting the limits comes before tok/s: a challenger that meets them on
every deploy where the incumbent missed them on one is kept whatever its tok/s (the sweep's rule: the fastest of
those that meet the limits, and none that misses them beats one that meets them).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

ACCEPT_TOLERANCE = 0.03  # the smallest accept-length move called a move (its within-deploy spread is often 0)
T_FACTOR = 2.8  # detectable effect ≈ 2.8·σ·√(2/n) (tune.md §5.2 rule 3: 80 % power at 5 %)


def schedule(pairs: int) -> list[str]:
    """Deploy order for ``pairs`` deploys of each arm, the incumbent ``A`` re-measured in the same run: A B B A A B …"""
    if pairs < 1:
        raise ValueError("pairs must be at least 1")
    unit = ["A", "B", "B", "A"]
    out = (unit * math.ceil(pairs / 2))[: 2 * pairs]
    return out


def spread(values: Sequence[float]) -> float:
    """(max − min) ÷ median over deploys: 0 for one deploy (nothing measured, which ``decide`` refuses)."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    return (max(values) - min(values)) / abs(med) if med else math.inf


def cv(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.stdev(values) / abs(mean) if mean else math.inf


def resolvable(values: Sequence[float], deploys: int) -> float:
    """The smallest relative effect ``deploys`` deploys per arm can resolve given these per-deploy values."""
    return T_FACTOR * cv(values) * math.sqrt(2.0 / max(deploys, 1))


@dataclass(frozen=True)
class Arm:
    """One arm's per-deploy figures: the objective (higher is better: tok/s), the mechanism figure (lower is
    better: ms), accept length, peak GPU memory (GiB), whether each deploy met the SLA and engaged the change."""

    objective: tuple[float, ...]
    mechanism: tuple[float, ...] = ()
    accept: tuple[float, ...] = ()
    memory_gib: tuple[float, ...] = ()
    sla_met: tuple[bool, ...] = ()
    engaged: tuple[bool, ...] = ()
    sla_broken: tuple[str, ...] = ()  # the limits its deploys broke, as ``plan/sla.broken`` words them


@dataclass(frozen=True)
class Verdict:
    kept: bool
    outcome: str  # kept | reverted | not engaged | guard
    why: str
    gain: float  # median end-to-end gain, relative
    spread: float  # the larger arm's end-to-end spread
    mechanism_gain: float | None = None
    mechanism_spread: float | None = None
    details: dict[str, float] = field(default_factory=dict)


def _beats_all(better: Sequence[float], worse: Sequence[float], higher: bool) -> bool:
    return min(better) > max(worse) if higher else max(better) < min(worse)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _missed(arm: Arm) -> int:
    return arm.sla_met.count(False)


def decide(incumbent: Arm, challenger: Arm, *, moves_accept: bool, memory_limit_gib: float | None = None,
           sla_first: bool = False) -> Verdict:
    a, b = incumbent.objective, challenger.objective
    if len(a) < 2 or len(b) < 2:
        raise ValueError("each arm needs at least two deploys: one deploy has no spread to compare against")
    if challenger.engaged and not all(challenger.engaged):
        return Verdict(False, "not engaged", f"the change did not engage on {challenger.engaged.count(False)} of "
                                             f"{len(challenger.engaged)} deploys: not scored", 0.0, 0.0)
    gain = statistics.median(b) / statistics.median(a) - 1
    s = max(spread(a), spread(b))
    base = dict(gain=gain, spread=s)
    if _missed(challenger):
        broke = f" ({', '.join(dict.fromkeys(challenger.sla_broken))})" if challenger.sla_broken else ""
        return Verdict(False, "guard", f"{_missed(challenger)} of {len(challenger.sla_met)} challenger deploys missed "
                                       f"the SLA{broke}", gain, s)
    if memory_limit_gib is not None and challenger.memory_gib and max(challenger.memory_gib) > memory_limit_gib:
        return Verdict(False, "guard", f"GPU memory {max(challenger.memory_gib):.1f} GiB over the "
                                       f"{memory_limit_gib:.1f} GiB limit", gain, s)
    if not moves_accept and incumbent.accept and challenger.accept:
        ma, mb = statistics.median(incumbent.accept), statistics.median(challenger.accept)
        tol = max(ACCEPT_TOLERANCE, spread(incumbent.accept), spread(challenger.accept))
        if ma and abs(mb / ma - 1) > tol:
            return Verdict(False, "guard", f"accept length moved {ma:.2f} → {mb:.2f} for a change that should not "
                                           "move it: the comparison is invalid", gain, s)
    if sla_first and _missed(incumbent) and challenger.sla_met:
        broke = f" ({', '.join(dict.fromkeys(incumbent.sla_broken))})" if incumbent.sla_broken else ""
        return Verdict(True, "kept", f"meets the SLA on every deploy, where the incumbent missed it on "
                                     f"{_missed(incumbent)} of {len(incumbent.sla_met)}{broke}; end to end "
                                     f"{_pct(gain)}", gain, s, details=base)
    if _beats_all(b, a, higher=True) and gain > s:
        return Verdict(True, "kept", f"end to end {_pct(gain)}: every challenger deploy beat every incumbent "
                                     f"deploy, beyond the spread {s * 100:.1f} %", gain, s, details=base)
    ma_, mb_ = incumbent.mechanism, challenger.mechanism
    if len(ma_) >= 2 and len(mb_) >= 2:
        mgain = 1 - statistics.median(mb_) / statistics.median(ma_)
        ms = max(spread(ma_), spread(mb_))
        if _beats_all(mb_, ma_, higher=False) and mgain > ms and gain > -s:
            return Verdict(True, "kept", f"mechanism {_pct(-mgain)} (every deploy, beyond its spread "
                                         f"{ms * 100:.1f} %), end to end {_pct(gain)} within its spread "
                                         f"{s * 100:.1f} %", gain, s, mgain, ms, base)
        return Verdict(False, "reverted", f"no win beyond the spread: end to end {_pct(gain)} (spread "
                                          f"{s * 100:.1f} %), mechanism {_pct(-mgain)} (spread {ms * 100:.1f} %)",
                       gain, s, mgain, ms, base)
    return Verdict(False, "reverted", f"no win beyond the spread: end to end {_pct(gain)} (spread "
                                      f"{s * 100:.1f} %)", gain, s, details=base)


@dataclass(frozen=True)
class Stop:
    reason: str  # nothing-left | below-resolution | budget (the loop also stops "unmeasured": no timer phases)
    sentence: str


def stop_reason(*, best_predicted: float | None, resolvable_fraction: float, loads_left: int, loads_per_trial: int,
                seconds_left: float, seconds_per_trial: float) -> Stop | None:
    """Why the loop stops before the next trial, or None to go on. ``best_predicted``: the best remaining
    candidate's predicted saving as a fraction of its figure (None: no rule fires with an untried remedy)."""
    if best_predicted is None:
        return Stop("nothing-left", "no rule fires with an untried remedy")
    if best_predicted < resolvable_fraction:
        return Stop("below-resolution", f"the best remaining predicted saving ({best_predicted * 100:.1f} %) is "
                                        f"below the smallest effect the measured spread resolves "
                                        f"({resolvable_fraction * 100:.1f} %)")
    if loads_left < loads_per_trial:
        return Stop("budget", f"the load budget: {loads_left} loads left, a trial needs {loads_per_trial}")
    if seconds_left < seconds_per_trial:
        return Stop("budget", f"the time budget: {seconds_left / 60:.1f} min left, a trial takes about "
                              f"{seconds_per_trial / 60:.1f} min")
    return None
