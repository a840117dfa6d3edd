"""Property-based fuzzing (hypothesis) of the inventory loader and of every task's flags.

Whatever a user writes, the tool answers with exit 0, or with exit 2 and a one-line message naming the field or
flag, never a traceback. The loader and the CLI's validation run in-process (fast enough for well over a thousand
cases per run): a flag value that passes validation reaches :class:`Reached`, which stands where the tool would
open its first SSH session, so nothing here connects anywhere (valid values taken to a real host:
tests/fleet/test_fuzz.py)."""

from __future__ import annotations

import inspect
import json
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabfile.cli import flagspec, tasks
from fabfile.errors import InventoryError, SpecDeployError
from fabfile.inventory import hosts as inventory
from fabfile.inventory import schema as inventory_schema
from tests.support.cli import run_cli
from tests.support.fuzzing import SHELLISH

# The profile (tests/conftest.py) decides whether the examples are the fixed ones (CI) or new ones (`./dev fuzz`);
# an exploring run draws at least as many as the profile asks. CI's examples are the same on every run (derandomized):
# a regression set, 200 per test (350 cost the unit tier ~25 s more and found nothing the 200 do not).
FUZZ = settings(max_examples=max(200, settings.default.max_examples), deadline=None,
                suppress_health_check=[HealthCheck.too_slow], database=None)

BASE: dict[str, Any] = {
    "defaults": {"python": "/opt/env/bin/python3", "model": "/models/kimi", "draft_model": "/models/eagle3",
                 "log_dir": "/var/log/sglang", "state_dir": "~/.specdeploy", "gpus": 8, "tp": 2,
                 "nccl_preset": "pcie", "port": 8000, "timeouts": {"ready": 600, "stall": 60}},
    "hosts": {"gpu1": {"default": True, "address": "10.0.0.1", "listen": "0.0.0.0",
                       "env": {"OPERATOR_NOTE": "plain"}},
              "gpu2": {"address": "10.0.0.2", "listen": "0.0.0.0", "speculative": {"steps": 2, "topk": 1}}},
    "groups": {"pair": ["gpu1", "gpu2"]},
    "routers": {"front": {"host": "gpu1", "group": "pair", "port": 30000}},
}

# Where a mutation lands: every host field, at the three layers that can hold it, and the top-level sections.
HOST_FIELDS = ["connection", "ssh_host", "default", "gpus", "tp", "python", "model", "draft_model", "log_dir",
               "state_dir", "port", "listen", "address", "nccl_preset", "nccl_env", "env", "sglang_args",
               "speculative", "patch_mode", "nccl_debug", "timeouts", "served_model_name", "gpu_idle_mib",
               "min_free_disk_gb", "force_env", "no_such_field"]
PATHS: list[tuple[str, ...]] = (
    [("hosts", "gpu1", f) for f in HOST_FIELDS] + [("defaults", f) for f in HOST_FIELDS]
    + [("hosts", "gpu2", "speculative", k) for k in ("algorithm", "steps", "topk", "draft_tokens", "bogus")]
    + [("defaults", "timeouts", k) for k in ("connect", "ready", "stall", "stop_grace", "lock_wait", "host",
                                             "silence", "bogus")]
    + [("hosts", "gpu1", "env", "OPERATOR_NOTE"), ("hosts", "gpu1", "env", "1BAD NAME"),
       ("hosts", "gpu1", "nccl_env", "NCCL_PROTO"), ("hosts", "gpu1", "nccl_env", "NOT_NCCL"),
       ("groups", "pair"), ("groups", "gpu1"), ("routers", "front", "port"), ("routers", "front", "group"),
       ("hosts", "bad host!"), ("hosts",), ("presets",), ("ssh_config",), ("clusters",), ("nonsense",)]
)

# Named functions, not lambdas, in every strategy: to print a strategy (which `st.recursive` does while it validates
# itself) Hypothesis describes a lambda by parsing this file with `ast`, and on CPython 3.11 that parse once raised
# "SystemError: AST constructor recursion depth mismatch" in a worker that had run other tests first. A named
# function is described by its name.
def _joined(a: str, b: str) -> str:
    return a + b


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3))


def _percent(p: int) -> str:
    return f"{p}%"


TEXT = st.one_of(st.text(max_size=40), SHELLISH,
                 st.builds(_joined, SHELLISH, st.text(st.characters(min_codepoint=0x80), max_size=8)))
