"""A rolling rollout in-process against scripted hosts (``tests/support/fakehost.py``): the real ``run_rollout`` →
``deploy_host`` → preflight / upload / deploy, with no SSH and no subprocess. What a user relies on: a failed batch
stops the rollout before the next batch is touched, and ``--rollback-on-failure`` puts back exactly the hosts this
run changed (the previous deploy started again where there was one, the server stopped and the files restored
where nothing ran before); and a deploy whose SSH link drops is followed to its end through its journal on
the host (re-attach), never started twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabfile.commands.rollout import parse_batch, run_rollout
from fabfile.inventory import hosts as inventory
from fabfile.plan.deploy_plan import Options
from fabfile.transport.session import connector
from tests.support.fakehost import FakeFleet

INV = """
defaults:
  python: /opt/venv/bin/python3
  model: /models/m
  draft_model: /models/d
  port: 9000
hosts:
  a: {ssh_host: gpu-a}
  b: {ssh_host: gpu-b}
  c: {ssh_host: gpu-c}
"""

FACTS = {"problems": [], "unsafe": [], "home": "/home/u",
         "sglang": {"version": "0.5.5", "site_packages": "/opt/venv/lib/python3.11/site-packages"},
         "gpu": {"gpus": [{"index": 0}]}}
STOPPED = {"terminated": [{"pid": 11, "cmdline": "python -m sglang.launch_server"}], "killed": [], "survivors": [],
           "routers_running": []}
RUNNING_BEFORE = {"running": True, "redeployable": True, "deploy_id": "old-a", "config_name": "baseline"}


@pytest.fixture
def inv(tmp_path: Path) -> inventory.Inventory:
    p = tmp_path / "inventory.yaml"
    p.write_text(INV)
    return inventory.load(p)


def _deployed(previous: dict[str, Any] | None) -> Any:
    def reply(req: dict[str, Any]) -> dict[str, Any]:
        return {"pid": 100, "deploy_id": req["deploy_id"], "config_name": "eagle3", "previous": previous}
    return reply


def _failed_after_changing(previous: dict[str, Any] | None) -> dict[str, Any]:
    return {"kind": "launch_failed", "message": "the server exited with code 1", "hint": "read its log",
            "details": {"changed": True, "previous": previous}}


def _status(config: str | None) -> dict[str, Any]:
    if config is None:
        return {"running": False, "record": {}}
    return {"running": True, "record": {"deploy_id": "x", "config_name": config, "pid": 7},
            "health": {"status": 200, "path": "/health_generate"}}


def test_a_failed_batch_stops_the_rollout_before_the_next_batch(inv: inventory.Inventory) -> None:
    fleet = FakeFleet({
        "a": {"facts": FACTS, "deploy": _deployed(None), "status": _status("eagle3")},
        "b": {"facts": FACTS, "deploy": _failed_after_changing(None), "status": _status(None)},
        "c": {"facts": FACTS, "status": _status("baseline")},
    })
    hosts = [inv.hosts[n] for n in ("a", "b", "c")]
    with connector(fleet):
        res = run_rollout(inv, hosts, Options(steps=1), strategy="rolling", batch=parse_batch("1"), canary=True,
                          rollback_on_failure=False, quiet=True)
    by = {r.host.name: r for r in res.hosts}
    assert res.batches == [["a"], ["b"], ["c"]] and res.stopped_after_batch == 2 and not res.ok
    assert set(fleet.requests("deploy")) == {"a", "b"}  # c was never touched
    assert by["a"].outcome == "deployed" and by["b"].outcome == "failed"
    assert by["c"].outcome == "not started (rollout stopped)"
    assert not fleet.requests("redeploy") and not fleet.requests("stop")  # no rollback unless asked
    # what each host runs is what it says now, not what this run believes
    assert (by["a"].config_now, by["b"].config_now, by["c"].config_now) == ("eagle3", None, "baseline")


def test_every_host_passes_preflight_before_the_first_host_is_touched(inv: inventory.Inventory) -> None:
    """A wrong model path on the last host refuses the whole rollout before the canary is deployed (it cost two model
    loads: the canary's deploy and its rollback)."""
    bad = {**FACTS, "problems": ["model path /models/m does not exist"]}
    fleet = FakeFleet({
        "a": {"facts": FACTS, "deploy": _deployed(None), "status": _status("baseline")},
        "b": {"facts": FACTS, "deploy": _deployed(None), "status": _status("baseline")},
        "c": {"facts": bad, "deploy": _deployed(None), "status": _status("baseline")},
    })
    hosts = [inv.hosts[n] for n in ("a", "b", "c")]
    with connector(fleet):
        res = run_rollout(inv, hosts, Options(steps=1), strategy="rolling", batch=parse_batch("1"), canary=True,
                          rollback_on_failure=True, quiet=True)
    by = {r.host.name: r for r in res.hosts}
    assert not res.ok and res.extra["preflight_failed"] == ["c"]
    assert res.exit_code == 2  # refused before any host was touched (it was 1): the README's bad-input code
    assert not fleet.requests("deploy") and not fleet.requests("redeploy") and not fleet.requests("stop")
    assert by["c"].outcome == "failed (unchanged)" and by["c"].deploy is not None
    assert by["c"].deploy.error is not None and "does not exist" in by["c"].deploy.error.message
    assert by["a"].outcome == by["b"].outcome == "not started (preflight failed on c)"
    assert by["a"].config_now == "baseline"  # still what ran before


def test_rollback_on_failure_puts_back_only_the_hosts_this_run_changed(inv: inventory.Inventory) -> None:
    def records_of_b(_: dict[str, Any]) -> dict[str, Any]:
        # b's latest record is this run's failed deploy; nothing was recorded before it
        return {"current": {"deploy_id": fleet.requests("deploy")["b"]["deploy_id"]}, "previous": None}

    fleet = FakeFleet({
        "a": {"facts": FACTS, "deploy": _deployed(RUNNING_BEFORE), "status": _status("baseline"),
              "redeploy": {"deploy_id": "back-a", "config_name": "baseline", "pid": 55}},
        "b": {"facts": FACTS, "deploy": _failed_after_changing(None), "status": _status(None), "stop": STOPPED,
              "records": records_of_b, "patch_rollback": {"files": [{"path": "engine.py", "action": "restored"}]}},
        "c": {"facts": FACTS, "status": _status("baseline")},
    })
    hosts = [inv.hosts[n] for n in ("a", "b", "c")]
    with connector(fleet):
        res = run_rollout(inv, hosts, Options(steps=1), strategy="rolling", batch=parse_batch("1"), canary=True,
                          rollback_on_failure=True, quiet=True)
    by = {r.host.name: r for r in res.hosts}
    assert res.stopped_after_batch == 2 and res.rolled_back and not res.rollback_incomplete
    # a ran a deploy before this run: that deploy is started again
    assert fleet.requests("redeploy")["a"]["from_deploy_id"] == "old-a"
    assert by["a"].outcome == "rolled back" and by["a"].rollback == {
        "action": "redeployed", "deploy_id": "back-a", "from_deploy_id": "old-a", "config": "baseline"}
    # b ran nothing before: its server is stopped and its SGLang files restored
    assert "b" in fleet.requests("stop") and fleet.requests("patch_rollback")["b"]["dry_run"] is False
    assert by["b"].outcome == "rolled back (stopped)"
    assert by["b"].rollback and by["b"].rollback["patches"] == {"action": "restored", "files": 1}
    # c was not touched by the run, so the rollback leaves it alone too
    assert not any(h == "c" and v not in ("status", "facts") for h, v, _, _ in fleet.calls)
    assert by["c"].outcome == "not started (rollout stopped)" and by["c"].config_now == "baseline"


def test_a_deploy_whose_link_drops_is_followed_to_its_end_through_its_journal(inv: inventory.Inventory) -> None:
    from fabfile.commands.deploy import deploy_host
    from fabfile.errors import ConnectionLost
    from fabfile.present.progress import Reporter

    def drop(_: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionLost("the SSH session dropped", host="a")

    def attach(req: dict[str, Any]) -> dict[str, Any]:
        return {"result": {"ok": True, "data": {"pid": 100, "deploy_id": req["deploy_id"], "config_name": "eagle3"}}}

    fleet = FakeFleet({"a": {"facts": FACTS, "deploy": drop, "attach": attach}})
    with connector(fleet):
        r = deploy_host(inv, inv.hosts["a"], Options(steps=1), Reporter("a", enabled=False))
    sent, followed = fleet.requests("deploy")["a"], fleet.requests("attach")["a"]
    assert r.ok and r.record["pid"] == 100
    # the same deploy is followed, from its journal on the host, not started again
    assert followed["deploy_id"] == sent["deploy_id"] == r.plan.deploy_id
    assert sent["journal"] == f"{sent['state_dir']}/deploys/{sent['deploy_id']}.events"
    assert [v for h, v, _, _ in fleet.calls if v in ("deploy", "attach")] == ["deploy", "attach"]


def test_a_reattached_deploy_that_failed_on_the_host_is_a_failure_saying_so(inv: inventory.Inventory) -> None:
    from fabfile.commands.deploy import deploy_host
    from fabfile.errors import ConnectionLost
    from fabfile.present.progress import Reporter

    def drop(_: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionLost("the SSH session dropped", host="a")

    failed = {"kind": "launch_failed", "message": "the server exited with code 1", "details": {"changed": True}}
    fleet = FakeFleet({"a": {"facts": FACTS, "deploy": drop, "attach": {"result": {"ok": False, "error": failed}}}})
    with connector(fleet):
        r = deploy_host(inv, inv.hosts["a"], Options(steps=1), Reporter("a", enabled=False))
    assert not r.ok and r.error is not None and r.error.message == "the server exited with code 1"
    assert r.error.details["changed"] is True and r.remote_started and not r.outcome_unknown


def test_a_deploy_lost_between_two_steps_says_so_when_it_happens(inv: inventory.Inventory) -> None:
    """The link died after one step's end reached the client and before the next one's start did: no step is in
    flight, and the host's ✗ line used to wait for the summary printed after the rollback (in a parallel deploy the
    other hosts' lines went on as if nothing had happened). It is printed once, when the deploy gives up."""
    import io

    from rich.console import Console

    from fabfile.commands.deploy import deploy_host
    from fabfile.errors import ConnectError, ConnectionLost
    from fabfile.present.progress import Reporter

    def drop(_: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionLost("the SSH session dropped", host="a")

    def unreachable(_: dict[str, Any]) -> dict[str, Any]:
        raise ConnectError("could not open an SSH session to gpu-a", host="a")

    screen = io.StringIO()
    reporter = Reporter("a", console=Console(file=screen, width=120, no_color=True))
    fleet = FakeFleet({"a": {"facts": FACTS, "deploy": drop, "attach": unreachable}})
    with connector(fleet):
        r = deploy_host(inv, inv.hosts["a"], Options(steps=1), reporter)
    assert not r.ok
    failures = [line for line in screen.getvalue().splitlines() if line.startswith("✗")]
    assert len(failures) == 1 and failures[0].split()[:4] == ["✗", "a", "between", "steps"], screen.getvalue()
    assert "since the deploy began" in failures[0]
    # a failed step already said it: no second ✗ line
    reporter.step_start("wait_ready")
    reporter.step_end("wait_ready", False, message="the server exited")
    reporter.failed_between_steps()
    assert sum(line.startswith("✗") for line in screen.getvalue().splitlines()) == 2
