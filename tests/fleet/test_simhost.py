"""The simulated fleet over real SSH: isolation, host keys, SFTP, clean up/down, loopback mode."""

from __future__ import annotations

import io
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import paramiko
import pytest

from tests.simhost import fleet as fleetmod
from tests.simhost.fleet import Fleet, SimHost
from tests.support import waiting

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def connect(ssh_config: Path, known_hosts: Path | None, alias: str) -> Iterator[paramiko.SSHClient]:
    """A paramiko client built only from the generated files (RejectPolicy; no agent, no ~/.ssh)."""
    cfg = paramiko.SSHConfig.from_path(str(ssh_config)).lookup(alias)
    client = paramiko.SSHClient()
    if known_hosts is not None:
        client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    sock = paramiko.ProxyCommand(cfg["proxycommand"]) if "proxycommand" in cfg else None
    try:
        client.connect(
            cfg["hostname"],
            port=int(cfg.get("port", 22)),
            username=cfg["user"],
            key_filename=cfg["identityfile"],
            look_for_keys=False,
            allow_agent=False,
            sock=sock,
            timeout=10,
            banner_timeout=10,
            auth_timeout=10,
            channel_timeout=10,
        )
        yield client
    finally:
        transport = client.get_transport()
        client.close()
        if transport is not None:
            transport.join(5)  # its thread closes the proxy too; reap only after that
        if sock is not None:  # client.close() has SIGTERMed the proxy; reap it and close its pipes
            if sock.process.poll() is None:
                sock.process.terminate()
            sock.process.wait(timeout=5)
            for stream in (sock.process.stdin, sock.process.stdout, sock.process.stderr):
                if stream is not None:
                    stream.close()


def run(client: paramiko.SSHClient, cmd: str, timeout: float = 20) -> tuple[int, str]:
    _, out, err = client.exec_command(cmd, timeout=timeout)
    text = out.read().decode()
    code = out.channel.recv_exit_status()
    return code, text + err.read().decode()


def ssh(fleet: Fleet, alias: str) -> AbstractContextManager[paramiko.SSHClient]:
    return connect(fleet.ssh_config_path, fleet.known_hosts_path, alias)


needs_netns = pytest.mark.skipif(os.geteuid() != 0, reason="namespace isolation needs root")


def _netns_only(fleet: Fleet) -> None:
    if fleet.mode != "netns":
        pytest.skip("fleet runs in loopback mode")


# ------------------------------------------------------------------ inside one host


def test_host_shape_over_ssh(fleet: Fleet, sim_hosts: dict[str, SimHost]) -> None:
    home = sim_hosts["sim1"].inside_home
    with ssh(fleet, "sim1") as c:
        code, out = run(
            c,
            f"echo HOME=$HOME; command -v nvidia-smi; "
            f"test -f {home}/models/kimi-k2.5-int4/config.json && echo M; "
            f"test -f {home}/eagle3/output_100k_sglang/4/config.json && echo D; "
            f"{home}/ml-env/bin/python3 -c "
            "'import sys, sglang.version as v; print(sys.prefix, v.__version__)'",
        )
    assert code == 0, out
    assert f"HOME={home}" in out
    assert f"{home}/sim-bin/nvidia-smi" in out
    assert "\nM\nD\n" in out
    assert f"{home}/ml-env {sim_hosts['sim1'].version}" in out


def test_each_host_sees_only_its_own_processes_and_gpus(fleet: Fleet, sim_hosts: dict[str, SimHost]) -> None:
    _netns_only(fleet)
    sim_hosts["sim2"].set_sim_config(gpus=4)
    with ssh(fleet, "sim1") as c1, ssh(fleet, "sim2") as c2:
        code, out = run(c1, "ls -d /proc/[0-9]* | wc -l; hostname; ip -o link | wc -l; ps -o args= -p 1")
        assert code == 0, out
        count, hostname, links, init = out.split("\n", 3)
        assert int(count) < 12, out  # init, sshd listener + session, shell, ls, wc
        assert init.startswith("simhost-init sim1"), out
        assert hostname == "sim1"
        assert links == "2"  # lo, and eth0 on the fleet's private LAN (10.77.0.N, for multi-node ranks)
        assert run(c1, "nvidia-smi -L | grep -c '^GPU '")[1].strip() == "8"
        assert run(c2, "nvidia-smi -L | grep -c '^GPU '")[1].strip() == "4"


