"""`inv deploy` end to end over real SSH against the simulated fleet: the behaviour an operator relies on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.simhost.fleet import Fleet, SimHost
from tests.support import waiting
from tests.support.cli import host_doc
from tests.support.invoke_cli import (
    INV,
    ROOT,
    derived_inventory,
    http_get,
    inv_host_json,
    inv_json,
    run_inv,
    sglang_pids,
    ssh_logins,
)


@pytest.fixture
def inventory(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> Path:
    return derived_inventory(fleet, tmp_path)


def test_clean_deploy_serves_eagle3_with_the_planned_command(inventory: Path, sim_host: SimHost) -> None:
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 0, err
    assert doc["ok"] is True and doc["host"] == "sim1"
    assert doc["url"] == "http://127.0.0.1:8000" and doc["config"] == "eagle3-s3-k1-d4"
    argv = doc["launch_argv"]
    for flag, value in [("--speculative-algorithm", "EAGLE3"), ("--speculative-num-steps", "3"),
                        ("--speculative-eagle-topk", "1"), ("--speculative-num-draft-tokens", "4"), ("--tp-size", "2")]:
        assert f"{flag}={value}" in argv  # one word: argparse reads the value as the flag's (plan/argv.py)
    assert doc["env"]["SPT_NOENV"] == "1" and doc["env"]["NCCL_PROTO"] == "LL"
    assert set(doc["timings"]) >= {"connect", "preflight", "lock", "stop", "gpu_clean", "start", "wait_ready",
                                   "verify_env", "record"}
    assert doc["transport"]["connections"] == 1
    # The server really runs on the host, with one scheduler per TP rank, and answers.
    status, body = http_get(sim_host, "/server_info")
    assert status == 200
    info = json.loads(body)
    assert info["speculative_num_steps"] == 3
    titles = sorted(c for _, c in sglang_pids(sim_host) if c.startswith("sglang::scheduler"))
    assert titles == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    assert doc["pid"] in [p for p, _ in sglang_pids(sim_host)]
    assert doc["check_env"]["ok"] is True
    # The deploy record on the host says the same.
    record = json.loads(sim_host.exec(["cat", "/root/.specdeploy/current.json"]).stdout)
    assert record["pid"] == doc["pid"] and record["plan_hash"] == doc["plan_hash"] and record["status"] == "running"


@pytest.mark.parametrize(("version", "path"), [("0.4.9", "/health_generate"), ("0.5.16", "/health")])
def test_deploy_and_status_wait_as_long_as_sglangs_health_endpoint_takes(inventory: Path, sim_host: SimHost,
                                                                        version: str, path: str) -> None:
    """On 0.4.x ... 0.5.19 readiness is a health endpoint that runs a one-token generate and sleeps a second before
    it answers 200 (the simulator does as the wheels do): the probe must wait for that, and say how long it took."""
    sim_host.set_version(version)
    code, doc, err = inv_host_json("deploy", "--steps", "3", "--timeout", "60", inventory=inventory)
    assert code == 0, err
    assert doc["sglang_version"] == version
    assert doc["ready"]["ready_path"] == path
    assert doc["ready"]["probe_latency_s"] >= 1.0  # SGLang's asyncio.sleep(1) comes before its first look
    assert doc["ready"]["probe_timeout_s"] > 20  # the server's own limit (SGLANG_HEALTH_CHECK_TIMEOUT) first
    code, st, err = inv_json("status", inventory=inventory)
    assert code == 0, err
    health = st["hosts"][0]["data"]["health"]
    assert health["path"] == path and health["status"] == 200 and health["latency_s"] >= 1.0


def test_redeploy_replaces_the_running_server(inventory: Path, sim_host: SimHost) -> None:
    code, first, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 0, err
    code, second, err = inv_host_json("deploy", "--steps", "0", inventory=inventory)
    assert code == 0, err
    stopped = {p["pid"] for p in second["stopped"]["terminated"] + second["stopped"]["killed"]}
    assert first["pid"] in stopped
    launchers = [p for p, c in sglang_pids(sim_host) if "sglang.launch_server" in c]
    assert launchers == [second["pid"]]
    info = json.loads(http_get(sim_host, "/server_info")[1])
    assert info.get("speculative_algorithm") in (None, "")
    assert second["config"] == "baseline"


def _gpu_pids(host: SimHost) -> list[str]:
    return host.exec(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"]).stdout.split()


def _start_gpu_holder(host: SimHost, *args: str) -> int:
    """A foreign, detached process holding a GPU (it ignores SIGTERM); returns its pid once nvidia-smi lists it."""
    r = host.exec("setsid nohup /root/ml-env/bin/python3 -m simgpu_holder " + " ".join(args)
                  + " >/tmp/holder.log 2>&1 </dev/null & echo $!")
    pid = int(r.stdout.strip())
    deadline = waiting.deadline()
    while str(pid) not in _gpu_pids(host):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return pid


def test_gpu_holder_that_ignores_sigterm_is_killed_and_named(inventory: Path, sim_host: SimHost) -> None:
    holder = _start_gpu_holder(sim_host, "--gpu", "1", "--mib", "3000")
    code, doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    killed = {p["pid"]: p for p in doc["stopped"]["killed"]}
    assert holder in killed, doc["stopped"]
    assert "GPU 1" in killed[holder]["why"]
    assert holder not in [p for p, _ in sglang_pids(sim_host)]


@pytest.mark.parametrize("failure, needle", [
    ("load_traceback", "Traceback"),
    ("cuda_oom", "out of memory"),
    ("port_in_use", "port"),
    ("scheduler_killed", "child"),
])
def test_injected_failures_fail_fast_with_excerpt_and_leave_nothing(inventory: Path, sim_host: SimHost,
                                                                      failure: str, needle: str) -> None:
    sim_host.set_sim_config(fail=failure, fail_after_seconds=0.0)
    t0 = time.monotonic()
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    elapsed = time.monotonic() - t0
    assert code == 1, err
    assert doc["ok"] is False
    e = doc["error"]
    assert e["kind"] == "LaunchError", e
    text = (e["message"] + " " + " ".join(e["details"].get("excerpt") or [])).lower()
    assert needle.lower() in text, e
    assert e["hint"]
    # Seen in the log and ended at once, not by the ready bound (60 s in this inventory) running out.
    assert e["details"].get("agent_kind") != "ready_timeout", e
    assert elapsed < 60, elapsed
    # No process left behind, and the GPUs are free again.
    assert sglang_pids(sim_host) == []
    apps = sim_host.exec(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"]).stdout.strip()
    assert apps == ""


@pytest.mark.parametrize("failure, sglang_line", [
    ("load_traceback", "SafetensorError"),
    ("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory"),
    ("port_in_use", "Port is already in use"),
])
def test_the_message_itself_carries_sglangs_error_line(inventory: Path, sim_host: SimHost, failure: str,
                                                         sglang_line: str) -> None:
    # On a real H200 the first line of a traceback or SGLang's "Received sigquit" told the user nothing; the line
    # that names the error (the exception, argparse's complaint) must be in the one-line message, not only in the
    # excerpt further down.
    sim_host.set_sim_config(fail=failure, fail_after_seconds=0.0)
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 1, err
    assert sglang_line in doc["error"]["message"], "\n".join(doc["error"]["details"].get("excerpt") or [])
    assert "Traceback (most recent call last)" not in doc["error"]["message"]


def test_a_taken_http_port_is_refused_before_the_server_starts(inventory: Path, sim_host: SimHost) -> None:
    # No SGLang release checks its HTTP port early: on real 0.5.16 (H200, 7B shape) uvicorn's `[Errno 98]` came after
    # the whole model load, 60 s. The deploy binds the port itself first and refuses in milliseconds, naming the
    # holder; nothing starts, the GPUs are not touched.
    holder = int(sim_host.exec("setsid nohup /root/ml-env/bin/python3 -c 'import socket, time; s = socket.socket(); "
                               "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                               "s.bind((\"127.0.0.1\", 8000)); s.listen(1); time.sleep(120)' >/dev/null 2>&1 "
                               "</dev/null & echo $!").stdout.strip())
    deadline = waiting.deadline()
    while "LISTEN" not in sim_host.exec("ss -ltn 'sport = :8000' || true").stdout.upper():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    try:
        code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
        assert code == 1, err
        error = doc["error"]
        assert error["message"].startswith(f"port 8000 is already in use on the host by PID {holder} (")
        assert "import socket" in error["message"] and "\n" not in error["message"]
        assert "change `port` in the inventory" in error["hint"]
        assert "✗ " in err and "port free" in err  # the step that failed, by its title
        assert {"stop", "gpu_clean", "port_free"} <= set(doc["timings"]) and "start" not in doc["timings"]
        assert sglang_pids(sim_host) == []
    finally:
        sim_host.exec(f"kill {holder} || true")


def test_a_flag_the_version_rejects_is_named_in_the_message(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path, hosts={"sim1": {"sglang_args": ["--enable-amd-monokernel"]}})
    t0 = time.monotonic()
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 1, err
    assert "error: unrecognized arguments: --enable-amd-monokernel" in doc["error"]["message"], doc["error"]
    assert time.monotonic() - t0 < 30
    assert sglang_pids(sim_host) == []


def test_hang_is_reported_as_stalled_and_torn_down(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path, defaults={"timeouts": {"stall": 2}})
    sim_host.set_sim_config(fail="hang")
    code, doc, _ = inv_host_json("deploy", "--steps", "3", inventory=inventory)
    assert code == 1
    assert doc["error"]["details"]["agent_kind"] == "stalled", doc["error"]
    assert sglang_pids(sim_host) == []


def test_hard_timeout_bounds_the_wait(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path)
    sim_host.set_sim_config(fail="slow_load", load_seconds=30)
    t0 = time.monotonic()
    code, doc, _ = inv_host_json("deploy", "--steps", "3", "--timeout", "3", inventory=inventory)
    assert code == 1
    assert doc["error"]["details"]["agent_kind"] == "ready_timeout"
    assert time.monotonic() - t0 < 20
    assert sglang_pids(sim_host) == []


def test_values_with_spaces_and_quotes_reach_the_server_exactly(fleet: Fleet, sim_host: SimHost,
                                                                 tmp_path: Path) -> None:
    tricky = "kimi k2 'single' \"double\" $HOME `id` ; echo pwned"
    note = "a  b\t'c' \"d\" $(touch /tmp/pwned) \\ end"
    inventory = derived_inventory(fleet, tmp_path, hosts={"sim1": {"served_model_name": tricky,
                                                                   "env": {"OPERATOR_NOTE": note}}})
    code, doc, err = inv_host_json("deploy", "--steps", "1", inventory=inventory)
    assert code == 0, err
    info = json.loads(http_get(sim_host, "/server_info")[1])
    assert info["served_model_name"] == tricky
    environ = sim_host.exec(["cat", f"/proc/{doc['pid']}/environ"]).stdout.split("\0")
    assert f"OPERATOR_NOTE={note}" in environ
    assert sim_host.exec(["test", "-e", "/tmp/pwned"]).returncode != 0


def test_dry_run_touches_no_host(inventory: Path, sim_host: SimHost) -> None:
    before = ssh_logins(sim_host)
    r = run_inv("deploy", "--steps", "3", "--dry-run", inventory=inventory)
    assert r.returncode == 0, r.stderr
    assert "sglang.launch_server" in r.stdout and "NCCL_PROTO=LL" in r.stdout
    assert "--speculative-num-steps=3" in r.stdout  # the dry run shows the exact argv: the value in its word
    r = run_inv("render", "--steps", "0", inventory=inventory)
    assert r.returncode == 0 and "speculative" not in r.stdout.split("launch command", 1)[1].split("\n")[1]
    assert ssh_logins(sim_host) == before
    assert sim_host.exec(["test", "-e", "/root/.specdeploy"]).returncode != 0


BAD_INVENTORIES = [
    ("hosts:\n  sim1: {ssh_host: sim1, pyhton: /x}\n", "hosts.sim1.pyhton", "unknown field"),
    ("hosts:\n  sim1: {ssh_host: sim1, python: /x, model: /m, gpus: many}\n", "hosts.sim1.gpus", "integer"),
    ("hosts:\n  sim1: {ssh_host: sim1, python: relative/python3, model: /m}\n", "hosts.sim1.python", "absolute"),
    ("hosts:\n  sim1: {ssh_host: sim1, python: /x, model: /m, gpus: 2, tp: 8}\n", "hosts.sim1.tp", "GPUs"),
    ("hosts:\n  sim1: {ssh_host: sim1, python: /x, model: /m, draft_model: /d, speculative: {steps: 3, "
     "draft_tokens: 9}}\n", "draft_tokens", "steps + 1"),
    ("hosts:\n  sim1: {ssh_host: sim1, python: /x, model: /m, nccl_preset: pcei}\n", "nccl_preset", "unknown preset"),
    ("hosts:\n  sim1: {ssh_host: sim1, python: /x}\n", "hosts.sim1.model", "required"),
    ("hosts: [sim1\n", "", "not valid YAML"),
]


@pytest.mark.parametrize("text, field, words", BAD_INVENTORIES)
def test_bad_inventory_is_one_line_exit_2_and_no_connection(fleet: Fleet, sim_host: SimHost, tmp_path: Path,
                                                            text: str, field: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"ssh_config: {fleet.ssh_config_path}\n" + text)
    before = ssh_logins(sim_host)
    r = run_inv("deploy", inventory=path)
    assert r.returncode == 2, r.stderr
    first = r.stderr.strip().splitlines()[0]
    assert str(path) in first and field in first and words.lower() in first.lower(), first
    assert "Traceback" not in r.stderr
    assert ssh_logins(sim_host) == before


def test_unknown_host_and_bad_flags_exit_2(inventory: Path, sim_host: SimHost) -> None:
    before = ssh_logins(sim_host)
    for args, words in [(("deploy", "--host", "gpu9"), "unknown host"), (("deploy", "--steps", "two"), "--steps"),
                        (("deploy", "--steps", "3", "--draft-tokens", "2"), "draft tokens"),
                        (("deploy", "--patch-mode", "magic"), "--patch-mode"),
                        (("deploy", "--timeout", "-1"), "--timeout")]:
        r = run_inv(*args, inventory=inventory)
        assert r.returncode == 2, (args, r.stderr)
        assert words in r.stderr, (args, r.stderr)
    assert ssh_logins(sim_host) == before


def test_concurrent_deploys_to_one_host_one_fails_clearly(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    """By default (no --lock-wait) the second deploy refuses: it never silently replaces the first one's server
    (it waited 600 s, then did, both exiting 0)."""
    inventory = derived_inventory(fleet, tmp_path)
    sim_host.set_sim_config(fail="slow_load", load_seconds=3)
    results: list[subprocess.CompletedProcess[str]] = []

    def go() -> None:
        results.append(run_inv("deploy", "--steps", "2", inventory=inventory))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.3)
    for t in threads:
        t.join()
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 1], [r.stderr for r in results]
    loser = next(r for r in results if r.returncode == 1)
    said = " ".join(loser.stderr.split())
    assert "another deploy (" in said and "holds this host since" in said and "at step" in said, said
    assert "`--lock-wait SECONDS` queues behind it" in said, said
    assert len([p for p, c in sglang_pids(sim_host) if "sglang.launch_server" in c]) == 1


def _children(pid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    return out


def test_dropped_ssh_connection_mid_deploy_is_reattached(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path)
    sim_host.set_sim_config(fail="slow_load", load_seconds=3)
    proc = subprocess.Popen([*INV, "deploy", "--steps", "2", "--json", "--inventory", str(inventory)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        # Wait until the server has been started on the host, then cut the client's network path (the
        # ProxyCommand), as a dropped link would.
        deadline = waiting.deadline()
        while not any("sglang.launch_server" in c for _, c in sglang_pids(sim_host)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        socats = [c for c in _children(proc.pid) if "socat" in Path(f"/proc/{c}/cmdline").read_text()]
        assert socats
        for s in socats:
            os.kill(s, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    doc = host_doc(json.loads(out))
    assert doc["ok"] and doc["transport"]["reconnects"] >= 1
    assert "dropped" in err
    launchers = [p for p, c in sglang_pids(sim_host) if "sglang.launch_server" in c]
    assert launchers == [doc["pid"]]


def test_host_unreachable_after_a_drop_is_reported_and_the_deploy_finishes_there(fleet: Fleet, sim_host: SimHost,
                                                                                  tmp_path: Path) -> None:
    """The link drops mid-deploy and the host stays unreachable past the connect budget: the client says what
    happened and what to do; on the host the deploy runs to its end (no half state), as `inv status` shows later."""
    if fleet.mode != "netns":
        pytest.skip("needs netns mode (root)")
    inventory = derived_inventory(fleet, tmp_path, defaults={"timeouts": {"connect_total": 3}})
    sim_host.set_sim_config(fail="slow_load", load_seconds=2)
    proc = subprocess.Popen([*INV, "deploy", "--steps", "2", "--inventory", str(inventory)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    lo = ["ip", "netns", "exec", str(sim_host.netns), "ip", "link", "set", "lo"]
    try:
        deadline = waiting.deadline()
        while not any("sglang.launch_server" in c for _, c in sglang_pids(sim_host)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        subprocess.run([*lo, "down"], check=True)
        for c in _children(proc.pid):
            if "socat" in Path(f"/proc/{c}/cmdline").read_text():
                os.kill(c, signal.SIGKILL)
        _out, err = proc.communicate(timeout=60)
    finally:
        subprocess.run([*lo, "up"], check=True)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "could not reconnect" in err and "inv status" in err and "Traceback" not in err, err
    # Taking the host's network down also broke the server's own loopback, so the headless deploy may have failed:
    # either way it must end whole, a healthy server or none at all.
    deadline = waiting.deadline()
    while True:
        code, doc, _ = inv_json("status", inventory=inventory)
        d = doc["hosts"][0]["data"]
        # a failed deploy with nothing serving is exit 1 (status says so), a running one exit 0
        if code in (0, 1) and not d["deploy_in_progress"] and (d["record"] or {}).get(
                "status") in ("running", "failed"):
            break
        assert time.monotonic() < deadline, doc
        time.sleep(0.5)
    if d["record"]["status"] == "running":
        assert d["running"] and d["health"]["status"] == 200
    else:
        assert not d["running"] and sglang_pids(sim_host) == []


def test_changed_host_key_is_refused_without_retry(inventory: Path, sim_host: SimHost) -> None:
    sim_host.rotate_host_key()
    r = run_inv("status", inventory=inventory)
    assert r.returncode == 1
    assert "does not match known_hosts" in r.stderr and "Traceback" not in r.stderr
    # not retried: the tool says "cannot connect yet (...); retrying for up to N s" before any retry (a count, not
    # a stopwatch: a loaded machine makes one attempt slow, never a second one appear)
    assert "retrying" not in r.stderr, r.stderr


def test_stop_status_logs(inventory: Path, sim_host: SimHost) -> None:
    assert run_inv("deploy", "--steps", "2", inventory=inventory).returncode == 0
    code, doc, _ = inv_json("status", inventory=inventory)
    d = doc["hosts"][0]["data"]
    assert code == 0 and d["running"] and d["health"]["status"] == 200
    # the deploy's own real request and accept-length burst come after SGLang's "ready" line
    r = run_inv("logs", "--lines", "40", inventory=inventory)
    assert r.returncode == 0 and "ready to roll" in r.stdout
    r = run_inv("stop", inventory=inventory)
    assert r.returncode == 0, r.stderr
    assert sglang_pids(sim_host) == []
    code, doc, _ = inv_json("status", inventory=inventory)
    d = doc["hosts"][0]["data"]
    assert d["running"] is False and d["record"]["status"] == "stopped"
    # nothing serves after the stop: exit 1 and `"ok": false` (both said all was well), as the README says
    assert code == 1 and doc["ok"] is False and doc["hosts"][0]["ok"] is False, doc
    r = run_inv("status", inventory=inventory)
    assert r.returncode == 1 and "nothing serves" in r.stderr and "was stopped" in r.stderr, r.stderr


def test_gpu_holder_whose_main_thread_exited_is_still_stopped(inventory: Path, sim_host: SimHost) -> None:
    """Real-host behaviour (H200 smoke run): a CUDA process's main thread can show 'Z' while other threads still
    hold the GPU. Such a process is neither skipped as "already gone" nor reported gone before it is."""
    holder = _start_gpu_holder(sim_host, "--gpu", "0", "--mib", "1000", "--leader-exits")
    assert sim_host.exec(["cut", "-d", " ", "-f", "3", f"/proc/{holder}/stat"]).stdout.strip() == "Z"
    code, doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    stopped = {p["pid"] for p in doc["stopped"]["terminated"] + doc["stopped"]["killed"]}
    assert holder in stopped
    assert str(holder) not in _gpu_pids(sim_host)


def test_host_without_sftp_gets_files_by_shell_write(inventory: Path, sim_host: SimHost) -> None:
    """Some hosts disable sshd's sftp subsystem: the agent and the launch script still arrive, atomically."""
    sim_host.set_sftp(False)
    code, doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    assert doc["transport"]["uploads"] >= 2  # the agent (first time on this host) and the launch script
    mode = sim_host.exec(["stat", "-c", "%a", "/root/.specdeploy/launch-eagle3-s2-k1-d3.sh"]).stdout.strip()
    assert mode == "700"
    assert sim_host.exec("ls -a /root/.specdeploy | grep -c specdeploy-").stdout.strip() == "0"  # no temp files


