"""Orchestration in-process against scripted hosts (``tests/fakehost.py``): the fan-out engine, the multi-host
commands and a rollout's final observation run their real code with no SSH and no subprocess."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabfile import inventory
from fabfile.errors import ConnectError, HostTimeoutError, LockHeldError
from fabfile.fanout import for_each_host
from fabfile.operations import stop_hosts
from fabfile.rollout import HostRollout, observe
from fabfile.session import connector
from tests.fakehost import FakeFleet

INV = """
defaults:
  python: /opt/venv/bin/python3
  model: /models/m
  draft_model: /models/d
  port: 9000
hosts:
  a: {ssh_host: gpu-a, gpus: 2, tp: 2}
  b: {ssh_host: gpu-b}
  c: {ssh_host: gpu-c}
"""

STOPPED = {"terminated": [{"pid": 11, "cmdline": "python -m sglang.launch_server"}], "killed": [], "survivors": [],
           "routers_running": []}


@pytest.fixture
def inv(tmp_path: Path) -> inventory.Inventory:
    p = tmp_path / "inventory.yaml"
    p.write_text(INV)
    return inventory.load(p)


def _hosts(inv: inventory.Inventory, *names: str) -> list[inventory.Host]:
    return [inv.hosts[n] for n in names]


def test_a_hung_host_times_out_alone_and_its_session_is_closed(inv: inventory.Inventory) -> None:
    def hang(_: dict[str, Any]) -> dict[str, Any]:
        fleet.transports["b"].aborted.wait(60)  # as a host whose sshd stopped answering: only an abort ends it
        return {"late": True}

    fleet = FakeFleet({"a": {"gpus": {"n": 1}}, "b": {"gpus": hang}, "c": {"gpus": {"n": 3}}})
    with connector(fleet):
        outcomes = for_each_host(inv, _hosts(inv, "a", "b", "c"), lambda s: s.call("gpus", {}), host_timeout=0.5)
    by = {o.host.name: o for o in outcomes}
    assert [o.host.name for o in outcomes] == ["a", "b", "c"]  # in the order asked, not the order answered
    assert by["a"].data == {"n": 1} and by["c"].data == {"n": 3}
    assert isinstance(by["b"].error, HostTimeoutError) and by["b"].error.host == "b"
    assert "no answer within" in by["b"].error.message
    assert fleet.transports["b"].aborted.wait(10)  # the main thread closed the hung session


def test_an_unreachable_host_is_one_failed_row(inv: inventory.Inventory) -> None:
    fleet = FakeFleet({"a": {"gpus": {"n": 1}}}, unreachable=("b",))
    with connector(fleet):
        outcomes = for_each_host(inv, _hosts(inv, "a", "b"), lambda s: s.call("gpus", {}))
    assert outcomes[0].ok and isinstance(outcomes[1].error, ConnectError) and outcomes[1].error.host == "b"


def test_stop_sends_one_request_shape_and_reports_the_worst_exit_code(inv: inventory.Inventory,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    busy = {"kind": "lock_held", "message": "another deploy holds the lock", "hint": "wait for it"}
    fleet = FakeFleet({"a": {"stop": STOPPED}, "b": {"stop": busy}, "c": {"stop": STOPPED}})
    with connector(fleet):
        code = stop_hosts(inv, _hosts(inv, "a", "b", "c"), dry_run=False, as_json=False)
    sent = fleet.requests("stop")
    a, c = inv.hosts["a"], inv.hosts["c"]
    assert sent["a"]["target_gpus"] == [0, 1] and sent["c"]["target_gpus"] == [0]
    assert sent["a"]["grace"] == a.timeouts.stop_grace and sent["a"]["lock_wait"] == a.timeouts.lock_wait
    assert sent["a"]["dry_run"] is False and sent["a"]["state_dir"] == a.state_dir
    stop_timeouts = {h: t for h, v, _, t in fleet.calls if v == "stop"}
    assert stop_timeouts["c"] == 3 * c.timeouts.stop_grace + 30
    printed = capsys.readouterr()
    assert "a: stopped 1 process(es)" in printed.out
    assert "c: stopped 1 process(es)" in printed.out and "another deploy holds the lock" in printed.err
    assert code == LockHeldError("x").exit_code != 0


def test_a_rollouts_table_shows_what_each_host_says_runs(inv: inventory.Inventory) -> None:
    running = {"running": True, "record": {"deploy_id": "d1", "config_name": "eagle-3", "pid": 42},
               "health": {"status": 200, "path": "/health_generate"}}
    gone = {"running": False, "record": {"deploy_id": "d0", "config_name": "base", "pid": 7, "status": "running"}}
    fleet = FakeFleet({"a": {"status": running}, "b": {"status": gone}}, unreachable=("c",))
    rows = [HostRollout(h, batch=1) for h in _hosts(inv, "a", "b", "c")]
    with connector(fleet):
        observe(inv, rows)
    a, b, c = rows
    assert (a.config_now, a.pid_now, a.observed and a.observed["state"]) == ("eagle-3", 42, "running")
    assert b.config_now is None and b.observed and b.observed["state"] == "exited"
    assert "is gone" in str(b.observed["problem"])
    assert c.config_now == "unknown" and c.observe_error and "cannot connect" in c.observe_error


def test_sessions_open_for_real_again_after_the_block(inv: inventory.Inventory) -> None:
    from fabfile import session

    with connector(FakeFleet({})):
        assert session._connector is not None
    assert session._connector is None
