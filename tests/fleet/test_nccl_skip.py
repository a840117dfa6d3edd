"""A --predict sweep with NCCL candidates loads only the candidates that can win (the rule: plan/nccl_skip.py)."""

from __future__ import annotations

import json
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


@pytest.mark.fleet
def test_predict_at_tp2_skips_the_candidate_nccls_costs_rule_out_and_loads_the_one_that_can_win(
        fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    """TP 2 over PCIe, 16 requests in flight, all-reduce-heavy (244 per forward, verify's compute growing little
    with the batch): verify's 128-token messages are Simple's (bandwidth), so with PROTO=Simple measured first (and
    traced), forcing LL cannot beat its best row (by about 10 %, against the benchmark's few-% interval) and is not
    loaded, while NCCL's own choice (PROTO=-: LL for the draft's small messages) could, and is loaded. Every draft is
    accepted, so the requests run alike and the interval stays narrow whatever the machine's load."""
    cfg_path = sim_host.home / "models/kimi-k2.5-int4/config.json"
    saved = cfg_path.read_text()
    # the model's shape, as a real config.json gives it: what sizes the all-reduce messages
    cfg_path.write_text(json.dumps({**json.loads(saved), "hidden_size": 7168, "torch_dtype": "bfloat16"}) + "\n")
    try:
        inv = derived_inventory(fleet, tmp_path, defaults={"gpus": 2, "tp": 2, "nccl_preset": "none"})
        sim_host.set_sim_config(time_scale=0.5, load_seconds=0.1, gpus=2, nccl_allreduces_per_forward=244,
                                verify_ms_per_batch_token=0.04, accept_prob=[1.0] * 7)
        args = ["sweep", "--steps", "0,7", "--nccl-env", "NCCL_PROTO=Simple|LL|-", "--predict", "--concurrency", "16",
                "--num-prompts", "32", "--input-len", "64", "--output-len", "256", "--out", str(tmp_path / "runs")]
        code, doc, err = inv_json(*args, inventory=inv, timeout=600)
        assert code == 0, err
        # --resume of the finished sweep: nothing measured again, the skip recomputed from the saved rows' traces
        code2, again, err2 = inv_json(*args, "--resume", str(Path(doc["paths"]["json"]).parent), inventory=inv,
                                      timeout=300)
    finally:
        cfg_path.write_text(saved)
    assert code2 == 0, err2
    assert [s["candidate"] for s in again["nccl_skipped"]] == ["PROTO=LL"]
    assert not any(r["config"].endswith("@PROTO=LL") for r in again["rows"])
    assert again["model_loads"] <= doc["model_loads"] + 1   # at most the winner's redeploy
    measured = {r["config"] for r in doc["rows"] if r.get("measured")}
    print("model loads:", doc["model_loads"], "of", doc["grid_loads"], "measured:", sorted(measured),
          "skipped:", doc["nccl_skipped"])
    first = [r for r in doc["rows"] if r.get("nccl") == "PROTO=Simple"]
    assert all(r["allreduce"]["ms_per_pass"] > 0 and "profiler trace" in r["allreduce"]["source"] for r in first)
    (skip,) = doc["nccl_skipped"]
    assert skip["candidate"] == "PROTO=LL" and sorted(skip["configs"]) == ["baseline@PROTO=LL",
                                                                          "eagle3-s7-k1-d8@PROTO=LL"]
    assert skip["optimistic_tok_s"] < skip["best_pessimistic_tok_s"]
    assert "derived" in skip["figures"]["optimistic_tok_s"]
    assert not any(n.endswith("@PROTO=LL") for n in measured)
    assert {"baseline@PROTO=-", "eagle3-s7-k1-d8@PROTO=-"} <= measured   # it could win: loaded
    assert "NCCL candidate PROTO=LL skipped" in err
    assert doc["model_loads"] <= 5 < doc["grid_loads"] == 6   # 4 loads (+ the winner's redeploy) of 6
    assert not doc["winner"].endswith("@PROTO=LL")
    report = Path(doc["paths"]["report"]).read_text()
    assert "| baseline@PROTO=LL | skipped |" in report