def test_process_started_on_one_host_is_invisible_and_unkillable_from_another(
    fleet: Fleet, sim_hosts: dict[str, SimHost]
) -> None:
    _netns_only(fleet)
    secs = 1000 + secrets.randbelow(1000)
    tag, pattern = f"sleep {secs}", f"[s]leep {secs}"  # the pattern never matches the shell running it
    with ssh(fleet, "sim1") as c1, ssh(fleet, "sim2") as c2:
        code, out = run(c1, f"setsid {tag} </dev/null >/dev/null 2>&1 & echo $!")
        assert code == 0, out
        _eventually(lambda: run(c1, "ps -o ppid= -C sleep")[1].split() == ["1"])
        # Detached from its session it is reparented to the host's init, as on a real host.
        assert run(c1, "ps -o ppid= -C sleep")[1].split() == ["1"]
        assert run(c2, f"pgrep -f '{pattern}'")[0] == 1
        assert run(c2, f"pkill -f '{pattern}'")[0] == 1
        assert run(c1, f"pgrep -f '{pattern}'")[0] == 0
        run(c1, f"pkill -f '{pattern}'")
        _eventually(lambda: run(c1, "ps -eo stat= | grep -c Z")[1].strip() == "0")  # reaped by the host's init


def test_files_are_per_host(fleet: Fleet, sim_hosts: dict[str, SimHost]) -> None:
    name = f"marker-{secrets.token_hex(4)}"
    with ssh(fleet, "sim1") as c1, ssh(fleet, "sim2") as c2:
        assert run(c1, f"echo hi > ~/{name} && cat ~/{name}") == (0, "hi\n")
        assert run(c2, f"test -e ~/{name}")[0] == 1
    assert (sim_hosts["sim1"].home / name).exists()
    assert not (sim_hosts["sim2"].home / name).exists()


def test_hosts_cannot_reach_each_other(fleet: Fleet, sim_hosts: dict[str, SimHost]) -> None:
    _netns_only(fleet)
    sim2 = sim_hosts["sim2"]
    r = sim2.exec(
        "setsid python3 -m http.server 8000 --bind 127.0.0.1 </dev/null >/dev/null 2>&1 & sleep 0.3"
    )
    assert r.returncode == 0, r.stderr
    probe = (
        "python3 -c \"import socket,sys\ntry:\n socket.create_connection(('127.0.0.1', 8000), 2)\n"
        "except OSError as e: print('refused', type(e).__name__)\nelse: print('connected')\""
    )
    _eventually(lambda: "connected" in sim2.exec(probe).stdout)  # the server may take a moment to listen
    with ssh(fleet, "sim1") as c1:
        assert run(c1, probe)[1].startswith("refused")
        # 127.0.0.1:22 from sim1 is sim1's own sshd, never sim2's.
        _code, out = run(c1, "ssh-keyscan -T 3 -t ed25519 127.0.0.1 2>/dev/null")
    own = fleetmod.key_type_and_blob((sim_hosts["sim1"].host_key.with_suffix(".pub")).read_text())
    other = fleetmod.key_type_and_blob((sim2.host_key.with_suffix(".pub")).read_text())
    assert own in out and other not in out


def test_machine_bashrc_is_not_read(fleet: Fleet, sim_hosts: dict[str, SimHost]) -> None:
    machine_bashrc = Path("/root/.bashrc")
    with ssh(fleet, "sim1") as c:
        code, out = run(c, "echo SIMHOST=$SIMHOST PYENV_ROOT=${PYENV_ROOT:-unset}; cat ~/.bashrc")
    assert code == 0
    assert "SIMHOST=sim1 PYENV_ROOT=unset" in out
    assert "simulated GPU host" in out
    if machine_bashrc.exists() and fleet.mode == "netns":
        assert machine_bashrc.read_text() not in out


