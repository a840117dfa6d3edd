"""Fleet commands over real SSH on the simulated fleet: a hung host, parallel and rolling deploys with rollback,
a multi-node cluster (real TCP rendezvous between the hosts' network namespaces), and the router."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simhost.fleet import Fleet, SimHost, up
from tests.support import waiting
from tests.support.invoke_cli import derived_inventory, http_get, inv_host_json, inv_json, run_inv, sglang_pids

ALL = "sim1,sim2,sim3"


def _inventory(fleet: Fleet, tmp_path: Path, **extra: Any) -> Path:
    path = derived_inventory(fleet, tmp_path)
    data = yaml.safe_load(path.read_text())
    for key, value in extra.items():
        if key == "hosts":
            for h, over in value.items():
                data["hosts"][h].update(over)
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _steps_running(host: SimHost) -> int | None:
    status, body = http_get(host, "/server_info")
    return json.loads(body).get("speculative_num_steps") if status == 200 else None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _start_ticks(host: SimHost, pid: int) -> int:
    """A process's start time on the host, in clock ticks since boot (field 22 of /proc/PID/stat)."""
    stat = host.exec(f"cat /proc/{pid}/stat").stdout
    return int(stat.rsplit(")", 1)[1].split()[19])


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in doc["hosts"]}


# -- read-only commands: one hung host ----------------------------------------------------------------------------
def test_hung_host_is_reported_while_the_others_print(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                      tmp_path: Path) -> None:
    # sim2's connect budget is well above the host timeout: with both at 10 s, which one ended the wait was a race (a
    # loaded run saw the connect give up first, "Error reading SSH protocol banner", and no "timed out").
    inventory = _inventory(fleet, tmp_path, hosts={"sim2": {"timeouts": {"connect_total": 40}}})
    sshd = sim_hosts["sim2"].sshd_pid()
    # The healthy hosts get a host timeout that a loaded CI machine still meets (3 s once timed out a healthy
    # check-env there); the bound below is what the hung host would cost without it: its connect budget plus its
    # command timeout (40 + 120 s), so "bounded by --host-timeout" is told apart from "waited for sim2" by a wide
    # margin, not by how fast the machine is.
    host_timeout = 10
    without_the_bound = 40 + 120
    waiting.stop_process(sshd)  # sim2 accepts TCP but never says a word
    try:
        for cmd in ("status", "gpus", "check-env"):
            t0 = time.monotonic()
            code, doc, err = inv_json(cmd, "--host", ALL, "--host-timeout", str(host_timeout), inventory=inventory,
                                      timeout=without_the_bound)
            elapsed = time.monotonic() - t0
            assert elapsed < without_the_bound / 2, (cmd, elapsed)
            assert code == 1, (cmd, err)
            by = {h["host"]: h for h in doc["hosts"]}
            assert by["sim2"]["error"]["kind"] == "HostTimeoutError", (cmd, by["sim2"])
            assert by["sim2"]["error"]["details"].get("timed_out") is True, (cmd, by["sim2"])
            assert by["sim1"].get("error") is None and by["sim3"].get("error") is None, (cmd, doc)
        t0 = time.monotonic()
        r = run_inv("status", "--host", ALL, "--host-timeout", str(host_timeout), inventory=inventory,
                    timeout=without_the_bound)
        assert time.monotonic() - t0 < without_the_bound / 2
        assert "timed out" in r.stdout and "sim1" in r.stdout and "sim3" in r.stdout
        assert f"sim2: no answer within {host_timeout} s" in r.stderr
    finally:
        subprocess.run(["kill", "-CONT", str(sshd)], check=True)


def test_logs_of_several_hosts_are_prefixed(fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path)
    code, _, err = inv_json("deploy", "--host", "sim1,sim2", "--strategy", "parallel", "--steps", "1",
                            inventory=inventory)
    assert code == 0, err
    r = run_inv("logs", "--host", "sim1,sim2", "--lines", "3", inventory=inventory)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert lines and all(ln.startswith(("sim1 | ", "sim2 | ")) for ln in lines), lines
    assert {ln[:4] for ln in lines} == {"sim1", "sim2"}


