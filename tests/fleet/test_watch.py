"""`inv watch`: a live view of each server's tok/s, accept length, running and queued requests
and health, from /metrics when enabled and SGLang's Decode batch lines otherwise; thresholds that print an alarm
line and exit non-zero; --once and --json for scripts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_host_json, inv_json, run_inv


def _traffic(host: SimHost, requests: int = 6, tokens: int = 64) -> None:
    code = ("import json,urllib.request\n"
            f"for _ in range({requests}):\n"
            " r=urllib.request.Request('http://127.0.0.1:8000/generate',data=json.dumps({'input_ids':[1,2,3],"
            f"'sampling_params':{{'max_new_tokens':{tokens}}}}}).encode(),headers={{'Content-Type':'application/json'}})\n"
            " assert urllib.request.urlopen(r,timeout=60).status==200\n")
    r = host.exec([host.python_in_host, "-c", code], timeout=90)
    assert r.returncode == 0, r.stderr


def _lines(stdout: str) -> list[dict[str, object]]:
    return [json.loads(x) for x in stdout.splitlines() if x.strip()]


def test_watch_once_reads_the_decode_lines_and_metrics(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                       tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path, hosts={"sim2": {"sglang_args": ["--enable-metrics"]}})
    sim_hosts["sim1"].set_sim_config(decode_log_interval=5)
    code, _, err = inv_json("deploy", "--host", "sim1,sim2", "--strategy", "parallel", "--steps", "3",
                              inventory=inventory, timeout=200)
    assert code == 0, err
    _traffic(sim_hosts["sim1"])
    _traffic(sim_hosts["sim2"])
    r = run_inv("watch", "--host", "sim1,sim2", "--once", "--json", inventory=inventory)
    assert r.returncode == 0, r.stderr
    (sample,) = _lines(r.stdout)
    rows = {h["host"]: h for h in sample["hosts"]}  # type: ignore[union-attr]
    assert rows["sim1"]["source"] == "log" and rows["sim2"]["source"] == "metrics", rows
    for row in rows.values():
        assert row["running"] and row["health"]["status"] == 200 and row["config_name"] == "eagle3-s3-k1-d4"
        assert 1.5 < row["accept_len"] < 3.5 and row["tok_s"] > 0, row
        assert row["running_req"] is not None and row["queue_req"] is not None
    assert sample["alarms"] == {}
    # the screen a person reads
    r = run_inv("watch", "--host", "sim1,sim2", "--once", inventory=inventory)
    assert r.returncode == 0, r.stderr
    for word in ("tok/s", "accept len", "running", "queued", "sim1", "sim2", "metrics", "log"):
        assert word in r.stdout, r.stdout


def test_watch_alarms_on_a_low_accept_length_and_on_a_dead_server(fleet: Fleet, sim_host: SimHost,
                                                                   tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path)
    sim_host.set_sim_config(decode_log_interval=5, accept_prob_by_config={"3,1,4": [0.0]})
    code, _, err = inv_host_json("deploy", "--steps", "3", "--accept-gate", "0", inventory=inventory)
    assert code == 0, err
    _traffic(sim_host)
    r = run_inv("watch", "--once", "--min-accept", "1.5", inventory=inventory)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ALARM sim1: accept length 1.0" in r.stderr and "--min-accept 1.5" in r.stderr, r.stderr
    # held for a while before the alarm: samples keep coming until it has stayed below for --for seconds
    r = run_inv("watch", "--min-accept", "1.5", "--for", "1", "--interval", "0.5", "--json", "--duration", "30",
                inventory=inventory)
    assert r.returncode == 1, r.stderr
    samples = _lines(r.stdout)
    assert len(samples) >= 2 and samples[-1]["alarms"] and not samples[0]["alarms"], samples
    assert "for 1 s" in r.stderr or "for 2 s" in r.stderr, r.stderr
    # a threshold that holds: exit 0 at the end of --duration
    r = run_inv("watch", "--min-accept", "0.5", "--interval", "0.5", "--duration", "1", "--json",
                inventory=inventory)
    assert r.returncode == 0, r.stderr
    # a server that is gone is an alarm
    assert run_inv("stop", inventory=inventory).returncode == 0
    r = run_inv("watch", "--once", inventory=inventory)
    assert r.returncode == 1 and "ALARM sim1: no server running" in r.stderr, r.stderr


def test_watch_bad_flags_exit_2(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path)
    for args in (["--interval", "0"], ["--min-accept", "x"], ["--for", "-1"], ["--once", "--for", "3"]):
        r = run_inv("watch", *args, inventory=inventory)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
        assert args[0] in r.stderr, r.stderr
