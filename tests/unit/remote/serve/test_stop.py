"""Which processes a deploy or `inv stop` would stop (fabfile/remote/serve/stop.py), read from this machine's real
/proc: the recorded server with its children, an SGLang launcher, never a router the tool started nor an unrelated
process. Only the finding is run here (and the verb's dry run): stopping would reach every SGLang process of the
machine's PID namespace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabfile.remote import procs
from fabfile.remote.common import EventSink
from fabfile.remote.serve import records, stop

# A parent that starts one child and sleeps: the recorded server and a scheduler of it. The child's pid is its
# first line of output.
_PARENT = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
           " print(c.pid, flush=True); time.sleep(60)")


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[str]]]:
    made: list[subprocess.Popen[str]] = []
    yield made
    for p in made:
        p.kill()
        p.wait()


def _start(made: list[subprocess.Popen[str]], *argv: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True)
    made.append(p)
    return p


def _ticks(pid: int) -> int | None:
    st = procs.stat(pid)
    return st.start_ticks if st else None


def test_the_recorded_server_and_its_children_are_found_and_nothing_unrelated(
        tmp_path: Path, spawned: list[subprocess.Popen[str]]) -> None:
    state = str(tmp_path / "state")
    server = _start(spawned, "-c", _PARENT)
    assert server.stdout is not None
    child = int(server.stdout.readline())
    bystander = _start(spawned, "-c", "import time; time.sleep(60)")
    records.write(state, {"deploy_id": "d1", "pid": server.pid, "start_ticks": _ticks(server.pid)})
    found = stop.find_stale(state, [], include_gpu_holders=False).targets
    assert found[server.pid].why == "recorded server of deploy d1"
    assert found[child].why == "child of the recorded server"
    assert bystander.pid not in found


def test_a_launcher_is_found_by_its_command_line_unless_it_is_a_router_the_tool_started(
        tmp_path: Path, spawned: list[subprocess.Popen[str]]) -> None:
    state = tmp_path / "state"
    launcher = _start(spawned, "-c", "import time; time.sleep(60)", "sglang.launch_server")
    deadline = time.monotonic() + 10  # the child has exec'd its command line once /proc shows it
    while "sglang.launch_server" not in _cmdline(launcher.pid):
        assert time.monotonic() < deadline, "the launcher's command line never showed"
        time.sleep(0.01)
    found = stop.find_stale(str(state), [], include_gpu_holders=False).targets
    assert found[launcher.pid].why == "SGLang launcher"
    (state / "routers").mkdir(parents=True)
    (state / "routers" / "front.json").write_text(json.dumps(
        {"name": "front", "pid": launcher.pid, "start_ticks": _ticks(launcher.pid)}))
    assert launcher.pid not in stop.find_stale(str(state), [], include_gpu_holders=False).targets


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_dry_run_of_stop_lists_the_servers_and_leaves_them_and_the_record_alone(
        tmp_path: Path, spawned: list[subprocess.Popen[str]]) -> None:
    state = str(tmp_path / "state")
    server = _start(spawned, "-c", _PARENT)
    assert server.stdout is not None
    server.stdout.readline()
    records.write(state, {"deploy_id": "d1", "pid": server.pid, "start_ticks": _ticks(server.pid),
                          "status": "running"})
    got = stop.run({"state_dir": state, "dry_run": True}, EventSink())
    assert got["dry_run"] is True and got["routers_running"] == []
    listed = {int(str(p["pid"])): p["why"] for p in got["would_stop"]}
    assert listed[server.pid] == "recorded server of deploy d1"
    assert server.poll() is None and os.path.exists(f"/proc/{server.pid}")
    rec = records.current(state)
    assert rec is not None and rec["status"] == "running"
