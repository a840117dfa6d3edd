"""The agent and the client share one table of verbs and error kinds (fabfile/remote/protocol.py). These tests read
the agent's source, so a kind raised on the host that the client does not know (it would lose its category, exit
code and hint) fails here, and so does a kind in the table that nothing raises any more."""

from __future__ import annotations

import ast
import functools
import typing
from pathlib import Path

from fabfile import errors
from fabfile.remote import protocol, verbs
from fabfile.remote.verbs import TABLE
from tests.support import sources

REMOTE = Path(protocol.__file__).resolve().parent


def _str_constants(node: ast.AST) -> set[str]:
    """String literals a kind argument can evaluate to: a constant, or either branch of ``a if c else b``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _str_constants(node.body) | _str_constants(node.orelse)
    return set()


def _func_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


@functools.cache  # three tests read the same scan of the agent's files
def raised_kinds() -> dict[str, list[str]]:
    """kind -> ["file:line", ...] for every ``AgentError(kind, ...)`` in the agent, through kind-forwarding helpers.

    A helper is a function whose first parameter is ``kind`` and that passes it on as AgentError's first argument;
    its callers' literal kinds count. Any other non-literal kind is a failure: the scan could not see it.
    """
    trees = {str(p.relative_to(REMOTE)): sources.parsed(p) for p in sources.modules(REMOTE)}
    helpers = {"AgentError"}
    for tree in trees.values():
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.args.args and fn.args.args[0].arg == "kind":
                helpers.add(fn.name)
    found: dict[str, list[str]] = {}
    opaque: list[str] = []

    class Scan(ast.NodeVisitor):
        def __init__(self, name: str) -> None:
            self.name = name
            self.stack: list[str] = []

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            self.stack.append(node.name)
            self.generic_visit(node)
            self.stack.pop()

        def visit_Call(self, call: ast.Call) -> None:
            self.generic_visit(call)
            fname = _func_name(call)
            if fname not in helpers:
                return
            arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "kind"), None)
            if arg is None:
                return
            kinds = _str_constants(arg)
            for k in kinds:
                found.setdefault(k, []).append(f"{self.name}:{call.lineno}")
            forwarded = isinstance(arg, ast.Name) and arg.id == "kind" and bool(self.stack) and \
                self.stack[-1] in helpers
            if not kinds and not forwarded:
                opaque.append(f"{self.name}:{call.lineno}")

    for name, tree in trees.items():
        Scan(name).visit(tree)
    assert not opaque, f"AgentError kinds the scan cannot read (use a literal or a `kind` helper): {opaque}"
    return found


def test_every_raised_kind_is_in_the_shared_table() -> None:
    raised = raised_kinds()
    missing = {k: where for k, where in raised.items() if k not in protocol.ERROR_KINDS}
    assert not missing, f"kinds the agent raises but the shared table lacks (add them to protocol.py): {missing}"


def test_every_kind_in_the_table_is_raised_somewhere() -> None:
    raised = raised_kinds()
    unused = sorted(set(protocol.ERROR_KINDS) - set(raised))
    assert not unused, f"kinds in protocol.ERROR_KINDS that nothing raises any more: {unused}"


def test_the_scan_sees_the_kinds_it_must() -> None:
    """The scanner itself: kinds raised through helpers and conditional expressions are found (the kinds that once
    lost their category included)."""
    raised = raised_kinds()
    for kind in ("mode_unsupported", "patch_busy", "write_failed", "anchor_ambiguous", "rollback_refused",
                 "lock_held", "internal_error", "disk_full"):
        assert kind in raised, kind


def test_every_category_is_an_exception_class_and_hints_are_sentences() -> None:
    for kind, (category, hint) in protocol.ERROR_KINDS.items():
        assert category in protocol.CATEGORIES, kind
        assert hint.strip(), kind
        cls = errors.class_of_kind(kind)
        # Exit 1 (a step failed), except bad input (a host path refused as unsafe, no server to adopt, a host
        # that does not meet the inventory at preflight): exit 2.
        bad_input = category in ("unsafe_path", "usage", "preflight")
        assert issubclass(cls, errors.SpecDeployError) and cls.exit_code == (2 if bad_input else 1)


def test_the_client_keeps_the_specific_class_and_hint() -> None:
    e = errors.from_agent({"kind": "patch_busy", "message": "Another specdeploy patch operation holds X."}, "h1")
    assert isinstance(e, errors.LockHeldError) and e.hint == protocol.ERROR_KINDS["patch_busy"][1]
    e = errors.from_agent({"kind": "write_failed", "message": "m", "hint": "the agent's own hint"}, "h1")
    assert isinstance(e, errors.PatchError) and e.hint == "the agent's own hint"
    e = errors.from_agent({"kind": "a_kind_from_a_newer_agent", "message": "m"}, "h1")
    assert type(e) is errors.RemoteError


# --- the verb table: each verb has a request and an answer shape, and its function is annotated with both -------

SESSION = Path(protocol.__file__).resolve().parent.parent / "transport" / "session.py"

def _sent_by_session() -> dict[str, list[str]]:
    """verb name -> the HostSession methods that send it (``self._call(verbs.X, ...)``), read from the source."""
    by_const = {name: v.name for name, v in vars(verbs).items() if isinstance(v, verbs.Verb)}
    tree = sources.parsed(SESSION)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HostSession")
    sent: dict[str, list[str]] = {}
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        for call in ast.walk(fn):
            if isinstance(call, ast.Call) and _func_name(call) == "_call" and call.args and \
                    isinstance(call.args[0], ast.Attribute):
                sent.setdefault(by_const[call.args[0].attr], []).append(fn.name)
    return sent


def test_every_verb_has_a_request_and_an_answer_shape_and_its_function_is_annotated_with_them() -> None:
    from typing import get_type_hints

    from tests.support.shapes import _is_typeddict

    assert len(TABLE) >= 20
    for name, verb in TABLE.items():
        assert verb.name == name
        for shape in (verb.request, verb.answer):
            assert _is_typeddict(shape) and shape.__module__ == protocol.__name__, (name, shape)
        fn = verb.function()  # the row names a function that exists
        hints = get_type_hints(fn, localns=vars(protocol))  # the agent imports its shapes for mypy only
        first = fn.__code__.co_varnames[0]
        assert hints.get(first) is verb.request, f"{name}: {fn.__qualname__}'s request is not {verb.request}"
        assert hints.get("return") is verb.answer, f"{name}: {fn.__qualname__} does not return {verb.answer}"


def test_each_verb_is_named_on_the_wire_as_its_constant_is_named_in_the_table() -> None:
    # check-env's verb was once "evidence" on the wire beside the constant EVIDENCE and the method check_env: one
    # name for one verb, so a grep for the command finds its verb on both sides
    constants = {k: v for k, v in vars(verbs).items() if isinstance(v, verbs.Verb)}
    assert {k.lower(): v for k, v in constants.items()} == TABLE
    assert TABLE["check_env"] is verbs.CHECK_ENV and "evidence" not in TABLE


def test_each_request_is_built_in_one_host_session_method_that_returns_the_answer_shape() -> None:
    from typing import get_type_hints

    from fabfile.transport.session import HostSession

    sent = _sent_by_session()
    assert set(sent) == set(TABLE), set(sent) ^ set(TABLE)
    for name, methods in sent.items():
        assert len(methods) == 1, f"{name} is sent by {methods}: build its request in one place"
        assert get_type_hints(getattr(HostSession, methods[0]), localns={"p": protocol})["return"] is \
            TABLE[name].answer, name
    # and nothing else in the client talks to the agent by a verb's name
    root = SESSION.parent.parent
    for path in sources.modules(root):
        if path.parent.name == "remote" or path.name in ("session.py", "agentclient.py"):
            continue
        for call in sources.nodes(path):
            if isinstance(call, ast.Call) and _func_name(call) in ("call", "_call"):
                assert not (call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value in TABLE), \
                    f"{path.relative_to(root)}:{call.lineno} sends {call.args[0].value!r} outside HostSession"


def test_the_shape_checker_sees_a_wrong_answer() -> None:
    from tests.support.shapes import problems

    proc: protocol.Proc = {"pid": 1, "ppid": 0, "pgid": 1, "state": "S", "start_ticks": 5, "cmdline": "sglang"}
    good: protocol.StopAnswer = {"routers_running": [], "terminated": [proc], "killed": [], "survivors": []}
    assert problems(good, protocol.StopAnswer) == []
    assert problems({"terminated": []}, protocol.StopAnswer) == [
        "answer: missing required key 'routers_running' (StopAnswer)"]
    assert problems({"routers_running": [], "restored": []}, protocol.StopAnswer) == [
        "answer: key 'restored' is not in StopAnswer"]
    assert problems({"routers_running": ["r"], "dry_run": 1}, protocol.StopAnswer) == [
        "answer.dry_run: 1 is a int, not a bool"]
    assert problems({"replayed": True, "result": None}, protocol.AttachAnswer) == [
        "answer.result: NoneType, not an object (AgentEvent)"]
    assert problems({"log_path": "/x", "offset": 2.5}, protocol.LogsAnswer) == [
        "answer.offset: 2.5 is a float, not a int"]
    logs: dict[str, object] = {"log_path": "/x", "offset": 2}
    assert problems(logs, protocol.LogsAnswer) == []
    # a record's timings are keyed by the protocol's step names: a step the protocol does not name is a drift
    assert problems({"lock": 0.01, "port_free": 0.0}, dict[protocol.StepName, float], "timings") == []
    assert problems({"lock": 0.01, "warm": 1.0}, dict[protocol.StepName, float], "timings") == [
        f"timings: key 'warm': 'warm' is not one of {typing.get_args(protocol.StepName)}"]


# --- request shapes: what the client sends is exactly what protocol.py says (the agent is typed against it) -------

SHAPE_INV = """
defaults:
  python: /opt/venv/bin/python3
  model: /models/m
  draft_model: /models/d
  port: 9000