# -- one --json shape for one host or many ------------------------------------------------------------------------
def _same_shape(one: dict[str, Any], two: dict[str, Any], *, run_keys: bool = False) -> None:
    """One host's document is the list of one, in the same frame as two hosts' (``run_keys``: a deploy over several
    adds what describes its run, such as its strategy, beside the list; a deploy of one host has no such keys)."""
    assert {"ok", "hosts"} <= set(one) and {"ok", "hosts"} <= set(two), (one, two)
    assert set(one) <= set(two) if run_keys else set(one) == set(two), (sorted(one), sorted(two))
    assert [h["host"] for h in one["hosts"]] == ["sim1"], one
    assert [h["host"] for h in two["hosts"]] == ["sim1", "sim2"], two
    # the per-host document: a deploy over several adds its rollout's outcome for each host to the host's deploy
    keys = set(one["hosts"][0])
    assert all(keys <= set(h) if run_keys else keys == set(h) for h in two["hosts"]), (keys, two["hosts"])
    assert all(isinstance(h["ok"], bool) for h in [*one["hosts"], *two["hosts"]])
    assert one["ok"] is one["hosts"][0]["ok"]


def test_render_bench_and_deploy_print_one_shape_for_one_host_or_two(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                                      tmp_path: Path) -> None:
    """A script reads ``doc["hosts"]`` whatever the number of hosts: one host printed its own keys at the top."""
    inventory = _inventory(fleet, tmp_path)
    bench = ["bench", "--client", "builtin", "--num-prompts", "2", "--input-len", "16", "--output-len", "8",
             "--out", str(tmp_path / "runs")]
    (c1, one, e1), (c2, two, e2) = (inv_json("render", "--steps", "2", "--host", h, inventory=inventory)
                                    for h in ("sim1", "sim1,sim2"))
    assert c1 == c2 == 0, (e1, e2)
    _same_shape(one, two)
    assert one["ok"] is two["ok"] is True and one["hosts"][0]["config"] == "eagle3-s2-k1-d3"

    c1, one, e1 = inv_json("deploy", "--steps", "1", "--host", "sim1", inventory=inventory)
    c2, two, e2 = inv_json("deploy", "--steps", "1", "--host", "sim1,sim2", "--strategy", "parallel",
                           inventory=inventory)
    assert c1 == c2 == 0, (e1, e2)
    _same_shape(one, two, run_keys=True)
    assert set(one) == {"ok", "hosts"} and two["strategy"] == "parallel"
    assert one["hosts"][0]["config"] == "eagle3-s1-k1-d2" and one["hosts"][0]["pid"]

    (c1, one, e1), (c2, two, e2) = (inv_json(*bench, "--host", h, inventory=inventory) for h in ("sim1", "sim1,sim2"))
    assert c1 == c2 == 0, (e1, e2)
    _same_shape(one, two)
    assert one["hosts"][0]["completed"] == 2 and all(h["completed"] == 2 for h in two["hosts"])

    # A host that cannot benchmark (sim3 runs no server): its error in the same frame, with the same exit code.
    (c1, one, e1), (c2, two, e2) = (inv_json(*bench, "--host", h, inventory=inventory) for h in ("sim3", "sim3,sim1"))
    assert c1 == c2 != 0, (e1, e2)
    assert set(one) == set(two) == {"ok", "hosts"} and one["ok"] is two["ok"] is False
    failed = [one["hosts"][0], two["hosts"][0]]
    assert [set(f) for f in failed] == [{"host", "ok", "error"}] * 2 and all(f["host"] == "sim3" for f in failed)
    assert failed[0]["error"]["kind"] == failed[1]["error"]["kind"] and two["hosts"][1]["ok"] is True


