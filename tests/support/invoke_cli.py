"""Running the tool exactly as a user does (`inv ...` in a subprocess) against a simulated fleet, plus the small
helpers the end-to-end tests share: derived inventories, looking inside a host, counting SSH logins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from tests.simhost.fleet import Fleet, SimHost
from tests.support.cli import host_doc, run_cli

ROOT = Path(__file__).resolve().parents[2]
INV = [sys.executable, "-m", "invoke", "--search-root", str(ROOT)]


def run_inv(*args: str, inventory: Path | None = None, timeout: float = 120, env: dict[str, str] | None = None,
            cwd: Path | None = None, process: bool = False) -> subprocess.CompletedProcess[str]:
    """``inv ARGS`` as a user runs it: in this process (tests/support/cli.py, the same Program, stdout, stderr and
    exit code), or with ``process`` in a real subprocess, for what only a process shows (how it starts, exits on a
    closed pipe, or imports)."""
    # Off the main thread (tests that run commands side by side) only a process will do: the in-process run swaps
    # the process's stdout, environment and working folder, and its timer signal reaches the main thread alone.
    if not process and threading.current_thread() is threading.main_thread():
        ran = run_cli(*args, inventory=inventory, cwd=cwd, env=env, timeout=timeout)
        return subprocess.CompletedProcess(["inv", *args], ran.returncode, ran.stdout, ran.stderr)
    argv = [*INV, *args]
    if inventory is not None:
        argv += ["--inventory", str(inventory)]
    full_env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd or ROOT,
                          stdin=subprocess.DEVNULL)


def inv_json(*args: str, inventory: Path, timeout: float = 120, process: bool = False,
             cwd: Path | None = None) -> tuple[int, dict[str, Any], str]:
    r = run_inv(*args, "--json", inventory=inventory, timeout=timeout, process=process, cwd=cwd)
    try:
        doc = json.loads(r.stdout)
    except ValueError as e:
        raise AssertionError(f"not JSON (exit {r.returncode}):\nstdout={r.stdout}\nstderr={r.stderr}") from e
    return r.returncode, doc, r.stderr


def inv_host_json(*args: str, inventory: Path, timeout: float = 120,
                  process: bool = False) -> tuple[int, dict[str, Any], str]:
    """``inv_json`` for a command run on one host: its exit code, that host's document (:func:`host_doc` checks the
    shape around it) and stderr."""
    code, doc, err = inv_json(*args, inventory=inventory, timeout=timeout, process=process)
    return code, host_doc(doc), err


def derived_inventory(fleet: Fleet, tmp_path: Path, *, defaults: dict[str, Any] | None = None,
                      hosts: dict[str, dict[str, Any]] | None = None, name: str = "inventory.yaml") -> Path:
    """The fleet's inventory with overrides merged in (fast timeouts by default, so failing tests fail fast)."""
    data = yaml.safe_load(fleet.inventory_path.read_text())
    data["defaults"].setdefault("timeouts", {}).update({"ready": 60, "stall": 20, "stop_grace": 3, "gpu_clean": 10,
                                                        "connect_total": 10})
    for k, v in (defaults or {}).items():
        if isinstance(v, dict) and isinstance(data["defaults"].get(k), dict):
            data["defaults"][k].update(v)
        else:
            data["defaults"][k] = v
    for h, over in (hosts or {}).items():
        data["hosts"].setdefault(h, {}).update(over)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sglang_pids(host: SimHost) -> list[tuple[int, str]]:
    """(pid, cmdline) of every SGLang-looking process inside the host (titles and launchers)."""
    code = ("import os\n"
            "for p in os.listdir('/proc'):\n"
            "  if p.isdigit() and int(p) != os.getpid():\n"
            "    try: c=open(f'/proc/{p}/cmdline','rb').read().replace(b'\\0',b' ').decode()\n"
            "    except OSError: continue\n"
            "    c=c.strip().replace(chr(10),' ')\n"
            "    try: st=open(f'/proc/{p}/stat').read().rsplit(')',1)[1].split()[0]\n"
            "    except OSError: continue\n"
            "    if st != 'Z' and (c.startswith('sglang::') or 'sglang.launch_server' in c or 'simgpu_holder' in c):\n"
            "      print(p, c)\n")
    r = host.exec([host.python_in_host, "-c", code])
    out = []
    for line in r.stdout.splitlines():
        pid, _, cmd = line.partition(" ")
        out.append((int(pid), cmd))
    return out


def http_get(host: SimHost, path: str, port: int = 8000) -> tuple[int, str]:
    return http_in_host(host, path, port=port)


def http_in_host(host: SimHost, path: str, body: Any = None, port: int = 8000, timeout: float = 5) -> tuple[int, str]:
    """(status, body) of a GET, or with ``body`` a JSON POST, made from inside the host (0: no answer)."""
    data = "None" if body is None else f"json.dumps({body!r}).encode()"
    code = ("import sys,json,urllib.request,urllib.error\n"
            f"req=urllib.request.Request('http://127.0.0.1:{port}{path}', data={data}, "
            "headers={'Content-Type': 'application/json'})\n"
            f"try:\n r=urllib.request.urlopen(req,timeout={timeout}); print(r.status); print(r.read().decode())\n"
            "except urllib.error.HTTPError as e: print(e.code)\n"
            "except Exception as e: print(0); print(e)\n")
    r = host.exec([host.python_in_host, "-c", code])
    status, _, text = r.stdout.partition("\n")
    return int(status or 0), text


def ssh_logins(host: SimHost) -> int:
    """How many SSH logins the host's sshd has accepted so far (proof that a command did not connect)."""
    log = host.directory / "sshd.log"
    return log.read_text(errors="replace").count("Accepted publickey") if log.exists() else 0


def start_inv(*args: str, inventory: Path, cwd: Path | None = None) -> subprocess.Popen[str]:
    """`inv ...` in its own process group (so the test can kill the client and its ssh ProxyCommand together);
    ``cwd``: a folder of the test's own for what the command writes beside it (``runs/``)."""
    return subprocess.Popen([*INV, *args, "--inventory", str(inventory)], cwd=cwd or ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
