"""Issue 40, point 5: `inv explain` on a `--predict` sweep labels a row that was predicted, not measured (it
printed the row's cycle and accept length as `[derived]` and `[meta]`, sources of measurements, on a configuration
never deployed, and fired rules on them). The sweep is the H200's real 7B-shaped `--predict` run
(tests/data/real-0.5.16-h200/7b-p3-predict-sweep.json: steps 2 and 7 measured, 1 and 3-6 predicted)."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.invoke_cli import ROOT
from tests.support.terminal import WIDTHS, run_on_terminal

SWEEP = ROOT / "tests" / "data" / "real-0.5.16-h200" / "7b-p3-predict-sweep.json"


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("on_terminal", [True, False], ids=["pty", "pipe"])
def test_a_predicted_row_is_labelled_predicted_and_no_rule_fires_on_it(columns: int, on_terminal: bool) -> None:
    code, shown, _ = run_on_terminal("explain", "--from", str(SWEEP), columns=columns, stdout_tty=on_terminal)
    assert code == 0, shown
    blocks = re.split(r"\n(?=eagle3-)", "\n" + shown)
    predicted = [b for b in blocks if b.startswith("eagle3-s3-k1-d4")]
    assert len(predicted) == 1, shown
    flat = re.sub(r"\s+", " ", predicted[0])
    assert flat.startswith("eagle3-s3-k1-d4 (predicted, never deployed): cycle 5.84 ms [predicted]"), flat
    assert "[meta]" not in flat and "[derived]" not in flat and "derived_only" not in flat, flat
    assert "verdict: predicted, not measured (never deployed)" in flat and "`inv deploy --steps 3`" in flat
    measured = re.sub(r"\s+", " ", next(b for b in blocks if b.startswith("eagle3-s2-k1-d3")))
    assert "predicted" not in measured and "verify 5.16 ms [timer]" in measured, measured


def test_the_json_says_which_subjects_were_predicted() -> None:
    code, js, _ = run_on_terminal("explain", "--from", str(SWEEP), "--json", columns=80, stdout_tty=False)
    assert code == 0
    said = {s["config"]: s["predicted"] for s in json.loads(js)["subjects"]}
    assert said["eagle3-s3-k1-d4"] is True and said["eagle3-s2-k1-d3"] is False and said["eagle3-s7-k1-d8"] is False
