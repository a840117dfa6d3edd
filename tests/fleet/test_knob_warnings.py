"""Knobs without effect said before a deploy touches anything, and SGLang's own warnings about the launch said after
it (issue 39): against the simulated host, whose SGLang logs the release's real wording (tests/simhost/sim)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_host_json, inv_json, run_inv, sglang_pids

SEED_KNOB = "--num-continuous-decode-steps has no effect on SGLang 0.5.16: it is parsed and read nowhere; remove it"
ALIAS_WARNING = ("'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
                 "Use '--cuda-graph-max-bs-decode' instead.")
SPEC_V2_WARNING = ("SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker. "
                   "Use --disable-overlap-schedule to select the non-overlap (synchronous) path.")


def _inventory(fleet: Fleet, tmp_path: Path, **over: object) -> Path:
    return derived_inventory(fleet, tmp_path, hosts={"sim1": dict(over)})


def test_strict_deploy_refuses_a_knob_without_effect_on_the_hosts_release_before_touching_it(
        fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.set_version("0.5.16")
    inventory = _inventory(fleet, tmp_path, sglang_args=["--num-continuous-decode-steps", "4"])
    r = run_inv("deploy", "--steps", "2", "--strict", inventory=inventory)
    assert r.returncode == 2, r.stderr
    assert f"--strict: {SEED_KNOB}" in r.stderr
    assert sglang_pids(sim_host) == []  # nothing started
    listing = sim_host.exec(["sh", "-c", "ls /root/.specdeploy 2>/dev/null || true"]).stdout
    assert "launch-" not in listing  # no launch script written
    # The dry run says the same on the release it is told (no host is reached), and --strict exits 2 there too.
    r = run_inv("deploy", "--dry-run", "--steps", "2", "--sglang-version", "0.5.16", inventory=inventory)
    assert r.returncode == 0 and f"knob: {SEED_KNOB}" in r.stdout, r.stderr
    r = run_inv("deploy", "--dry-run", "--strict", "--sglang-version", "0.5.16", inventory=inventory)
    assert r.returncode == 2 and SEED_KNOB in r.stderr


def test_deploy_names_knobs_first_and_sglangs_own_warnings_after_once_each(fleet: Fleet, sim_host: SimHost,
                                                                           tmp_path: Path) -> None:
    sim_host.set_version("0.5.16")
    sim_host.set_sim_config(moe_kernel_config="default")
    inventory = _inventory(fleet, tmp_path, sglang_args=["--num-continuous-decode-steps", "4",
                                                         "--cuda-graph-max-bs", "8"],
                           env={"SGLANG_ENABLE_SPEC_V2": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    code, doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    assert SEED_KNOB in doc["knob_notes"]
    assert ("--cuda-graph-max-bs is a deprecated alias on SGLang 0.5.16: write --cuda-graph-max-bs-decode"
            in doc["knob_notes"])
    warnings = doc["sglang_warnings"]
    assert ALIAS_WARNING in warnings and SPEC_V2_WARNING in warnings
    moe = [w for w in warnings if w.startswith("Using default MoE kernel config.")]
    assert len(moe) == 1  # both TP ranks log it: said once
    assert len(warnings) == len(set(warnings))
    # The deploy's step lines say the knobs before anything is written (stderr, ahead of the lock step).
    assert f"knob: {SEED_KNOB}" in err
    # status: in the JSON always, for people with --verbose, one line each.
    code, st, err = inv_json("status", inventory=inventory)
    assert code == 0, err
    assert st["hosts"][0]["data"]["sglang_warnings"] == warnings
    plain = run_inv("status", inventory=inventory)
    assert "sglang warns" not in plain.stdout
    verbose = run_inv("status", "--verbose", inventory=inventory)
    assert verbose.returncode == 0, verbose.stderr
    said = [line for line in verbose.stdout.splitlines() if "sglang warns:" in line]
    assert said == [f"sim1: sglang warns: {w}" for w in warnings]
    record = json.loads(sim_host.exec(["cat", "/root/.specdeploy/current.json"]).stdout)
    assert record["sglang_warnings"] == warnings
    # check-env: the variable SGLang assigns itself is "overridden by SGLang" (its value, 8 on 0.5.16, is what the
    # workers get), not missing; the NCCL rows are proven as before, so the verdict holds.
    code, ce, err = inv_json("check-env", inventory=inventory)
    assert code == 0, err
    assert ce["hosts"][0]["sglang_overwrites"] == [
        {"var": "CUDA_DEVICE_MAX_CONNECTIONS", "expected": "1", "observed": "8", "status": "sglang_overrides",
         "note": "SGLang 0.5.16 sets CUDA_DEVICE_MAX_CONNECTIONS=8 itself: your value never reaches the workers"}]
    assert all(r["var"] != "CUDA_DEVICE_MAX_CONNECTIONS" for r in ce["hosts"][0]["rows"])
    people = run_inv("check-env", inventory=inventory)
    assert "CUDA_DEVICE_MAX_CONNECTIONS: overridden by SGLang, expected 1, observed 8" in people.stdout
