"""Measurement on a deploy to a simulated host: ``--measure`` reaches every scheduler, a release without the timer is
refused with nothing touched, and bench, sweep and explain show the phases SGLang measured and what the timer costs."""

from __future__ import annotations

import re
from pathlib import Path

from fabfile.plan import measure, versioncheck
from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_host_json, inv_json, run_inv, sglang_pids

TIMER = versioncheck.DEVICE_TIMER_ENV


def _environ(host: SimHost, pid: int) -> dict[str, str]:
    raw = host.exec(["cat", f"/proc/{pid}/environ"]).stdout.split("\0")
    return dict(x.split("=", 1) for x in raw if "=" in x)


def test_deploy_measure_reaches_every_scheduler(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.set_version("0.5.16")
    code, doc, err = inv_host_json("deploy", "--steps", "3", "--measure", inventory=derived_inventory(fleet, tmp_path))
    assert code == 0, err
    assert "--enable-metrics" in doc["launch_argv"] and doc["env"][TIMER] == "1"
    schedulers = [p for p, c in sglang_pids(sim_host) if c.startswith("sglang::scheduler")]
    assert len(schedulers) == 2
    for pid in schedulers:
        env = _environ(sim_host, pid)
        assert env[TIMER] == "1" and env[measure.PROFILER_DIR_ENV] == "/root/.specdeploy/profiles"
    launcher = next(p for p, c in sglang_pids(sim_host) if "sglang.launch_server" in c)
    assert "--enable-metrics" in sim_host.exec(["cat", f"/proc/{launcher}/cmdline"]).stdout.split("\0")
    mode = sim_host.exec(["stat", "-c", "%a %U", "/root/.specdeploy/profiles"]).stdout.split()
    assert mode == ["700", "root"]


def test_deploy_measure_on_a_release_without_the_timer_is_refused_untouched(fleet: Fleet, sim_host: SimHost,
                                                                            tmp_path: Path) -> None:
    sim_host.set_version("0.5.9")
    code, _, err = inv_host_json("deploy", "--steps", "3", "--measure", inventory=derived_inventory(fleet, tmp_path))
    assert code == 2, err
    assert "has no per-phase device timer" in err and "0.5.11–0.5.23" in err
    assert not [p for p, c in sglang_pids(sim_host) if "sglang.launch_server" in c]


def test_bench_on_a_measured_deploy_shows_the_phases(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.set_version("0.5.16")
    inv = derived_inventory(fleet, tmp_path)
    code, _, err = inv_host_json("deploy", "--steps", "3", "--measure", inventory=inv)
    assert code == 0, err
    r = run_inv("bench", "--client", "builtin", "--num-prompts", "4", "--output-len", "32", "--out",
                str(tmp_path / "runs"), inventory=inv)
    assert r.returncode == 0, r.stderr
    assert re.search(r"phases rank 0 .*verify \d+\.\d+ ms \[timer\]", r.stdout), r.stdout
    code, doc, err = inv_host_json("bench", "--client", "builtin", "--num-prompts", "4", "--output-len", "32", "--out",
                              str(tmp_path / "runs"), inventory=inv)
    assert code == 0, err
    ranks = doc["phases"]["ranks"]
    assert [a["rank"] for a in ranks] == [0, 1] and all(a["verify"]["ms"] > 0 for a in ranks)


def test_sweep_measures_by_default_and_explains(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    """A sweep's deploys turn the device timer on by themselves (the version has it); each row then carries its
    measured phases, the table's sentences give draft/step, verify and draft-extend with the break-even, the PNG has
    the stacked bars, and --explain applies the rule table against the sweep's own baseline."""
    import json

    sim_host.set_version("0.5.16")
    inv = derived_inventory(fleet, tmp_path, defaults={"sglang_args": ["--decode-log-interval", "5"]})
    # 8 requests: with 3 the intervals overlap (the cost model's 1.3× win reads as a tie, and a tie keeps the
    # baseline, which has fewer changed variables)
    r = run_inv("sweep", "--steps", "0,2", "--num-prompts", "8", "--output-len", "32", "--input-len", "32",
                "--client", "builtin", "--explain", "--out", str(tmp_path / "runs"), inventory=inv, timeout=300)
    assert r.returncode == 0, r.stderr
    out = next((tmp_path / "runs" / "sim1").glob("sweep-*"))
    doc = json.loads((out / "sweep.json").read_text())
    spec = next(row for row in doc["rows"] if row["steps"] == 2)
    assert spec["phases"]["ranks"][0]["verify"]["source"] == "SGLang device timer"
    assert re.search(r"eagle3-s2-k1-d3: draft/step .*verify \d+\.\d+ ms \[timer\].*break-even accept length "
                     r"\d\.\d\d", r.stdout), r.stdout
    assert [s["config"] for s in doc["explain"]["subjects"]] == ["eagle3-s2-k1-d3"]
    # the explanation: the measured anatomy, the baseline's step it is judged against, and the rules' verdict (the
    # cost model's EAGLE-3 wins, with a small draft: no rule has anything to say)
    assert re.search(r"baseline decode step \d+\.\d ms \[timer\] \(this sweep's baseline row\)", r.stdout), r.stdout
    assert "no rule fired" in r.stdout
    assert doc["winner"] == "eagle3-s2-k1-d3", doc.get("ranking")
    assert "eagle3-s2-k1-d3 is left running with SGLang's device timer on" in r.stdout  # and how to turn it off


def test_explain_profiles_the_running_server(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    """`inv explain` without --from measures the running server through the profile verb (timer and trace) and
    judges each rank; every figure of its anatomy names its source."""
    sim_host.set_version("0.5.16")
    inv = derived_inventory(fleet, tmp_path)
    code, _, err = inv_host_json("deploy", "--steps", "3", "--measure", inventory=inv)
    assert code == 0, err
    code, doc, err = inv_json("explain", "--trace", "--num-prompts", "4", inventory=inv, timeout=300)
    assert code == 0, err
    assert [s["rank"] for s in doc["subjects"]] == [0, 1]
    a = doc["subjects"][0]["anatomy"]
    assert a["verify"]["source"] == "SGLang device timer" and "verify" in a["kernels"]
    assert all("source" in v for v in a.values() if isinstance(v, dict) and "ms" in v)
    assert doc["hosts"][0]["ok"] is True


def test_bench_with_and_without_the_timer_says_its_cost(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.set_version("0.5.16")
    inv = derived_inventory(fleet, tmp_path)
    bench = ("bench", "--client", "builtin", "--num-prompts", "4", "--output-len", "32", "--out",
             str(tmp_path / "runs"))
    for flag in ("--measure", "--no-measure"):
        code, _, err = inv_host_json("deploy", "--steps", "3", flag, inventory=inv)
        assert code == 0, err
        r = run_inv(*bench, inventory=inv)
        assert r.returncode == 0, r.stderr
    assert re.search(r"device timer cost -?\d+\.\d % of served tok/s \(\d+\.\d with, \d+\.\d without; measured by "
                     r"the tool against .*\.json\)", r.stdout), r.stdout
