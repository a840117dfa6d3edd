"""What the tool says runs is what runs: every state in a rollout's table and in `inv status` is observed
on the host at that moment; the record only says what was intended, and a disagreement is shown as one.

Each test drives the real CLI over real SSH against the simulated fleet (sim1..sim3), with real signals: a frozen
sshd is a host lost mid-deploy, a SIGSTOPped launcher is a hung server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.simhost.fleet import SSHD, Fleet, SimHost, _exe
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
)

ALL = "sim1,sim2,sim3"


def _inventory(fleet: Fleet, tmp_path: Path, **extra: Any) -> Path:
    path = derived_inventory(fleet, tmp_path, defaults={"timeouts": {"silence": 3, "connect": 3}})
    data = yaml.safe_load(path.read_text())
    for key, value in extra.items():
        if key == "hosts":
            for h, over in value.items():
                data["hosts"][h].update(over)
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _rows(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in doc["hosts"]}


def _steps_running(host: SimHost) -> int | None:
    status, body = http_get(host, "/server_info")
    return json.loads(body).get("speculative_num_steps") if status == 200 else None


def _sshd_pids(host: SimHost) -> list[int]:
    return [p for p in host.pids() if _exe(p) == SSHD]


@contextmanager
def frozen_sshd(host: SimHost) -> Iterator[list[int]]:
    """Every sshd process of the host stopped (the listener and the open sessions): the host is lost to the client,
    while what runs there goes on. Resumed on exit (or earlier by the test)."""
    pids = _sshd_pids(host)
    for p in pids:
        waiting.stop_process(p)
    try:
        yield pids
    finally:
        for p in pids:
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass


def table_row(text: str, host: str) -> str:
    """The last table row whose first cell is ``host``, with its wrapped continuation lines."""
    lines = text.splitlines()
    found = ""
    for i, ln in enumerate(lines):
        cells = [c.strip() for c in ln.strip().strip("│").split("│")]
        if cells and cells[0] == host:
            row = [ln]
            for nxt in lines[i + 1:]:
                more = [c.strip() for c in nxt.strip().strip("│").split("│")]
                if len(more) < 2 or more[0]:
                    break
                row.append(nxt)
            found = " ".join(" ".join(c.strip() for c in r.split("│")) for r in row)
    return found


def _wait_for(check: Any, timeout: float = waiting.HANG_GUARD_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.05)


def _launcher_running(host: SimHost) -> bool:
    return any("sglang.launch_server" in c for _, c in sglang_pids(host))


# -- 1, 3: a host lost mid-deploy -----------------------------------------------------------------------------------
def _start_lost_host_rollout(fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path,
                             as_json: bool, sim2_timeouts: dict[str, float] | None = None
                             ) -> tuple[Path, subprocess.Popen[str]]:
    inventory = _inventory(fleet, tmp_path, **({"hosts": {"sim2": {"timeouts": sim2_timeouts}}}
                                               if sim2_timeouts else {}))
    code, _, err = inv_json("deploy", "--host", ALL, "--strategy", "parallel", "--steps", "3", inventory=inventory)
    assert code == 0, err
    sim_hosts["sim2"].set_sim_config(fail="slow_load", load_seconds=8)
    argv = [*INV, "deploy", "--host", ALL, "--strategy", "parallel", "--steps", "2", "--rollback-on-failure",
            "--inventory", str(inventory), *(["--json"] if as_json else [])]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1"})
    # sim2's new server is starting: from here on its deploy has changed the host.
    _wait_for(lambda: any(f"speculative-num-steps{sep}2" in c for sep in "= "
                          for _, c in sglang_pids(sim_hosts["sim2"])))
    return inventory, proc


def test_host_lost_mid_deploy_is_rechecked_when_it_answers_and_rolled_back(
        fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path) -> None:
    """Point 1: sim2's link dies during its deploy; the others deploy, the batch fails, rollback. sim2 answers again
    during the rollback: its deploy's outcome is read from its journal (it went on and changed the host), and it is
    put back like the others. Before: its row said `failed (unchanged)`, rollback skipped it, and it ran the new
    version in a fleet the tool called rolled back."""
    # A resumed sshd first works through every connection queued while it was stopped (each retry of the lost
    # deploy left one); on a loaded 2-core machine that outlasted the suite's 10 s connect budget (seen in 3 of 4
    # full runs, never alone). sim2 gets twice that budget, so "answers again" means what it says.
    inventory, proc = _start_lost_host_rollout(fleet, sim_hosts, tmp_path, as_json=False,
                                               sim2_timeouts={"connect_total": 20, "connect_refused": 15})
    err_lines: list[str] = []
    try:
        with frozen_sshd(sim_hosts["sim2"]) as pids:
            assert proc.stderr is not None
            # sim2 comes back the moment its deploy gives up: the step line that says so is printed then (the
            # error itself only once, at the end, after the rollback: resumed on that, sim2's rollback had already
            # spent its connect budget against the frozen sshd, and the test failed).
            for line in proc.stderr:
                err_lines.append(line)
                if line.lstrip().startswith("✗ sim2") or ("sim2" in line and "could not reconnect" in line):
                    break
            else:
                raise AssertionError("sim2's deploy never reported its lost link:\n" + "".join(err_lines))
            for p in pids:  # it comes back while the rollout is still running
                os.kill(p, signal.SIGCONT)
        out, rest = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(err_lines) + rest
    assert proc.returncode == 1, err
    row = table_row(out, "sim2")
    sshd_log = (sim_hosts["sim2"].directory / "sshd.log").read_text(errors="replace")[-4000:]
    assert "rolled back" in row and "re-checked" in row, f"{out}\n--- stderr:\n{err}\n--- sim2 sshd.log:\n{sshd_log}"
    assert "changed hosts were rolled back" in err and "incomplete" not in err, err
    for name in ("sim1", "sim2", "sim3"):
        assert _steps_running(sim_hosts[name]) == 3, name
    code, st, _ = inv_json("status", "--host", ALL, inventory=inventory)
    assert code == 0
    assert {h["host"]: h["data"]["state"]["config"] for h in st["hosts"]} == dict.fromkeys(
        ("sim1", "sim2", "sim3"), "eagle3-s3-k1-d4")


def test_host_still_lost_is_unknown_and_the_rollback_is_not_called_complete(
        fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path) -> None:
    """Points 1 and 3: sim2 never answers again during the run. Its outcome is `unknown`, what runs there is
    `unknown`, and the result does not say the fleet was rolled back (`rolled_back` false, sim2 named)."""
    _, proc = _start_lost_host_rollout(fleet, sim_hosts, tmp_path, as_json=True)
    try:
        with frozen_sshd(sim_hosts["sim2"]):
            out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    doc = json.loads(out)
    rows = _rows(doc)
    assert rows["sim2"]["outcome"] == "unknown", rows["sim2"]
    assert rows["sim2"]["outcome_unknown"] is True and rows["sim2"]["config_now"] == "unknown"
    assert doc["rolled_back"] is False and doc["rollback_incomplete"] == ["sim2"]
    for name in ("sim1", "sim3"):
        assert rows[name]["outcome"] == "rolled back" and rows[name]["config_now"] == "eagle3-s3-k1-d4"


# -- 2, 11: failed rows say what runs; the closing line names who is on the new version ---------------------------
def test_failed_rows_show_what_runs_and_the_last_line_names_who_is_on_the_new_version(
        fleet: Fleet, sim_hosts: dict[str, SimHost], tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path, hosts={"sim3": {"draft_model": "/root/no-such-draft"}})
    (tmp_path / "plain").mkdir()
    plain = _inventory(fleet, tmp_path / "plain")
    code, _, err = inv_json("deploy", "--host", ALL, "--strategy", "parallel", "--steps", "2", inventory=plain)
    assert code == 0, err
    # Point 2: sim3's preflight fails (no draft model); its old server still runs and the row says so.
    code, doc, err = inv_json("deploy", "--host", ALL, "--strategy", "parallel", "--steps", "3",
                              inventory=inventory)
    assert code == 2  # refused at preflight, no host touched: the README's exit 2 (it was 1)
    rows = _rows(doc)
    assert rows["sim3"]["outcome"] == "failed (unchanged)"
    assert rows["sim3"]["config_now"] == "eagle3-s2-k1-d3" and rows["sim3"]["pid_now"], rows["sim3"]
    assert _steps_running(sim_hosts["sim3"]) == 2
    # Point 11: the canary fails without rollback: it now runs nothing, and nobody is on the new version.
    sim_hosts["sim1"].set_sim_config(fail="load_traceback")
    r = run_inv("deploy", "--host", ALL, "--strategy", "rolling", "--steps", "1", inventory=plain)
    assert r.returncode == 1
    assert "stay on the new version" not in r.stderr and "stays on the new version" not in r.stderr, r.stderr
    assert "no host runs the new version" in r.stderr and "nothing runs now on sim1" in r.stderr, r.stderr
    assert sglang_pids(sim_hosts["sim1"]) == []


def test_rollback_that_stops_a_host_puts_back_its_patch_mode(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                             tmp_path: Path) -> None:
    """Point 11: sim1 and sim2 last ran a scheduler-patched deploy, now stopped. A plugin-mode rollout fails on
    sim2 and is rolled back: both are stopped again (nothing ran before) and their SGLang files are the scheduler
    patch again, not the failed deploy's plugin."""
    inventory = _inventory(fleet, tmp_path)
    code, _, err = inv_json("deploy", "--host", "sim1,sim2", "--strategy", "parallel", "--steps", "2",
                            "--patch-mode", "scheduler", inventory=inventory)
    assert code == 0, err
    assert run_inv("stop", "--host", "sim1,sim2", inventory=inventory).returncode == 0
    sim_hosts["sim2"].set_sim_config(fail="load_traceback")
    code, doc, err = inv_json("deploy", "--host", "sim1,sim2", "--strategy", "rolling", "--batch", "1", "--steps",
                              "3", "--patch-mode", "plugin", "--rollback-on-failure", inventory=inventory)
    assert code == 1, err
    rows = _rows(doc)
    for name in ("sim1", "sim2"):
        assert rows[name]["outcome"] == "rolled back (stopped)", rows[name]
        assert rows[name]["rollback"]["patches"]["action"] == "reapplied", rows[name]
        site = sim_hosts[name].site_packages()
        assert not (site / "specdeploy_nccl_env").exists(), name
        assert "specdeploy" in (site / "sglang/srt/managers/scheduler.py").read_text(), name
        assert sglang_pids(sim_hosts[name]) == []
    assert doc["rolled_back"] is True


