"""Every task returns one type, a ``commands.result.CommandResult``, and only reads its flags and hands over: the
progress lines, the choice of one host or several and the refusals of what a command cannot do as asked live in
``commands/`` and ``plan/``. A task once returned a CommandResult or an int (logs and watch, which print as they
go), and bench, profile, explain and sweep drew progress or refused flag combinations in the task itself."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path
from typing import get_type_hints

import pytest
from invoke.exceptions import Exit

from fabfile.cli import run, tasks
from fabfile.commands.result import CommandResult
from fabfile.errors import FlagError
from fabfile.plan.sweep_plan import check_keep, refusals
from tests.support import sources
from tests.support.cli import run_cli

INVENTORY = ("defaults: {python: /opt/venv/bin/python3, model: /models/m, draft_model: /models/d, gpus: 2}\n"
             "hosts: {g1: {ssh_host: no-such-alias.invalid}}\n")


def test_every_task_is_annotated_to_return_a_command_result() -> None:
    for name, task in tasks.ns.tasks.items():
        body = inspect.unwrap(task.body)
        hints = get_type_hints(body, localns={"CommandResult": CommandResult, "Any": object})
        assert hints["return"] is CommandResult, f"inv {name} returns {hints['return']}"


def test_no_task_draws_progress_or_builds_a_result_itself() -> None:
    path = Path(tasks.__file__).resolve()
    called = {n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in sources.nodes(path)
              if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}
    assert not called & {"CommandResult", "BenchProgress", "print_result", "print_explained", "print"}, called


def test_a_streamed_result_is_not_shown_again_and_exits_with_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Exit) as e:
        run.finish(CommandResult.printed(1), as_json=True)
    assert e.value.code == 1 and capsys.readouterr().out == ""
    run.finish(CommandResult.printed(0), as_json=False)  # 0: no exit raised
    run.finish(CommandResult({"ok": True}, lambda: None), as_json=True)
    assert json.loads(capsys.readouterr().out) == {"ok": True}


def test_the_sweep_refusals_are_each_a_sentence_naming_its_flag() -> None:
    said = [e.message for e in refusals(predict=True, adaptive=True, client="sglang", adaptive_length=True)]
    assert [s.split(":")[0] for s in said] == ["--adaptive", "--client", "--client"], said
    assert refusals(predict=True, adaptive=False, client="builtin", adaptive_length=True) == []
    assert refusals(predict=False, adaptive=True, client=None, adaptive_length=True) == []
    with pytest.raises(FlagError, match="--keep: 'nope' is not one of this sweep's configurations"):
        check_keep([], "nope")


def test_a_sweep_refuses_what_it_cannot_measure_all_at_once_before_any_host(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(INVENTORY)
    r = run_cli("sweep", "--host", "g1", "--steps", "0,2", "--predict", "--adaptive", "--client", "sglang",
                inventory=inv)
    assert r.returncode == 2, r.stderr
    assert "--adaptive: SGLang's adaptive mode moves its own step count" in r.stderr, r.stderr
    assert "--client: --predict needs each request's meta_info" in r.stderr, r.stderr
    assert "--client: an adaptive length needs the builtin client" in r.stderr, r.stderr
    r = run_cli("sweep", "--host", "g1", "--steps", "0,2", "--keep", "eagle3-s9", inventory=inv)
    assert r.returncode == 2 and "--keep: 'eagle3-s9' is not one of this sweep's configurations: baseline" \
        in r.stderr.replace("\n", " "), r.stderr


def test_bench_explain_of_several_hosts_is_refused_by_its_command(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(INVENTORY.replace("hosts: {g1: {ssh_host: no-such-alias.invalid}}",
                                     "hosts: {g1: {ssh_host: no-such-alias.invalid}, "
                                     "g2: {ssh_host: no-such-alias.invalid}}"))
    r = run_cli("bench", "--host", "g1,g2", "--explain", inventory=inv)
    assert r.returncode == 2 and "--explain: explains one host's benchmark at a time" in r.stderr, r.stderr
