"""The command line run in-process: the tool's own Program (fabfile/cli/program.py) given an argv, its stdout,
stderr and exit code captured, as a user would see them from `inv ...`, without paying a subprocess (a Python
start and the imports, ~0.8 CPU-s) per call. For what needs a real process (a closed pipe, signals), run_inv."""

from __future__ import annotations

import io
import os
from contextlib import chdir, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from fabfile.cli.main import program

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, inventory: Path | None = None, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> Ran:
    argv = ["inv", *args, *(["--inventory", str(inventory)] if inventory is not None else [])]
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update({"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    code: int | str | None = 0
    try:
        with chdir(cwd or ROOT), redirect_stdout(out), redirect_stderr(err):
            try:
                program("inv").run(argv)
            except SystemExit as e:
                code = e.code
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Ran(code if isinstance(code, int) else 0 if code is None else 1, out.getvalue(), err.getvalue())
