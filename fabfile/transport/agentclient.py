"""Ships the host-side agent (``fabfile.remote``) to the host and calls its verbs.

The agent travels as one zip built in memory with fixed timestamps, and is unpacked on the host into
``STATE/agent/<sha16>/``, a directory named by the hash of its manifest (every file's sha256), so the name depends
only on the code. Why a directory rather than running the zip: Python cannot cache bytecode for modules imported
from a zip, so every call recompiled the agent (measured ~80 ms of CPU per call); from a directory the host's Python
writes ``__pycache__`` once and reuses it.
A call normally costs one round trip; the upload happens only when the bootstrap reports the agent missing. Every
call goes through the bootstrap (``fabfile/remote/boot.py``), which refuses to run code from a directory another
account could change and checks every unpacked file against the manifest shipped with it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import shlex
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fabfile.errors import AgentCrashError, PreflightError, from_agent
from fabfile.remote.boot import NOT_INSTALLED
from fabfile.transport.base import ProcessResult, Transport

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.remote.protocol import AgentEvent

REMOTE_SRC = Path(__file__).resolve().parent.parent / "remote"
# On the host the agent is the package ``specdeploy_agent``, not ``fabfile.remote``: a Python that has specdeploy
# itself installed (say, editable, on the GPU box) would otherwise import the installed copy instead of this one.
AGENT_PACKAGE = "specdeploy_agent"
_MAIN = f"import sys\nfrom {AGENT_PACKAGE}.__main__ import main\nsys.exit(main(sys.argv))\n"
# The bootstrap (fabfile/remote/boot.py) travels in every command line: it checks the directories and the files
# it runs before running them, and installs the agent safely. Comment-only lines are left out to keep it short.
BOOT_SOURCE = "\n".join(line for line in (REMOTE_SRC / "boot.py").read_text().splitlines()
                         if not line.lstrip().startswith("#")) + "\n"


class Bundle:
    """The agent's files and their manifest; the zip that ships them is built only when a host needs an install.

    The install directory is named by the manifest's hash (first 16 hex digits): content-addressed like the zip,
    but known without compressing anything, so a call costs no zip building (~9 ms of CPU per CLI run).
    """

    def __init__(self, files: list[tuple[str, bytes]]) -> None:
        self.files = files
        self.manifest = json.dumps({name: hashlib.sha256(data).hexdigest() for name, data in files},
                                   sort_keys=True, indent=0).encode()
        self.manifest_sha256 = hashlib.sha256(self.manifest).hexdigest()  # every call checks the files against it

    @functools.cached_property
    def data(self) -> bytes:
        """The zip that is shipped (fixed timestamps: its bytes depend only on the code)."""
        import io
        import zipfile  # here: only a host without this agent needs the zip; every other call spares the import

        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in [*self.files, ("MANIFEST.json", self.manifest)]:
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = 0o600 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data)
        return buf.getvalue()

    @functools.cached_property
    def zip_sha256(self) -> str:
        """What the host checks the uploaded archive against before unpacking it."""
        return hashlib.sha256(self.data).hexdigest()


def _sources(directory: str, under: str) -> Iterator[tuple[str, bytes]]:
    """Every ``*.py`` below ``directory`` (bytecode caches aside) as (its path under ``under``, its bytes)."""
    with os.scandir(directory) as entries:
        for e in entries:
            if e.is_dir(follow_symlinks=False) and e.name != "__pycache__":
                yield from _sources(e.path, f"{under}{e.name}/")
            elif e.name.endswith(".py") and e.is_file(follow_symlinks=False):
                with open(e.path, "rb") as f:
                    yield f"{under}{e.name}", f.read()


@functools.lru_cache(maxsize=1)
def bundle() -> Bundle:
    """The agent: its entry point and the ``fabfile/remote`` modules, under the package name it has on the host.
    Read with ``os.scandir`` (pathlib's ``rglob`` and ``relative_to`` were half of the ~2.7 ms it took on every
    command that calls the agent)."""
    files = [("__main__.py", _MAIN.encode()), *sorted(_sources(str(REMOTE_SRC), f"{AGENT_PACKAGE}/"))]
    return Bundle(files)


class AgentClient:
    def __init__(self, transport: Transport, python: str, state_dir: str) -> None:
        self.transport = transport
        self.python = python
        self.state_dir = state_dir.rstrip("/")
        self.bundle = bundle()
        self.dir = f"{self.state_dir}/agent/{self.bundle.manifest_sha256[:16]}"
        self.shipped = False
        self.cpu_s = 0.0  # the agent's CPU on the host over this session's calls, as each result reports it

    def _boot(self, mode: str, *args: str) -> str:
        # -I: ignore PYTHON* variables and the user site, and keep the working directory off sys.path.
        return (f"{shlex.quote(self.python)} -I -c {shlex.quote(BOOT_SOURCE)} {mode} "
                + " ".join(self.transport.shell_path(a) if a.startswith(("~/", "/")) else shlex.quote(a)
                           for a in args))

    def _command(self, verb: str, request: Mapping[str, Any]) -> str:
        payload = base64.b64encode(json.dumps(request, sort_keys=True).encode()).decode()
        return self._boot("run", self.dir, self.bundle.manifest_sha256, verb, payload)

    def _refused(self, r: ProcessResult, what: str) -> None:
        """A bootstrap refusal (an unsafe directory) or failure, as the tool's error."""
        for line in r.stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == "result" and not event.get("ok"):
                raise from_agent(event.get("error") or {}, self.transport.host_name)
        if r.exit_code != 0:
            raise AgentCrashError(f"could not {what} in {self.dir}: {r.stderr.strip()[-300:]}",
                                  "check free space and permissions of the state_dir", host=self.transport.host_name)

    def ship(self) -> None:
        """Install the agent: check/create the state directory, upload the zip under a name of its own (two
        deploys may ship at once), and unpack it on the host into its content-addressed directory, verified."""
        import secrets  # here: only shipping needs it (base.shell_write_command says why)

        self._refused(self.transport.run(self._boot("prep", self.state_dir), 60), "prepare the agent directory")
        archive = f"{self.state_dir}/agent/.upload-{secrets.token_hex(8)}.zip"
        self.transport.put(self.bundle.data, archive, 0o600)
        r = self.transport.run(self._boot("unpack", archive, self.dir, self.bundle.zip_sha256,
                                          self.bundle.manifest_sha256), 60)
        self._refused(r, "unpack the agent")
        self.shipped = True

    def _execute(self, verb: str, request: Mapping[str, Any], timeout: float,
                 on_event: Callable[[AgentEvent], None] | None,
                 idle_timeout: float | None = None) -> tuple[ProcessResult, list[AgentEvent]]:
        request = {"deadline_s": timeout, **request}
        events: list[AgentEvent] = []

        def on_line(line: str) -> None:
            line = line.strip()
            if not line:
                return
            try:
                parsed = json.loads(line)
            except ValueError:
                return  # not ours (a sitecustomize or the shell printed something): ignore
            if not isinstance(parsed, dict):
                return
            event = cast("AgentEvent", parsed)  # a line the agent printed (``EventSink.emit``): an event object
            if event.get("event") == "heartbeat" or (event.get("event") == "replay" and
                                                      (event.get("original") or {}).get("event") == "heartbeat"):
                return  # only proof of life (see idle_timeout); not an event anyone handles
            events.append(event)
            if on_event is not None and event.get("event") != "result":
                on_event(event)

        cmd = self._command(verb, request)
        result = self.transport.stream(cmd, on_line, timeout + 15, idle_timeout)
        if result.exit_code == 3 and NOT_INSTALLED in result.stderr and not self.shipped:
            # This host has not got this version of the agent yet.
            self.ship()
            events.clear()
            result = self.transport.stream(cmd, on_line, timeout + 15, idle_timeout)
        return result, events

    def call(self, verb: str, request: Mapping[str, Any], timeout: float = 60.0,
             on_event: Callable[[AgentEvent], None] | None = None,
             idle_timeout: float | None = None) -> object:
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
            # One sentence, never the host's raw stderr (a Python traceback): the agent writes its own tracebacks
            # to a file on the host and answers; ending without an answer means it was killed or could not start.
            how = "it was killed" if result.exit_code in (-1, 137, 143) or result.exit_code < 0 else \
                f"exit {result.exit_code}"
            last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
            said = f": {last[:200]}" if last and not last.startswith(("Traceback", "File ")) else ""
            raise AgentCrashError(
                f"the host-side agent ({verb}) ended without an answer ({how}){said}",
                "run the command again; `inv status` shows what runs on the host", host=host)
        self.cpu_s += float(final.get("cpu_s") or 0.0)
        if not final.get("ok"):
            raise from_agent(final.get("error"), host)
        return final.get("data") or {}
