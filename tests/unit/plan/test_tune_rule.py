"""``inv tune``'s decision rule over many seeds: a real 30 % gain under a 20 % deploy-to-deploy spread is kept, a
no-op under the same noise is reverted — where a loop deciding by eye (one deploy each, a strict ``>``) keeps the
no-op about half the time — and the guards (engaged, SLA, accept length, GPU memory) and stop reasons."""

from __future__ import annotations

import random

import pytest

from fabfile.plan import tune_rule
from fabfile.plan.tune_rule import Arm, decide

SEEDS = range(200)
NOISE = 0.10  # each deploy's figure × U(0.9, 1.1): a 20 % deploy-to-deploy spread


def _deploys(rng: random.Random, true: float, n: int = 3, noise: float = NOISE) -> tuple[float, ...]:
    return tuple(true * rng.uniform(1 - noise, 1 + noise) for _ in range(n))


def _by_eye(rng: random.Random, a: float, b: float) -> bool:
    return b * rng.uniform(1 - NOISE, 1 + NOISE) > a * rng.uniform(1 - NOISE, 1 + NOISE)


def test_a_real_30_percent_gain_is_kept_under_20_percent_noise() -> None:
    kept = 0
    for seed in SEEDS:
        rng = random.Random(seed)
        v = decide(Arm(_deploys(rng, 100.0)), Arm(_deploys(rng, 130.0)), moves_accept=False)
        kept += v.kept
    assert kept >= 0.95 * len(SEEDS), kept


def test_a_no_op_is_reverted_under_the_same_noise_where_a_strict_greater_keeps_it_half_the_time() -> None:
    kept = by_eye = 0
    for seed in SEEDS:
        rng = random.Random(seed)
        kept += decide(Arm(_deploys(rng, 100.0)), Arm(_deploys(rng, 100.0)), moves_accept=False).kept
        by_eye += _by_eye(rng, 100.0, 100.0)
    assert kept <= 0.05 * len(SEEDS), kept  # all 3 beat all 3 by chance: p = 1/20, less with the spread
    assert by_eye > 0.3 * len(SEEDS)  # the loop this rule replaces would have kept these


def test_a_mechanism_win_is_kept_when_end_to_end_cannot_resolve_it() -> None:
    kept = 0
    for seed in SEEDS:
        rng = random.Random(seed)
        inc = Arm(_deploys(rng, 100.0, noise=0.2), mechanism=_deploys(rng, 1.0, noise=0.01))
        ch = Arm(_deploys(rng, 103.0, noise=0.2), mechanism=_deploys(rng, 0.9, noise=0.01))
        v = decide(inc, ch, moves_accept=False)
        kept += v.kept
    assert kept >= 0.9 * len(SEEDS)


def test_a_mechanism_win_is_refused_when_end_to_end_got_worse_beyond_its_spread() -> None:
    inc = Arm((100.0, 101.0, 100.5), mechanism=(1.0, 1.0, 1.0))
    ch = Arm((80.0, 80.5, 81.0), mechanism=(0.5, 0.5, 0.5))
    v = decide(inc, ch, moves_accept=False)
    assert not v.kept and v.outcome == "reverted"


def test_a_change_that_did_not_engage_is_never_scored() -> None:
    v = decide(Arm((100.0, 101.0)), Arm((200.0, 201.0), engaged=(True, False)), moves_accept=False)
    assert (v.kept, v.outcome) == (False, "not engaged")


@pytest.mark.parametrize("challenger, why", [
    (Arm((200.0, 201.0), sla_met=(True, False)), "SLA"),
    (Arm((200.0, 201.0), accept=(2.0, 2.0)), "accept length moved"),
    (Arm((200.0, 201.0), memory_gib=(150.0, 120.0)), "GPU memory"),
])
def test_guards_refuse_a_faster_challenger(challenger: Arm, why: str) -> None:
    inc = Arm((100.0, 101.0), accept=(3.0, 3.0))
    v = decide(inc, challenger, moves_accept=False, memory_limit_gib=139.0)
    assert (v.kept, v.outcome) == (False, "guard") and why in v.why


def test_accept_length_may_move_for_a_change_that_should_move_it() -> None:
    v = decide(Arm((100.0, 101.0), accept=(3.0, 3.0)), Arm((200.0, 201.0), accept=(2.0, 2.0)), moves_accept=True)
    assert v.kept


def test_one_deploy_per_arm_is_refused() -> None:
    with pytest.raises(ValueError):
        decide(Arm((100.0,)), Arm((200.0,)), moves_accept=False)


def test_the_schedule_interleaves_and_remeasures_the_incumbent() -> None:
    assert tune_rule.schedule(2) == ["A", "B", "B", "A"]
    assert tune_rule.schedule(3) == ["A", "B", "B", "A", "A", "B"]


def test_resolvable_effect_follows_the_measured_spread() -> None:
    assert tune_rule.resolvable([1.0, 1.0, 1.0], 3) == 0.0
    wide, narrow = tune_rule.resolvable([0.8, 1.0, 1.2], 3), tune_rule.resolvable([0.98, 1.0, 1.02], 3)
    assert wide > 0.3 > narrow


@pytest.mark.parametrize("kw, reason", [
    (dict(best_predicted=None), "nothing-left"),
    (dict(best_predicted=0.05, resolvable_fraction=0.1), "below-resolution"),
    (dict(loads_left=3), "budget"),
    (dict(seconds_left=10.0), "budget"),
])
def test_stop_reasons(kw: dict[str, object], reason: str) -> None:
    args: dict[str, object] = dict(best_predicted=0.5, resolvable_fraction=0.1, loads_left=10, loads_per_trial=4,
                                   seconds_left=600.0, seconds_per_trial=120.0)
    args.update(kw)
    stop = tune_rule.stop_reason(**args)  # type: ignore[arg-type]
    assert stop is not None and stop.reason == reason
    assert tune_rule.stop_reason(best_predicted=0.5, resolvable_fraction=0.1, loads_left=10, loads_per_trial=4,
                                 seconds_left=600.0, seconds_per_trial=120.0) is None


def test_the_sla_objective_keeps_a_slower_change_that_meets_the_limits_the_incumbent_missed() -> None:
    inc = Arm((200.0, 201.0, 199.0), sla_met=(True, False, False), sla_broken=("TTFT 812.0", "TTFT 790.0"))
    slower_but_within = Arm((180.0, 181.0, 179.0), sla_met=(True, True, True))
    v = decide(inc, slower_but_within, moves_accept=False, sla_first=True)
    assert v.kept and "meets the SLA" in v.why and "TTFT 812.0" in v.why
    # tok/s as the objective: the SLA only guards, and a slower change is not kept.
    assert not decide(inc, slower_but_within, moves_accept=False).kept


def test_the_sla_guard_names_the_limit_a_challenger_broke() -> None:
    v = decide(Arm((100.0, 101.0)), Arm((200.0, 201.0), sla_met=(True, False), sla_broken=("TPOT 41.5",)),
               moves_accept=False, sla_first=True)
    assert (v.kept, v.outcome) == (False, "guard") and "1 of 2" in v.why and "TPOT 41.5" in v.why
