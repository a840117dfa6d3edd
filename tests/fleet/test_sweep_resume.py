"""``inv sweep --resume DIR``: a sweep that stopped (a failed configuration, Ctrl-C, a lost client or host) goes on
from what it saved, measuring again nothing it measured on the same deploy plan; a sweep of another plan is
refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_json, run_inv

BENCH = ["--num-prompts", "3", "--output-len", "32", "--input-len", "32"]


def test_a_resumed_sweep_measures_only_what_it_lacks_and_refuses_another_plan(fleet: Fleet, sim_host: SimHost,
                                                                              tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path)
    runs = tmp_path / "runs"
    # EAGLE-3 at steps 2 is never accepted: its deploy fails the accept gate, the sweep goes on and exits 1.
    sim_host.set_sim_config(time_scale=0.5, load_seconds=0.1, accept_prob_by_config={"2,1,3": [0.0]})
    code, first, err = inv_json("sweep", "--steps", "0,1,2", *BENCH, "--out", str(runs), inventory=inv, timeout=200)
    assert code == 1, err
    assert [r["ok"] for r in first["rows"]] == [True, True, False]
    out = Path(first["paths"]["json"]).parent
    benches = {r["config"]: r["bench_id"] for r in first["rows"] if r["ok"]}

    # Another plan (other step counts, other load, another inventory value): refused, nothing started or written.
    before = (out / "sweep.json").read_text()
    for extra, words in ((["--steps", "0,1,3", *BENCH], "other configurations"),
                         (["--steps", "0,1,2", "--num-prompts", "4", "--output-len", "32", "--input-len", "32"],
                          "other parameters")):
        r = run_inv("sweep", *extra, "--out", str(runs), "--resume", str(out), inventory=inv)
        assert r.returncode == 2 and words in r.stderr, r.stderr
    other = derived_inventory(fleet, tmp_path, defaults={"nccl_preset": "none"}, name="other.yaml")
    r = run_inv("sweep", "--steps", "0,1,2", *BENCH, "--out", str(runs), "--resume", str(out), inventory=other)
    assert r.returncode == 2 and "deploy plan of baseline, eagle3-s1-k1-d2, eagle3-s2-k1-d3 changed" in r.stderr
    assert (out / "sweep.json").read_text() == before

    # Fixed on the host: the resumed sweep deploys only the configuration it lacks, into the same folder.
    sim_host.set_sim_config(time_scale=0.5, load_seconds=0.1, accept_prob_by_config={})
    code, doc, err = inv_json("sweep", "--steps", "0,1,2", *BENCH, "--out", str(runs), "--resume", str(out),
                              inventory=inv, timeout=200)
    assert code == 0, err
    assert doc["sweep_id"] == first["sweep_id"] and doc["resumed"]["kept"] == ["baseline", "eagle3-s1-k1-d2"]
    assert {r["config"]: r["bench_id"] for r in doc["rows"][:2]} == benches  # not measured again
    assert [r["config"] for r in doc["rows"]] == ["baseline", "eagle3-s1-k1-d2", "eagle3-s2-k1-d3"]
    assert all(r["ok"] for r in doc["rows"])
    loads = doc["model_loads"] - first["model_loads"]
    assert loads == (1 if doc["running"] == "eagle3-s2-k1-d3" else 2)  # the one lacking, and the winner's redeploy
    assert json.loads((out / "sweep.json").read_text())["resumed"]["kept"] == ["baseline", "eagle3-s1-k1-d2"]
