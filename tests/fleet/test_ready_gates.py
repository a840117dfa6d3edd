"""Ready means it answers: after the readiness endpoint's 200 the deploy sends a real
generation request and, for a speculative configuration, measures the accept length with a short burst. A server
whose readiness passes but whose generation fails or hangs, or whose speculation is stuck at accept length 1, is a
failed deploy: torn down, and rolled back with --rollback-on-failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabfile.remote.serve.gates import BURST_TOKENS
from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, http_get, inv_host_json, inv_json, run_inv, sglang_pids


@pytest.fixture
def inventory(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> Path:
    return derived_inventory(fleet, tmp_path, defaults={"timeouts": {"first_request": 5}})


def _record(host: SimHost) -> dict[str, object]:
    return dict(json.loads(host.exec(["cat", "/root/.specdeploy/current.json"]).stdout))


def test_a_healthy_eagle3_deploy_answers_a_real_request_and_passes_the_accept_gate(inventory: Path,
                                                                                  sim_host: SimHost) -> None:
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 0, err
    assert {"wait_ready", "first_request", "accept_gate"} <= set(doc["timings"])
    first = doc["first_request"]
    assert first["completion_tokens"] == 8 and first["latency_s"] > 0
    acc = doc["accept"]
    # the simulator's default acceptance (0.8, 0.6, 0.45 for 3 drafts) gives about 2.5 tokens per verify pass
    assert 1.8 < acc["accept_length"] < 3.2, acc
    assert acc["gate"] == 1.1 and acc["requests"] == 4 and acc["verify_ct"] > 0
    assert "spec_verify_ct" in acc["source"]
    rec = _record(sim_host)
    assert rec["status"] == "running" and rec["accept"] == acc
    # what the progress shows: the step and its latency
    r = run_inv("deploy", "--steps", "3", inventory=inventory)
    assert r.returncode == 0, r.stderr
    assert "first real request" in r.stderr and "tokens in" in r.stderr and "accept length" in r.stderr, r.stderr


def test_a_baseline_deploy_sends_the_real_request_but_has_no_accept_gate(inventory: Path, sim_host: SimHost) -> None:
    code, doc, err = inv_host_json("deploy", "--steps", "0", inventory=inventory)
    assert code == 0, err
    assert "first_request" in doc["timings"] and "accept_gate" not in doc["timings"]
    assert doc["accept"] is None and doc["first_request"]["completion_tokens"] == 8


@pytest.mark.parametrize(("fault", "needle", "timed_out"), [
    ("generate_error", "HTTP 500", False),
    ("generate_hang", "hung", True),
    ("scheduler_dead_health_ok", "hung", True),
])
def test_ready_but_not_answering_is_a_failed_deploy_torn_down(inventory: Path, sim_host: SimHost, fault: str,
                                                              needle: str, timed_out: bool) -> None:
    sim_host.set_sim_config(fail=fault)
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 1, err
    e = doc["error"]
    assert e["kind"] == "LaunchError" and e["details"]["agent_kind"] == "generate_failed", e
    assert needle in e["message"] and "ready" in e["message"], e["message"]
    assert bool(e["details"].get("timed_out")) is timed_out
    assert "wait_ready" in doc["timings"] and "first_request" in doc["timings"]
    assert e["details"]["torn_down"], e
    assert sglang_pids(sim_host) == []
    assert _record(sim_host)["status"] == "failed"


def test_eagle3_stuck_at_accept_length_1_fails_the_accept_gate(inventory: Path, sim_host: SimHost) -> None:
    sim_host.set_sim_config(accept_prob_by_config={"3,1,4": [0.0]})
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 1, err
    e = doc["error"]
    assert e["kind"] == "AcceptGateError", e
    msg = e["message"]
    # never accepted: each verify pass gives 1 token; the prefill's first token makes it a little above 1
    never = BURST_TOKENS / (BURST_TOKENS - 1)
    assert f"accept length {never:.2f}" in msg and "accept_gate 1.1" in msg and "spec_verify_ct" in msg, msg
    assert "draft model is not being accepted" in msg and "topk/draft-token" in e["hint"]
    assert e["details"]["accept_length"] <= 1.1 and e["details"]["source"]
    assert sglang_pids(sim_host) == []
    # The knob is per configuration: another draft length on the same host speculates and passes.
    code, doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    assert doc["accept"]["accept_length"] > 1.1
    # And the gate can be turned off (or lowered) for one run.
    code, doc, err = inv_host_json("deploy", "--steps", "3", "--accept-gate", "0", inventory=inventory)
    assert code == 0, err
    assert "accept_gate" not in doc["timings"]


def test_the_accept_gate_from_the_inventory_and_bad_values(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path, defaults={"accept_gate": 5.0})
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inv)
    assert code == 1 and doc["error"]["kind"] == "AcceptGateError", err
    assert "accept_gate 5" in doc["error"]["message"]
    for bad in ("-1", "abc", "100"):
        r = run_inv("deploy", "--steps", "3", "--accept-gate", bad, inventory=inv)
        assert r.returncode == 2 and "--accept-gate" in r.stderr and "Traceback" not in r.stderr, r.stderr
    (tmp_path / "b").mkdir()
    bad_inv = derived_inventory(fleet, tmp_path / "b", defaults={"accept_gate": -2})
    r = run_inv("deploy", "--steps", "3", inventory=bad_inv)
    assert r.returncode == 2 and "accept_gate" in r.stderr, r.stderr


def test_a_failed_gate_is_rolled_back_with_rollback_on_failure(inventory: Path, sim_host: SimHost) -> None:
    code, good, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    sim_host.set_sim_config(accept_prob_by_config={"3,1,4": [0.0]})
    code, _doc, err = inv_json("deploy", "--steps", "3", "--rollback-on-failure", inventory=inventory)
    assert code == 1, err
    rec = _record(sim_host)
    assert rec["status"] == "running" and rec["config_name"] == "eagle3-s2-k1-d3", rec
    assert rec.get("rollback_of") == good["deploy_id"]
    assert http_get(sim_host, "/health")[0] == 200


# -- point 4: what the host's version does not understand is refused before anything is touched -------------------
def _untouched(host: SimHost) -> None:
    ls = host.exec(["sh", "-c", "ls /root/.specdeploy 2>/dev/null; ls /root/sglang-logs 2>/dev/null"]).stdout
    assert "launch-" not in ls and "current.json" not in ls and ".log" not in ls, ls
    assert sglang_pids(host) == []


@pytest.mark.parametrize(("version", "over", "words"), [
    ("0.5.23", {"env": {"SGLANG_ENABLE_SPEC_V2": "1"}},
     ["SGLang 0.5.23", "does not read SGLANG_ENABLE_SPEC_V2", "0.5.4.post1–0.5.20"]),
    ("0.5.1", {"sglang_args": ["--enable-single-batch-overlap"]},
     ["SGLang 0.5.1", "no --enable-single-batch-overlap flag", "0.5.3–"]),
    ("0.5.1", {"speculative": {"algorithm": "STANDALONE"}},
     ["SGLang 0.5.1", "no speculative algorithm STANDALONE", "EAGLE, EAGLE3, NEXTN"]),
])
def test_what_the_version_does_not_understand_is_refused_untouched(fleet: Fleet, sim_host: SimHost, tmp_path: Path,
                                                                   version: str, over: dict[str, object],
                                                                   words: list[str]) -> None:
    sim_host.set_version(version)
    inv = derived_inventory(fleet, tmp_path, hosts={"sim1": over})
    r = run_inv("deploy", "--steps", "3", inventory=inv)
    assert r.returncode == 2, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    _untouched(sim_host)


def test_what_the_version_understands_is_deployed(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.set_version("0.5.16")
    inv = derived_inventory(fleet, tmp_path, hosts={"sim1": {"env": {"SGLANG_ENABLE_SPEC_V2": "1"},
                                                             "sglang_args": ["--enable-metrics"]}})
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inv)
    assert code == 0, err
    assert doc["env"]["SGLANG_ENABLE_SPEC_V2"] == "1" and "--enable-metrics" in doc["launch_argv"]
