"""SGLang's adaptive speculation as a sweep configuration (``inv sweep --adaptive``) on a simulated host: refused
before anything starts on releases without ``--speculative-adaptive`` (naming those that have it), measured like any
other configuration, with the step count SGLang settled on (``sglang:spec_num_steps``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_json, run_inv
from tests.support.sim import Sim, http, sim  # noqa: F401 (the fixture)


@pytest.mark.fleet
def test_adaptive_is_measured_with_the_step_count_sglang_settled_on(fleet: Fleet, sim_host: SimHost,
                                                                    tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path)
    sim_host.set_version("0.5.16")
    sim_host.set_sim_config(time_scale=0.2, load_seconds=0.1, accept_prob=[0.95] * 7)
    code, doc, err = inv_json("sweep", "--steps", "0,3", "--adaptive", "--num-prompts", "6", "--input-len", "32",
                              "--output-len", "200", "--out", str(tmp_path / "runs"), inventory=inv, timeout=300)
    assert code == 0, err
    rows = {r["config"]: r for r in doc["rows"]}
    assert list(rows) == ["baseline", "eagle3-s3-k1-d4", "eagle3-adaptive"]
    ad = rows["eagle3-adaptive"]
    assert ad["adaptive"] and ad["ok"] and ad["levels"][0]["spec_num_steps"] == 7  # drafts nearly always accepted
    # A sweep measures (--enable-metrics on every configuration): the fixed one reports its own step count.
    assert rows["eagle3-s3-k1-d4"]["levels"][0]["spec_num_steps"] == 3
    print("tok/s:", {k: r["tok_s"] for k, r in rows.items()})
    # Counted, not timed (a tok/s comparison moves with the machine's load): at 7 steps with drafts accepted 95 % of
    # the time a verify pass keeps ~6 tokens, at 3 steps under 4.
    print("accept length:", {k: r["accept_len"] for k, r in rows.items()})
    assert ad["accept_len"] > rows["eagle3-s3-k1-d4"]["accept_len"] + 1.0
    report = Path(doc["paths"]["report"]).read_text()
    assert "eagle3-adaptive started at steps 3 and settled on steps @1: 7 (sglang:spec_num_steps" in report


@pytest.mark.fleet
def test_adaptive_on_a_release_without_it_is_refused_before_anything_starts(fleet: Fleet, sim_host: SimHost,
                                                                           tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path)
    sim_host.set_version("0.5.9")
    r = run_inv("sweep", "--steps", "0,3", "--adaptive", "--num-prompts", "2", "--out", str(tmp_path / "runs"),
                inventory=inv, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "no --speculative-adaptive flag" in r.stderr and "0.5.11–0.5.23" in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()
    assert sim_host.exec("ls /root/.specdeploy/current.json 2>/dev/null || echo none").stdout.strip() == "none"
