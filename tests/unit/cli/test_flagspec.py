"""One spec per flag (issue 41, point 3): a flag was declared in four places (its parameter in cli/tasks.py, its help
in cli/help.py, its metavar in cli/program.py, its range in cli/options.py or flags.py), so one could be added in
one and missed in another. Now its parameter is in the task's signature (Invoke reads flags from there) and
everything else in its row of fabfile/cli/flagspec.FLAGS; these tests fail until the two agree."""

from __future__ import annotations

import inspect
from collections import Counter

import pytest

from fabfile.cli import flagspec, program, tasks
from fabfile.errors import FlagError, UsageError

TASKS = dict(tasks.ns.tasks)


def _params(name: str) -> dict[str, inspect.Parameter]:
    return {p: v for p, v in inspect.signature(TASKS[name].body).parameters.items() if p != "c"}


def test_every_task_parameter_has_exactly_one_spec() -> None:
    rows = Counter((t, f.param) for f in flagspec.FLAGS for t in f.tasks)
    for name in TASKS:
        for param in _params(name):
            assert rows[(name, param)] == 1, f"inv {name} --{param}: {rows[(name, param)]} specs in flagspec.FLAGS"


def test_every_spec_is_a_parameter_of_each_task_it_names() -> None:
    for f in flagspec.FLAGS:
        for name in f.tasks:
            assert name in TASKS, f"{f.flag}: no task {name!r}"
            assert f.param in _params(name), f"{f.flag}'s spec names inv {name}, whose function has no {f.param}"


def test_a_switch_is_a_switch_in_the_signature_and_takes_no_metavar() -> None:
    """Invoke makes a flag a switch from its default (False); the spec says the same, and a value flag says what it
    takes (help showed `--max-loads=MAX-LOADS` for a flag with no metavar)."""
    for f in flagspec.FLAGS:
        for name in f.tasks:
            default = _params(name)[f.param].default
            if f.value.kind == "switch":
                assert default is False and f.metavar is None, (name, f.flag, default, f.metavar)
            else:
                assert not isinstance(default, bool) and f.metavar, (name, f.flag, default, f.metavar)


def test_one_flag_name_shows_one_metavar() -> None:
    shown: dict[str, set[str]] = {}
    for f in flagspec.FLAGS:
        if f.metavar is not None:
            shown.setdefault(f.flag, set()).add(f.metavar)
    assert {k: v for k, v in shown.items() if len(v) > 1} == {}
    assert program.METAVARS["steps"] == "N" and program.METAVARS["help"] == "COMMAND"  # the core options' too


def test_help_and_metavars_come_from_the_table() -> None:
    """Each task's help texts are its rows' sentences, and `--help` shows each row's metavar."""
    for name, t in TASKS.items():
        assert t.help == flagspec.helps(name), name
    assert TASKS["tune"].help["max_loads"].startswith("model loads the tuner may spend")
    tuples = dict(program.named([("--max-loads=STRING", "x"), ("--sglang-version=STRING", "y")]))
    assert set(tuples) == {"--max-loads=N", "--sglang-version=VERSION"}


@pytest.mark.parametrize("task, param, value, words", [
    ("deploy", "steps", "65", "--steps: 65 is above the largest allowed, 64"),
    ("sweep", "steps", "0,0", "--steps: 0,0 lists a value twice"),
    ("sweep", "draft_tokens", "1", "--draft-tokens: 1 is below the smallest allowed, 2"),
    ("deploy", "draft_tokens", "0", "--draft-tokens: 0 is below the smallest allowed, 1"),
    ("logs", "timeout", "1e7", "--timeout: 1e7 is above the largest allowed, 604800 s"),
    ("cancel", "timeout", "1e7", "--timeout: 1e7 is above the largest allowed, 86400 s"),
    ("watch", "for_", "-1", "--for: -1 is below the smallest allowed, 0 s"),
    ("deploy", "patch_mode", "x", "--patch-mode: unknown mode 'x'; choose one of auto,"),
    ("tune", "objective", "x", "--objective: unknown objective 'x'; choose one of tok-s, sla"),
    ("profile", "trace_steps", "201", "--trace-steps: 201 is above the largest allowed, 200"),
    ("sweep", "resume", "", "--resume: an empty value is not a path"),
    ("deploy", "id_", "a/b", "--id: a/b is not a deploy id"),
])
def test_a_value_is_read_by_its_tasks_own_spec(task: str, param: str, value: str, words: str) -> None:
    """The same flag, a different meaning per task: the row of that task decides, in the parser's own words."""
    with pytest.raises(FlagError) as e:
        flagspec.read(task, param, value)
    assert e.value.exit_code == 2 and e.value.message.startswith(words), e.value.message


def test_values_read_by_their_spec() -> None:
    assert flagspec.read("sweep", "steps", "0,2") == [0, 2] and flagspec.read("deploy", "steps", "2") == 2
    assert flagspec.read("watch", "for_", "0") == 0.0 and flagspec.read("deploy", "host", "a,b") == "a,b"
    assert flagspec.read("render", "accept_gate", None) is None  # not given (render has no --accept-gate)
    with pytest.raises(KeyError):
        flagspec.read("render", "accept_gate", "1.1")  # a value for a flag the task does not have is a bug


def test_every_bad_flag_is_said_at_once() -> None:
    with pytest.raises(UsageError) as e:
        flagspec.read_each("logs", lines="0", timeout="nan", host_timeout="2")
    assert [x.message.split(":")[0] for x in e.value.each] == ["--lines", "--timeout"], e.value.message
