"""Ships the host-side agent (``fabfile.remote``) to the host and calls its verbs.

The agent travels as one zip built in memory with fixed timestamps, so its sha256 depends only on the code, and is
unpacked on the host into ``STATE/agent/<sha>/``, a directory named by that hash. Why a directory rather than
running the zip: Python cannot cache bytecode for modules imported from a zip, so every call recompiled the agent
(measured ~80 ms of CPU per call); from a directory the host's Python writes ``__pycache__`` once and reuses it.
A call normally costs one round trip; the upload happens only when the host's Python reports the file missing.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import shlex
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fabfile.errors import AgentCrashError, PreflightError, from_agent
from fabfile.transport import CommandResult, Transport

REMOTE_SRC = Path(__file__).resolve().parent / "remote"
# On the host the agent is the package ``specdeploy_agent``, not ``fabfile.remote``: a Python that has specdeploy
# itself installed (say, editable, on the GPU box) would otherwise import the installed copy instead of this one.
AGENT_PACKAGE = "specdeploy_agent"
_MAIN = f"import sys\nfrom {AGENT_PACKAGE}.__main__ import main\nsys.exit(main(sys.argv))\n"
_MISSING_MARK = "can't open file"


@functools.lru_cache(maxsize=1)
def agent_bundle() -> tuple[bytes, str]:
    """The agent archive (zip) and its sha256: what is shipped, and the name of the directory it unpacks into."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        entries = [("__main__.py", _MAIN.encode())]
        entries += [(f"{AGENT_PACKAGE}/{p.name}", p.read_bytes()) for p in sorted(REMOTE_SRC.glob("*.py"))]
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


class AgentClient:
    def __init__(self, transport: Transport, python: str, state_dir: str) -> None:
        self.transport = transport
        self.python = python
        self.state_dir = state_dir.rstrip("/")
        data, sha = agent_bundle()
        self.bundle = data
        self.dir = f"{self.state_dir}/agent/{sha[:16]}"
        self.path = self.dir  # run as `python -I DIR`: -I drops the script's directory from sys.path, not DIR's
        self.shipped = False

    def _command(self, verb: str, request: dict[str, Any]) -> str:
        payload = base64.b64encode(json.dumps(request, sort_keys=True).encode()).decode()
        # -I: ignore PYTHON* variables and the user site; the agent needs nothing but the standard library.
        return f"{shlex.quote(self.python)} -I {self.transport.shell_path(self.path)} {verb} {payload}"

    def ship(self) -> None:
        """Upload the zip and unpack it into its content-addressed directory (atomically: unpack, then rename)."""
        archive = f"{self.dir}.zip"
        self.transport.put(self.bundle, archive, 0o600)
        unpack = ("import os,signal,sys,tempfile,zipfile\n"
                  "signal.alarm(60)\n"  # bounded on the host too, like every remote command
                  "z,d=sys.argv[1],sys.argv[2]\n"
                  "if not os.path.isdir(d):\n"
                  " t=tempfile.mkdtemp(dir=os.path.dirname(d))\n"
                  " zipfile.ZipFile(z).extractall(t)\n"
                  " try: os.rename(t,d)\n"
                  " except OSError:\n"
                  "  import shutil; shutil.rmtree(t)\n"
                  "os.unlink(z)\n")
        cmd = (f"{shlex.quote(self.python)} -I -c {shlex.quote(unpack)} {self.transport.shell_path(archive)} "
               f"{self.transport.shell_path(self.dir)}")
        r = self.transport.run(cmd, 60)
        if r.exit_code != 0:
            raise AgentCrashError(f"could not unpack the agent into {self.dir}: {r.stderr.strip()[-300:]}",
                                  "check free space and permissions of the state_dir", host=self.transport.host_name)
        self.shipped = True

    def _execute(self, verb: str, request: dict[str, Any], timeout: float,
                 on_event: Callable[[dict[str, Any]], None] | None,
                 idle_timeout: float | None = None) -> tuple[CommandResult, list[dict[str, Any]]]:
        request = {"deadline_s": timeout, **request}
        events: list[dict[str, Any]] = []

        def on_line(line: str) -> None:
            line = line.strip()
            if not line:
                return
            try:
                event = json.loads(line)
            except ValueError:
                return  # not ours (a sitecustomize or the shell printed something): ignore
            if event.get("event") == "heartbeat" or (event.get("event") == "replay" and
                                                      (event.get("original") or {}).get("event") == "heartbeat"):
                return  # only proof of life (see idle_timeout); not an event anyone handles
            events.append(event)
            if on_event is not None and event.get("event") != "result":
                on_event(event)

        cmd = self._command(verb, request)
        result = self.transport.stream(cmd, on_line, timeout + 15, idle_timeout)
        if result.exit_code == 2 and _MISSING_MARK in result.stderr and not self.shipped:
            # "can't open file": this host has not got this version of the agent yet.
            self.ship()
            events.clear()
            result = self.transport.stream(cmd, on_line, timeout + 15, idle_timeout)
        return result, events

    def call(self, verb: str, request: dict[str, Any], timeout: float = 60.0,
             on_event: Callable[[dict[str, Any]], None] | None = None,
             idle_timeout: float | None = None) -> dict[str, Any]:
        """Run a verb; return its data or raise the tool's exception for the agent's error.

        ``idle_timeout`` (for verbs that send heartbeats): silence that long means the link is dead.
        """
        result, events = self._execute(verb, request, timeout, on_event, idle_timeout)
        final = next((e for e in reversed(events) if e.get("event") == "result"), None)
        host = self.transport.host_name
        if final is None:
            stderr = result.stderr.strip()
            if result.exit_code in (126, 127) or ("No such file" in stderr and self.python in stderr):
                raise PreflightError(f"the host's Python {self.python} cannot be run there "
                                     f"({stderr.splitlines()[-1] if stderr else f'exit {result.exit_code}'})",
                                     "fix `python` for this host in the inventory: the Python that runs SGLang",
                                     host=host)
            raise AgentCrashError(
                f"the host-side agent ended without an answer (exit {result.exit_code})",
                "this is a bug in specdeploy; the host's stderr is attached", host=host,
                stderr=stderr[-2000:])
        if not final.get("ok"):
            raise from_agent(final.get("error") or {}, host)
        data: dict[str, Any] = final.get("data") or {}
        return data