# -- deploys over several hosts -----------------------------------------------------------------------------------
def test_parallel_deploy_really_runs_hosts_at_once(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                   tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path)
    for h in sim_hosts.values():
        h.set_sim_config(fail="slow_load", load_seconds=2.5)
    # (the accept-length burst is not what this test is about: --accept-gate 0 keeps the hosts' time in wait_ready)
    code, doc, err = inv_json("deploy", "--host", ALL, "--strategy", "parallel", "--steps", "2", "--accept-gate", "0",
                              inventory=inventory)
    assert code == 0, err
    assert doc["strategy"] == "parallel" and doc["batches"] == [["sim1", "sim2", "sim3"]]
    waits = [h["timings"]["wait_ready"] for h in doc["hosts"]]
    assert all(w >= 2.4 for w in waits)
    assert {h["transport"]["connections"] for h in doc["hosts"]} == {1}
    for name, h in sim_hosts.items():
        assert _steps_running(h) == 2, name
        assert _rows(doc)[name]["outcome"] == "deployed" and _rows(doc)[name]["pid_now"]
    # Proof of overlap, not a speed figure: every server needs 2.5 s from its start to ready, so when the last one
    # started less than 2.5 s after the first, all three were loading at the same moment. One after another they
    # would start at least 2 x 2.5 s apart. (Start times in clock ticks since boot: the hosts share one kernel.)
    starts = [_start_ticks(sim_hosts[name], int(_rows(doc)[name]["pid_now"])) for name in sim_hosts]
    assert (max(starts) - min(starts)) / _CLOCK_TICKS < 2.5, starts


def test_rolling_failure_stops_the_rollout_and_keeps_the_new_version(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                                     tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path)
    code, _, err = inv_json("deploy", "--host", ALL, "--strategy", "parallel", "--steps", "2", inventory=inventory)
    assert code == 0, err
    sim_hosts["sim2"].set_sim_config(fail="load_traceback")
    code, doc, err = inv_json("deploy", "--host", ALL, "--strategy", "rolling", "--batch", "1", "--steps", "3",
                              inventory=inventory)
    assert code == 1
    assert doc["batches"] == [["sim1"], ["sim2"], ["sim3"]] and doc["stopped_after_batch"] == 2
    rows = _rows(doc)
    assert rows["sim1"]["outcome"] == "deployed" and rows["sim1"]["config_now"] == "eagle3-s3-k1-d4"
    assert rows["sim2"]["outcome"] == "failed" and rows["sim2"]["config_now"] is None
    assert rows["sim3"]["outcome"].startswith("not started")
    assert rows["sim3"]["config_now"] == "eagle3-s2-k1-d3"  # observed: untouched, it still runs the old version
    assert _steps_running(sim_hosts["sim1"]) == 3
    assert sglang_pids(sim_hosts["sim2"]) == []
    assert _steps_running(sim_hosts["sim3"]) == 2  # never touched
    r = run_inv("deploy", "--host", ALL, "--strategy", "rolling", "--batch", "1", "--steps", "3",
                inventory=inventory)
    assert r.returncode == 1
    assert "rollout stopped after batch 2" in r.stderr and "not started: sim3" in r.stderr
    assert "sim1 stays on the new version" in r.stderr and "nothing runs now on sim2" in r.stderr
    assert "eagle3-s3-k1-d4" in r.stdout


def test_rolling_failure_with_rollback_puts_every_changed_host_back(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                                   tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path)
    code, before, err = inv_json("deploy", "--host", ALL, "--strategy", "parallel", "--steps", "2",
                                 "--patch-mode", "scheduler", inventory=inventory)
    assert code == 0, err
    # sim3 is slow to load: the new deploy's 6 s bound fails there; the rollback uses the old deploy's own bounds.
    # (The bound leaves sim1 and sim2, which load in about a second, a wide margin on a loaded machine: with 2 s,
    # sim1 itself timed out there once and the rollout stopped before sim2.)
    sim_hosts["sim3"].set_sim_config(fail="slow_load", load_seconds=12)
    code, doc, err = inv_json("deploy", "--host", ALL, "--strategy", "rolling", "--batch", "50%", "--steps", "3",
                              "--patch-mode", "plugin", "--timeout", "6", "--rollback-on-failure", inventory=inventory,
                              timeout=180)
    assert code == 1, err
    assert doc["batches"] == [["sim1"], ["sim2", "sim3"]]
    assert doc["rolled_back"] is True
    rows = _rows(doc)
    old = {h["host"]: h["deploy_id"] for h in before["hosts"]}
    for name in ("sim1", "sim2", "sim3"):
        assert rows[name]["outcome"] == "rolled back", rows[name]
        assert rows[name]["config_now"] == "eagle3-s2-k1-d3"
        assert rows[name]["rollback"]["from_deploy_id"] == old[name]
        assert _steps_running(sim_hosts[name]) == 2, name
        launchers = [p for p, c in sglang_pids(sim_hosts[name]) if "sglang.launch_server" in c]
        assert launchers == [rows[name]["pid_now"]]
        # ... and with its own patch state: the new deploy's plugin is gone, the old scheduler patch is back.
        site = sim_hosts[name].site_packages()
        assert not (site / "specdeploy_nccl_env").exists(), name
        assert "specdeploy" in (site / "sglang/srt/managers/scheduler.py").read_text(), name