NUMBER = st.one_of(st.integers(min_value=-(10**30), max_value=10**30), st.integers(-3, 70000),
                   st.floats(allow_nan=True, allow_infinity=True))
SCALAR = st.one_of(TEXT, NUMBER, st.booleans(), st.none())
VALUE = st.recursive(SCALAR, _containers, max_leaves=6)

_DIR = Path(tempfile.mkdtemp(prefix="specdeploy-fuzz-"))


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = doc
    for key in path[:-1]:
        nxt = node.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            node[key] = nxt
        node = nxt
    node[path[-1]] = value


def _load_text(text: str) -> tuple[inventory.Inventory | None, InventoryError | None, Path]:
    path = _DIR / "inventory.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        return inventory.load(path), None, path
    except InventoryError as e:
        return None, e, path


def _check_refusal(e: InventoryError, path: Path, names: tuple[str, ...]) -> None:
    assert e.exit_code == 2
    # one line per refusal (a file with several is refused for all of them at once), each naming the file
    each = [x.message for x in (e.each or (e,))]
    assert all(len(m.splitlines()) == 1 and str(path) in m for m in each), e.message
    assert e.message.splitlines() == each, e.message
    named = [n for n in names if n and n in e.message]
    assert named, f"the message names none of {names}: {e.message}"


@FUZZ
@given(path=st.sampled_from(PATHS), value=VALUE)
def test_inventory_field_mutations(path: tuple[str, ...], value: Any) -> None:
    """Any value in any field: loaded (and then carried verbatim), or refused in one line naming the field."""
    doc = json.loads(json.dumps(BASE))
    _set(doc, path, value)
    try:
        text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    except yaml.YAMLError:
        return
    inv, err, file = _load_text(text)
    if err is not None:
        # The field, or (for cross-field rules such as tp > gpus, or a section replaced wholesale) its section.
        _check_refusal(err, file, (path[-1], path[-2] if len(path) > 1 else "", path[0], "tp", "gpus", "draft",
                                   "hosts", "group", "router", "cluster", "speculative", "default"))
        return
    assert inv is not None
    for h in inv.hosts.values():  # what was accepted is sane
        assert 1 <= h.tp <= h.gpus and 1 <= h.port <= 65535 and h.gpu_idle_mib >= 0, h
        assert math.isfinite(h.min_free_disk_gb) and h.min_free_disk_gb >= 0, h
        assert h.speculative.steps >= 0 and h.speculative.topk >= 1, h
        for key, t in vars(h.timeouts).items():
            assert math.isfinite(t) and (t > 0 or (key == "lock_wait" and t == 0)), (key, t)
    if path == ("hosts", "gpu1", "env", "OPERATOR_NOTE"):
        assert inv.hosts["gpu1"].env["OPERATOR_NOTE"] == (value if isinstance(value, str) else
                                                          inventory_schema._env_value(value))


# YAML's own features: duplicate keys, anchors and aliases (merge keys too), tags, deep nesting, odd bytes.
YAML_TEMPLATES = [
    "hosts:\n  gpu1: {{tp: 1, gpus: 1, python: /p, model: /m}}\n  gpu1: {{tp: 1, gpus: 1, python: /p, model: /m}}\n",
    "hosts:\n  gpu1: {{tp: 1, gpus: 1, gpus: {v}, python: /p, model: /m}}\n",
    "defaults: &d {{python: /p, model: /m, gpus: 2, tp: 2}}\nhosts:\n  gpu1: *d\n  gpu2: {{<<: *d, port: {v}}}\n",
    "defaults: &d {{python: /p, model: /m, gpus: 2, tp: 2}}\nhosts:\n  gpu1: {{<<: *d, tp: {v}}}\n",
    "x: &a [1, 2]\nhosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: 2, port: *a}}\n",
    "hosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: 2, port: !!str {v}}}\n",
    "hosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: 2, env: {{A: !!binary aGVsbG8=}}}}\n",
    "hosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: 2, env: {{A: !!timestamp 2001-12-14}}}}\n",
    "hosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: !!float {v}}}\n",
    "hosts:\n  gpu1: {{python: !!python/object/apply:os.system [id], model: /m, gpus: 2, tp: 2}}\n",
    "hosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: 2, sglang_args: !!set {{a, b}}}}\n",
    "hosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: 2, log_dir: !custom {v}}}\n",
    "hosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: 2, served_model_name: {v}}}\n",
    "hosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: 2, env: {{NOTE: {v}}}}}\n",
    "hosts: " + "[" * 400 + "]" * 400 + "\n",
    "a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: &d [*c, *c, *c, *c]\n"
    "hosts: {{gpu1: {{python: /p, model: /m, gpus: 2, tp: 2, sglang_args: *d}}}}\n",
    "hosts:\n  {v}: {{python: /p, model: /m, gpus: 2, tp: 2}}\n",
    "hosts:\n  gpu1: {{python: /p, model: /m, gpus: 2, tp: 2}}\n{v}\n",
]


