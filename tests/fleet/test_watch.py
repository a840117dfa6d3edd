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


def _old_decode_line(host: SimHost, log_path: str, age_s: int) -> None:
    """Append a Decode batch line stamped ``age_s`` seconds ago (the host's clock and zone), as an idle server's
    last line is: SGLang writes none while it does not decode."""
    code = ("import sys,time\n"
            f"t=time.strftime('%Y-%m-%d %H:%M:%S',time.localtime(time.time()-{age_s}))\n"
            f"open({log_path!r},'a').write('['+t+' TP0] Decode batch, #running-req: 0, #token: 9,"
            " token usage: 0.00, accept len: 2.00, accept rate: 0.33, cuda graph: True,"
            " gen throughput (token/s): 20.00, #queue-req: 0\\n')\n")
    r = host.exec([host.python_in_host, "-c", code])
    assert r.returncode == 0, r.stderr


def test_watch_judges_a_stale_sample_the_same_from_metrics_and_from_the_log(
        fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path) -> None:
    """An idle server's figures are 85 s old whichever way they are read: the gauge's age is its Decode line's
    (SGLang sets both at once), not the moment of the GET; a stale sample is no data: said, counted, and neither
    alarmed on nor passed in silence."""
    inventory = derived_inventory(fleet, tmp_path, hosts={"sim2": {"sglang_args": ["--enable-metrics"]}})
    code, deployed, err = inv_json("deploy", "--host", "sim1,sim2", "--strategy", "parallel", "--steps", "3",
                                   inventory=inventory, timeout=200)
    assert code == 0, err
    for doc in deployed["hosts"]:
        _old_decode_line(sim_hosts[doc["host"]], doc["log_path"], 85)
    r = run_inv("watch", "--host", "sim1,sim2", "--once", "--json", "--min-tok-s", "1000000", inventory=inventory)
    # no alarm on either: a stale figure is not a breach (the metrics source alarmed on its 0-s-old gauge)
    assert r.returncode == 0, r.stdout + r.stderr
    (sample,) = _lines(r.stdout)
    rows = {h["host"]: h for h in sample["hosts"]}  # type: ignore[union-attr]
    assert rows["sim1"]["source"] == "log" and rows["sim2"]["source"] == "metrics", rows
    for host, row in rows.items():
        assert 84 <= row["age_s"] <= 120, row  # the sample's age, the same from both sources
        assert row["gen_tok_s"] == row["tok_s"] and row["window_forwards"] >= 1, row  # named: SGLang's gen tok/s
        assert row["stale"].startswith("stale (") and row["stale"].endswith(" s old)"), row
        assert sample["stale"][host] == row["stale"] and sample["stale_samples"][host] == 1, sample
        # said on stderr, counted, with the threshold it could not judge (the log source passed in silence)
        assert f"NO DATA {host}: 1 of 1 sample stale (" in r.stderr and "--min-tok-s 1e+06 not judged" in r.stderr, \
            r.stderr
    assert sample["alarms"] == {}
    # the table a person reads says it in the row
    r = run_inv("watch", "--host", "sim1,sim2", "--once", "--min-tok-s", "1000000", inventory=inventory)
    assert r.returncode == 0 and r.stdout.count("s old)") == 2, r.stdout