# -- 4, 5, 8: inv status -------------------------------------------------------------------------------------------
def _generate(host: SimHost, tokens: int = 120) -> None:
    code = ("import json,urllib.request\n"
            "r=urllib.request.Request('http://127.0.0.1:8000/generate',data=json.dumps({'text':'hi',"
            f"'sampling_params':{{'max_new_tokens':{tokens}}}}}).encode(),headers={{'Content-Type':'application/json'}})\n"
            "assert urllib.request.urlopen(r,timeout=60).status==200\n")
    r = host.exec([host.python_in_host, "-c", code], timeout=90)
    assert r.returncode == 0, r.stderr


def test_status_figures_belong_to_the_server_that_runs_now(fleet: Fleet, sim_host: SimHost,
                                                           tmp_path: Path) -> None:
    """Point 4: a redeploy of the same configuration appends to the same log; the figures shown are the new
    server's own (none yet), never the previous process's, and they say how old they are."""
    inventory = _inventory(fleet, tmp_path)
    sim_host.set_sim_config(decode_log_interval=10)
    code, _, err = inv_host_json("deploy", "--host", "sim1", "--steps", "2", inventory=inventory)
    assert code == 0, err
    _generate(sim_host)
    code, st, _ = inv_json("status", "--host", "sim1", inventory=inventory)
    decode = st["hosts"][0]["data"]["last_decode"]
    assert decode["accept_len"] and decode["age_s"] is not None
    # The new server must have printed no Decode line of its own yet: the deploy's own real request (and, without
    # --accept-gate 0, its accept-length burst) would otherwise give it some.
    sim_host.set_sim_config(decode_log_interval=40)
    code, _, err = inv_host_json("deploy", "--host", "sim1", "--steps", "2", "--accept-gate", "0", inventory=inventory)
    assert code == 0, err
    code, st, _ = inv_json("status", "--host", "sim1", inventory=inventory)
    assert code == 0
    assert st["hosts"][0]["data"]["last_decode"] is None, st["hosts"][0]["data"]["last_decode"]
    r = run_inv("status", "--host", "sim1", inventory=inventory)
    row = table_row(r.stdout, "sim1")
    assert "running" in row and " ago" not in row, r.stdout
    _generate(sim_host)
    r = run_inv("status", "--host", "sim1", inventory=inventory)
    assert " ago)" in table_row(r.stdout, "sim1"), r.stdout
    # one figure, one name: SGLang's figures say their window (one Decode line's forwards), apart from a bench's
    assert "(40 fwd, " in table_row(r.stdout, "sim1") and "gen tok/s" in r.stdout, r.stdout
    assert "SGLang's last Decode batch line, over its last 40 decode forwards" in r.stdout, r.stdout
    code, st, _ = inv_json("status", "--host", "sim1", inventory=inventory)
    assert st["hosts"][0]["data"]["last_decode"]["window_forwards"] == 40


