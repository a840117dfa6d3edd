"""Bring a fleet of simulated GPU hosts up and down (test equipment, not real GPUs).

Each host runs a real OpenSSH ``sshd``. In ``netns`` mode (root) every host has its own network, PID,
mount, UTS and IPC namespaces: PID 1 is ``hostinit.py``, HOME is ``DIR/hosts/simN/home`` bind-mounted at
``/root``, ``/tmp`` is a private tmpfs, and the client reaches sshd only through
``ProxyCommand ip netns exec NS socat - TCP:127.0.0.1:22,nodelay``. In ``loopback`` mode (not root, or
asked for) each sshd listens on 127.0.0.1 with a free high port and the host's paths are its real ones.

Layout of DIR (``fleet.json`` is what :func:`down` needs)::

    DIR/fleet.json  inventory.yaml  ssh_config  known_hosts  id_ed25519[.pub]  template-venv/
    DIR/hosts/simN/ home/  sshd_config  ssh_host_ed25519_key[.pub]  sshd.log  sshd.pid  init.json
                    init.log  ready.json
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.simhost.keys import key_type_and_blob, keygen
from tests.support import waiting

DEFAULT_VERSION = "0.5.23"
SSHD = "/usr/sbin/sshd"
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOSTINIT = Path(__file__).with_name("hostinit.py")
OUR_FILES = (
    "inventory.yaml",
    "ssh_config",
    "known_hosts",
    "id_ed25519",
    "id_ed25519.pub",
    "template-venv",
    "hosts",
)

# In-process children (unshare / init launchers), kept referenced so they are reaped by down().
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_CHILDREN_LOCK = threading.Lock()


class FleetError(RuntimeError):
    """The fleet could not be brought up or down."""


def _sim_install() -> ModuleType:
    return importlib.import_module("tests.simhost.sim.install")


# ---------------------------------------------------------------- /proc helpers


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _starttime(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def _alive(pid: int, starttime: int | None = None) -> bool:
    """Running and not a zombie (and, when given, started at ``starttime``: not a reused pid)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return starttime is None or int(fields[19]) == starttime


def _all_pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def _parents() -> dict[int, int]:
    out = {}
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields:
            out[pid] = int(fields[1])
    return out


def _descendants(root: int) -> list[int]:
    parents = _parents()
    out: list[int] = []
    frontier = [root]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        frontier += kids
    return out


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        _reap_children()
        left = [p for p in left if _alive(p)]
        if left:
            time.sleep(0.01)
    return left


def _reap_children() -> None:
    with _CHILDREN_LOCK:
        for pid, proc in list(_CHILDREN.items()):
            if proc.poll() is not None:
                del _CHILDREN[pid]


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True, stdin=subprocess.DEVNULL)