def test_rollout_flags_are_checked_before_any_connection(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path)
    for args, words in [(("--strategy", "sideways"), "--strategy"), (("--batch", "0"), "--batch"),
                        (("--batch", "150%"), "--batch"), (("--strategy", "parallel", "--batch", "2"), "--batch")]:
        r = run_inv("deploy", "--host", ALL, *args, inventory=inventory)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)


# -- multi-node cluster -------------------------------------------------------------------------------------------
CLUSTER = {"duo": {"hosts": ["sim1", "sim2"], "tp": 4, "dist_init_port": 29555}}


def test_cluster_deploys_one_model_across_nodes(fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path, clusters=CLUSTER)
    code, doc, err = inv_json("deploy", "--host", "duo", "--steps", "2", inventory=inventory)
    assert code == 0, err
    assert doc["strategy"] == "cluster" and doc["dist_init_addr"] == f"{sim_hosts['sim1'].address}:29555"
    rows = _rows(doc)
    for rank, name in enumerate(("sim1", "sim2")):
        argv = rows[name]["launch_argv"]
        assert "--nnodes=2" in argv and f"--node-rank={rank}" in argv
        assert "--tp-size=4" in argv
        assert f"--dist-init-addr={doc['dist_init_addr']}" in argv
        assert rows[name]["env"]["NCCL_PROTO"] == "LL"
    titles = {n: sorted(c for _, c in sglang_pids(sim_hosts[n]) if c.startswith("sglang::scheduler"))
              for n in ("sim1", "sim2")}
    assert titles == {"sim1": ["sglang::scheduler_TP0", "sglang::scheduler_TP1"],
                      "sim2": ["sglang::scheduler_TP2", "sglang::scheduler_TP3"]}
    assert http_get(sim_hosts["sim1"], "/ready")[0] == 200
    assert http_get(sim_hosts["sim2"], "/health")[0] == 200       # SGLang's stub health server on rank 1
    assert http_get(sim_hosts["sim2"], "/server_info")[0] == 404  # only rank 0 serves the API
    log = (sim_hosts["sim1"].home / "sglang-logs" / "sglang-eagle3-s2-k1-d3.log").read_text()
    assert "Node rank 1 joined from " + sim_hosts["sim2"].address in log
    code, ev, err = inv_json("check-env", "--host", "duo", inventory=inventory)
    assert code == 0, err
    assert [h["host"] for h in ev["hosts"]] == ["sim1", "sim2"] and all(h["ok"] for h in ev["hosts"])


def test_cluster_rank_failure_tears_down_every_rank(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                    tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path, clusters=CLUSTER)
    # Rank 1 dies while loading: rank 0 loses its peer (NCCL WARN) and goes down too.
    sim_hosts["sim2"].set_sim_config(fail="load_traceback", fail_rank=2)
    code, doc, _ = inv_json("deploy", "--host", "duo", "--steps", "2", inventory=inventory)
    assert code == 1
    assert all(h["outcome"] != "deployed" for h in doc["hosts"])
    assert sglang_pids(sim_hosts["sim1"]) == [] and sglang_pids(sim_hosts["sim2"]) == []
    # Rank 0 fails before the rendezvous: rank 1 would wait for it forever; the client cancels it.
    sim_hosts["sim2"].set_sim_config(fail=None)
    sim_hosts["sim1"].set_sim_config(fail="port_in_use")
    t0 = time.monotonic()
    code, doc, _ = inv_json("deploy", "--host", "duo", "--steps", "2", inventory=inventory)
    assert code == 1 and time.monotonic() - t0 < 20
    rows = _rows(doc)
    assert rows["sim2"]["outcome"] == "cancelled (another rank failed)", rows["sim2"]
    assert sglang_pids(sim_hosts["sim1"]) == [] and sglang_pids(sim_hosts["sim2"]) == []