hosts:
  a: {ssh_host: gpu-a, gpus: 2, tp: 2}
"""
FACTS = {"problems": [], "unsafe": [], "home": "/home/u",
         "sglang": {"version": "0.5.5", "site_packages": "/opt/venv/lib/python3.11/site-packages"},
         "gpu": {"gpus": [{"index": 0}, {"index": 1}]}}


def _keys(shape: type) -> tuple[frozenset[str], frozenset[str]]:
    return shape.__required_keys__, shape.__optional_keys__  # type: ignore[attr-defined]


def test_the_requests_the_client_sends_have_the_protocols_shapes(tmp_path: Path) -> None:
    from fabfile.commands.bench import BenchParams, run_bench
    from fabfile.commands.deploy import deploy_host
    from fabfile.commands.operations import expected_env
    from fabfile.commands.profile import ProfileParams, profile_host
    from fabfile.inventory import hosts as inventory
    from fabfile.plan.deploy_plan import Options
    from fabfile.present.progress import Reporter
    from fabfile.transport.session import HostSession, connector
    from tests.support.fakehost import FakeFleet

    (tmp_path / "inventory.yaml").write_text(SHAPE_INV)
    inv = inventory.load(tmp_path / "inventory.yaml")
    host = inv.hosts["a"]
    fleet = FakeFleet({"a": {"facts": FACTS, "patch_apply": {}, "deploy": {"pid": 1, "deploy_id": "x"},
                             "stop": {"terminated": [], "killed": [], "survivors": []},
                             "bench": {"bench_id": "b"}, "check_env": {}, "profile": {"ranks": []}}})
    with connector(fleet):
        assert deploy_host(inv, host, Options(), Reporter("a", enabled=False)).ok
        with HostSession.open(inv, host) as s:
            s.stop()
            run_bench(s, BenchParams(target_ci=0.05))
            s.check_env(expected_env(host))
        assert profile_host(inv, host, ProfileParams(trace=True)).exit_code == 0

    required, optional = _keys(protocol.DeployRequest)
    deploy = fleet.requests("deploy")["a"]
    # rollback_of: only a redeploy sets it; tune_id: only a tune's deploys
    assert set(deploy) == required and optional == {"rollback_of", "tune_id"}
    assert deploy["journal"] == f"{deploy['state_dir']}/deploys/{deploy['deploy_id']}.events"
    assert set(deploy["timeouts"]) == _keys(protocol.Timeouts)[0]
    assert set(deploy["summary"]) == _keys(protocol.LaunchSummary)[0]
    # the verbs whose state_dir HostSession.call fills in: every key the shape names, and no other
    for verb, shape in (("stop", protocol.StopRequest), ("bench", protocol.BenchRequest),
                        ("check_env", protocol.CheckEnvRequest), ("profile", protocol.ProfileRequest)):
        required, optional = _keys(shape)
        sent = set(fleet.requests(verb)["a"])
        assert required <= sent <= required | optional, (verb, sent ^ (required | optional))