def test_a_hung_server_is_a_problem_not_healthy(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    """Point 5: the launcher is SIGSTOPped: alive, serving nothing. Before: `running` in green, health
    `/ready None`, exit 0."""
    inventory = _inventory(fleet, tmp_path)
    code, doc, err = inv_host_json("deploy", "--host", "sim1", "--steps", "2", inventory=inventory)
    assert code == 0, err
    pid = doc["pid"]
    machine_pid = next(p for p in sim_host.pids() if _inner_pid(p) == pid)
    waiting.stop_process(machine_pid)
    try:
        code, st, _ = inv_json("status", "--host", "sim1", inventory=inventory)
        r = run_inv("status", "--host", "sim1", inventory=inventory)
    finally:
        os.kill(machine_pid, signal.SIGCONT)
    assert code == 1 and st["hosts"][0]["data"]["state"]["state"] == "hung", st["hosts"][0]["data"]["state"]
    assert r.returncode == 1
    assert "None" not in r.stdout and "hung" in r.stdout and "stopped by a signal" in r.stderr, (r.stdout, r.stderr)


def _inner_pid(machine_pid: int) -> int | None:
    """The pid a process has inside its host's PID namespace (NSpid's last field)."""
    try:
        for line in Path(f"/proc/{machine_pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except OSError:
        return None
    return None


def test_status_during_a_deploy_shows_the_new_server_as_ours(fleet: Fleet, sim_host: SimHost,
                                                             tmp_path: Path) -> None:
    """Point 8: while a deploy runs, status names the server it is starting (config, pid) and does not call its
    processes strangers; the previous server (stopped by this deploy) is not shown as the one running."""
    inventory = _inventory(fleet, tmp_path)
    code, _, err = inv_host_json("deploy", "--host", "sim1", "--steps", "2", inventory=inventory)
    assert code == 0, err
    sim_host.set_sim_config(fail="slow_load", load_seconds=6)
    proc = subprocess.Popen([*INV, "deploy", "--host", "sim1", "--steps", "3", "--json", "--inventory",
                             str(inventory)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        _wait_for(lambda: proc.poll() is not None or any(f"speculative-num-steps{sep}3" in c for sep in "= "
                                                         for _, c in sglang_pids(sim_host)))
        # A deploy that ended before its server showed up says why here, not after the 180-s guard.
        assert proc.poll() is None, proc.communicate()
        code, st, err = inv_json("status", "--host", "sim1", inventory=inventory)
        r = run_inv("status", "--host", "sim1", inventory=inventory)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    new_pid = host_doc(json.loads(out))["pid"]
    d = st["hosts"][0]["data"]
    assert d["state"]["state"] == "deploying" and d["state"]["config"] == "eagle3-s3-k1-d4", d["state"]
    assert d["state"]["pid"] == new_pid
    assert d["other_sglang_processes"] == [], d["other_sglang_processes"]
    assert "not started by specdeploy" not in r.stdout
    assert "eagle3-s2-k1-d3" not in table_row(r.stdout, "sim1"), r.stdout


# -- 6: routers ----------------------------------------------------------------------------------------------------
def test_router_workers_are_the_live_set_and_a_router_can_be_stopped(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                                     tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path, groups={"replicas": ["sim2", "sim3"]},
                           routers={"front": {"host": "sim1", "group": "replicas", "port": 30000,
                                              "listen": "0.0.0.0", "policy": "round_robin"}},
                           hosts={"sim2": {"listen": "0.0.0.0"}, "sim3": {"listen": "0.0.0.0"}})
    code, _, err = inv_json("deploy", "--host", "replicas", "--strategy", "parallel", "--steps", "2",
                            inventory=inventory)
    assert code == 0, err
    code, doc, err = inv_json("deploy-router", inventory=inventory)
    assert code == 0, err
    assert doc["url"] == f"http://{sim_hosts['sim1'].address}:30000"
    assert run_inv("stop", "--host", "sim3", inventory=inventory).returncode == 0
    code, st, _ = inv_json("status", "--host", "sim1", inventory=inventory)
    router = st["hosts"][0]["data"]["routers"][0]
    health = {w["url"]: w["health"] for w in router["workers"]}
    assert health == {f"http://{sim_hosts['sim2'].address}:8000": 200,
                      f"http://{sim_hosts['sim3'].address}:8000": None}, router
    r = run_inv("status", "--host", "sim1", inventory=inventory)
    assert "0.0.0.0" not in r.stdout and f"http://{sim_hosts['sim1'].address}:30000" in r.stdout
    # `inv stop` on the router's host leaves it running, and says how to stop it.
    r = run_inv("stop", "--host", "sim1", inventory=inventory)
    assert r.returncode == 0 and "inv stop --router front" in r.stderr
    code, sdoc, err = inv_json("stop", "--router", "front", inventory=inventory)
    assert code == 0 and sdoc["stopped"], err
    code, st, _ = inv_json("status", "--host", "sim1", inventory=inventory)
    assert st["hosts"][0]["data"]["routers"][0]["running"] is False
    assert http_get(sim_hosts["sim1"], "/health", port=30000)[0] == 0


def _dead_proxy_inventory(fleet: Fleet, tmp_path: Path, timeouts: dict[str, float]) -> Path:
    """sim1 reached through a ProxyCommand whose connection is refused (nothing listens on port 1)."""
    config = tmp_path / "ssh_config"
    config.write_text(f"Host sim1\n  HostName 127.0.0.1\n  User root\n  IdentityFile {fleet.client_key_path}\n"
                      "  ProxyCommand socat - TCP:127.0.0.1:1\n")
    inventory = derived_inventory(fleet, tmp_path, defaults={"timeouts": timeouts})
    data = yaml.safe_load(inventory.read_text())
    data["ssh_config"] = str(config)
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    return inventory


# -- 7: a dead ProxyCommand ----------------------------------------------------------------------------------------
def test_a_dead_proxy_command_is_reported_with_its_own_words(fleet: Fleet, tmp_path: Path) -> None:
    """Point 7: the ProxyCommand cannot connect and exits. Before: paramiko read its closed stdout in a busy loop
    until the banner timeout and said "Error reading SSH protocol banner"."""
    inventory = _dead_proxy_inventory(fleet, tmp_path, {"connect_total": 6, "connect": 5})
    ticks0 = os.times()
    r = run_inv("status", "--host", "sim1", inventory=inventory, timeout=60)
    ticks1 = os.times()
    assert r.returncode == 1, r.stderr
    final = next(ln for ln in r.stderr.splitlines() if ln.startswith("error:"))
    assert "ProxyCommand" in final and "exited with status" in final and "Connection refused" in final, r.stderr
    assert "banner" not in r.stderr, r.stderr
    # ... and said at the first failed attempt, not only once the connect budget is spent.
    assert r.stderr.index("cannot connect yet") < r.stderr.index("error:"), r.stderr
    # Not a busy loop: the CLI's CPU time stays far below its wall time (each attempt ends when the proxy exits).
    cpu = (ticks1.children_user + ticks1.children_system) - (ticks0.children_user + ticks0.children_system)
    assert cpu < 0.6 * (ticks1.elapsed - ticks0.elapsed), (cpu, ticks1.elapsed - ticks0.elapsed)


def test_a_refused_proxy_is_given_up_after_connect_refused_not_connect_total(fleet: Fleet, tmp_path: Path) -> None:
    """Point 7, the time: `ssh` reports a refused connection at once; the tool retries a refusal only for
    timeouts.connect_refused (a restarting sshd), not for the whole connect_total budget (here 600 s: a run that
    used it would outlive the 120 s this test allows)."""
    inventory = _dead_proxy_inventory(fleet, tmp_path, {"connect_total": 600, "connect_refused": 1})
    r = run_inv("status", "--host", "sim1", inventory=inventory, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "Connection refused" in r.stderr and "timeouts.connect_refused" in r.stderr.split("error:")[-1], r.stderr


# -- 9: check-env over a group --------------------------------------------------------------------------------------
def test_check_env_summary_never_says_ok_for_a_host_without_proof(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                                  tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path)
    code, _, err = inv_host_json("deploy", "--host", "sim1", "--steps", "2", inventory=inventory)
    assert code == 0, err
    r = run_inv("check-env", "--host", "sim1,sim2", inventory=inventory)
    assert r.returncode == 1
    sim1, sim2 = table_row(r.stdout, "sim1"), table_row(r.stdout, "sim2")
    assert "proven" in sim1 and "NOT" not in sim1, r.stdout
    assert " ok " not in sim2 and "no server" in sim2, r.stdout


# -- 10: logs --follow -----------------------------------------------------------------------------------------------
def test_logs_follow_is_bounded_by_host_timeout_and_follows_a_redeploy(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                                       tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path)
    code, _, err = inv_host_json("deploy", "--host", "sim1", "--steps", "2", inventory=inventory)
    assert code == 0, err
    # A host whose sshd is stopped: reported as timed out after --host-timeout, not after the follow's hour.
    with frozen_sshd(sim_hosts["sim2"]):
        r = run_inv("logs", "--host", "sim1,sim2", "--follow", "--timeout", "8", "--host-timeout", "3",
                    inventory=inventory, timeout=40, env={"COLUMNS": "250"})
    assert r.returncode == 1 and "sim2" in r.stderr and "timed out" in r.stderr, r.stderr
    # A redeploy to another configuration writes another log: the follow moves to it.
    follower = subprocess.Popen([*INV, "logs", "--host", "sim1", "--follow", "--timeout", "20", "--inventory",
                                 str(inventory)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen: list[str] = []
    try:
        assert follower.stdout is not None
        reader = threading.Thread(target=lambda: seen.extend(follower.stdout or []), daemon=True)
        reader.start()
        _wait_for(lambda: bool(seen))
        code, _, err = inv_host_json("deploy", "--host", "sim1", "--steps", "1", inventory=inventory)
        assert code == 0, err
        _wait_for(lambda: any("config eagle3-s1-k1-d2" in ln for ln in seen), 20)
    finally:
        follower.kill()
        follower.wait()
    text = "".join(seen)
    assert "a new deploy writes" in text and "sglang-eagle3-s1-k1-d2.log" in text, text[-2000:]


# -- 12: flags ------------------------------------------------------------------------------------------------------
def test_flags_are_unambiguous_and_stop_runs_hosts_at_once(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                           tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path, clusters={"duo": {"hosts": ["sim2", "sim3"], "tp": 4,
                                                              "dist_init_port": 29556}})
    help_text = run_inv("--help", "deploy").stdout
    assert "--, " not in help_text and "-i STRING" not in help_text, help_text
    r = run_inv("deploy", "--host", "sim1", "-i", "5", inventory=inventory)
    assert r.returncode != 0 and sglang_pids(sim_hosts["sim1"]) == []
    # A node of a cluster is not deployed on its own without a word: bad input, nothing touched.
    r = run_inv("deploy", "--host", "sim3", "--steps", "2", inventory=inventory)
    assert r.returncode == 2 and "cluster duo" in r.stderr, r.stderr
    assert sglang_pids(sim_hosts["sim3"]) == []
    # `inv stop` over a group: every host at once, each bounded; a hung one does not hold up the others.
    code, _, err = inv_host_json("deploy", "--host", "sim1", "--steps", "2", inventory=inventory)
    assert code == 0, err
    with frozen_sshd(sim_hosts["sim2"]):
        code, doc, err = inv_json("stop", "--host", "sim1,sim2", "--host-timeout", "3", inventory=inventory,
                                  timeout=40)
    by = _rows(doc)
    assert code == 1 and by["sim2"]["error"]["kind"] == "HostTimeoutError", doc
    assert by["sim1"]["ok"] and sglang_pids(sim_hosts["sim1"]) == []


# -- Ctrl-C and overlapping commands -----------------------------------------------------------------------------
def _interruptible(*args: str, inventory: Path) -> subprocess.Popen[str]:
    """`inv ARGS` as typed in a terminal: SIGINT at its default (a suite started in the background ignores it)."""
    return subprocess.Popen([*INV, *args, "--inventory", str(inventory)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_ctrl_c_during_a_deploy_names_cancel_and_the_previous_deploy_comes_back(fleet: Fleet, sim_host: SimHost,
                                                                                tmp_path: Path) -> None:
    """Ctrl-C left the deploy running on the host without naming `inv cancel`; `inv bench` meanwhile measured the
    half-started server (2.1 tok/s); after `inv cancel` nothing said how to get the old server back."""
    inventory = _inventory(fleet, tmp_path)
    code, _, err = inv_host_json("deploy", "--host", "sim1", "--steps", "2", inventory=inventory)
    assert code == 0, err
    sim_host.set_sim_config(fail="slow_load", load_seconds=30)
    proc = _interruptible("deploy", "--host", "sim1", "--steps", "3", inventory=inventory)
    try:
        _wait_for(lambda: any(f"speculative-num-steps{sep}3" in c for sep in "= " for _, c in sglang_pids(sim_host)))
        bench = run_inv("bench", "--host", "sim1", "--num-prompts", "2", inventory=inventory)
        proc.send_signal(signal.SIGINT)
        _, deploy_err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert bench.returncode == 1 and "in progress on this host" in bench.stderr, bench.stderr
    assert "wait for the deploy to end" in bench.stderr and "tok/s" not in bench.stdout
    assert proc.returncode == 130 and "Traceback" not in deploy_err, deploy_err
    flat = " ".join(deploy_err.split())
    assert "`inv cancel --host sim1` stops it" in flat and "at step" in flat, deploy_err
    r = run_inv("cancel", "--host", "sim1", inventory=inventory)
    assert r.returncode == 0, r.stderr
    assert "inv deploy --previous --host sim1" in " ".join(r.stdout.split()), r.stdout
    sim_host.set_sim_config()
    r = run_inv("deploy", "--previous", "--host", "sim1", inventory=inventory)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _steps_running(sim_host) == 2
    # Ctrl-C of a read-only command says nothing about deploys
    follower = _interruptible("logs", "--host", "sim1", "--follow", "--timeout", "60", inventory=inventory)
    try:
        assert follower.stdout is not None and follower.stdout.readline()
        follower.send_signal(signal.SIGINT)
        _, follow_err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 130 and "deploy" not in follow_err and "Traceback" not in follow_err, follow_err
    run_inv("stop", inventory=inventory)
