"""Issue 40, point 8: the command line's mistakes said as what they are. `inv deploy --steps 3 --steps 2` said
"2: no such command" (the flag was given twice); `inv status sim2` said "sim2: no such command" (a host named
without `--host`); the README's quickstart names the line that brings up a simulated fleet to try commands on.
Into a pipe and on a terminal, at 80 and 200 columns: exit 2, one sentence naming the flag, nothing touched."""

from __future__ import annotations

import re

import pytest

from tests.support.invoke_cli import ROOT
from tests.support.terminal import WIDTHS, run_on_terminal


def _said(columns: int, on_terminal: bool, *args: str) -> tuple[int, str]:
    code, out, err = run_on_terminal(*args, columns=columns, stdout_tty=on_terminal)
    return code, re.sub(r"\s+", " ", out + err)


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("on_terminal", [True, False], ids=["pty", "pipe"])
@pytest.mark.parametrize("steps", [["--steps", "3", "--steps", "2"], ["--steps=3", "--steps=2"]], ids=["space", "eq"])
def test_a_flag_given_twice_is_said_so(columns: int, on_terminal: bool, steps: list[str]) -> None:
    code, said = _said(columns, on_terminal, "deploy", *steps, "--dry-run")
    assert code == 2, said
    assert "--steps: given twice (3, 2)" in said and "give --steps once" in said, said
    assert "no such command" not in said


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("on_terminal", [True, False], ids=["pty", "pipe"])
def test_a_host_named_without_its_flag_suggests_host(columns: int, on_terminal: bool) -> None:
    code, said = _said(columns, on_terminal, "status", "sim2")
    assert code == 2, said
    assert "sim2: inv status takes no bare word" in said and "`inv status --host sim2`" in said, said
    code, said = _said(columns, on_terminal, "stauts")  # a misspelt command is still one
    assert code == 2 and "stauts: no such command; did you mean status?" in said, said


def test_the_readme_quickstart_brings_up_a_simulated_fleet() -> None:
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quickstart: a simulated fleet", 1)[1].split("\n## ", 1)[0]
    assert "python -m tests.simhost up --hosts 2 --dir /tmp/fleet" in quick
    assert "SPECDEPLOY_INVENTORY=/tmp/fleet/inventory.yaml" in quick and "tests.simhost down" in quick
