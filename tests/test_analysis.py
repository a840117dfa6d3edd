"""Break-even analysis (fabfile/plan/analysis.py), checked against the seed's numbers."""

from __future__ import annotations

import pytest

from fabfile.plan import analysis

BASELINE_MS = 12.2          # seed: baseline decode, ms per token (82.2 tok/s)
VERIFY_UNTUNED = 29.0       # seed: EAGLE-3 2-step verify of 3 tokens without working NCCL tuning
VERIFY_TUNED = 18.7         # seed: the same verify with the tuning in the workers


def test_seed_29ms_verify_needs_about_2_4_and_loses() -> None:
    # 60.5 tok/s at a 29 ms cycle means the drafter achieved ≈1.75 tokens per cycle.
    got = 60.5 * VERIFY_UNTUNED / 1000.0  # tokens per cycle = tok/s × cycle (s)
    assert got == pytest.approx(1.75, abs=0.01)
    be = analysis.from_numbers(baseline_ms=BASELINE_MS, verify_ms=VERIFY_UNTUNED, steps=2, accept_len=got)
    assert be.needed_accept_len == pytest.approx(2.38, abs=0.01)   # "needs ~2.4+"
    assert be.needed_accept_len > 2.35 and be.max_accept_len == 3.0
    assert be.verdict == "loses"
    assert be.predicted_tok_s == pytest.approx(60.5, abs=0.5)
    assert be.speedup is not None and be.speedup == pytest.approx(0.74, abs=0.01)  # −26 %: the seed's "27 % worse"
    assert be.max_cycle_ms_to_win == pytest.approx(21.4, abs=0.1)
    assert "loses" in be.sentence() and "2.38" in be.sentence()
    # Any draft cost only raises the bar: "2.4+".
    with_draft = analysis.from_numbers(baseline_ms=BASELINE_MS, verify_ms=VERIFY_UNTUNED, steps=2, draft_ms=1.5)
    assert with_draft.needed_accept_len == pytest.approx(32.0 / 12.2)


def test_seed_18_7ms_verify_can_win() -> None:
    be = analysis.from_numbers(baseline_ms=BASELINE_MS, verify_ms=VERIFY_TUNED, steps=2, accept_len=1.75)
    assert be.needed_accept_len == pytest.approx(1.53, abs=0.01)
    assert be.verdict == "wins"
    assert be.predicted_tok_s == pytest.approx(93.6, abs=0.5)   # the seed's earlier 94 tok/s
    assert be.speedup is not None and be.speedup > 1.1


def test_cannot_win_when_break_even_exceeds_the_most_a_cycle_can_emit() -> None:
    be = analysis.from_numbers(baseline_ms=10.0, verify_ms=35.0, steps=2)
    assert be.needed_accept_len == 3.5 and be.max_accept_len == 3.0 and be.verdict == "cannot win"
    assert analysis.from_numbers(baseline_ms=10.0, verify_ms=25.0, steps=2).verdict == "unknown"


def test_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        analysis.needed_accept_len(20.0, 0.0)
    with pytest.raises(ValueError):
        analysis.break_even(baseline_ms=12.2, cycle=0.0)


def test_cycle_fit_and_sweep_rows() -> None:
    rows = [
        {"config": "baseline", "steps": 0, "topk": 1, "ok": True, "tok_s": 82.0, "decode_ms_per_token": 12.2},
        {"config": "eagle3-s1-k1-d2", "steps": 1, "topk": 1, "ok": True, "tok_s": 96.0, "accept_len": 1.8,
         "cycle_ms": 18.7},
        {"config": "eagle3-s2-k1-d3", "steps": 2, "topk": 1, "ok": True, "tok_s": 60.5, "accept_len": 1.75,
         "cycle_ms": 29.0},
        {"config": "eagle3-s3-k1-d4", "steps": 3, "topk": 1, "ok": False},
    ]
    a = analysis.analyze_sweep(rows)
    assert a["baseline_ms"] == 12.2
    verdicts = {r["config"]: r["verdict"] for r in a["rows"]}
    assert verdicts == {"eagle3-s1-k1-d2": "wins", "eagle3-s2-k1-d3": "loses"}
    assert a["fit"]["per_step_ms"] == pytest.approx(10.3)
    fit = analysis.fit_cycle([(1, 18.7), (2, 21.7), (3, 24.7)])
    assert fit is not None and fit.base_ms == pytest.approx(15.7) and fit.at(4) == pytest.approx(27.7)
    assert analysis.fit_cycle([(2, 20.0)]) is None
    assert analysis.analyze_sweep(rows[1:])["baseline_ms"] is None