def _netns_list() -> list[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


# ---------------------------------------------------------------- hosts


@dataclass
class SimHost:
    """One simulated GPU host. Paths are real paths on this machine."""

    name: str
    index: int
    mode: str
    directory: Path  # DIR/hosts/simN
    netns: str | None
    version: str
    gpus: int
    ssh_port: int
    sglang_port: int
    address: str = ""  # how the other hosts reach this one (netns: 10.77.0.N on the fleet's bridge)
    init_pid: int = 0
    init_start: int = 0
    launcher_pid: int = 0
    pristine_home: list[str] = field(default_factory=list)
    pristine_site: list[str] = field(default_factory=list)

    # ---- paths
    @property
    def home(self) -> Path:
        return self.directory / "home"

    @property
    def venv(self) -> Path:
        return self.home / "ml-env"

    @property
    def sim_state(self) -> Path:
        return self.venv / "sim-state"

    @property
    def sim_bin(self) -> Path:
        return self.home / "sim-bin"

    @property
    def inside_home(self) -> str:
        """What the host itself calls its HOME."""
        return "/root" if self.mode == "netns" else str(self.home)

    @property
    def python_in_host(self) -> str:
        return f"{self.inside_home}/ml-env/bin/python3"

    @property
    def host_key(self) -> Path:
        return self.directory / "ssh_host_ed25519_key"

    def site_packages(self) -> Path:
        found = sorted(self.venv.glob("lib/python*/site-packages"))
        if not found:
            raise FleetError(f"{self.name}: no site-packages under {self.venv}")
        return found[0]

    def default_sim_config(self) -> dict[str, Any]:
        return {"hostname": self.name, "gpus": self.gpus}

    def host_env(self) -> dict[str, str]:
        home = self.inside_home
        user = "root" if self.mode == "netns" else _username()
        return {
            "HOME": home,
            "PATH": f"{home}/sim-bin:{STD_PATH}",
            "LANG": "C.UTF-8",
            "USER": user,
            "LOGNAME": user,
        }

    # ---- looking inside
    def exec(self, argv: list[str] | str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a command inside the host without SSH (netns: nsenter into init's namespaces)."""
        cmd = ["bash", "-c", argv] if isinstance(argv, str) else list(argv)
        if self.mode == "netns":
            full = ["nsenter", "-t", str(self.init_pid), "-m", "-u", "-i", "-n", "-p", "-W", "/root", *cmd]
            cwd = None
        else:
            full, cwd = cmd, str(self.home)
        return subprocess.run(
            full,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.host_env(),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )

    def read_bytes(self, path: str, timeout: float = 30) -> bytes:
        """A file inside the host, byte for byte (``exec`` decodes text, and its universal newlines turn a ``\r``
        into ``\n``)."""
        cmd = ["cat", "--", path]
        if self.mode == "netns":
            full = ["nsenter", "-t", str(self.init_pid), "-m", "-u", "-i", "-n", "-p", "-W", "/root", *cmd]
            cwd = None
        else:
            full, cwd = cmd, str(self.home)
        return subprocess.run(full, capture_output=True, timeout=timeout, env=self.host_env(), cwd=cwd,
                              stdin=subprocess.DEVNULL, check=True).stdout

    def pids(self) -> list[int]:
        """Machine pids of every process of the host (init included)."""
        if self.mode == "netns":
            try:
                ns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
            except OSError:
                return []
            out = []
            for pid in _all_pids():
                try:
                    if os.readlink(f"/proc/{pid}/ns/pid") == ns:
                        out.append(pid)
                except OSError:
                    continue
            return out
        if not _alive(self.init_pid, self.init_start):
            return []
        return [self.init_pid, *_descendants(self.init_pid)]

    def sshd_pid(self) -> int:
        for pid in self.pids():
            if _stat_fields(pid) and int(_stat_fields(pid)[1]) == self.init_pid and _exe(pid) == SSHD:  # type: ignore[index]
                return pid
        raise FleetError(f"{self.name}: sshd is not running")

    # ---- changing the host
    def set_sim_config(self, **values: Any) -> None:
        path = self.sim_state / "config.json"
        cfg = json.loads(path.read_text()) if path.exists() else {}
        cfg.update(values)
        tmp = path.with_name("config.json.tmp")
        tmp.write_text(json.dumps(cfg, indent=2) + "\n")
        os.replace(tmp, path)

    def sim_config(self) -> dict[str, Any]:
        return dict(json.loads((self.sim_state / "config.json").read_text()))

    def _install(self, version: str, config: dict[str, Any]) -> None:
        site = self.site_packages()
        for p in [site / "sglang", *site.glob("sglang-*.dist-info")]:
            shutil.rmtree(p, ignore_errors=True)
        _sim_install().install_simulator(self.venv, self.sim_bin, version, self.python_in_host, config)
        (self.sim_state / "gpu-procs").mkdir(parents=True, exist_ok=True)

    def set_version(self, version: str) -> None:
        """Reinstall the simulator at ``version`` (the sim config is kept)."""
        cfg = self.sim_config() if (self.sim_state / "config.json").exists() else self.default_sim_config()
        self._install(version, cfg)

    def kill_all(self) -> None:
        """SIGKILL every process of the host except init and sshd (listener and session handlers)."""
        victims = [p for p in self.pids() if p != self.init_pid and _exe(p) != SSHD]
        for pid in victims:
            _kill(pid, signal.SIGKILL)
        left = _wait_gone(victims, 5.0)
        if left:
            raise FleetError(f"{self.name}: processes survived SIGKILL: {left}")

    def reset(self) -> None:
        """Back to the state right after ``up``: processes, venv, sim config, logs, state, HOME and /tmp."""
        self.kill_all()
        self.restore_host_key()
        self.set_sftp(True)
        site = self.site_packages()
        for entry in site.iterdir():
            if entry.name not in self.pristine_site:
                _remove(entry)
        shutil.rmtree(self.sim_state, ignore_errors=True)
        self._install(self.version, self.default_sim_config())
        for entry in self.home.iterdir():
            if entry.name not in self.pristine_home:
                _remove(entry)
        logs = self.home / "sglang-logs"
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir()
        if self.mode == "netns":
            # Empty the host's private /tmp, but never cross into what init bound back in there
            # (e.g. DIR itself when DIR lies under /tmp).
            keep = json.loads((self.directory / "init.json").read_text())["keep"]
            shielded = {Path(k).parts[2] for k in map(os.path.realpath, keep) if k.startswith("/tmp/")}
            tmp = Path(f"/proc/{self.init_pid}/root/tmp")
            for entry in tmp.iterdir():
                if entry.name not in shielded:
                    _remove(entry)

    def rotate_host_key(self) -> None:
        """New host key; sshd reloaded; known_hosts NOT updated (for the changed-key test).

        ``reset()`` puts the original key back.
        """
        self._reload_sshd(key_type_and_blob(keygen(self.host_key, f"{self.name}-host")))

    def restore_host_key(self) -> None:
        """Put back the host key known_hosts names (no-op when it was never rotated)."""
        orig = self.directory / "ssh_host_ed25519_key.orig"
        if self.host_key.read_bytes() == orig.read_bytes():
            return
        for suffix in ("", ".pub"):
            shutil.copy2(self.directory / f"ssh_host_ed25519_key.orig{suffix}", str(self.host_key) + suffix)
        pub = self.directory / "ssh_host_ed25519_key.pub"
        self._reload_sshd(key_type_and_blob(pub.read_text()))

    def set_sftp(self, enabled: bool) -> None:
        """Turn sshd's sftp subsystem on or off (some real hosts disable it); sshd is reloaded when it changes."""
        cfg = self.directory / "sshd_config"
        lines = cfg.read_text().splitlines()
        kept = [line for line in lines if not line.startswith("Subsystem sftp")]
        wanted = [*kept, "Subsystem sftp internal-sftp"] if enabled else kept
        if wanted == lines:
            return
        cfg.write_text("\n".join(wanted) + "\n")
        self._reload_sshd(key_type_and_blob((self.directory / "ssh_host_ed25519_key.pub").read_text()))

    def _reload_sshd(self, expect: str) -> None:
        _kill(self.sshd_pid(), signal.SIGHUP)
        deadline = waiting.deadline()
        while time.monotonic() < deadline:
            if expect == self.scan_host_key():
                return
            time.sleep(0.02)
        raise FleetError(f"{self.name}: sshd did not come back with the expected host key")

    def scan_host_key(self) -> str:
        """The ed25519 host key sshd serves now (``ssh-ed25519 AAAA...``), or '' if it does not answer."""
        argv = ["ssh-keyscan", "-T", "2", "-t", "ed25519", "-p", str(self.ssh_port), "127.0.0.1"]
        out = self.exec(argv, timeout=10).stdout
        for line in out.splitlines():
            if line and not line.startswith("#"):
                return key_type_and_blob(line.split(None, 1)[1])
        return ""

    # ---- state file
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["directory"] = str(self.directory)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SimHost:
        d = dict(d)
        d["directory"] = Path(d["directory"])
        return cls(**d)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _username() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


# ---------------------------------------------------------------- fleet


@dataclass
class Fleet:
    directory: Path
    mode: str
    fleet_id: str
    hosts: dict[str, SimHost]
    tp: int = 8
    mode_reason: str = ""
    keeper_pid: int = 0  # CLI `up`: the detached process that is parent of the launchers and reaps them
    keeper_start: int = 0

    @property
    def inventory_path(self) -> Path:
        return self.directory / "inventory.yaml"

    @property
    def ssh_config_path(self) -> Path:
        return self.directory / "ssh_config"

    @property
    def known_hosts_path(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def client_key_path(self) -> Path:
        return self.directory / "id_ed25519"

    def host(self, name: str) -> SimHost:
        return self.hosts[name]

    def down(self) -> None:
        down(self.directory)

    def save(self) -> None:
        data = {
            "fleet_id": self.fleet_id,
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "directory": str(self.directory),
            "tp": self.tp,
            "keeper_pid": self.keeper_pid,
            "keeper_start": self.keeper_start,
            "hosts": {n: h.to_json() for n, h in self.hosts.items()},
        }
        path = self.directory / "fleet.json"
        tmp = path.with_name("fleet.json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, directory: Path) -> Fleet:
        directory = Path(directory).resolve()
        data = json.loads((directory / "fleet.json").read_text())
        hosts = {n: SimHost.from_json(h) for n, h in data["hosts"].items()}
        return cls(
            directory,
            data["mode"],
            data["fleet_id"],
            hosts,
            data.get("tp", 8),
            data.get("mode_reason", ""),
            data.get("keeper_pid", 0),
            data.get("keeper_start", 0),
        )


def _choose_mode(mode: str) -> tuple[str, str]:
    if mode not in ("auto", "netns", "loopback"):
        raise FleetError(f"unknown mode {mode!r} (auto, netns or loopback)")
    if mode == "loopback":
        return "loopback", "asked for with --mode loopback"
    missing = [t for t in ("ip", "unshare", "nsenter", "socat") if shutil.which(t) is None]
    why = ""
    if os.geteuid() != 0:
        why = "not running as root (network namespaces need root)"
    elif missing:
        why = f"missing tools: {', '.join(missing)}"
    else:
        probe = f"sdprobe{os.getpid()}"
        r = _run(["ip", "netns", "add", probe], check=False)
        if r.returncode != 0:
            why = f"cannot create a network namespace: {r.stderr.strip()}"
        else:
            _run(["ip", "netns", "del", probe], check=False)
    if not why:
        return "netns", ""
    if mode == "netns":
        raise FleetError(f"netns mode unavailable: {why}")
    return "loopback", why


BASHRC = """\
# ~/.bashrc of a simulated GPU host (test equipment). Deliberately empty of start-up work.
export SIMHOST={name}
"""
PROFILE = """\
# ~/.profile of a simulated GPU host (test equipment).
[ -f "$HOME/.bashrc" ] && . "$HOME/.bashrc"
"""


def _prepare_host(h: SimHost, client_pub: str) -> str:
    """Write HOME, keys and sshd config; returns the host public key (``ssh-ed25519 AAAA``)."""
    h.directory.mkdir(parents=True)
    home = h.home
    for d in ("models/kimi-k2.5-int4", "eagle3/output_100k_sglang/4", "sglang-logs", ".ssh", "sim-bin"):
        (home / d).mkdir(parents=True, exist_ok=True)
    (home / ".bashrc").write_text(BASHRC.format(name=h.name))
    (home / ".profile").write_text(PROFILE)
    (home / "models/kimi-k2.5-int4/config.json").write_text(
        json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "simulated": True})
        + "\n"
    )
    (home / "eagle3/output_100k_sglang/4/config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "simulated": True})
        + "\n"
    )
    (home / ".ssh/authorized_keys").write_text(client_pub + "\n")
    os.chmod(home / ".ssh/authorized_keys", 0o600)
    (home / ".ssh/environment").write_text(f"PATH={h.inside_home}/sim-bin:{STD_PATH}\n")
    host_pub = key_type_and_blob(keygen(h.host_key, f"{h.name}-host"))
    for suffix in ("", ".pub"):
        shutil.copy2(str(h.host_key) + suffix, h.directory / f"ssh_host_ed25519_key.orig{suffix}")

    lines = [
        "# sshd of a simulated GPU host (test equipment)",
        "ListenAddress 127.0.0.1",
        f"Port {h.ssh_port}",
        f"HostKey {h.host_key}",
        f"PidFile {h.directory / 'sshd.pid'}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "MaxStartups 100:30:200",
        "AcceptEnv LANG LC_*",
        "Subsystem sftp internal-sftp",
    ]
    if h.mode == "netns":
        lines += ["AuthorizedKeysFile .ssh/authorized_keys", "PermitUserEnvironment yes"]
    else:
        # No namespaces: the login's real HOME is the user's own; point HOME and PATH at the host's.
        lines += [
            f"AuthorizedKeysFile {home / '.ssh/authorized_keys'}",
            "PermitUserEnvironment no",
            f"SetEnv HOME={home} PATH={h.sim_bin}:{STD_PATH} SIMHOST={h.name}",
        ]
    (h.directory / "sshd_config").write_text("\n".join(lines) + "\n")
    keep = [str(h.directory), sys.base_prefix, sys.prefix, str(HOSTINIT.parent)]
    init = {
        "mode": h.mode,
        "hostname": h.name,
        "home": str(home),
        "keep": keep,
        "port": h.ssh_port,
        "sshd_config": str(h.directory / "sshd_config"),
        "sshd_log": str(h.directory / "sshd.log"),
        "ready_file": str(h.directory / "ready.json"),
    }
    (h.directory / "init.json").write_text(json.dumps(init, indent=2) + "\n")
    return host_pub


def _install_venv(h: SimHost, template: Path) -> None:
    subprocess.run(["cp", "-a", str(template), str(h.venv)], check=True)
    h._install(h.version, h.default_sim_config())
    h.pristine_site = sorted(p.name for p in h.site_packages().iterdir())


SUBNET = "10.77.0"


def _switch_netns(fleet_id: str) -> str:
    return f"sd{fleet_id}-switch"


def _make_switch(fleet_id: str) -> None:
    """The fleet's private LAN: a bridge inside its own network namespace (nothing in this machine's namespace).

    Each host joins with a veth pair (``eth0`` in the host, ``vN`` on the bridge). Deleting the switch namespace
    and the hosts' namespaces (``down``) deletes the bridge and every veth with them.
    """
    sw = _switch_netns(fleet_id)
    _run(["ip", "netns", "add", sw])
    _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
    _run(["ip", "-n", sw, "link", "set", "br0", "up"])


def _join_switch(h: SimHost, fleet_id: str) -> None:
    assert h.netns
    sw = _switch_netns(fleet_id)
    port = f"v{h.index}"
    _run(["ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.netns])
    _run(["ip", "-n", sw, "link", "set", port, "master", "br0", "up"])
    _run(["ip", "-n", h.netns, "addr", "add", f"{h.address}/24", "dev", "eth0"])
    _run(["ip", "-n", h.netns, "link", "set", "eth0", "up"])


def _start_host(h: SimHost, fleet_id: str = "") -> None:
    init_argv = [sys.executable, str(HOSTINIT), str(h.directory / "init.json")]
    log = open(h.directory / "init.log", "wb")  # noqa: SIM115 (handed to the child)
    if h.mode == "netns":
        assert h.netns
        _run(["ip", "netns", "add", h.netns])
        _run(["ip", "-n", h.netns, "link", "set", "lo", "up"])
        if fleet_id:
            _join_switch(h, fleet_id)
        argv = [
            "ip", "netns", "exec", h.netns,
            "unshare", "--mount", "--pid", "--uts", "--ipc", "--fork", "--mount-proc",
            "--propagation", "private", "--kill-child=SIGKILL", *init_argv,
        ]  # fmt: skip
    else:
        argv = init_argv
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    with _CHILDREN_LOCK:
        _CHILDREN[proc.pid] = proc
    h.launcher_pid = proc.pid


def _wait_ready(h: SimHost, timeout: float = 15.0) -> None:
    ready = h.directory / "ready.json"
    deadline = time.monotonic() + timeout
    proc = _CHILDREN.get(h.launcher_pid)
    while not ready.exists():
        if proc is not None and proc.poll() is not None:
            raise FleetError(f"{h.name}: init exited early; see {h.directory / 'init.log'}")
        if time.monotonic() > deadline:
            raise FleetError(f"{h.name}: sshd not ready after {timeout:.0f}s; see {h.directory}")
        time.sleep(0.005)
    if not json.loads(ready.read_text())["ok"]:
        raise FleetError(f"{h.name}: sshd did not answer; see {h.directory / 'sshd.log'}")
    if h.mode == "netns":
        kids = [c for c, p in _parents().items() if p == h.launcher_pid]
        if len(kids) != 1:
            raise FleetError(f"{h.name}: cannot find init under pid {h.launcher_pid}")
        h.init_pid = kids[0]
    else:
        h.init_pid = h.launcher_pid
    h.init_start = _starttime(h.init_pid) or 0


def _write_client_files(fleet: Fleet, host_keys: dict[str, str], tp: int) -> None:
    cfg = ["# Simulated GPU fleet written by `python -m tests.simhost up` (test equipment, not real GPUs)."]
    known = []
    user = "root" if fleet.mode == "netns" else _username()
    for h in fleet.hosts.values():
        cfg += [
            f"Host {h.name}",
            f"  HostName {h.name if fleet.mode == 'netns' else '127.0.0.1'}",
            f"  User {user}",
            f"  IdentityFile {fleet.client_key_path}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {fleet.known_hosts_path}",
            "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes",
        ]
        if fleet.mode == "netns":
            cfg.append(f"  ProxyCommand ip netns exec {h.netns} socat - TCP:127.0.0.1:22,nodelay")
            known.append(f"{h.name} {host_keys[h.name]}")
        else:
            cfg.append(f"  Port {h.ssh_port}")
            known.append(f"[127.0.0.1]:{h.ssh_port} {host_keys[h.name]}")
        cfg.append("")
    fleet.ssh_config_path.write_text("\n".join(cfg))
    fleet.known_hosts_path.write_text("\n".join(known) + "\n")

    first = next(iter(fleet.hosts.values()))
    home = first.inside_home if fleet.mode == "netns" else "{home}"
    inv = [
        "# Simulated GPU fleet written by `python -m tests.simhost up` (test equipment, not real GPUs).",
        f"# mode: {fleet.mode}" + (f" ({fleet.mode_reason})" if fleet.mode_reason else ""),
        f"ssh_config: {json.dumps(str(fleet.ssh_config_path))}",
        f"known_hosts: {json.dumps(str(fleet.known_hosts_path))}",
        "defaults:",
    ]
    fields = {
        "python": f"{home}/ml-env/bin/python3",
        "model": f"{home}/models/kimi-k2.5-int4",
        "draft_model": f"{home}/eagle3/output_100k_sglang/4",
        "log_dir": f"{home}/sglang-logs",
        "state_dir": f"{home}/.specdeploy",
    }
    if fleet.mode == "netns":
        inv += [f"  {k}: {v}" for k, v in fields.items()]
        inv.append("  port: 8000")
    inv += [f"  gpus: {first.gpus}", f"  tp: {tp}", "  nccl_preset: pcie", "hosts:"]
    for h in fleet.hosts.values():
        entry = [f"ssh_host: {h.name}"]
        if h.index == 1:
            entry.append("default: true")
        if fleet.mode != "netns":
            entry += [f"{k}: {json.dumps(v.format(home=h.home))}" for k, v in fields.items()]
            entry.append(f"port: {h.sglang_port}")
        if h.gpus != first.gpus:
            entry.append(f"gpus: {h.gpus}")
        entry.append(f"address: {h.address}")  # how the other hosts reach it (cluster rendezvous, router)
        inv.append(f"  {h.name}: {{{', '.join(entry)}}}")
    fleet.inventory_path.write_text("\n".join(inv) + "\n")


def _clean_dir(directory: Path) -> None:
    for name in (*OUR_FILES, "fleet.json", "fleet.json.tmp"):
        p = directory / name
        if p.exists() or p.is_symlink():
            _remove(p)


# The seed host (shared/seeds/003_...): a Proxmox LXC container, Ubuntu 24.04, 8 RTX PRO 6000 Blackwell GPUs on PCIe
# (96 GB each, 97887 MiB as nvidia-smi reports it), no NVLink. `./dev demo` simulates this machine.
SEED_MACHINE: dict[str, Any] = {"gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "gpu_memory_mib": 97887,
                                "interconnect": "pcie", "container": True}


def up(
    n: int,
    directory: Path,
    versions: list[str] | None = None,
    gpus: int = 8,
    tp: int = 8,
    mode: str = "auto",
    echo: Callable[[str], None] | None = None,
    keeper: bool = False,
) -> Fleet:
    """Bring up ``n`` simulated hosts under ``directory`` (a live fleet there is brought down first)."""
    say = echo or (lambda _msg: None)
    if n < 1:
        raise FleetError("need at least one host")
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "fleet.json").exists():
        say(f"a fleet is already recorded in {directory}; bringing it down first")
        down(directory)
    _clean_dir(directory)
    chosen, why = _choose_mode(mode)
    if chosen == "loopback":
        say(
            "LOOPBACK MODE: weaker isolation (hosts share this machine's processes, files and network); "
            f"why: {why}"
        )
    if chosen == "netns":
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    vers = list(versions or [DEFAULT_VERSION])
    fleet_id = secrets.token_hex(3)
    hosts: dict[str, SimHost] = {}
    for i in range(1, n + 1):
        name = f"sim{i}"
        hosts[name] = SimHost(
            name=name,
            index=i,
            mode=chosen,
            directory=directory / "hosts" / name,
            netns=f"sd{fleet_id}-{name}" if chosen == "netns" else None,
            version=vers[min(i, len(vers)) - 1],
            gpus=gpus,
            ssh_port=22 if chosen == "netns" else _free_port(),
            sglang_port=8000 if chosen == "netns" else 18000 + i,
            address=f"{SUBNET}.{i}" if chosen == "netns" else "127.0.0.1",
        )
    fleet = Fleet(directory, chosen, fleet_id, hosts, tp, why)
    if keeper:
        fleet.keeper_pid, fleet.keeper_start = os.getpid(), _starttime(os.getpid()) or 0
    fleet.save()
    started = time.monotonic()
    try:
        client_pub = keygen(fleet.client_key_path, f"simhost-client-{fleet_id}")
        template = directory / "template-venv"
        with ThreadPoolExecutor(max_workers=max(2, n)) as pool:
            venv_job = pool.submit(_sim_install().create_venv, template)
            key_jobs = {h.name: pool.submit(_prepare_host, h, client_pub) for h in hosts.values()}
            host_keys = {name: job.result() for name, job in key_jobs.items()}
            venv_job.result()
            list(pool.map(lambda h: _install_venv(h, template), hosts.values()))
            if chosen == "netns":
                if n > 250:
                    raise FleetError("at most 250 hosts fit the fleet's /24")
                _make_switch(fleet_id)
            for h in hosts.values():
                _start_host(h, fleet_id if chosen == "netns" else "")
            fleet.save()
            list(pool.map(_wait_ready, hosts.values()))
        for h in hosts.values():
            h.pristine_home = sorted(p.name for p in h.home.iterdir())
            say(
                f"{h.name}: up ({chosen}{', netns ' + h.netns if h.netns else ', port ' + str(h.ssh_port)}, "
                f"sglang {h.version}, {h.gpus} GPUs, init pid {h.init_pid})"
            )
        _write_client_files(fleet, host_keys, tp)
        fleet.save()
    except BaseException:
        fleet.save()
        down(directory)
        raise
    say(f"{n} host(s) up in {time.monotonic() - started:.2f}s; inventory: {fleet.inventory_path}")
    return fleet


def down(directory: Path) -> None:
    """Stop every process, remove every namespace of the fleet in ``directory``. Safe to repeat."""
    directory = Path(directory).resolve()
    if not (directory / "fleet.json").exists():
        return
    fleet = Fleet.load(directory)
    inits = [h for h in fleet.hosts.values() if h.init_pid and _alive(h.init_pid, h.init_start)]
    for h in inits:
        _kill(h.init_pid, signal.SIGTERM)
    left = _wait_gone([h.init_pid for h in inits], 6.0)
    for pid in left:
        _kill(pid, signal.SIGKILL)
    _wait_gone(left, 3.0)
    launchers = [h.launcher_pid for h in fleet.hosts.values() if h.launcher_pid]
    for pid in launchers:
        proc = _CHILDREN.get(pid)
        if proc is not None:
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            _CHILDREN.pop(pid, None)
    keeper_live = fleet.keeper_pid and _alive(fleet.keeper_pid, fleet.keeper_start)
    if keeper_live and fleet.keeper_pid != os.getpid() and _wait_gone([fleet.keeper_pid], 3.0):
        _kill(fleet.keeper_pid, signal.SIGKILL)
    if fleet.mode == "netns":
        prefix = f"sd{fleet.fleet_id}-"
        for ns in _netns_list():
            if ns.startswith(prefix):
                _run(["ip", "netns", "del", ns], check=False)
    (directory / "fleet.json").unlink(missing_ok=True)