def test_files_travel_by_sftp(fleet: Fleet, sim_hosts: dict[str, SimHost]) -> None:
    payload = os.urandom(100_000)
    with ssh(fleet, "sim1") as c, c.open_sftp() as sftp:
        sftp.putfo(io.BytesIO(payload), "upload.bin")
        back = io.BytesIO()
        sftp.getfo("upload.bin", back)
    assert back.getvalue() == payload
    assert (sim_hosts["sim1"].home / "upload.bin").read_bytes() == payload


def test_exec_runs_inside_the_host(sim_host: SimHost) -> None:
    r = sim_host.exec(["bash", "-c", "echo $HOME; command -v nvidia-smi"])
    assert r.returncode == 0
    assert r.stdout.split() == [sim_host.inside_home, f"{sim_host.inside_home}/sim-bin/nvidia-smi"]


# ------------------------------------------------------------------ host keys


def test_changed_host_key_is_rejected(fleet: Fleet, sim_hosts: dict[str, SimHost]) -> None:
    sim3 = sim_hosts["sim3"]
    sim3.rotate_host_key()
    try:
        with pytest.raises(paramiko.BadHostKeyException), ssh(fleet, "sim3"):
            pass
    finally:
        sim3.restore_host_key()
    with ssh(fleet, "sim3") as c:
        assert run(c, "true")[0] == 0


