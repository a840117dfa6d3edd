"""A process run through a transport and a command's result for the command line are two things with two names,
each defined in one module: ``transport.base.ProcessResult`` (exit status, stdout, stderr of a host's process) and
``commands.result.CommandResult`` (the --json document, the tables, the exit code). Both were once called
``CommandResult``."""

from __future__ import annotations

import ast
from pathlib import Path

from fabfile.commands.result import CommandResult
from fabfile.transport.base import LocalTransport, ProcessResult
from tests.support.sources import modules, nodes

ROOT = Path(__file__).resolve().parents[3]


def _defined(name: str) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in modules(ROOT / "fabfile")
            if any(isinstance(n, ast.ClassDef) and n.name == name for n in nodes(p))]


def test_each_result_class_has_one_module() -> None:
    assert _defined("ProcessResult") == ["fabfile/transport/base.py"]
    assert _defined("CommandResult") == ["fabfile/commands/result.py"]


def test_a_transport_run_returns_the_process_exit_status_and_output() -> None:
    t = LocalTransport("local")
    r = t.run("echo out; echo err >&2; exit 3", timeout=10)
    assert r == ProcessResult(3, "out\n", "err\n")
    assert not isinstance(r, CommandResult)


def test_a_streamed_run_hands_stdout_to_its_callback_and_keeps_stderr() -> None:
    lines: list[str] = []
    r = LocalTransport("local").stream("echo a; echo b; echo oops >&2; exit 1", lines.append, timeout=10)
    assert (lines, r) == (["a", "b"], ProcessResult(1, "", "oops\n"))


def test_a_command_result_carries_its_document_and_exit_code() -> None:
    shown: list[str] = []
    c = CommandResult({"ok": False}, lambda: shown.append("table"), exit_code=4)
    c.for_people()
    assert (c.document, c.exit_code, c.error, shown) == ({"ok": False}, 4, None, ["table"])
