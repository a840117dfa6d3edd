"""`inv tune` end to end over real SSH against the simulated fleet: bad input refused before a host is touched, and
one measured iteration from the inventory's configuration that leaves the host serving, its path saved."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_json, run_inv, sglang_pids, start_inv

FAST = {"time_scale": 0.5, "load_seconds": 0.1}
LOAD = ["--num-prompts", "4", "--output-len", "48", "--input-len", "32"]
# Each test runs `inv tune` in its own folder (tmp_path): its saved path (runs/tune-sim1.json) is its own, never one
# a previous run left in the checkout.


@pytest.fixture
def inventory(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> Path:
    # No `measure` and no timer variable: tune's deploys turn SGLang's device timer on themselves, as a sweep's do
    # (the real H200 run found a tune on a plain inventory reading no phase at all, so no rule could fire).
    return derived_inventory(fleet, tmp_path)


@pytest.mark.parametrize("args, words", [(["--objective", "latency"], "--objective"),
                                         (["--max-loads", "0"], "--max-loads"),
                                         (["--max-minutes", "0"], "--max-minutes"),
                                         (["--objective", "sla"], "--objective sla"),
                                         (["--max-ttft-ms", "0"], "--max-ttft-ms"),
                                         (["--max-tpot-ms", "0.01"], "--max-tpot-ms 0.01: no server can meet it"),
                                         (["--min-tok-s", "1e6", "--concurrency", "2"],
                                          "--min-tok-s 1e+06: no server can meet it at --concurrency 2")])
def test_bad_input_is_refused_before_any_host_is_touched(inventory: Path, sim_host: SimHost, args: list[str],
                                                         words: str, tmp_path: Path) -> None:
    r = run_inv("tune", *args, inventory=inventory, cwd=tmp_path)
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert not sglang_pids(sim_host)


def test_every_bad_flag_is_said_at_once(inventory: Path, sim_host: SimHost, tmp_path: Path) -> None:
    r = run_inv("tune", "--objective", "latency", "--max-loads", "0", "--max-minutes", "0", "--max-tpot-ms", "0.001",
                "--trace-steps", "0", inventory=inventory, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    for flag in ("--objective", "--max-loads", "--max-minutes", "--max-tpot-ms", "--trace-steps"):
        assert flag in r.stderr, (flag, r.stderr)
    assert not sglang_pids(sim_host)


def test_tune_measures_and_leaves_the_host_serving_its_best(inventory: Path, sim_host: SimHost,
                                                             tmp_path: Path) -> None:
    sim_host.set_sim_config(**FAST)
    code, doc, err = inv_json("tune", *LOAD, "--max-loads", "8", "--trace-steps", "4", "--write",
                              str(tmp_path / "diff.json"), inventory=inventory, cwd=tmp_path)
    assert code == 0, err
    assert doc["loads"] >= 1 and doc["stop"] in ("nothing-left", "below-resolution", "budget")
    # TP 2: the NCCL remedies of allreduce_bound (a rule only the trace can fire) are untried, so the first deploy
    # is measured with the profiler's trace too, bounded by --trace-steps.
    first = doc["outside_trials"][0]
    assert first["traced"] and 0 < first["traced_passes"] <= 4, first
    assert {"verify", "draft", "other"} <= set(first["figures"]), first["figures"]  # the device timer's phases
    assert first["memory_gib"] and first["memory_gib"] > 0, first  # the GPU memory guard has a figure [nvidia-smi]
    assert json.loads(Path(doc["state_file"]).read_text())["loads"] == doc["loads"]
    assert json.loads((tmp_path / "diff.json").read_text())
    assert sglang_pids(sim_host), "tune left the host without a server"


def test_tune_keeps_overlap_back_on_where_host_time_dominates(fleet: Fleet, sim_host: SimHost,
                                                              tmp_path: Path) -> None:
    """The simulator's host time (``host_ms``) doubles with --disable-overlap-schedule: the profile's "other" is a
    third of the cycle, the other_share rule fires, overlap comes back on in A B B A A B and wins beyond the spread
    of deploys that each draw their own ±5 % host-time factor."""
    inventory = derived_inventory(fleet, tmp_path, defaults={"sglang_args": ["--disable-overlap-schedule"]})
    sim_host.set_sim_config(**FAST, host_ms=8.0, no_overlap_host_factor=2.0, deploy_noise=0.05)
    code, doc, err = inv_json("tune", *LOAD, "--max-loads", "12", inventory=inventory, cwd=tmp_path)
    assert code == 0, err
    assert all({"verify", "other"} <= set(m["figures"]) for m in doc["outside_trials"])  # the device timer's
    step = doc["steps"][0]
    assert step["rule"] == "other_share" and step["remedy"] == "overlap-on", step
    assert all({"verify", "other"} <= set(m["figures"]) for m in step["measurements"])  # phases, every deploy
    assert step["outcome"] == "kept", step["why"]
    assert len(step["measurements"]) == 6 and [m["arm"] for m in step["measurements"]] == list("ABBAAB")
    assert "--disable-overlap-schedule" not in doc["best"]["flags"]
    running = " ".join(cmd for _pid, cmd in sglang_pids(sim_host))
    assert running and "--disable-overlap-schedule" not in running


def test_a_group_tunes_its_first_host_under_an_sla_and_tells_the_others_what_they_would_get(
        fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path) -> None:
    """`--host pair` (sim1, sim2): sim1 is tuned; the winning change (overlap back on) is tried under a TPOT limit no
    deploy meets — each deploy's median TPOT [tool: the load's timings] judged as `inv sweep` judges it — so it is
    not kept (guard, the broken limit named) and its trial ends there; sim2, which runs overlap on, is told what the
    final configuration would change on it, as an inventory diff against its running deploy, and is never
    deployed (its server's pid is the same after)."""
    inventory = derived_inventory(fleet, tmp_path, defaults={
        "sglang_args": ["--enable-metrics", "--disable-overlap-schedule"],
        "env": {"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}},
        hosts={"sim2": {"sglang_args": ["--enable-metrics"]}})
    data = yaml.safe_load(inventory.read_text())
    data["groups"] = {"pair": ["sim1", "sim2"]}
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    sim1, sim2 = sim_hosts["sim1"], sim_hosts["sim2"]
    for h in (sim1, sim2):
        h.set_sim_config(**FAST, host_ms=8.0, no_overlap_host_factor=2.0, deploy_noise=0.05)
    assert run_inv("deploy", "--host", "sim2", inventory=inventory, cwd=tmp_path).returncode == 0
    before = sglang_pids(sim2)
    code, doc, err = inv_json("tune", "--host", "pair", *LOAD, "--max-loads", "7", "--max-tpot-ms", "0.5",
                              "--write", str(tmp_path / "diff.json"), inventory=inventory, cwd=tmp_path)
    assert code == 0, err
    assert doc["host"] == "sim1"
    step = doc["steps"][0]
    assert step["remedy"] == "overlap-on" and step["outcome"] == "guard", step
    assert "missed the SLA (TPOT" in step["why"], step["why"]
    # The first challenger deploy that misses ends the trial: no later load could get the change kept.
    assert [m["arm"] for m in step["measurements"]] == ["A", "B"]
    assert all(m["sla"]["tpot_ms"] > 0.5 and not m["sla_met"] for m in step["measurements"])
    assert "--disable-overlap-schedule" in doc["best"]["flags"]
    assert doc["sla"]["max_tpot_ms"] == 0.5 and doc["sla"]["best_met"] is False
    [other] = doc["others"]
    assert other["host"] == "sim2" and other["deployed"] is False and "running deploy" in other["source"]
    assert other["changes"] == ["+--disable-overlap-schedule"], other
    assert other["inventory_diff"]["sglang_args"] == {"--disable-overlap-schedule": None}
    assert json.loads((tmp_path / "diff.json").read_text())["sim2"] == other["inventory_diff"]
    assert sglang_pids(sim2) == before  # never deployed


def test_ctrl_c_during_a_candidate_deploys_the_best_so_far_again(fleet: Fleet, sim_host: SimHost,
                                                                 tmp_path: Path) -> None:
    """SIGINT to the real `inv tune` process while the candidate (overlap back on) serves: the incumbent (the
    start, overlap off) is deployed again before it exits, and the saved path says so."""
    inventory = derived_inventory(fleet, tmp_path, defaults={"sglang_args": ["--disable-overlap-schedule"]})
    sim_host.set_sim_config(**FAST, host_ms=8.0, no_overlap_host_factor=2.0)
    # Three times the load of the other tests: the candidate serves for its whole measurement, a window the poll
    # below (an ssh exec each turn, slow on a loaded machine) must not miss, or the tune ends before the signal.
    load = ["--num-prompts", "12", *LOAD[2:]]
    client = start_inv("tune", *load, "--max-loads", "12", inventory=inventory, cwd=tmp_path)
    err = ""
    try:
        deadline = time.monotonic() + 90
        def candidate_serves() -> bool:
            cmds = [c for _p, c in sglang_pids(sim_host) if "launch_server" in c]
            return any("--disable-overlap-schedule" not in c for c in cmds)

        while not candidate_serves():
            assert time.monotonic() < deadline and client.poll() is None
            time.sleep(0.2)
        os.killpg(client.pid, signal.SIGINT)
        _out, err = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert client.returncode != 0
    assert "Traceback" not in err, err
    saved = json.loads((tmp_path / "runs" / "tune-sim1.json").read_text())
    assert saved["stop"] == "interrupted" and "deployed again" in saved["restored"], saved
    running = " ".join(c for _p, c in sglang_pids(sim_host) if "launch_server" in c)
    assert "--disable-overlap-schedule" in running, running
    # The tune let go of the host on its way out: a deploy takes it at once.
    after = run_inv("deploy", "--host", "sim1", inventory=inventory, cwd=tmp_path, timeout=180)
    assert after.returncode == 0, after.stderr


def test_one_tune_per_host_a_deploy_or_a_second_tune_between_its_deploys_is_refused(
        fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    """While `inv tune` runs, a deploy that queues for the host (`--lock-wait`: it would get the deploy lock
    between two of the tune's deploys) and a second tune are refused, naming the tune, and nothing of theirs runs;
    once the tune ends, the host is free again."""
    inventory = derived_inventory(fleet, tmp_path, defaults={
        "sglang_args": ["--enable-metrics", "--disable-overlap-schedule"],
        "env": {"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}})
    sim_host.set_sim_config(**FAST, host_ms=8.0, no_overlap_host_factor=2.0)
    (tmp_path / "second").mkdir()
    client = start_inv("tune", *LOAD, "--max-loads", "12", inventory=inventory, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 90
        while not any("launch_server" in c for _p, c in sglang_pids(sim_host)):
            assert time.monotonic() < deadline and client.poll() is None
            time.sleep(0.2)
        racer = run_inv("deploy", "--host", "sim1", "--lock-wait", "120", "--steps", "4", inventory=inventory,
                        cwd=tmp_path, timeout=180)
        assert racer.returncode != 0 and "a tune (`inv tune`, tune-" in racer.stderr, racer.stderr
        assert "nothing was changed here" in racer.stderr
        second = run_inv("tune", *LOAD, "--max-loads", "8", inventory=inventory, cwd=tmp_path / "second")
        assert second.returncode != 0 and "a tune (`inv tune`, tune-" in second.stderr, second.stderr
        assert not (tmp_path / "second" / "runs" / "tune-sim1.json").exists()
        assert not any("--speculative-num-steps=4" in c or "--speculative-num-steps 4" in c
                       for _p, c in sglang_pids(sim_host))
        _out, err = client.communicate(timeout=300)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert client.returncode == 0, err
    saved = json.loads((tmp_path / "runs" / "tune-sim1.json").read_text())
    # Every deploy the tune scored was its own: the path's deploys are all measured on its configurations.
    assert saved["stop"] in ("nothing-left", "below-resolution", "budget"), saved["stop"]
    after = run_inv("deploy", "--host", "sim1", inventory=inventory, cwd=tmp_path, timeout=180)
    assert after.returncode == 0, after.stderr


def test_a_flag_the_server_did_not_take_is_not_engaged_by_its_own_server_info(fleet: Fleet, sim_host: SimHost,
                                                                               tmp_path: Path) -> None:
    """overlap-on drops --disable-overlap-schedule, but this server runs without overlap whatever its command line
    says (``server_args_override``: a flag that did not take): its own /get_server_info reports
    disable_overlap_schedule true, so the change is "not engaged" and never scored — not judged by the
    configuration the tune asked for."""
    inventory = derived_inventory(fleet, tmp_path, defaults={
        "sglang_args": ["--enable-metrics", "--disable-overlap-schedule"],
        "env": {"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}})
    sim_host.set_sim_config(**FAST, host_ms=8.0, no_overlap_host_factor=2.0,
                            server_args_override={"disable_overlap_schedule": True})
    code, doc, err = inv_json("tune", *LOAD, "--max-loads", "8", inventory=inventory, cwd=tmp_path)
    assert code == 0, err
    step = next(s for s in doc["steps"] if s["remedy"] == "overlap-on")
    assert step["outcome"] == "not engaged", step
    assert "disable_overlap_schedule=True [SGLang /get_server_info]" in step["evidence"], step["evidence"]
    assert [m["arm"] for m in step["measurements"]] == ["A", "B"] and not step["after"]


def test_tune_lengthens_a_saturated_chain_on_the_7b_like_host(fleet: Fleet, sim_host: SimHost,
                                                             tmp_path: Path) -> None:
    """The simulator's 7B-like profile (``cost_profile: 7b-h200``: the real H200 grid's phases, the kit's draft
    wrong every third slot) from steps 1, where the real grid measured 268 tok/s against steps 2's 499: no rule but
    draft_saturated fires (speculation already wins), half the passes accept the one draft token, more-steps goes
    to a longer chain through the host's speculative settings (the launch has the flag once), and the win is kept
    beyond the spread of A B B A A B."""
    inventory = derived_inventory(fleet, tmp_path, defaults={"tp": 1, "speculative": {"steps": 1}})
    sim_host.set_version("0.5.16")
    sim_host.set_sim_config(cost_profile="7b-h200", time_scale=4.0, load_seconds=0.1, deploy_noise=0.02)
    code, doc, err = inv_json("tune", *LOAD, "--concurrency", "1", "--max-loads", "8", inventory=inventory,
                              cwd=tmp_path)
    assert code == 0, err
    first = doc["outside_trials"][0]
    assert first["figures"]["steps"] == 1 and first["accept_histogram"], first
    step = doc["steps"][0]
    assert step["rule"] == "draft_saturated" and step["remedy"] == "more-steps", step
    assert "accepted its one draft token" in step["finding"], step["finding"]
    assert step["outcome"] == "kept", step["why"]
    steps = int(doc["best"]["flags"]["--speculative-num-steps"])
    assert steps >= 2 and step["evidence"].replace("'", "") == \
        f"server_args speculative_num_steps={steps} [SGLang /get_server_info]", step["evidence"]
    after = [m for m in step["measurements"] if m["arm"] == "B"]
    assert all(m["accept"] > 2.5 for m in after), after  # the partial draft's chain: 2 tokens accepted per pass
    running = [c for _p, c in sglang_pids(sim_host) if "launch_server" in c]
    assert running and all(c.count("--speculative-num-steps") == 1 and f"--speculative-num-steps={steps}" in c
                           for c in running), running