def test_secrets_never_shown_even_though_sglang_logs_them(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path, hosts={"sim1": {"sglang_args": ["--api-key", "k3y-s3cr3t"],
                                                                   "env": {"HF_TOKEN": "hf_t0k3n_s3cr3t"}}})
    code, doc, err = inv_host_json("deploy", "--steps", "1", inventory=inventory)
    assert code == 0, err
    shown = json.dumps(doc) + err
    log = sim_host.exec(["cat", doc["log_path"]]).stdout
    assert "k3y-s3cr3t" in log  # SGLang itself logs its server_args, key included ...
    r = run_inv("logs", "--lines", "500", inventory=inventory)
    shown += r.stdout + r.stderr
    r = run_inv("deploy", "--steps", "1", "--dry-run", inventory=inventory)
    shown += r.stdout + r.stderr
    assert "k3y-s3cr3t" not in shown and "hf_t0k3n_s3cr3t" not in shown  # ... the tool never shows it
    mode = sim_host.exec(["stat", "-c", "%a", "/root/.specdeploy/launch-eagle3-s1-k1-d2.sh"]).stdout.strip()
    assert mode == "700"


def test_wrong_python_path_is_a_sentence_and_nothing_runs(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path, hosts={"sim1": {"python": "/root/no-env/bin/python3"}})
    code, doc, err = inv_host_json("deploy", "--steps", "1", inventory=inventory)
    assert code == 2  # refused before anything was touched: the inventory's python is wrong
    assert doc["error"]["kind"] == "PreflightError"
    assert "/root/no-env/bin/python3" in doc["error"]["message"] and "inventory" in doc["error"]["hint"]
    assert sglang_pids(sim_host) == [] and "Traceback" not in err