@FUZZ
@given(template=st.sampled_from(YAML_TEMPLATES), v=st.one_of(TEXT.map(json.dumps), NUMBER.map(str), TEXT))
def test_inventory_yaml_features(template: str, v: str) -> None:
    text = template.format(v=v)
    inv, err, file = _load_text(text)
    if err is not None:
        each = [x.message for x in (err.each or (err,))]  # one line per refusal, every one naming the file
        assert err.exit_code == 2 and all(len(m.splitlines()) == 1 and str(file) in m for m in each), err.message
        return
    assert inv is not None and inv.hosts


def test_duplicate_keys_are_refused_naming_the_key() -> None:
    _inv, err, _file = _load_text(YAML_TEMPLATES[0].format(v=1))
    assert err is not None and "duplicate key 'gpu1' (first given on line 2)" in err.message
    _inv, err, _file = _load_text(YAML_TEMPLATES[1].format(v=4))
    assert err is not None and "duplicate key 'gpus'" in err.message
    inv, err, _file = _load_text(YAML_TEMPLATES[3].format(v=1))  # a merge key's value may be overridden
    assert err is None and inv is not None and inv.hosts["gpu1"].tp == 1


# ---------------------------------------------------------------------------------------------------------------
# Every task's flags

class Reached(SpecDeployError):
    """Validation passed: the command got as far as opening its first SSH session."""

    exit_code = 99


BOOL_PARAMS = {"json", "dry_run", "follow", "no_verify", "no_canary", "rollback_on_failure"}
# What a task needs besides the fuzzed flag to get past its other checks (one flag fuzzed at a time).
BASE_ARGS: dict[str, dict[str, Any]] = {
    "sweep": {"steps": "0,2"},
    # A live view runs until Ctrl-C or an alarm; with hosts that are never reached (no_ssh) and no threshold crossed,
    # a fuzzed --interval/--duration would keep it sampling for ever. One sample checks every flag's validation.
    "watch": {"once": True},
    "analyze": {"baseline_ms": "12.2", "verify_ms": "18.7"},
    "trust-host": {"host": "gpu1"},
    "adopt": {"host": "gpu1"},
}
PATH_PARAMS = {"out", "write"}  # kept relative: a fuzzed path is written to, inside the scratch directory only
TASKS = {name: t for name, t in tasks.ns.tasks.items()}
FLAGS = sorted((name, p) for name, t in TASKS.items() for p in inspect.signature(t.body).parameters
               if p not in ("c", "inventory") and p not in BOOL_PARAMS)
FLAG_VALUES = st.one_of(
    TEXT, NUMBER.map(str), st.sampled_from(["nan", "inf", "-inf", "1e309", " 3 ", "0x10", "1_000", "３", "٣",
                                            "0", "-0", "00", "1.5", "2,3", "0,,1", "1,1", "25%", "150%", "0%",
                                            "-1", "gpu1", "pair", "front", "rolling", "parallel"]))


