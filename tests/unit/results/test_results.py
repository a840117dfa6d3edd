"""What every command comes back with: its ``--json`` document (one shape for one host or many) and its exit code,
judged by the result itself (``fabfile.results``), never by what prints it. In-process against scripted hosts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabfile.commands.operations import check_env, check_env_hosts, gpus, status
from fabfile.errors import ConnectError, FlagError, PreflightError
from fabfile.inventory import hosts as inventory
from fabfile.present.output import show
from fabfile.transport.session import connector
from tests.support.fakehost import FakeFleet

INV = """
defaults:
  python: /opt/venv/bin/python3
  model: /models/m
  draft_model: /models/d
hosts:
  a: {ssh_host: gpu-a}
  b: {ssh_host: gpu-b}
"""

UP = {"running": True, "record": {"deploy_id": "d", "config_name": "baseline", "pid": 7},
      "health": {"status": 200, "path": "/health_generate"}}


def _evidence(proven: bool) -> dict[str, Any]:
    row = {"rank": 0, "pid": 41, "var": "NCCL_P2P_LEVEL", "expected": "SYS", "observed": "SYS" if proven else None,
           "status": "proven" if proven else "unconfirmed", "evidence": "nccl_log" if proven else None}
    return {"evaluation": {"ok": proven, "rows": [row], "hints": [], "summary": {row["status"]: 1}},
            "evidence": {"facts": {"sglang_version": "0.5.23"}, "schedulers": [{"pid": 41}]}}


@pytest.fixture
def inv(tmp_path: Path) -> inventory.Inventory:
    p = tmp_path / "inventory.yaml"
    p.write_text(INV)
    return inventory.load(p)


def test_status_check_env_and_gpus_have_one_json_shape_for_one_host_or_many(inv: inventory.Inventory) -> None:
    """One host's document was its own keys at the top (check-env: the host's evaluation alone), several hosts'
    {"hosts": [...]}: a script had to read two shapes."""
    fleet = FakeFleet({n: {"status": UP, "check_env": _evidence(True), "gpus": {"available": False}} for n in "ab"})
    with connector(fleet):
        for command in (status, check_env, gpus):
            one = command(inv, inv.select("a")).as_dict()
            many = command(inv, inv.select("a,b")).as_dict()
            assert set(one) == set(many) == {"ok", "hosts"}, (command.__name__, one)
            assert [d["host"] for d in one["hosts"]] == ["a"] and [d["host"] for d in many["hosts"]] == ["a", "b"]
            assert set(one["hosts"][0]) == set(many["hosts"][0])
    assert one["ok"] is True and "data" in one["hosts"][0]
    fleet = FakeFleet({"a": {"check_env": _evidence(True)}}, unreachable=("b",))
    with connector(fleet):
        down = check_env(inv, inv.select("b"))
    doc = down.as_dict()
    assert down.exit_code == 1 and set(doc) == {"ok", "hosts"} and doc["ok"] is False
    assert doc["hosts"][0]["host"] == "b" and doc["hosts"][0]["error"]["kind"] == "ConnectError"


def test_check_env_json_is_the_results_document_and_its_exit_code_comes_from_the_result(
        inv: inventory.Inventory, capsys: pytest.CaptureFixture[str]) -> None:
    """check-env's exit code was computed in the presentation layer (``checkenv_report.exit_code``) and its JSON
    built there too; now both come from the result."""
    fleet = FakeFleet({"a": {"check_env": _evidence(False)}, "b": {"check_env": _evidence(True)}})
    with connector(fleet):
        r = check_env(inv, inv.select("a"))
        res = check_env_hosts(inv, inv.select("a"))
        show(res.document, res.for_people, as_json=True)
        code = res.exit_code
        both = check_env(inv, inv.select("b,a"))
        proven = check_env(inv, inv.select("b"))
    doc = json.loads(capsys.readouterr().out)
    assert r.exit_code == code == 1 and both.exit_code == 1 and proven.exit_code == 0
    assert doc == json.loads(json.dumps(r.as_dict(), default=str))
    host = doc["hosts"][0]
    assert doc["ok"] is False and host["host"] == "a" and host["ok"] is False
    assert host["rows"][0]["status"] == "unconfirmed" and host["facts"]["sglang_version"] == "0.5.23"
    assert [d["ok"] for d in both.as_dict()["hosts"]] == [True, False]


def _plan() -> Any:
    from fabfile.plan.deploy_plan import Options, build

    return build(inventory.load(Path(__file__).parents[3] / "inventory.yaml").hosts["gpu1"], Options(steps=3))


def test_deploys_rollouts_and_routers_carry_their_exit_code() -> None:
    """The deploy's exit code was worked out by the dispatcher (``refused_code``, ``r.error.exit_code``)."""
    from fabfile.results.deploys import DeployResult, HostRollout, RolloutResult, RouterResult

    plan = _plan()
    ok = DeployResult(host="gpu1", ok=True, plan=plan)
    bad_input = DeployResult(host="gpu1", ok=False, plan=plan,
                             error=FlagError("--steps: SGLang 0.5.2 does not accept it", host="gpu1"))
    failed = DeployResult(host="gpu1", ok=False, plan=plan)
    assert (ok.exit_code, bad_input.exit_code, failed.exit_code) == (0, 2, 1)
    h = plan.host

    def rollout(d: DeployResult, **extra: Any) -> RolloutResult:
        outcome = "deployed" if d.ok else "failed (unchanged)"
        return RolloutResult("rolling", [[h.name]], [HostRollout(h, 1, d, outcome=outcome)], extra=extra)

    assert rollout(ok).exit_code == 0
    assert rollout(bad_input, preflight_failed=[h.name]).exit_code == 2  # refused before any host: bad input
    assert rollout(bad_input).exit_code == 1 and rollout(failed, preflight_failed=[h.name]).exit_code == 1
    # A host that does not meet the inventory refuses at preflight, nothing touched: exit 2 (it was 1), one host or
    # a fleet; a host that could not be reached there is no refusal of bad input: 1, try again.
    missing = PreflightError("model path /models/m does not exist on the host", host="gpu1")
    refused = DeployResult(host="gpu1", ok=False, plan=plan, error=missing)
    assert refused.exit_code == 2 and rollout(refused, preflight_failed=[h.name]).exit_code == 2
    unreachable = DeployResult(host="gpu1", ok=False, plan=plan, error=ConnectError("cannot resolve gpu1"))
    assert rollout(unreachable, preflight_failed=[h.name]).exit_code == 1
    r = inventory.Router(name="front", host="gpu1", members=("gpu1",), group="g", port=30000, listen="0.0.0.0",
                         policy="round_robin", python="python3", args=())
    assert RouterResult(r).exit_code == 0
    assert RouterResult(r, error=FlagError("--router: no such router")).exit_code == 2


