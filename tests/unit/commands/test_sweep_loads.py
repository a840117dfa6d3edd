"""Issue 40, point 3: one model-load count, computed once, said the same before the first load and at the end (the
plan said "6 model loads as without --predict", the end "model loads: 7 (the full grid would have taken 6)": the 7th
was the winner's redeploy, which a grid needs too), and `inv sweep --help` says what `--predict` measures (it said
"the smallest and largest chain step counts"; it measures the largest only while SGLang's device timer is on)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from fabfile.commands.sweep import load_count, planned_loads_sentence
from fabfile.plan.deploy_plan import Options
from fabfile.plan.sweep_plan import Config, measurement_order
from fabfile.present.sweep_report import loads_sentence
from tests.support.terminal import WIDTHS, run_on_terminal


def _cfgs(steps: list[int], nccl: list[str]) -> list[Config]:
    out = []
    for n in nccl:
        for s in steps:
            name = ("baseline" if s == 0 else f"eagle3-s{s}-k1-d{s + 1}") + (f"@{n}" if n else "")
            out.append(Config(name=name, steps=s, topk=1, draft_tokens=s + 1 if s else None, opts=Options(), nccl=n))
    return out


def test_the_nccl_sweep_of_the_issue_plans_and_ends_on_the_same_terms() -> None:
    cfgs = _cfgs([0, 2, 3], ["pcie", "none"])
    order, held, _ = measurement_order(cfgs, True)
    least, most = load_count(order, held, [1], "pcie")
    assert (least, most) == (3, 6)  # the first candidate's 3; the other's 3 only if they can win
    said = planned_loads_sentence(least, most, len(cfgs), len(held))
    assert said.startswith("3 to 6 model loads to measure (the full grid: 6")
    assert "as without --predict" not in said
    # every candidate was loaded and the winner redeployed at the end: 6 to measure, the 7th said apart
    doc: dict[str, Any] = {"predict": True, "grid_loads": 6, "model_loads": 7, "redeploy_loads": 1,
                           "planned_loads": {"least": least, "most": most}}
    end = loads_sentence(doc)
    assert end == ("model loads: 6 to measure (the full grid: 6; planned: 3 to 6), and 1 to leave the winner running "
                   "(a grid in this order needs it too)")
    assert "would have taken 6" not in end


def test_nothing_to_save_is_said_as_the_grid() -> None:
    cfgs = _cfgs([0, 1, 2], [""])
    order, held, _ = measurement_order(cfgs, True)
    least, most = load_count(order, held, [1], None)
    assert planned_loads_sentence(least, most, 3, len(held)).startswith(
        "nothing to predict or skip among these configurations: all 3 are measured, 3 model loads")
    assert loads_sentence({"predict": True, "grid_loads": 3, "model_loads": 3,
                           "planned_loads": {"least": 3, "most": 3}}) == \
        "model loads: 3 to measure (the full grid: 3; planned: 3)"


def test_a_chain_sweep_counts_the_winner_confirmation_as_planned() -> None:
    cfgs = _cfgs(list(range(8)), [""])
    order, held, _ = measurement_order(cfgs, True)
    least, most = load_count(order, held, [1], None)
    assert (least, most) == (2, 4)  # the baseline and steps 7, then at most the winner and a refit's
    assert [c.steps for c in order] == [0, 7] and replace(order[0]).name == "baseline"


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("on_terminal", [True, False], ids=["pty", "pipe"])
def test_sweep_help_says_predict_measures_the_largest_step_count(columns: int, on_terminal: bool) -> None:
    code, shown, _ = run_on_terminal("sweep", "--help", columns=columns, stdout_tty=on_terminal)
    assert code == 0, shown
    flat = re.sub(r"\s+", " ", shown)
    assert "smallest and largest" not in flat
    assert "measure the baseline and the largest chain step count (the smallest too where SGLang's device timer " \
           "is off" in flat, flat
