"""`inv profile` end to end over real SSH against the simulated fleet: the phases of a speculative cycle from the
device timer and from the profiler trace, their agreement, the fallback without a timer, and the profiler stopped
on the server whatever happens to the client.

The simulator's cost model at time_scale 0.5, steps 3, 4 draft tokens, one request in flight: a draft forward
1.5 ms (2 per cycle), the verify 14.2 + 1.5·4 = 20.2 ms, the draft-extend 1.5 ms, all × 0.5 of wall time.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.simhost.fleet import Fleet, SimHost
from tests.support.cli import run_cli
from tests.support.invoke_cli import (
    derived_inventory,
    http_in_host,
    inv_host_json,
    inv_json,
    run_inv,
    sglang_pids,
    start_inv,
)

FAST = {"time_scale": 0.5, "load_seconds": 0.1}
LOAD = ["--num-prompts", "4", "--output-len", "48", "--input-len", "32"]
TIMER_ENV = {"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}


@pytest.fixture
def inventory(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> Path:
    return derived_inventory(fleet, tmp_path, defaults={"sglang_args": ["--enable-metrics"], "env": TIMER_ENV},
                             hosts={"sim1": {"tp": 2}})


def _post_in_host(host: SimHost, path: str, body: dict[str, object] | None = None) -> tuple[int, str]:
    """POST to the server from inside the host (what any user who reaches the port can do)."""
    return http_in_host(host, path, body if body is not None else {}, timeout=30)


def _profile_running(host: SimHost) -> bool:
    """Ask the simulator: /stop_profile answers 200 only while a profile runs (and stops it)."""
    return _post_in_host(host, "/stop_profile")[0] == 200


def test_timer_and_trace_agree_and_name_their_sources(inventory: Path, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.set_sim_config(**FAST)
    code, _doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 0, err
    code, doc, err = inv_json("profile", *LOAD, inventory=inventory)
    assert code == 0, err
    r = doc["hosts"][0]["data"]
    assert r["timer"] is True and r["cuda_graph"] is True
    assert [k["rank"] for k in r["ranks"]] == [0, 1]
    timer = r["ranks"][0]["timer"]
    assert timer["verify"]["source"] == "SGLang device timer"
    assert timer["verify"]["ms"] == pytest.approx(20.2 * 0.5, rel=0.05)
    assert timer["draft_step"]["ms"] == pytest.approx(1.5 * 0.5, rel=0.05)
    assert timer["draft"]["ms"] == pytest.approx(2 * 1.5 * 0.5, rel=0.05)
    assert timer["draft_extend"]["ms"] == pytest.approx(1.5 * 0.5, rel=0.05)
    assert timer["cycle"]["source"].startswith("the tool")
    assert timer["other"]["ms"] >= 0 and timer["other"]["source"].startswith("derived")
    assert timer["accept_length"]["ms"] > 1
    assert r["ranks"][0]["trace"] is None and r["derived"] is None

    out = tmp_path / "traces"
    code, doc, err = inv_json("profile", *LOAD, "--trace", "--trace-steps", "10", "--out", str(out),
                              inventory=inventory)
    assert code == 0, err
    r = doc["hosts"][0]["data"]
    for rank in r["ranks"]:
        t, traced = rank["timer"], rank["trace"]
        assert traced["verify"]["source"] == "SGLang profiler trace"
        for phase in ("draft_step", "draft", "verify", "draft_extend"):
            assert traced[phase]["ms"] == pytest.approx(t[phase]["ms"], rel=0.10), phase
            assert abs(rank["difference_pct"][phase]) <= 10
        k = traced["kernels"]["verify"]
        # TP 2: two NCCL all-reduces per layer of the (2-layer simulated) target; a CUDA graph replay each pass.
        assert k["allreduce_calls"] == 4 and k["allreduce_mean_us"] > 0
        assert k["launch"] == "cuda graph" and k["graph_launches"] == 1
        assert k["classes_ms"]["gemm"] > k["classes_ms"]["attention"] > 0
        name = f"sim1-{r['deploy_id']}-TP{rank['rank']}.trace.json.gz"
        local = out / name
        assert rank["local_file"] == str(local)
        events = json.loads(gzip.decompress(local.read_bytes()))["traceEvents"]
        assert any(e.get("name", "").startswith("step[TARGET_VERIFY") for e in events)
        assert oct(local.stat().st_mode & 0o777) == "0o600"
    # The tool's own directory on the host, 0700; nothing left running.
    assert r["trace_dir"].startswith("/root/.specdeploy/profiles/")
    assert sim_host.exec(["stat", "-c", "%a", "/root/.specdeploy/profiles"]).stdout.strip() == "700"
    assert not _profile_running(sim_host)
    # The person's view: both sources, their difference, the kernel classes.
    p = run_inv("profile", *LOAD, "--trace", "--trace-steps", "6", inventory=inventory)
    assert p.returncode == 0, p.stderr
    for words in ("device timer", "trace − timer", "verify", "draft-extend", "all-reduces", "cuda graph",
                  "SGLang profiler trace"):
        assert words in p.stdout, p.stdout


def test_under_concurrency_a_pass_is_one_batch(inventory: Path, sim_host: SimHost) -> None:
    """SGLang's decode-batch counter counts passes whatever the batch: a verify of B requests costs
    14.2 + 1.5·4 + 0.12·4·(B − 1) ms, so per pass between B = 1 (the tail) and B = 4."""
    sim_host.set_sim_config(**FAST)
    assert inv_host_json("deploy", "--steps", "3", inventory=inventory)[0] == 0
    code, doc, err = inv_json("profile", "--concurrency", "4", "--num-prompts", "8", "--output-len", "48",
                              inventory=inventory)
    assert code == 0, err
    verify = doc["hosts"][0]["data"]["ranks"][0]["timer"]["verify"]
    assert 20.2 * 0.5 * 0.98 <= verify["ms"] <= (20.2 + 0.12 * 4 * 3) * 0.5 * 1.02, verify
    assert "note" not in verify  # counted by SGLang itself, not estimated


def test_the_baseline_reports_its_decode_step_from_both_sources(inventory: Path, sim_host: SimHost) -> None:
    sim_host.set_sim_config(**FAST)
    assert inv_host_json("deploy", "--steps", "0", inventory=inventory)[0] == 0
    code, doc, err = inv_json("profile", *LOAD, "--trace", "--trace-steps", "10", inventory=inventory)
    assert code == 0, err
    rank = doc["hosts"][0]["data"]["ranks"][0]
    assert rank["timer"]["decode"]["ms"] == pytest.approx(12.2 * 0.5, rel=0.05)
    assert rank["trace"]["decode"]["ms"] == pytest.approx(rank["timer"]["decode"]["ms"], rel=0.10)
    assert "verify" not in rank["timer"] and rank["trace"]["kernels"]["decode"]["launch"] == "cuda graph"


def test_without_the_timer_the_cycle_is_derived_and_says_how_to_measure(fleet: Fleet, sim_host: SimHost,
                                                                        tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path, defaults={"sglang_args": ["--enable-metrics"]},
                                  hosts={"sim1": {"tp": 2}})
    sim_host.set_sim_config(**FAST)
    assert inv_host_json("deploy", "--steps", "3", inventory=inventory)[0] == 0
    code, doc, err = inv_json("profile", *LOAD, inventory=inventory)
    assert code == 0, err
    r = doc["hosts"][0]["data"]
    assert r["timer"] is False
    assert "measure: true" in r["timer_missing"] and "--measure" in r["timer_missing"]
    assert r["derived"]["cycle"]["source"] == "derived: TPOT × accept length"
    p = run_inv("profile", *LOAD, inventory=inventory)
    assert p.returncode == 0 and "no device timer" in p.stdout and "derived" in p.stdout, p.stdout


def test_a_profile_already_running_is_one_sentence_and_left_alone(inventory: Path, sim_host: SimHost) -> None:
    sim_host.set_sim_config(**FAST)
    assert inv_host_json("deploy", "--steps", "3", inventory=inventory)[0] == 0
    theirs = "/root/someone-elses-profile"
    assert _post_in_host(sim_host, "/start_profile", {"output_dir": theirs})[0] == 200
    p = run_inv("profile", *LOAD, "--trace", inventory=inventory)
    assert p.returncode == 1, p.stderr
    assert "a profile is already running on this server" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert _profile_running(sim_host)  # theirs still ran: the tool stopped nothing it had not started


def _agent_pid(host: SimHost) -> int | None:
    code = ("import os\n"
            "for p in os.listdir('/proc'):\n"
            "  if p.isdigit():\n"
            "    try: c=open(f'/proc/{p}/cmdline','rb').read().rstrip(b'\\0').split(b'\\0')\n"
            "    except OSError: continue\n"
            "    if len(c) > 3 and c[-2] == b'profile' and b'python' in c[0]: print(p)\n")
    out = host.exec([host.python_in_host, "-c", code]).stdout.split()
    return int(out[0]) if out else None


@pytest.mark.parametrize("how", ["ctrl-c", "lost connection", "agent sigterm"])
def test_the_profiler_is_stopped_when_the_client_goes(inventory: Path, sim_host: SimHost, how: str) -> None:
    """The profile would run 200 steps (~25 s at time_scale 5) by itself: the stop the log shows is the agent's
    POST /stop_profile, answered 200 while it still ran."""
    sim_host.set_sim_config(time_scale=5.0, load_seconds=0.1)
    assert inv_host_json("deploy", "--steps", "3", inventory=inventory)[0] == 0
    client = start_inv("profile", "--num-prompts", "200", "--output-len", "200", "--trace", "--trace-steps", "200",
                       inventory=inventory)
    err = ""
    try:
        deadline = time.monotonic() + 60
        while "Profiling starts" not in sim_host.exec("cat /root/sglang-logs/*.log").stdout:
            assert time.monotonic() < deadline and client.poll() is None
            time.sleep(0.2)
        if how == "ctrl-c":
            os.killpg(client.pid, signal.SIGINT)
        elif how == "lost connection":  # the client and its SSH link vanish at once
            os.killpg(client.pid, signal.SIGKILL)
        else:
            pid = _agent_pid(sim_host)
            assert pid is not None
            sim_host.exec(["kill", "-TERM", str(pid)])
        _out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    log = ""
    while time.monotonic() < deadline:
        log = sim_host.exec("cat /root/sglang-logs/*.log").stdout
        if "/stop_profile" in log:
            break
        time.sleep(0.3)
    assert '"POST /stop_profile HTTP/1.1" 200' in log, log[-3000:]
    assert not _profile_running(sim_host)
    if how == "agent sigterm":
        assert client.returncode == 1 and "interrupted on the host (SIGTERM)" in err, err


def test_a_server_that_dies_during_the_profile_keeps_no_figures(inventory: Path, sim_host: SimHost) -> None:
    sim_host.set_sim_config(time_scale=2.0, load_seconds=0.1)
    assert inv_host_json("deploy", "--steps", "3", inventory=inventory)[0] == 0
    client = start_inv("profile", "--num-prompts", "100", "--output-len", "100", "--trace", inventory=inventory)
    try:
        deadline = time.monotonic() + 60
        while "Profiling starts" not in sim_host.exec("cat /root/sglang-logs/*.log").stdout:
            assert time.monotonic() < deadline and client.poll() is None
            time.sleep(0.2)
        sched = next(p for p, c in sglang_pids(sim_host) if c.startswith("sglang::scheduler_TP1"))
        sim_host.exec(["kill", "-KILL", str(sched)])
        _out, err = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert client.returncode == 1, err
    assert "died during the profile" in err and "no figures were kept" in err, err
    # the rank that died, not the launcher, and where the host says it (SGLang's watchdog line in its log)
    assert f"TP1 (pid {sched}) is gone" in err, err
    assert f"Subprocess scheduler_1 (pid={sched}) crashed with exit code -9" in err, err
    assert "Traceback" not in err


def test_a_rank_that_dies_while_the_traces_are_written_leaves_no_figures_and_no_files(inventory: Path,
                                                                                     sim_host: SimHost) -> None:
    """The load ends before the 200 steps, so the tool's /stop_profile makes SGLang write a file per rank: TP0's
    completes, TP1's scheduler dies half-way through its own (its .tmp left) and the launcher's watchdog takes the
    server down. That profile measured a death: one sentence naming the rank, nothing kept on the host."""
    sim_host.set_sim_config(**FAST)
    assert inv_host_json("deploy", "--steps", "3", inventory=inventory)[0] == 0
    tp1 = next(p for p, c in sglang_pids(sim_host) if c.startswith("sglang::scheduler_TP1"))
    sim_host.set_sim_config(trace_kill_rank=1)
    code, doc, err = inv_json("profile", *LOAD, "--trace", "--trace-steps", "200", inventory=inventory)
    assert code == 1, err
    host = doc["hosts"][0]
    assert host["ok"] is False and host["data"] is None, host  # no per-rank figure, no trace reported
    message = host["error"]["message"]
    assert "the server died while SGLang wrote its traces" in message, message
    assert f"TP1 (pid {tp1}) is gone" in message, message
    assert f"Subprocess scheduler_1 (pid={tp1}) crashed with exit code -9" in message, message
    assert "no figures or traces were kept" in message
    # Neither rank 0's complete file nor rank 1's half-written .tmp stays in the profile store.
    left = sim_host.exec(["find", "/root/.specdeploy/profiles", "-mindepth", "1"]).stdout.split()
    assert left == [], left
    log = sim_host.exec("cat /root/sglang-logs/*.log").stdout
    assert "Stop profiling..." in log and "Profiling done" not in log  # it did die while writing


def test_bad_flags_exit_2_before_any_connection(inventory: Path) -> None:
    for args, words in ((["--trace-steps", "5"], "--trace-steps: only with --trace"),
                        (["--trace", "--trace-steps", "999"], "--trace-steps: 999 is above the largest allowed, 200"),
                        (["--concurrency", "0"], "--concurrency: 0 is below the smallest allowed, 1")):
        p = run_cli("profile", *args, inventory=inventory)
        assert p.returncode == 2 and words in p.stderr, (args, p.stderr)