def test_deploy_previous_json_has_the_same_shape_for_one_host(inv: inventory.Inventory,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`deploy --previous --json` was the host's document alone for one host, {"ok", "hosts"} for several."""
    from fabfile.commands.recorded import start_recorded

    fleet = FakeFleet({"a": {"records": {"current": {"deploy_id": "d-2"}, "previous": None, "history": []}}})
    with connector(fleet):
        res = start_recorded(inv, inv.select("a"), deploy_id=None, dry_run=False, yes=False, as_json=True)
        show(res.document, res.for_people, as_json=True)
        code = res.exit_code
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and set(doc) == {"ok", "hosts"} and doc["ok"] is False
    assert doc["hosts"][0]["host"] == "a" and "nothing to go back to" in doc["hosts"][0]["error"]["message"]


def test_a_sweep_judges_its_exit_code_from_its_document() -> None:
    """The sweep's exit code was worked out at the end of the command from its rows; the result now says it."""
    from fabfile.results.documents import SweepResult

    rows = [{"config": "baseline", "ok": True}, {"config": "eagle3-s2-k1-d3", "ok": True}]
    assert SweepResult({"rows": rows, "running": "eagle3-s2-k1-d3"}).exit_code == 0
    failed = [*rows, {"config": "eagle3-s9-k1-d10", "ok": False}]
    assert SweepResult({"rows": failed, "running": "baseline"}).exit_code == 1
    assert SweepResult({"rows": rows, "running": None}).exit_code == 1  # the final deploy failed: nothing serves
    assert SweepResult({"rows": rows, "running": "baseline", "sla": {"unmet_levels": [8]}}).exit_code == 1
    assert SweepResult({"rows": rows}).as_dict() == {"rows": rows}
