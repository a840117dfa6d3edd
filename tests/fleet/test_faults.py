"""The fault matrix: what the tool survives with nothing lost.

Each case injects one fault into a real deploy on the simulated fleet (real sshd, real processes and signals), then
asserts what the user saw (the sentence, the exit code, never a traceback) and the host afterwards
(:func:`assert_whole`): 0 or 1 servers and never 2, the lock free, the patch manifest matching the files on disk,
every backup intact, no orphan process, and finally that a plain re-run of the command succeeds.

Faults land in a chosen deploy step without timing guesses: a watcher inside the host reads the deploy lock's holder
note (which names the step the deploy is on) in a tight loop and freezes (SIGSTOP) or kills (SIGKILL) the host agent
the moment it enters that step. The simulator's knobs make slow steps (slow_load for the wait, nvidia-smi for
the GPU gate); a small tmpfs inside the host's mount namespace is the full filesystem.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabfile.remote.protocol import DEPLOY_STEPS
from tests.simhost.fleet import Fleet, SimHost
from tests.support import waiting
from tests.support.cli import host_doc
from tests.support.invoke_cli import derived_inventory, inv_host_json, run_inv, sglang_pids, start_inv
from tests.support.waiting import HANG_GUARD_S

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the fault matrix needs netns mode (root)")

STATE = "/root/.specdeploy"
# The agent's steps a deploy of the fault inventory runs, in the protocol's order (its one home).
STEPS = [s for s in DEPLOY_STEPS if s not in ("connect", "preflight", "first_request", "accept_gate")]

# Runs inside the host: stop the deploy holding the lock as it enters step argv[2], then send it signal argv[3].
# The agent stops itself there (a failpoint, fabfile/remote/failpoints.py, armed before the deploy starts): a poller
# that signalled the agent when it saw the step missed the millisecond steps on a loaded machine.
# Mode "proc" instead waits for an agent process running verb argv[2] (the client-side preflight's `facts`).
WATCH = rf"""
import json, os, signal, sys, time
note, target, sig, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
order = {STEPS!r}
deadline = time.time() + {HANG_GUARD_S!r}
if mode == "step":
    armed = os.path.join(os.path.dirname(note), "failpoints")
    os.makedirs(armed, mode=0o700, exist_ok=True)
    open(os.path.join(armed, target), "w").close()
print("armed", flush=True)
def state(pid):
    try:
        return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
while time.time() < deadline:
    if mode == "proc":
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid():  # this watcher's own source mentions /agent/
                continue
            try:
                argv = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
            except OSError:
                continue
            # the agent: `PY -I -c BOOT run STATE/agent/<sha> MANIFEST VERB PAYLOAD`
            if b"/agent/" in b" ".join(argv[:6]) and target.encode() in argv[3:8]:
                os.kill(int(p), sig)
                print(json.dumps({{"pid": int(p), "step": target}}), flush=True)
                sys.exit(0)
        time.sleep(0.002)
        continue
    try:
        with open(note) as f:
            d = json.load(f)
    except (OSError, ValueError):
        time.sleep(0.01)
        continue
    step = d.get("step")
    if not d.get("journal") or step not in order:
        time.sleep(0.01)
        continue
    if step == target and state(d["pid"]) == "T":
        if sig != signal.SIGSTOP:
            os.kill(d["pid"], sig)
        print(json.dumps({{"pid": d["pid"], "step": step, "deploy_id": d.get("deploy_id")}}), flush=True)
        sys.exit(0)
    if order.index(step) > order.index(target):  # the failpoint did not fire: say where the deploy was
        os.kill(d["pid"], sig)
        print(json.dumps({{"pid": d["pid"], "step": step, "deploy_id": d.get("deploy_id")}}), flush=True)
        sys.exit(3)
    time.sleep(0.01)
sys.exit(4)
"""

# Runs inside the host: everything assert_whole judges, as one JSON document.
INSPECT = r"""
import fcntl, hashlib, json, os, sys
state, site = sys.argv[1], sys.argv[2]
def sha(p):
    try:
        return hashlib.sha256(open(p, "rb").read()).hexdigest()
    except OSError:
        return None
procs = []
for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) == os.getpid():
        continue
    try:
        c = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").decode().strip()
        st = open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if st[0] == "Z":
        continue
    procs.append({"pid": int(p), "ppid": int(st[1]), "pgid": int(st[2]), "cmd": c})
