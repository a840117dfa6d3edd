"""`inv adopt --host`: read the hand-started SGLang server from /proc, and the adoption record that lets the next
deploy stop exactly that server (by pid and start time, not by guessing from process names)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, TypedDict, cast

from .. import procs
from ..common import AgentError, EventSink, atomic_write, expand

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import AdoptAnswer, AdoptRequest

# Variables a login session sets by itself: not something the operator chose for the server.
_SESSION_NOISE = {"_", "OLDPWD", "PWD", "SHLVL", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "TERM", "MAIL",
                  "SSH_AUTH_SOCK", "LS_COLORS", "LESSOPEN", "LESSCLOSE", "MOTD_SHOWN", "HOME", "USER", "LOGNAME",
                  "PATH", "SHELL", "LANG", "LC_ALL", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR",
                  "XDG_SESSION_ID", "XDG_SESSION_CLASS", "XDG_SESSION_TYPE", "XDG_DATA_DIRS", "HUSHLOGIN"}
RECORD = "adopted.json"


def _argv(pid: int) -> list[str]:
    try:
        with open(f"{procs.PROC}/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return procs.redact_argv([p.decode("utf-8", "replace") for p in raw.split(b"\0") if p])


def _stdout_file(pid: int) -> str | None:
    try:
        target = os.readlink(f"{procs.PROC}/{pid}/fd/1")
    except OSError:
        return None
    return target if target.startswith("/") and not target.startswith("/dev/") else None


def launchers() -> list[procs.ProcInfo]:
    """Top-level SGLang launchers of this PID namespace (a launcher whose parent is one is its child)."""
    table = procs.all_procs()
    found = [p for p in table if procs.same_pid_namespace(p.pid) and procs.is_sglang_launcher(p.cmdline)
             and "specdeploy" not in p.cmdline]
    pids = {p.pid for p in found}
    return [p for p in found if p.ppid not in pids]


class HandStarted(TypedDict):
    """A server started by hand, as the host shows it: its process, launch line, the variables it was given beyond
    the agent's own, its log and working directory."""

    pid: int
    start_ticks: int
    argv: list[str]
    env: dict[str, str]
    env_readable: bool
    log_path: str | None
    cwd: str | None


class Adopted(TypedDict):
    """The adoption record (``STATE/adopted.json``): which process a deploy stops as the adopted server."""

    pid: int
    start_ticks: int | None
    argv: list[str]


def read_server(state_dir: str, port: int | None = None) -> HandStarted:
    servers = launchers()
    if port is not None and len(servers) > 1:
        servers = [p for p in servers if f"--port {port}" in p.cmdline or f"--port={port}" in p.cmdline] or servers
    if not servers:
        raise AgentError("no_server", "no SGLang server runs on this host (no `python -m sglang.launch_server` "
                         "process)", "start it first, or adopt its launch line with --command '...'")
    if len(servers) > 1:
        raise AgentError("no_server", f"{len(servers)} SGLang servers run on this host (pids "
                         f"{', '.join(str(p.pid) for p in servers)}); adopt cannot tell which one",
                         "adopt its launch line with --command '...'")
    p = servers[0]
    env = procs.read_environ(p.pid)
    ours = dict(os.environ)
    chosen = {k: v for k, v in (env or {}).items() if k not in _SESSION_NOISE and ours.get(k) != v}
    argv = _argv(p.pid)
    try:
        cwd: str | None = os.readlink(f"{procs.PROC}/{p.pid}/cwd")
    except OSError:
        cwd = None
    return {"pid": p.pid, "start_ticks": p.start_ticks, "argv": argv, "env": chosen,
            "env_readable": env is not None and bool(env), "log_path": _stdout_file(p.pid), "cwd": cwd}


def write_record(state_dir: str, server: HandStarted) -> str:
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    path = os.path.join(state_dir, RECORD)
    data: Adopted = {"pid": server["pid"], "start_ticks": server["start_ticks"], "argv": server["argv"]}
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode(), 0o600)
    return path


def adopted(state_dir: str) -> Adopted | None:
    """The adopted server, while it still runs (same pid and start time); else None."""
    try:
        with open(os.path.join(state_dir, RECORD), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int):
        return None
    # Written by ``write_record`` alone: its shape is ours.
    return cast("Adopted", data) if procs.alive(int(data["pid"]), data.get("start_ticks")) else None


def adopt(req: AdoptRequest, sink: EventSink) -> AdoptAnswer:
    """The ``adopt`` verb: read the hand-started server (argv, the variables it was given, its log) and record it as
    adopted, so the next deploy stops exactly it."""
    from .. import facts

    state_dir = expand(req["state_dir"])
    s = read_server(state_dir, req.get("port"))
    return {"pid": s["pid"], "start_ticks": s["start_ticks"], "argv": s["argv"], "env": s["env"],
            "env_readable": s["env_readable"], "log_path": s["log_path"], "cwd": s["cwd"],
            "record": write_record(state_dir, s), "sglang": facts.sglang_info().get("version")}