def test_unknown_host_is_rejected(fleet: Fleet, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with (
        pytest.raises(paramiko.SSHException, match="not found in known_hosts"),
        connect(fleet.ssh_config_path, empty, "sim1"),
    ):
        pass
    with (
        pytest.raises(paramiko.SSHException, match="not found in known_hosts"),
        connect(fleet.ssh_config_path, None, "sim2"),
    ):
        pass


def _eventually(check: Callable[[], bool], timeout: float = waiting.HANG_GUARD_S) -> None:
    """Poll instead of sleeping a fixed time: a loaded CI machine starts processes slower than this one."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.05)


# ------------------------------------------------------------------ reset / versions


def test_reset_restores_the_pristine_host(sim_host: SimHost) -> None:
    site = sim_host.site_packages()
    (site / "sitecustomize.py").write_text("raise SystemExit('patched')\n")
    (site / "specdeploy_plugin-0.1.dist-info").mkdir()
    sim_host.set_sim_config(fail="hang")
    (sim_host.home / "sglang-logs" / "server.log").write_text("x")
    (sim_host.home / ".specdeploy").mkdir()
    r = sim_host.exec("setsid sleep 777 </dev/null >/dev/null 2>&1 & echo started")
    assert r.returncode == 0
    deadline = waiting.deadline()
    while not any("sleep" in _cmdline(p) for p in sim_host.pids()):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    sim_host.reset()
    assert not (site / "sitecustomize.py").exists()
    assert not (site / "specdeploy_plugin-0.1.dist-info").exists()
    assert "fail" not in sim_host.sim_config()
    assert list((sim_host.home / "sglang-logs").iterdir()) == []
    assert not (sim_host.home / ".specdeploy").exists()
    assert not any("sleep" in _cmdline(p) for p in sim_host.pids())


def test_set_version(sim_host: SimHost) -> None:
    code = "import sglang.version as v; print(v.__version__)"
    sim_host.set_version("0.5.7")
    assert sim_host.exec([sim_host.python_in_host, "-c", code]).stdout.strip() == "0.5.7"
    sim_host.reset()
    assert sim_host.exec([sim_host.python_in_host, "-c", code]).stdout.strip() == sim_host.version


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    """Every process whose parent is ``pid`` (field 4 of /proc/N/stat)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


# ------------------------------------------------------------------ CLI up/down, loopback


def _machine_snapshot(directory: Path | None = None) -> dict[str, object]:
    """What a fleet could leave behind. Scoped to ``directory`` when given, because other fleets (other test
    sessions, a demo) may be coming and going on the same machine at the same time."""
    sshd = subprocess.run(["pgrep", "-x", "sshd"], capture_output=True, text=True).stdout.split()
    mounts = Path("/proc/self/mountinfo").read_text()
    if directory is not None:
        sshd = [p for p in sshd if str(directory) in _cmdline(int(p))]
        mounts = "\n".join(line for line in mounts.splitlines() if str(directory) in line)
    return {
        "netns": sorted(
            subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        ),
        "links": subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout,
        "sshd": sorted(sshd),
        "mounts": mounts,
    }


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.simhost", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


@needs_netns
def test_cli_up_down_leaves_nothing_behind(fleet: Fleet, tmp_path: Path) -> None:
    _netns_only(fleet)  # the session fleet has already created /run/netns, which `ip` never removes
    d = tmp_path / "cli-fleet"
    try:
        r = _cli("up", "--hosts", "2", "--dir", str(d), "--versions", "0.5.23,0.5.7", "--tp", "2")
        assert r.returncode == 0, r.stderr
        assert "sim1: up" in r.stdout and "sim2: up" in r.stdout and "host(s) up in" in r.stdout
        assert "sim1: {ssh_host: sim1, default: true, address: " in (d / "inventory.yaml").read_text()
        with connect(d / "ssh_config", d / "known_hosts", "sim2") as c:
            out = run(c, "~/ml-env/bin/python3 -c 'import sglang.version as v; print(v.__version__)'")[1]
            assert out.strip() == "0.5.7"
        # up on a live DIR brings the old fleet down first
        old = Fleet.load(d)
        r = _cli("up", "--hosts", "1", "--dir", str(d))
        assert r.returncode == 0, r.stderr
        assert not any(ns.startswith(f"sd{old.fleet_id}-")
                       for ns in _machine_snapshot()["netns"])  # type: ignore[union-attr]
        new_id = Fleet.load(d).fleet_id
        for _ in range(2):  # down twice is fine
            r = _cli("down", "--dir", str(d))
            assert r.returncode == 0, r.stderr
    finally:
        _cli("down", "--dir", str(d))  # even when an assertion above failed: never leak a fleet
    after = _machine_snapshot(d)
    assert after["sshd"] == [] and after["mounts"] == ""
    for fid in (old.fleet_id, new_id):
        assert not any(ns.startswith(f"sd{fid}-") for ns in after["netns"])  # type: ignore[union-attr]
        assert f"sd{fid}" not in str(after["links"])


def test_loopback_mode(tmp_path: Path) -> None:
    f = fleetmod.up(1, tmp_path / "lb", gpus=2, tp=1, mode="loopback")
    ours: set[int] = set()  # this fleet's sshd and its per-connection children (other tests may run sshds too)
    try:
        h = f.host("sim1")
        assert f.mode == "loopback"
        assert f"port: {h.sglang_port}" in f.inventory_path.read_text()
        with ssh(f, "sim1") as c:
            code, out = run(
                c,
                "echo $HOME; nvidia-smi -L | grep -c '^GPU '; setsid sleep 555 </dev/null >/dev/null 2>&1 &",
            )
        assert code == 0, out
        assert out.split() == [str(h.home), "2"]
        _eventually(lambda: any("sleep 555" in _cmdline(p) for p in h.pids()))  # detached, still the host's
        ours = {h.sshd_pid(), *_children(h.sshd_pid())}
    finally:
        f.down()
    assert ours and not any(os.path.exists(f"/proc/{pid}") and "sshd" in _cmdline(pid) for pid in ours)
    assert not any(str(tmp_path / "lb") in _cmdline(int(p)) for p in os.listdir("/proc") if p.isdigit())
    assert not any("sleep 555" in _cmdline(int(p)) for p in os.listdir("/proc") if p.isdigit())