lock_free = True
if os.path.exists(os.path.join(state, "deploy.lock")):
    fd = os.open(os.path.join(state, "deploy.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        lock_free = False
    os.close(fd)
manifest = None
try:
    manifest = json.load(open(os.path.join(state, "patches", "manifest.json")))
except (OSError, ValueError) as e:
    manifest = {"error": str(e)} if os.path.exists(os.path.join(state, "patches", "manifest.json")) else None
files = {}
for e in (manifest or {}).get("entries", []):
    files[e["path"]] = {"now": sha(e["path"]), "after": e.get("sha256_after"), "before": e.get("sha256_before"),
                        "backup": e.get("backup"), "backup_sha": sha(e["backup"]) if e.get("backup") else None}
sentinels = []  # every file carrying specdeploy's patch marker (source blocks, plugin, sitecustomize)
for root, dirs, names in os.walk(site):
    for n in names:
        if n.endswith((".py", ".txt")) and not n.endswith(".pyc"):
            p = os.path.join(root, n)
            if b"specdeploy nccl-env" in open(p, "rb").read():
                sentinels.append(p)
try:
    current = json.load(open(os.path.join(state, "current.json")))
except (OSError, ValueError):
    current = None
print(json.dumps({"procs": procs, "lock_free": lock_free, "manifest": manifest, "files": files,
                  "sentinels": sentinels, "current": current}))
"""


def _in_host(host: SimHost, path: Path) -> str:
    return str(path).replace(str(host.home), host.inside_home)


def inspect(host: SimHost, state: str = STATE) -> dict[str, Any]:
    r = host.exec([host.python_in_host, "-c", INSPECT, state, _in_host(host, host.site_packages())])
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def _is_agent(cmd: str) -> bool:
    return "/.specdeploy/agent/" in cmd or "specdeploy_agent" in cmd


def assert_whole(host: SimHost, *, servers: int | None = None, settle: float = 60.0,
                 state: str = STATE) -> dict[str, Any]:
    """The host after a fault: no agent left running (a headless deploy is given time to end), 0 or 1 servers, every
    SGLang process part of the recorded server, the lock free, manifest == files, backups intact."""
    deadline = time.monotonic() + settle
    while True:
        doc = inspect(host, state)
        agents = [p for p in doc["procs"] if _is_agent(p["cmd"])]
        if not agents:
            break
        assert time.monotonic() < deadline, f"agent(s) still running after {settle:.0f} s: {agents}"
        time.sleep(0.2)
    procs = doc["procs"]
    launchers = [p for p in procs if "sglang.launch_server" in p["cmd"]]
    assert len(launchers) <= 1, f"two servers on {host.name}: {launchers}"
    if servers is not None:
        assert len(launchers) == servers, (servers, launchers)
    owned: set[int] = set()
    if launchers:
        rec = doc["current"] or {}
        assert rec.get("pid") == launchers[0]["pid"], f"the running server is not the recorded one: {rec} {launchers}"
        owned = {launchers[0]["pid"]}
        grew = True
        while grew:
            kids = {p["pid"] for p in procs if p["ppid"] in owned} - owned
            grew = bool(kids)
            owned |= kids
    orphans = [p for p in procs if (p["cmd"].startswith("sglang::") or "sglang" in p["cmd"] or
                                    "simgpu_holder" in p["cmd"]) and p["pid"] not in owned
               and not p["cmd"].startswith(("sshd", "/usr/sbin/sshd"))]
    assert not orphans, f"orphan processes on {host.name}: {orphans}"
    assert doc["lock_free"], f"{host.name}: the deploy lock is still held"
    assert not (doc["manifest"] or {}).get("error"), doc["manifest"]
    for path, f in doc["files"].items():
        assert f["now"] == f["after"], f"{path}: on disk {f['now']}, the manifest says {f['after']}"
        if f["before"] is not None:
            assert f["backup_sha"] == f["before"], f"{path}: its backup {f['backup']} is missing or changed"
    unmanaged = [p for p in doc["sentinels"] if p not in doc["files"]]
    assert not unmanaged, f"patched files the manifest does not know: {unmanaged}"
    return doc


TOOL_CODE = ("fabfile/", "specdeploy_agent/", "tasks.py", "site-packages/invoke/", "site-packages/paramiko/")


def no_traceback(*texts: str) -> None:
    """No Python traceback of the tool's own (a server log excerpt may quote SGLang's traceback: that is the
    server's story, shown on purpose)."""
    for t in texts:
        assert not re.search(r"^Traceback \(most recent call last\)", t, re.M), t
        assert not any(f'{x}' in line for line in t.splitlines() if 'File "' in line for x in TOOL_CODE), t


class Watch:
    """A watcher inside the host that signals the deploy agent when it enters ``step``."""

    def __init__(self, host: SimHost, step: str, sig: int, mode: str = "step", state: str = STATE) -> None:
        assert host.mode == "netns"
        argv = ["nsenter", "-t", str(host.init_pid), "-m", "-u", "-i", "-n", "-p", "-W", "/root",
                host.python_in_host, "-c", WATCH, f"{state}/deploy.lock.json", step, str(int(sig)), mode]
        self.host = host
        self.step = step
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=host.host_env(), stdin=subprocess.DEVNULL)
        # The failpoint is armed before the test starts the deploy it is meant for.
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if ready.strip() != "armed":
            raise AssertionError(f"the watcher did not start: {ready!r} {self.proc.communicate()[1]}")

    def wait(self, timeout: float = waiting.HANG_GUARD_S) -> dict[str, Any]:
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, f"the fault missed step {self.step}: rc {self.proc.returncode} {out} {err}"
        doc: dict[str, Any] = json.loads(out)
        return doc

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def host_kill(host: SimHost, sig: str, pid: int) -> None:
    host.exec(["kill", f"-{sig}", str(pid)])


def rerun_deploy(inventory: Path, host: SimHost, *args: str) -> subprocess.CompletedProcess[str]:
    r = run_inv("deploy", "--steps", "2", *args, inventory=inventory, timeout=180)
    assert r.returncode == 0, r.stderr
    no_traceback(r.stderr, r.stdout)
    assert_whole(host, servers=1)
    return r


@pytest.fixture
def inventory(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> Path:
    # These cases queue behind the deploy they disturbed (a second deploy refuses by default: test_deploy.py).
    return derived_inventory(fleet, tmp_path, defaults={"timeouts": {"silence": 3, "connect_total": 3,
                                                                     "lock_wait": 120}})


@pytest.fixture
def host(sim_host: SimHost) -> Iterator[SimHost]:
    yield sim_host
    # Whatever a case froze, let it go before the next case resets the host.
    for p in inspect(sim_host)["procs"]:
        host_kill(sim_host, "CONT", p["pid"])


# ---------------------------------------------------------------------------------------------------------------
# The client killed during each step (a closed laptop): the deploy goes on on the host; `inv deploy` again waits for
# it (saying which deploy holds the host and its step), then succeeds.

@pytest.mark.parametrize("step", ["preflight", "patch", "stop", "gpu_clean", "start", "wait_ready", "verify_env"])
def test_client_killed_during_step_then_deploy_again(step: str, inventory: Path, host: SimHost) -> None:
    if step == "stop":
        assert run_inv("deploy", "--steps", "0", inventory=inventory).returncode == 0  # something to stop
    host.set_sim_config(fail="slow_load", load_seconds=2)
    mode = "proc" if step == "preflight" else "step"
    watch = Watch(host, "facts" if step == "preflight" else step, signal.SIGSTOP, mode)
    client = start_inv("deploy", "--steps", "2", inventory=inventory)
    try:
        frozen = watch.wait()
        os.killpg(client.pid, signal.SIGKILL)
        client.communicate(timeout=30)
    finally:
        watch.close()
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    if step in ("start", "wait_ready") and frozen.get("deploy_id"):
        # The killed client's deploy holds the host: the new one waits, naming it and its step. The old deploy is
        # resumed only once the new one has said so; resumed earlier, its 2 s load could end before a slow
        # machine's new client reached the lock, and there would be nothing to wait for (seen on a loaded run).
        again = start_inv("deploy", "--steps", "2", inventory=inventory)
        said: list[str] = []
        try:
            assert again.stderr is not None
            for line in again.stderr:
                said.append(line)
                if "holds this host" in line:
                    break
            host_kill(host, "CONT", frozen["pid"])
            out, rest = again.communicate(timeout=180)
        finally:
            if again.poll() is None:
                os.killpg(again.pid, signal.SIGKILL)
        err = "".join(said) + rest
        assert again.returncode == 0, err
        no_traceback(err, out)
        assert f"deploy {frozen['deploy_id']}" in err and "holds this host" in err, err
    else:
        host_kill(host, "CONT", frozen["pid"])
        r = run_inv("deploy", "--steps", "2", inventory=inventory, timeout=180)
        assert r.returncode == 0, r.stderr
        no_traceback(r.stderr, r.stdout)
    assert_whole(host, servers=1)


# ---------------------------------------------------------------------------------------------------------------
# The host agent SIGKILLed during each step: the client says so in one sentence; the host is whole (a server it had
# started is recorded, not orphaned); `inv deploy` again succeeds.

@pytest.mark.parametrize("step", ["preflight", "patch", "stop", "gpu_clean", "start", "wait_ready", "verify_env"])
def test_agent_killed_during_step_then_deploy_again(step: str, inventory: Path, host: SimHost) -> None:
    if step == "stop":
        assert run_inv("deploy", "--steps", "0", inventory=inventory).returncode == 0
    if step == "wait_ready":
        host.set_sim_config(fail="slow_load", load_seconds=2)
    mode = "proc" if step == "preflight" else "step"
    watch = Watch(host, "facts" if step == "preflight" else step, signal.SIGKILL, mode)
    try:
        r = run_inv("deploy", "--steps", "2", inventory=inventory, timeout=120)
        watch.wait()
    finally:
        watch.close()
    assert r.returncode == 1, r.stderr
    # A killed agent closes its channel without an exit status: the client re-attaches to the deploy's journal,
    # finds its agent gone, and says so (the preflight's `facts` has no journal: the command "dropped").
    said = "dropped while a command ran" if step == "preflight" else "ended without a result in its journal (its " \
        "agent was killed)"
    assert said in r.stderr, r.stderr
    no_traceback(r.stderr, r.stdout)
    doc = assert_whole(host)
    if any("sglang.launch_server" in p["cmd"] for p in doc["procs"]):
        # Known to the records (the one it was about to replace, or the one it had started), so the next deploy
        # replaces it.
        assert doc["current"]["status"] in ("running", "starting")
    host.set_sim_config(fail=None)
    rerun_deploy(inventory, host)


# ---------------------------------------------------------------------------------------------------------------
# The link

def test_sshd_stopped_during_the_wait(fleet: Fleet, inventory: Path, host: SimHost) -> None:
    """sshd stops answering and the session dies while the server loads: the client says it could not reconnect
    and that the deploy goes on; on the host the deploy ends whole; once sshd is back a re-run succeeds."""
    host.set_sim_config(fail="slow_load", load_seconds=2)
    watch = Watch(host, "wait_ready", signal.SIGSTOP)
    client = start_inv("deploy", "--steps", "2", inventory=inventory)
    listener = host.sshd_pid()
    try:
        frozen = watch.wait()
        waiting.stop_process(listener)  # new connections hang
        for p in host.pids():  # the live session's sshd processes die
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes()
            except OSError:
                continue
            if p != listener and b"sshd" in cmd:
                os.kill(p, signal.SIGKILL)
        host_kill(host, "CONT", frozen["pid"])
        _out, err = client.communicate(timeout=90)
    finally:
        watch.close()
        os.kill(listener, signal.SIGCONT)
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert client.returncode == 1, err
    assert "could not reconnect" in err and "inv status" in err, err
    no_traceback(err)
    assert_whole(host)
    rerun_deploy(inventory, host)


def test_link_black_holed_during_patch(inventory: Path, host: SimHost) -> None:
    """The link stops carrying bytes while the agent patches: the client notices the silence, reconnects,
    re-attaches to the journal and reports the deploy's own result."""
    watch = Watch(host, "patch", signal.SIGSTOP)
    client = start_inv("deploy", "--steps", "2", "--json", inventory=inventory)
    frozen_socat: list[int] = []
    try:
        frozen = watch.wait()
        frozen_socat = [p for p in _tree(client.pid) if b"socat" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert frozen_socat
        for p in frozen_socat:
            os.kill(p, signal.SIGSTOP)
        host_kill(host, "CONT", frozen["pid"])
        out, err = client.communicate(timeout=90)
    finally:
        watch.close()
        for p in frozen_socat:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert client.returncode == 0, err
    doc = host_doc(json.loads(out))
    assert doc["ok"] and doc["transport"]["reconnects"] >= 1
    no_traceback(err)
    assert_whole(host, servers=1)
    rerun_deploy(inventory, host)


def _tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


# ---------------------------------------------------------------------------------------------------------------
# A full filesystem under the host's state directory (a small tmpfs in the host's own mount namespace)

SMALL = "/root/small-state"


@pytest.fixture
def small_state(fleet: Fleet, host: SimHost, tmp_path: Path) -> Iterator[Path]:
    host.exec(f"mkdir -p {SMALL} && mount -t tmpfs -o size=4m,mode=0700 specdeploy-test {SMALL}")
    try:
        yield derived_inventory(fleet, tmp_path, defaults={"state_dir": SMALL,
                                                           "timeouts": {"silence": 3, "connect_total": 3}},
                                name="small.yaml")
    finally:
        host.exec(f"umount -l {SMALL}; rmdir {SMALL}")


def fill(host: SimHost) -> None:
    host.exec(f"dd if=/dev/zero of={SMALL}/filler bs=64k 2>/dev/null; sync")
    assert "No space" in host.exec(f"echo x > {SMALL}/probe").stderr


def unfill(host: SimHost) -> None:
    host.exec(f"rm -f {SMALL}/filler {SMALL}/probe")


def _small_whole(host: SimHost, servers: int | None = None) -> dict[str, Any]:
    return assert_whole(host, servers=servers, state=SMALL)


@pytest.mark.parametrize("step", ["patch", "record"])
def test_state_dir_full_during_deploy_step(step: str, small_state: Path, host: SimHost) -> None:
    # The record step is too short to catch: the disk fills at the end of verify_env, the step before it.
    watch = Watch(host, "verify_env" if step == "record" else step, signal.SIGSTOP, state=SMALL)
    client = start_inv("deploy", "--steps", "2", inventory=small_state)
    try:
        frozen = watch.wait()
        fill(host)
        host_kill(host, "CONT", frozen["pid"])
        _out, err = client.communicate(timeout=90)
    finally:
        watch.close()
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert client.returncode == 1, err
    assert f"✗ sim1 {'patch' if step == 'patch' else 'record deploy'}" in err, err
    if step == "patch":  # the patch transaction's own sentence: nothing half-written
        assert "failed (No space left on device); every file already written was restored" in err, err
    else:
        assert "in step 'record' could not write" in err and "no space left on the device" in err, err
    no_traceback(err)
    _small_whole(host, servers=0)  # nothing half-started is left: the new server was torn down
    unfill(host)
    r = run_inv("deploy", "--steps", "2", inventory=small_state, timeout=120)
    assert r.returncode == 0, r.stderr
    _small_whole(host, servers=1)


def test_state_dir_full_during_rollback(small_state: Path, host: SimHost) -> None:
    assert run_inv("deploy", "--steps", "2", "--patch-mode", "scheduler", inventory=small_state).returncode == 0
    before = _small_whole(host, servers=1)
    fill(host)
    r = run_inv("rollback-patches", inventory=small_state)
    assert r.returncode == 1, r.stderr
    assert "No space left" in r.stderr and "restored" in r.stderr, r.stderr
    no_traceback(r.stderr)
    after = _small_whole(host, servers=1)
    assert after["files"] == before["files"] and after["files"]  # still patched, exactly as the manifest says
    unfill(host)
    r = run_inv("rollback-patches", inventory=small_state)
    assert r.returncode == 0, r.stderr
    assert _small_whole(host)["files"] == {}


# ---------------------------------------------------------------------------------------------------------------
# Damaged patch state: `inv rollback-patches` refuses, names the file, changes nothing

def _patched(inventory: Path, host: SimHost) -> dict[str, Any]:
    r = run_inv("deploy", "--steps", "2", "--patch-mode", "scheduler", inventory=inventory)
    assert r.returncode == 0, r.stderr
    doc = assert_whole(host, servers=1)
    assert doc["files"]
    return doc


def _tree_hash(host: SimHost) -> str:
    site = _in_host(host, host.site_packages())
    return host.exec(f"cd {site} && find sglang {STATE}/patches -type f -not -name '*.pyc' -print0 | sort -z | "
                     "xargs -0 sha256sum | sha256sum").stdout


@pytest.mark.parametrize("damage", ["truncated", "corrupted"])
def test_damaged_manifest_rollback_refuses(damage: str, inventory: Path, host: SimHost) -> None:
    _patched(inventory, host)
    manifest = f"{STATE}/patches/manifest.json"
    good = host.exec(["cat", manifest]).stdout
    bad = good[: len(good) // 2] if damage == "truncated" else good.replace('"entries"', '"entr\x00es', 1)
    (host.home / ".specdeploy/patches/manifest.json").write_text(bad)
    before = _tree_hash(host)
    r = run_inv("rollback-patches", inventory=inventory)
    assert r.returncode == 1, r.stderr
    assert "manifest.json" in r.stderr and "not valid JSON" in r.stderr, r.stderr
    no_traceback(r.stderr)
    assert _tree_hash(host) == before
    (host.home / ".specdeploy/patches/manifest.json").write_text(good)
    r = run_inv("rollback-patches", inventory=inventory)
    assert r.returncode == 0, r.stderr
    assert assert_whole(host)["files"] == {}


def test_deleted_backup_rollback_refuses(inventory: Path, host: SimHost) -> None:
    doc = _patched(inventory, host)
    _path, f = next((p, f) for p, f in doc["files"].items() if f["backup"])
    backup = Path(str(f["backup"]).replace(host.inside_home, str(host.home)))
    saved = backup.read_bytes()
    backup.unlink()
    before = _tree_hash(host)
    r = run_inv("rollback-patches", inventory=inventory)
    assert r.returncode == 1, r.stderr
    assert f["backup"] in r.stderr and "missing" in r.stderr, r.stderr
    no_traceback(r.stderr)
    assert _tree_hash(host) == before
    backup.write_bytes(saved)
    os.chmod(backup, 0o600)
    assert run_inv("rollback-patches", inventory=inventory).returncode == 0
    assert assert_whole(host)["files"] == {}


def test_hand_edited_patched_file_rollback_refuses(inventory: Path, host: SimHost) -> None:
    doc = _patched(inventory, host)
    path = next(p for p, f in doc["files"].items() if f["backup"])
    outside = Path(path.replace(host.inside_home, str(host.home)))
    saved = outside.read_bytes()
    outside.write_bytes(saved + b"\n# edited by hand\n")
    before = _tree_hash(host)
    r = run_inv("rollback-patches", inventory=inventory)
    assert r.returncode == 1, r.stderr
    assert path in r.stderr and "Refusing to roll back" in r.stderr, r.stderr
    no_traceback(r.stderr)
    assert _tree_hash(host) == before
    outside.write_bytes(saved)
    assert run_inv("rollback-patches", inventory=inventory).returncode == 0
    assert assert_whole(host)["files"] == {}


# ---------------------------------------------------------------------------------------------------------------
# Commands that meet a deploy in progress

def test_rollback_patches_during_a_deploy_is_refused(inventory: Path, host: SimHost) -> None:
    host.set_sim_config(fail="slow_load", load_seconds=2)
    watch = Watch(host, "wait_ready", signal.SIGSTOP)
    client = start_inv("deploy", "--steps", "2", "--patch-mode", "scheduler", inventory=inventory)
    try:
        frozen = watch.wait()
        r = run_inv("rollback-patches", "--lock-wait", "0", inventory=inventory)
        host_kill(host, "CONT", frozen["pid"])
        _out, err = client.communicate(timeout=90)
    finally:
        watch.close()
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert r.returncode == 1, r.stderr
    assert f"another deploy ({frozen['deploy_id']}" in r.stderr and "at step wait_ready" in r.stderr, r.stderr
    assert "inv cancel" in r.stderr
    no_traceback(r.stderr)
    assert client.returncode == 0, err  # the deploy was not disturbed: its patches are still in place
    assert assert_whole(host, servers=1)["files"]
    assert run_inv("rollback-patches", inventory=inventory).returncode == 0


def test_stop_during_a_deploy_waits_then_stops(inventory: Path, host: SimHost) -> None:
    host.set_sim_config(fail="slow_load", load_seconds=2)
    watch = Watch(host, "wait_ready", signal.SIGSTOP)
    client = start_inv("deploy", "--steps", "2", inventory=inventory)
    try:
        frozen = watch.wait()
        stopper = start_inv("stop", inventory=inventory)
        time.sleep(0.5)  # let stop reach the lock (the order is all that matters, not the time)
        host_kill(host, "CONT", frozen["pid"])
        _out, err = client.communicate(timeout=90)
        _s_out, s_err = stopper.communicate(timeout=90)
    finally:
        watch.close()
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert client.returncode == 0, err
    assert stopper.returncode == 0, s_err
    no_traceback(s_err, err)
    assert_whole(host, servers=0)
    rerun_deploy(inventory, host)


def test_cancel_a_deploy_whose_client_went_away(inventory: Path, host: SimHost) -> None:
    """The client dies while the server loads; `inv status` shows the deploy in progress, its step and journal;
    `inv cancel` stops it and its new server; a new deploy then runs at once."""
    host.set_sim_config(fail="slow_load", load_seconds=30)
    watch = Watch(host, "wait_ready", signal.SIGSTOP)
    client = start_inv("deploy", "--steps", "2", inventory=inventory)
    try:
        frozen = watch.wait()
        os.killpg(client.pid, signal.SIGKILL)
        client.communicate(timeout=30)
    finally:
        watch.close()
    host_kill(host, "CONT", frozen["pid"])
    r = run_inv("status", inventory=inventory)
    # the old server is stopped, the new one still loads: nothing serves, so status exits 1 (it exited 0) and says so
    assert r.returncode == 1, r.stderr
    assert f"nothing serves yet: deploy {frozen['deploy_id']} is under way" in " ".join(r.stderr.split()), r.stderr
    assert f"deploy {frozen['deploy_id']} in progress" in r.stdout and "step wait_ready" in r.stdout, r.stdout
    assert f"journal: {STATE}/deploys/{frozen['deploy_id']}.events" in r.stdout
    assert "step lock ok" in r.stdout and "step wait_ready running" in r.stdout  # the journal, one line a step
    r = run_inv("cancel", inventory=inventory)
    assert r.returncode == 0, r.stderr
    assert f"deploy {frozen['deploy_id']} cancelled" in r.stdout and "torn down" in r.stdout, r.stdout
    assert_whole(host, servers=0)
    # `inv status` says who cancelled it and when, not "failed"
    _, doc, _ = inv_host_json("status", inventory=inventory)
    assert doc["data"]["state"]["state"] == "cancelled", doc["data"]["state"]
    problem = doc["data"]["state"]["problem"]
    assert f"deploy {frozen['deploy_id']} (" in problem and ") was cancelled by " in problem, problem
    assert "with `inv cancel` at 20" in problem and "failed" not in problem, problem
    r = run_inv("status", inventory=inventory)
    assert "cancelled" in r.stdout and " failed " not in r.stdout, r.stdout
    host.set_sim_config(fail=None, load_seconds=0.3)
    r = run_inv("cancel", inventory=inventory)
    assert r.returncode == 0 and "nothing to cancel" in r.stdout
    rerun_deploy(inventory, host, "--lock-wait", "0")


def test_two_inventories_deploy_to_one_host_at_once(fleet: Fleet, inventory: Path, host: SimHost,
                                                    tmp_path: Path) -> None:
    """Two teams, two inventories, one host: the second waits for the first and then replaces it; never two."""
    other = derived_inventory(fleet, tmp_path, defaults={"sglang_args": ["--max-running-requests", "8"],
                                                         "timeouts": {"lock_wait": 120}}, name="other.yaml")
    host.set_sim_config(fail="slow_load", load_seconds=1.5)
    assert run_inv("gpus", inventory=inventory).returncode == 0  # the agent is installed (see the next case)
    results: dict[str, subprocess.CompletedProcess[str]] = {}

    def go(name: str, inv: Path, steps: str) -> None:
        results[name] = run_inv("deploy", "--steps", steps, inventory=inv, timeout=180)

    threads = [threading.Thread(target=go, args=("a", inventory, "2")),
               threading.Thread(target=go, args=("b", other, "3"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["a"].returncode == 0 and results["b"].returncode == 0, (results["a"].stderr, results["b"].stderr)
    waited = [n for n, r in results.items() if "holds this host" in r.stderr]
    assert len(waited) == 1, {n: r.stderr for n, r in results.items()}
    assert "this deploy now replaces deploy" in results[waited[0]].stderr, results[waited[0]].stderr
    no_traceback(*(r.stderr for r in results.values()))
    doc = assert_whole(host, servers=1)
    last = "b" if waited == ["b"] else "a"
    assert doc["current"]["config_name"] == ("eagle3-s3-k1-d4" if last == "b" else "eagle3-s2-k1-d3")


def test_concurrent_first_deploys_to_a_fresh_host(inventory: Path, host: SimHost) -> None:
    """Two deploys meet a host that has never seen the agent: both install it safely, one waits for the other."""
    results: list[subprocess.CompletedProcess[str]] = []

    def go() -> None:
        results.append(run_inv("deploy", "--steps", "2", inventory=inventory, timeout=180))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    no_traceback(*(r.stderr for r in results))
    assert_whole(host, servers=1)


def test_two_hosts_at_once_one_fails_the_other_untouched(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                          tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path)
    sim_hosts["sim2"].set_sim_config(fail="load_traceback")
    r = run_inv("deploy", "--host", "sim1,sim2", "--steps", "2", "--strategy", "parallel", inventory=inventory,
                timeout=180)
    assert r.returncode == 1, r.stderr
    assert "sim2" in r.stderr and "Python exception" in r.stderr, r.stderr
    no_traceback(*[line for line in r.stderr.splitlines() if not line.startswith(" ")])
    assert_whole(sim_hosts["sim1"], servers=1)
    assert_whole(sim_hosts["sim2"], servers=0)
    sim_hosts["sim2"].set_sim_config(fail=None)
    r = run_inv("deploy", "--host", "sim1,sim2", "--steps", "2", "--strategy", "parallel", inventory=inventory,
                timeout=180)
    assert r.returncode == 0, r.stderr
    for name in ("sim1", "sim2"):
        assert_whole(sim_hosts[name], servers=1)


# ---------------------------------------------------------------------------------------------------------------
# The server itself

def test_server_dies_after_ready_before_verify(inventory: Path, host: SimHost) -> None:
    watch = Watch(host, "verify_env", signal.SIGSTOP)
    client = start_inv("deploy", "--steps", "2", inventory=inventory)
    try:
        frozen = watch.wait()
        launcher = next(p for p, c in sglang_pids(host) if "sglang.launch_server" in c)
        host_kill(host, "KILL", launcher)
        # `kill` returns once the signal is queued; the launcher dies when it next runs, which a loaded machine can
        # put after the deploy resumes and finds it alive. The death this test is about comes first.
        waiting.wait_until(lambda: launcher not in {p for p, _ in sglang_pids(host)}, "the killed launcher exiting",
                           poll_s=0.1)
        host_kill(host, "CONT", frozen["pid"])
        _out, err = client.communicate(timeout=90)
    finally:
        watch.close()
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert client.returncode == 1, err
    assert "check-env could not prove" in err or "exited" in err, err
    no_traceback(err)
    assert_whole(host, servers=0)
    rerun_deploy(inventory, host)


def test_scheduler_dies_while_bench_runs(inventory: Path, host: SimHost, tmp_path: Path) -> None:
    assert run_inv("deploy", "--steps", "2", inventory=inventory).returncode == 0
    bench = start_inv("bench", "--num-prompts", "400", "--output-len", "64", "--client", "builtin",
                      "--out", str(tmp_path / "runs"), inventory=inventory)
    try:
        deadline = waiting.deadline()
        while "Decode batch" not in host.exec(f"tail -c 2000 {host.inside_home}/sglang-logs/*.log").stdout:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        sched = next(p for p, c in sglang_pids(host) if c.startswith("sglang::scheduler_TP1"))
        host_kill(host, "KILL", sched)
        _out, err = bench.communicate(timeout=120)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
    assert bench.returncode == 1, err
    assert "died during the benchmark" in err and "no figures were kept" in err, err
    no_traceback(err)
    assert_whole(host, servers=0)
    rerun_deploy(inventory, host)
    r = run_inv("bench", "--num-prompts", "4", "--output-len", "16", "--client", "builtin",
                "--out", str(tmp_path / "runs"), inventory=inventory)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------------------------------------------------
# A bug on the host: never a traceback on the client's screen

def test_unexpected_agent_error_is_one_sentence_and_a_traceback_file(inventory: Path, host: SimHost) -> None:
    """A damaged state dir (current.json turned into a directory) makes the record write raise something the agent
    never expected: the user gets one sentence naming the host, the step and a 0600 file with the traceback, and
    no server runs (it never left its start gate)."""
    host.exec(f"mkdir -p {STATE}/current.json/x")
    code, doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 1, err
    e = doc["error"]
    assert e["kind"] == "AgentCrashError" and e["host"] == "sim1"
    # The first record write is the one just before the server may run (see server.start's gate).
    assert "in step 'start'" in e["message"] and "IsADirectoryError" in e["message"], e
    path = e["details"]["traceback_file"]
    assert path.startswith(f"{STATE}/errors/") and path in e["message"]
    assert host.exec(["stat", "-c", "%a", path]).stdout.strip() == "600"
    assert "Traceback (most recent call last)" in host.exec(["cat", path]).stdout
    no_traceback(err, json.dumps(doc))
    assert_whole(host, servers=0)
    host.exec(f"rm -rf {STATE}/current.json")
    rerun_deploy(inventory, host)


def test_lock_wait_zero_refuses_at_once_naming_the_holder(inventory: Path, host: SimHost) -> None:
    host.set_sim_config(fail="slow_load", load_seconds=2)
    watch = Watch(host, "wait_ready", signal.SIGSTOP)
    client = start_inv("deploy", "--steps", "2", inventory=inventory)
    try:
        frozen = watch.wait()
        code, doc, _err = inv_host_json("deploy", "--steps", "2", "--lock-wait", "0", inventory=inventory)
        host_kill(host, "CONT", frozen["pid"])
        _out, cerr = client.communicate(timeout=90)
    finally:
        watch.close()
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
    assert code == 1 and doc["error"]["kind"] == "LockHeldError", doc
    assert frozen["deploy_id"] in doc["error"]["message"] and "at step wait_ready" in doc["error"]["message"]
    assert "--lock-wait" in doc["error"]["hint"]
    assert client.returncode == 0, cerr
    assert_whole(host, servers=1)