def test_black_holed_link_is_noticed_by_silence_and_reattached(fleet: Fleet, sim_host: SimHost,
                                                                tmp_path: Path) -> None:
    """The link stops carrying bytes but never closes (the client's ProxyCommand is frozen): keepalives cannot tell,
    the host's heartbeats stop arriving, so after `timeouts.silence` the client reconnects and re-attaches."""
    inventory = derived_inventory(fleet, tmp_path, defaults={"timeouts": {"silence": 3}})
    # The load outlasts the poll that finds the launch (several seconds on a loaded machine: a full suite once took
    # the whole of a 12 s load) plus the silence: the deploy must still be waiting for ready when its link freezes,
    # or it ends without needing the link again.
    sim_host.set_sim_config(fail="slow_load", load_seconds=20)
    proc = subprocess.Popen([*INV, "deploy", "--steps", "2", "--json", "--inventory", str(inventory)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    frozen: list[int] = []
    try:
        deadline = waiting.deadline()
        while not any("sglang.launch_server" in c for _, c in sglang_pids(sim_host)):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        frozen = [c for c in _children(proc.pid) if "socat" in Path(f"/proc/{c}/cmdline").read_text()]
        assert frozen
        t0 = time.monotonic()
        for s in frozen:
            os.kill(s, signal.SIGSTOP)
        out, err = proc.communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        for s in frozen:
            try:
                os.kill(s, signal.SIGKILL)
                os.kill(s, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    doc = host_doc(json.loads(out))
    assert doc["ok"] and doc["transport"]["reconnects"] >= 1
    assert "link looks dead" in err or "dropped" in err
    assert waited < 30  # noticed in seconds, not at the deploy's deadline
