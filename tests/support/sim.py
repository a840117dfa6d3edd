"""The SGLang simulator run locally without SSH (test equipment in tests/simhost/sim).

``Sim`` installs the simulator into a fresh venv under a test's tmp_path and starts it with subprocess in its own
process group; the ``sim`` fixture kills every group it started, even when the test fails. ``sim_module`` imports
one of the simulator's modules into the test process, to drive its cost model directly.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.simhost.sim.install import create_venv, install_simulator
from tests.support import waiting

SITE = Path(__file__).resolve().parents[1] / "simhost" / "sim" / "site"

PY_VER = f"python{sys.version_info.major}.{sys.version_info.minor}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == pid:
            out.append(int(d.name))
    return out


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            out.append(int(d.name))
    return out


def group_gone(pgid: int, timeout: float = waiting.HANG_GUARD_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.05)
    return False


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def http(url: str, data: Any = None, timeout: float = 10) -> tuple[int, bytes]:
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Sim:
    """One simulated host's venv plus the processes a test started in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.prefix = root / "venv"
        self.bin = root / "sim-bin"
        self.python = str(self.prefix / "bin" / "python3")
        self.model = root / "model"
        self.draft = root / "draft"
        self.model.mkdir()
        self.draft.mkdir()
        (self.model / "config.json").write_text(
            json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
                        "max_position_embeddings": 131072})
        )
        (self.draft / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log: Path | None = None
        self.port = 0
        create_venv(self.prefix)

    @property
    def site(self) -> Path:
        return self.prefix / "lib" / PY_VER / "site-packages"

    def install(self, version: str = "0.5.7", **config: Any) -> None:
        cfg = {"gpus": 2, "load_seconds": 0.1, "hostname": "simtest", **config}
        install_simulator(self.prefix, self.bin, version, self.python, cfg)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SPT_", "SGLANG_"))}
        env.update(extra)
        return env

    def launch(self, *args: str, tp: int = 2, spec: bool = False, env: dict[str, str] | None = None,
               extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        self.port = free_port()
        argv = [self.python, "-m", "sglang.launch_server", "--model-path", str(self.model),
                "--port", str(self.port), "--tp-size", str(tp)]
        if spec:
            argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(self.draft),
                     "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", "4"]
        argv += list(args)
        self.log = self.root / f"server-{len(self.procs)}.log"
        with open(self.log, "wb") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=env or self.env(**(extra_env or {})), start_new_session=True)
        self.procs.append(p)
        return p

    def spawn(self, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def text(self) -> str:
        assert self.log is not None
        return self.log.read_text(errors="replace")

    def wait_log(self, pattern: str, timeout: float = waiting.HANG_GUARD_S,
                 proc: subprocess.Popen[bytes] | None = None) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.text()
            if re.search(pattern, t):
                return t
            if proc is not None and proc.poll() is not None:
                t = self.text()
                if re.search(pattern, t):
                    return t
                raise AssertionError(f"process exited ({proc.returncode}) before {pattern!r}:\n{t}")
            time.sleep(0.05)
        raise AssertionError(f"timeout waiting for {pattern!r}:\n{self.text()}")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def schedulers(self, launcher: subprocess.Popen[bytes]) -> dict[str, int]:
        return {cmdline(c): c for c in children_of(launcher.pid) if cmdline(c).startswith("sglang::")}

    def smi(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / "nvidia-smi"), *args], capture_output=True, text=True, timeout=10)

    def kill_all(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    s = Sim(tmp_path)
    try:
        yield s
    finally:
        s.kill_all()



@contextlib.contextmanager
def sim_module(name: str, version: str = "0.5.16") -> Iterator[ModuleType]:
    """A module of the simulator imported from its site dir in this process, as ``version`` (the installer writes
    ``sglang/version.py``; here a stand-in module says it); removed from sys.modules afterwards."""
    stub = ModuleType("sglang.version")
    stub.__dict__["__version__"] = version
    sys.modules["sglang.version"] = stub
    sys.path.insert(0, str(SITE))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(SITE))
        for mod in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[mod]