@pytest.fixture(scope="module")
def fuzz_inventory() -> Path:
    path = _DIR / "flags.yaml"
    path.write_text(yaml.safe_dump(BASE, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def no_ssh() -> Iterator[None]:
    """Stand in for the first SSH session: a flag value that gets there has passed validation. The tasks run in a
    scratch directory (a fuzzed `--out` writes where it points, relative paths included)."""
    # Patched where it is looked up: `inv trust-host` calls commands/trust.py's own `fetch_key` (bound by its `from
    # ... import`). Patching transport/trust.py's instead leaked: when commands/trust.py was first imported while
    # the patch was on, it bound the stand-in for good, and every later trust-host test on that worker failed
    # "validation passed" (exit 99). Importing it first binds the real function; the patch is then undone cleanly.
    from fabfile.commands import trust
    from fabfile.transport import session

    def reached(*_a: Any, **_k: Any) -> Any:
        raise Reached("validation passed")

    mp = pytest.MonkeyPatch()
    mp.setattr(session.HostSession, "open", classmethod(reached))
    mp.setattr(trust, "fetch_key", reached)
    scratch = _DIR / "cwd"
    scratch.mkdir(exist_ok=True)
    mp.chdir(scratch)
    yield
    mp.undo()


def run_task(task_name: str, inv: Path, **flags: Any) -> tuple[int, str, str]:
    """The command line as typed (`inv TASK --flag=value ...`), parsed by the tool's own Program, in-process."""
    argv = [task_name]
    params = inspect.signature(TASKS[task_name].body).parameters
    for k, v in flags.items():
        v = "." + v if k in PATH_PARAMS and isinstance(v, str) and v.startswith("/") else v
        if isinstance(params[k].default, bool):  # a switch: given (any true value) or not
            argv += [_flag(k)] if v else []
        elif v is True:
            argv.append(_flag(k))
        elif v is not False and v is not None:
            argv.append(f"{_flag(k)}={v}")  # `=`: a value that starts with '-' is still this flag's value
    r = run_cli(*argv, inventory=inv if "inventory" in params else None, cwd=Path.cwd())
    return r.returncode, r.stdout, r.stderr


def _flag(param: str) -> str:
    return "--" + param.rstrip("_").replace("_", "-")  # `for_` is --for


@FUZZ
@given(flag=st.sampled_from(FLAGS), value=FLAG_VALUES, dry=st.booleans())
def test_every_flag_of_every_task(flag: tuple[str, str], value: str, dry: bool, fuzz_inventory: Path,
                                  no_ssh: None) -> None:
    """Any value of any flag: exit 0 (or it reached the host), or exit 2 naming the flag; never a traceback."""
    name, param = flag
    extra: dict[str, Any] = dict(BASE_ARGS.get(name, {}))
    if name == "deploy" and dry:
        extra["dry_run"] = True
    extra[param] = value
    code, out, err = run_task(name, fuzz_inventory, **extra)
    assert "Traceback" not in out + err
    # 99 (or 1, where the command reports a host's failure as a row: a sweep's config, a router's member) means
    # the value passed validation.
    assert code in (0, 1, 2, 99), (name, param, value, code, err)
    if code == 2:
        named = _flag(param) in err or (param == "host" and "--host" in err)
        assert named, (name, param, value, err)


@pytest.mark.parametrize("name, param", [("sweep", "out"), ("bench", "out"), ("adopt", "write")])
def test_a_nul_byte_in_a_path_flag_is_refused_up_front(name: str, param: str, fuzz_inventory: Path,
                                                        no_ssh: None) -> None:
    """Found by the fuzzer above, now and then: `sweep --out 'x/<NUL>/y'` ran its configurations, then died writing
    its results with a traceback (pathlib's mkdir). A path flag no file system can hold is bad input: exit 2, the
    flag named, before any host is reached."""
    extra: dict[str, Any] = {**BASE_ARGS.get(name, {}), param: "x/\x00/y"}
    code, out, err = run_task(name, fuzz_inventory, **extra)
    assert code == 2 and _flag(param) in err and "NUL" in err and "Traceback" not in out + err, (code, err)


# Values that are valid must pass: (task, flag) -> strategy of valid values (waits up to a day: fabfile/flags.py).
VALID: dict[tuple[str, str], Any] = {
    ("deploy", "steps"): st.integers(0, 8).map(str),
    ("deploy", "timeout"): st.floats(0.5, tasks.flags.DAY_S).map(str),
    ("deploy", "lock_wait"): st.floats(0, 86400).map(str),
    ("deploy", "patch_mode"): st.sampled_from(["auto", "env", "engine", "scheduler", "sitecustomize"]),
    ("deploy", "batch"): st.one_of(st.integers(1, 50).map(str), st.integers(1, 100).map(_percent)),
    ("logs", "lines"): st.integers(1, 10**6).map(str),
    ("bench", "concurrency"): st.integers(1, 1024).map(str),
    ("bench", "num_prompts"): st.integers(1, 10**5).map(str),
    ("bench", "output_len"): st.integers(2, 4096).map(str),
    ("stop", "lock_wait"): st.integers(0, 86400).map(str),
    ("cancel", "timeout"): st.floats(0.1, tasks.flags.DAY_S).map(str),
    ("status", "host_timeout"): st.floats(0.1, tasks.flags.DAY_S).map(str),
    ("analyze", "accept_len"): st.floats(1.0, 9.0).map(str),
}


@FUZZ
@given(data=st.data())
def test_valid_flag_values_pass_validation(data: st.DataObject, fuzz_inventory: Path, no_ssh: None) -> None:
    name, param = data.draw(st.sampled_from(sorted(VALID)))
    value = data.draw(VALID[(name, param)])
    extra: dict[str, Any] = {**BASE_ARGS.get(name, {}), param: value}
    if name == "deploy":
        extra["dry_run"] = True
    code, _out, err = run_task(name, fuzz_inventory, **extra)
    assert code in (0, 99) or (code == 1 and "validation passed" in err), (name, param, value, err)


def test_fuzzing_covers_every_task_and_flag() -> None:
    """Every task with a value flag is fuzzed (a new task or flag is picked up without editing this file)."""
    assert {n for n, _ in FLAGS} >= set(TASKS) - {"render"} - {n for n, t in TASKS.items()
                                                               if not set(inspect.signature(t.body).parameters)
                                                               - {"c", "inventory"} - BOOL_PARAMS}
    assert ("deploy", "lock_wait") in FLAGS and ("cancel", "timeout") in FLAGS
    assert math.isfinite(1.0)


# ---------------------------------------------------------------------------------------------------------------
# Every numeric flag of every command: finite, bounded, refused in one short line

BAD_NUMBERS = ["nan", "NaN", "inf", "-inf", "1e309", "0x10", "", "-1", "9" * 10_000]
# What a command needs besides the fuzzed flag to reach that flag's validation. No `--once` for watch: it refuses
# --for and --duration before reading them, so --for was never reached. A --duration bounds the live view instead,
# should a value pass that must not (an unreachable host is an alarm at its first sample, so a valid value ends it
# at once).
NUMERIC_CONTEXT: dict[str, dict[str, Any]] = {
    "sweep": {"steps": "0,2"},
    "watch": {"duration": "5"},
    "analyze": {"baseline_ms": "12.2", "verify_ms": "18.7"},
    "diff": {"new": "now"},
    "profile": {"trace": True},   # --trace-steps only with --trace
}
# Plain numbers, one of which any numeric flag takes (counts from 1, seconds, a share, a list, a min/max pair).
PROBES = ["0", "1", "2", "4", "16", "2,4"]
# The flags that take a number (or a comma list of them), by their specs: found by behaviour below, and the two must
# agree (a spec that says "whole" of a flag its task reads as text, or the other way round, fails).
SPEC_NUMERIC = {(t, f.param) for f in flagspec.FLAGS if f.value.numeric for t in f.tasks}
# An SGLang release ("2" is one, as is 0.5.11) passes the probes below where its task reads it, and is no number.
RELEASES = {(t, f.param) for f in flagspec.FLAGS if f.value.kind == "release" for t in f.tasks}


def _numeric_run(name: str, param: str, value: str, inv: Path) -> tuple[int, str, str]:
    extra = {k: v for k, v in NUMERIC_CONTEXT.get(name, {}).items() if k != param}
    return run_task(name, inv, **extra, **{param: value})


# The two tests of the numeric flags run on one worker (`--dist loadgroup`): finding the flags runs hundreds of
# commands, once.
NUMERIC_FLAGS = pytest.mark.xdist_group("numeric-flags")


@pytest.fixture(scope="module")
def numeric_flags(fuzz_inventory: Path, no_ssh: None) -> list[tuple[str, str]]:
    """The flags that take a number, found from the tasks' signatures by behaviour: a word is refused (exit 2 naming
    the flag) where a plain number passes validation."""
    found = []
    for name, param in FLAGS:
        code, _out, err = _numeric_run(name, param, "three", fuzz_inventory)
        if code != 2 or _flag(param) not in err:
            continue
        if any(_numeric_run(name, param, v, fuzz_inventory)[0] in (0, 1, 99) for v in PROBES):
            found.append((name, param))
    return found


@NUMERIC_FLAGS
def test_every_flag_is_numeric_by_its_spec_and_by_behaviour(numeric_flags: list[tuple[str, str]]) -> None:
    numeric = set(numeric_flags) - RELEASES
    assert {("watch", "for_"), ("deploy", "batch"), ("deploy", "timeout"), ("sweep", "steps"), ("diff", "steps"),
            ("analyze", "baseline_ms"), ("logs", "lines"), ("bench", "num_prompts")} <= numeric
    by_spec = {f for f in FLAGS if f in SPEC_NUMERIC}
    assert numeric == by_spec, f"numeric by behaviour, not by spec: {sorted(numeric - by_spec)}; by spec, not by " \
                               f"behaviour (a number its probes never passed?): {sorted(by_spec - numeric)}"


@NUMERIC_FLAGS
def test_every_numeric_flag_refuses_what_is_no_sane_number(numeric_flags: list[tuple[str, str]],
                                                           fuzz_inventory: Path, no_ssh: None) -> None:
    """NaN, ±inf, 1e309, hex, empty, negative and 10,000 digits, on every numeric flag of every command: exit 2,
    before any host is reached, in one line that names the flag and quotes a long value only in part."""
    for name, param in numeric_flags:
        for value in BAD_NUMBERS:
            code, out, err = _numeric_run(name, param, value, fuzz_inventory)
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1 and _flag(param) in lines[0], (name, param, value[:20], code, err)
            assert len(lines[0]) <= 200 and "Traceback" not in out + err, (name, param, value[:20], err[:300])


def test_no_refusal_echoes_a_long_value_whole(fuzz_inventory: Path, no_ssh: None) -> None:
    """Any flag given 10,000 characters: a refusal quotes at most the first 40 of them (48 refusals printed them
    all: --host, --router, --patch-mode, --keep, --old, the numbers...)."""
    for name, param in FLAGS:
        for value in ("x" * 10_000, "9" * 10_000, "-" + "y" * 10_000):
            code, _out, err = run_task(name, fuzz_inventory, **{**BASE_ARGS.get(name, {}), param: value})
            if code == 2:
                assert len(err) < 600 and value[1:42] not in err, (name, param, value[:3], err[:300])


@pytest.mark.parametrize("args, words", [
    ({"for_": "nan"}, "--for: nan is not a finite number"),
    ({"for_": "inf"}, "--for: inf is not a finite number"),
    ({"interval": "1e309"}, "--interval: 1e309 is not a finite number"),
])
def test_watch_for_nan_is_refused(args: dict[str, str], words: str, fuzz_inventory: Path, no_ssh: None) -> None:
    """`inv watch --for nan` was accepted: the figure never stayed below its threshold "for nan seconds", so the
    alarm never fired."""
    code, _out, err = run_task("watch", fuzz_inventory, **{**NUMERIC_CONTEXT["watch"], **args})
    assert code == 2 and words in err, err


def test_a_huge_batch_or_timeout_says_what_is_wrong(fuzz_inventory: Path, no_ssh: None) -> None:
    """`deploy --batch <10,000 digits>` died with int()'s "Exceeds the limit (4300 digits)" traceback; a huge
    --timeout said "must be positive"; and every refusal echoed the whole value."""
    code, out, err = run_task("deploy", fuzz_inventory, batch="9" * 10_000)
    assert code == 2 and "Traceback" not in out + err, err[-300:]
    assert "--batch: " + "9" * 40 + "…(10000 characters) is above the largest allowed" in err, err[:300]
    code, _out, err = run_task("deploy", fuzz_inventory, timeout="1e309")
    assert code == 2 and "--timeout: 1e309 is not a finite number" in err, err
    code, _out, err = run_task("deploy", fuzz_inventory, timeout="100000")
    assert code == 2 and "--timeout: 100000 is above the largest allowed, 86400 s" in err, err
    code, _out, err = run_task("deploy", fuzz_inventory, patch_mode="x" * 10_000)
    assert code == 2 and "(10000 characters)" in err and len(err) < 300, err[:300]


# ---------------------------------------------------------------------------------------------------------------
# A sample of valid values taken to a real host: they arrive in a scheduler's environment byte for byte.


def test_deeply_nested_yaml_is_one_line() -> None:
    _inv, err, _file = _load_text("hosts: " + "[" * 3000 + "]" * 3000 + "\n")
    assert err is not None and err.exit_code == 2 and len(err.message.splitlines()) == 1, err
