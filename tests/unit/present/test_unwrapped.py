"""Issue 40, point 1: nothing is wrapped when stdout is not a terminal (rich took the width of stderr's terminal,
so `inv deploy | grep "ssh -F"` got the tunnel line without its host), and a command, an id, a path or a file body
is never wrapped on a terminal either. At 80 and 200 columns, on a real pty and in a pipe beside one."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.support.cli import host_doc
from tests.support.invoke_cli import run_inv
from tests.support.terminal import WIDTHS, run_on_terminal

LONG = " ".join(f"word{i}" for i in range(60))  # 480 characters of prose, wrappable at any space
PRINTS = ("from rich.table import Table\n"
          "from fabfile.present.output import out\n"
          f"out.print({LONG!r}, soft_wrap=False)\n"
          "t = Table('path', 'deploy id')\n"
          "t.add_row('/root/.specdeploy/' + 'x' * 90 + '.sh', '20261202T200937-16fe3d')\n"
          "out.print(t)\n")


def _same_render(line: str) -> str:
    """Two renders differ only in their deploy id and clock."""
    return re.sub(r"\d{8}T\d{6}-[0-9a-f]{6}|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "ID", line)


@pytest.mark.parametrize("columns", WIDTHS)
def test_stdout_into_a_pipe_is_not_wrapped_beside_a_terminal_of_any_width(columns: int) -> None:
    code, piped, _ = run_on_terminal("-c", PRINTS, columns=columns, stdout_tty=False, program=[sys.executable])
    assert code == 0, piped
    assert LONG in piped.splitlines()  # one line, as long as it is
    row = next(ln for ln in piped.splitlines() if "/root/.specdeploy/" in ln)
    assert "x" * 90 + ".sh" in row and "20261202T200937-16fe3d" in row  # the table at its own width, uncut


@pytest.mark.parametrize("columns", WIDTHS)
def test_prose_still_wraps_on_a_terminal(columns: int) -> None:
    code, shown, _ = run_on_terminal("-c", PRINTS, columns=columns, program=[sys.executable])
    assert code == 0, shown
    assert LONG not in shown and all(len(ln) <= columns for ln in shown.splitlines() if ln.startswith("word"))


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("on_terminal", [True, False], ids=["pty", "pipe"])
def test_render_prints_the_launch_command_and_each_file_line_whole(columns: int, on_terminal: bool) -> None:
    doc = host_doc(json.loads(run_inv("render", "--steps", "3", "--json").stdout))
    code, shown, _ = run_on_terminal("render", "--steps", "3", columns=columns, stdout_tty=on_terminal)
    assert code == 0, shown
    lines = {_same_render(ln.rstrip()) for ln in shown.splitlines()}
    assert _same_render(doc["launch_command"]) in lines  # the command you may copy is one line
    script = next(text for path, text in doc["files"].items() if path.endswith(".sh"))
    assert [ln for ln in script.splitlines() if len(ln) > 200]  # the test means something: lines past 200 columns
    for ln in script.splitlines():
        assert _same_render(ln.rstrip()) in lines, ln


def test_host_text_is_printed_as_it_is_never_as_emoji() -> None:
    """A server's log line holding ``:name:`` (a Python dict's repr, a URL, a user's prompt) is shown as written:
    Rich would have drawn ``:warning:`` as a picture, in a line ``inv logs`` promises to print unchanged."""
    code = ("from fabfile.present.hosts_report import print_log_lines\n"
            "print_log_lines('sim1', ['queue :warning: full, {\"a\":1}:x:'], prefix=False, width=4)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout == 'queue :warning: full, {"a":1}:x:\n'