# -- router -------------------------------------------------------------------------------------------------------
def test_router_fronts_the_healthy_replicas(fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path) -> None:
    """The simulator's stand-in `sglang_router.launch_router` (it speaks the router's protocol: --worker-urls, /health,
    /list_workers and /generate forwarded round-robin): this test runs without network; the real router (pip,
    `sglang-router`) is tested in tests/fleet/test_real_router.py."""
    inventory = _inventory(fleet, tmp_path, groups={"replicas": ["sim2", "sim3"]},
                           routers={"front": {"host": "sim1", "group": "replicas", "port": 30000,
                                              "policy": "round_robin"}},
                           hosts={"sim2": {"listen": "0.0.0.0"}, "sim3": {"listen": "0.0.0.0"}})
    code, _, err = inv_host_json("deploy", "--host", "sim2", "--steps", "2", inventory=inventory)
    assert code == 0, err
    # sim3 runs nothing: it is left out, and said so.
    code, doc, err = inv_json("deploy-router", inventory=inventory)
    assert code == 0, err
    assert doc["workers"] == [f"http://{sim_hosts['sim2'].address}:8000"]
    assert "sim3" in doc["skipped"]
    code, _, err = inv_json("deploy", "--host", "replicas", "--strategy", "parallel", "--steps", "2",
                            inventory=inventory)
    assert code == 0, err
    code, doc, err = inv_json("deploy-router", inventory=inventory)
    assert code == 0, err
    assert len(doc["workers"]) == 2
    post = ("import json,urllib.request\n"
            "for _ in range(4):\n"
            " r=urllib.request.Request('http://127.0.0.1:30000/generate',data=json.dumps({'text':'hi',"
            "'sampling_params':{'max_new_tokens':2}}).encode(),headers={'Content-Type':'application/json'})\n"
            " assert urllib.request.urlopen(r,timeout=30).status==200\n"
            "print(urllib.request.urlopen('http://127.0.0.1:30000/workers').read().decode())\n")
    r = sim_hosts["sim1"].exec([sim_hosts["sim1"].python_in_host, "-c", post])
    assert r.returncode == 0, r.stderr
    assert sorted(w["served"] for w in json.loads(r.stdout)["workers"]) == [2, 2]
    code, st, _ = inv_json("status", "--host", "sim1", inventory=inventory)
    routers = st["hosts"][0]["data"]["routers"]
    assert routers[0]["name"] == "front" and routers[0]["running"] and routers[0]["health"] == 200
    assert "front" in run_inv("status", "--host", "sim1", inventory=inventory).stdout


def test_fleet_hosts_reach_each_other_and_down_leaves_nothing(tmp_path: Path) -> None:
    def links() -> set[str]:
        out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
        return {ln.split(":")[1].strip() for ln in out.splitlines()}

    before_links = links()
    f = up(2, tmp_path / "fleet", gpus=2, tp=1)
    try:
        if f.mode != "netns":
            pytest.skip("needs netns mode (root)")
        sim1, sim2 = f.host("sim1"), f.host("sim2")
        code = ("import socket; s=socket.socket(); s.bind(('0.0.0.0', 4242)); s.listen(1); "
                "c, a = s.accept(); print(a[0])")
        server = subprocess.Popen(["nsenter", "-t", str(sim1.init_pid), "-n", sys.executable, "-c", code],
                                  stdout=subprocess.PIPE, text=True)
        # The listener may take a moment to start: the client retries for a few seconds.
        r = sim2.exec([sim2.python_in_host, "-c",
                       "import socket, time\n"
                       "for _ in range(100):\n"
                       f"    try: socket.create_connection(('{sim1.address}', 4242), timeout=5); break\n"
                       "    except ConnectionRefusedError: time.sleep(0.05)\n"
                       "else: raise SystemExit('never connected')\n"])
        assert r.returncode == 0, r.stderr
        assert server.communicate(timeout=10)[0].strip() == sim2.address
        prefix = f"sd{f.fleet_id}-"
    finally:
        f.down()
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix not in netns
    assert links() == before_links
