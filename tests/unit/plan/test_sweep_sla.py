"""Winners under service limits: ``inv sweep --max-ttft-ms --max-tpot-ms --min-tok-s`` (fabfile/plan/sla.py,
``plan.sweep_winner.choose``, the sweep table's marks). Pure, on sweep rows shaped as ``measure`` writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabfile.plan.sla import Limits
from fabfile.plan.sweep_winner import choose
from fabfile.present.sweep_report import conclusion, table_rows
from tests.support.invoke_cli import run_inv


def _row(config: str, steps: int, levels: list[tuple[int, float, float, float]]) -> dict[str, Any]:
    lv = [{"concurrency": c, "tok_s": t, "ttft_ms": ttft, "tpot_ms": tpot} for c, t, ttft, tpot in levels]
    return {"config": config, "steps": steps, "topk": 1, "draft_tokens": steps + 1 if steps else None, "ok": True,
            "measured": True, **{k: v for k, v in lv[0].items() if k != "concurrency"}, "levels": lv}


ROWS = [_row("baseline", 0, [(1, 80.0, 90.0, 12.0), (8, 400.0, 120.0, 19.0)]),
        _row("eagle3-s2-k1-d3", 2, [(1, 130.0, 160.0, 7.5), (8, 520.0, 300.0, 15.0)]),
        _row("eagle3-s4-k1-d5", 4, [(1, 150.0, 240.0, 6.6), (8, 470.0, 420.0, 17.0)])]


def _doc(rows: list[dict[str, Any]], levels: list[int], limits: Limits) -> dict[str, Any]:
    doc: dict[str, Any] = {"host": "h", "sweep_id": "x", "rows": rows, "concurrency_levels": levels}
    doc.update(choose(rows, None, levels, limits))
    doc["running"] = doc["kept"]
    return doc


def test_the_winner_is_the_fastest_configuration_meeting_the_limits_per_level() -> None:
    doc = _doc([dict(r) for r in ROWS], [1, 8], Limits(max_ttft_ms=200.0))
    assert doc["winners"] == {"1": "eagle3-s2-k1-d3", "8": "baseline"}  # without limits: s4 at 1, s2 at 8
    assert doc["winner"] == doc["kept"] == "eagle3-s2-k1-d3" and doc["sla"]["unmet_levels"] == []
    marks = {r[0]: r[-1] for r in table_rows(doc)}
    assert marks["eagle3-s4-k1-d5"].endswith("broke @1: TTFT 240.0; @8: TTFT 420.0")
    assert marks["eagle3-s2-k1-d3"].endswith("broke @8: TTFT 300.0") and "broke" not in marks["baseline"]
    assert "meeting TTFT ≤ 200 ms" in conclusion(doc)
    assert choose([dict(r) for r in ROWS], None, [1, 8])["winners"] == {"1": "eagle3-s4-k1-d5",
                                                                         "8": "eagle3-s2-k1-d3"}


def test_each_limit_that_was_broken_is_named() -> None:
    doc = _doc([dict(r) for r in ROWS], [1], Limits(max_tpot_ms=7.0, min_tok_s=140.0))
    assert doc["winner"] == "eagle3-s4-k1-d5"
    marks = {r[0]: r[-1] for r in table_rows(doc)}
    assert marks["baseline"].endswith("broke TPOT 12.0, tok/s 80.0")
    assert marks["eagle3-s2-k1-d3"].endswith("broke TPOT 7.5, tok/s 130.0")


def test_none_meeting_the_limits_is_a_clear_result_not_a_crash() -> None:
    doc = _doc([dict(r) for r in ROWS], [1], Limits(max_ttft_ms=50.0))
    assert doc["winner"] is None and doc["sla"]["unmet_levels"] == [1]
    assert doc["kept"] == "eagle3-s4-k1-d5"  # the fastest stays up; the sweep exits 1 (run_sweep)
    assert conclusion(doc) == ("no configuration meets TTFT ≤ 50 ms (measured by the benchmark); left running the "
                               "fastest, eagle3-s4-k1-d5")


@pytest.mark.parametrize(("flag", "value"), [("--max-ttft-ms", "0"), ("--max-tpot-ms", "-3"), ("--min-tok-s", "nan"),
                                             ("--max-ttft-ms", "inf"), ("--min-tok-s", "fast")])
def test_limits_that_are_not_positive_finite_numbers_exit_2_before_anything(tmp_path: Path, flag: str,
                                                                             value: str) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {python: /v/bin/python3, model: /m, draft_model: /d}\n"
                   "hosts:\n  h: {ssh_host: 192.0.2.1}\n")
    r = run_inv("sweep", "--steps", "0,1", flag, value, "--out", str(tmp_path / "runs"), inventory=inv)
    assert r.returncode == 2 and flag in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()
