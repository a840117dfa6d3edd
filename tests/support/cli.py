"""The command line run in-process: the tool's own Program (fabfile/cli/program.py) given an argv, its stdout,
stderr and exit code captured, as a user would see them from `inv ...`, without paying a subprocess (a Python
start and the imports, ~0.8 CPU-s) per call. The suite is CPU-bound on CI's two cores, and several hundred calls
made that the larger part of its time. For what needs a real process (a closed pipe, signals, Ctrl-C, a client
killed mid-deploy), tests/support/invoke_cli.run_inv(..., process=True) or start_inv."""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import Callable
from contextlib import chdir, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from fabfile.cli.main import program
from fabfile.present import output

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


class CommandHung(BaseException):
    """An in-process command ran past its test's bound. A BaseException, so no handler of the tool's (they catch
    Exception, or KeyboardInterrupt for Ctrl-C) takes it for one of its own errors and goes on."""


def _hung(seconds: float) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise CommandHung(f"the command did not finish within the test's {seconds:g} s")
    return handler


def run_cli(*args: str, inventory: Path | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None, timeout: float | None = None) -> Ran:
    """``inv ARGS`` in this process. ``timeout``: the bound a subprocess would have had (a real interval timer on
    the test's main thread, so a hang fails the test instead of holding the worker)."""
    argv = ["inv", *args, *(["--inventory", str(inventory)] if inventory is not None else [])]
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    stdin = sys.stdin
    os.environ.update({"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    code: int | str | None = 0
    previous = None
    if timeout is not None:
        previous = signal.signal(signal.SIGALRM, _hung(timeout))
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        # stdin as a subprocess run gets it (DEVNULL): a prompt reads end-of-file, never the test runner's input
        sys.stdin = io.StringIO("")
        # A process reads COLUMNS once, when its consoles are made at import; here they were made by an earlier
        # run, so each run gives them its own width, as a fresh process would have it.
        for console in (output.out, output.err):
            console.width = int(os.environ["COLUMNS"])
        with chdir(cwd or ROOT), redirect_stdout(out), redirect_stderr(err):
            try:
                program("inv").run(argv)
            except SystemExit as e:
                code = e.code
    finally:
        if timeout is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        sys.stdin = stdin
        os.environ.clear()
        os.environ.update(saved)
    return Ran(code if isinstance(code, int) else 0 if code is None else 1, out.getvalue(), err.getvalue())


def host_doc(doc: Any) -> dict[str, Any]:
    """The one host's part of a host command's ``--json`` document, after checking the one shape every host
    command has for one host or many: ``{"ok": bool, "hosts": [{"host", "ok", ...}]}`` (a rollout's keys, such as
    its strategy, may stand beside ``hosts``)."""
    assert isinstance(doc, dict) and isinstance(doc.get("ok"), bool), f"not a host command's document: {doc!r}"
    hosts = doc.get("hosts")
    assert isinstance(hosts, list) and len(hosts) == 1, f"not one host's document: {doc!r}"
    host = hosts[0]
    assert isinstance(host, dict) and isinstance(host.get("host"), str) and isinstance(host.get("ok"), bool), host
    if set(doc) == {"ok", "hosts"}:
        assert doc["ok"] is host["ok"], doc
    return host
