"""A --predict sweep with NCCL candidates loads only the candidates that can win (the rule: plan/nccl_skip.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_json


@pytest.mark.fleet
def test_predict_at_tp1_loads_only_the_first_nccl_candidate(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    """TP 1: no NCCL communicator, so `--nccl pcie,none --predict` measures pcie only (2 first loads, not 4) and
    names the skip and its reason; the winner is still the one the full grid has (7 steps at accept 0.95)."""
    inv = derived_inventory(fleet, tmp_path, defaults={"gpus": 1, "tp": 1})
    sim_host.set_sim_config(time_scale=0.5, load_seconds=0.1, gpus=1, accept_prob=[0.95] * 7)
    code, doc, err = inv_json("sweep", "--steps", "0,3,7", "--nccl", "pcie,none", "--predict", "--concurrency", "4",
                              "--num-prompts", "8", "--input-len", "32", "--output-len", "128", "--out",
                              str(tmp_path / "runs"), inventory=inv, timeout=400)
    assert code == 0, err
    measured = {r["config"] for r in doc["rows"] if r.get("measured")}
    print("model loads:", doc["model_loads"], "of", doc["grid_loads"], "measured:", sorted(measured))
    assert not any(n.endswith("@none") for n in measured), measured
    assert [s["candidate"] for s in doc["nccl_skipped"]] == ["none"] and "TP 1" in doc["nccl_skipped"][0]["reason"]
    assert "skipped: TP 1" in err
    assert doc["model_loads"] <= 3 < doc["grid_loads"]
    assert doc["winner"] == "eagle3-s7-k1-d8@pcie"
