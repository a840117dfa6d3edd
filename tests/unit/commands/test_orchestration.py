"""Orchestration in-process against scripted hosts (``tests/support/fakehost.py``): the fan-out engine, the multi-host
commands and a rollout's final observation run their real code with no SSH and no subprocess."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from fabfile.commands.fanout import for_each_host
from fabfile.commands.operations import stop_hosts
from fabfile.commands.rollout import HostRollout, observe
from fabfile.errors import ConnectError, HostTimeoutError, LockHeldError
from fabfile.inventory import hosts as inventory
from fabfile.transport.session import connector
from tests.support.fakehost import FakeFleet

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
  n0: {ssh_host: node-0, address: 10.0.0.1, gpus: 2}
  n1: {ssh_host: node-1, address: 10.0.0.2, gpus: 2}
  n2: {ssh_host: node-2, address: 10.0.0.3, gpus: 2}
clusters:
  trio: {hosts: [n0, n1, n2], tp: 6}
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
        outcomes = for_each_host(inv, _hosts(inv, "a", "b", "c"), lambda s: s.gpus(), host_timeout=2)
    by = {o.host.name: o for o in outcomes}
    assert [o.host.name for o in outcomes] == ["a", "b", "c"]  # in the order asked, not the order answered
    assert by["a"].data == {"n": 1} and by["c"].data == {"n": 3}
    assert isinstance(by["b"].error, HostTimeoutError) and by["b"].error.host == "b"
    assert "no answer within" in by["b"].error.message
    assert fleet.transports["b"].aborted.wait(10)  # the main thread closed the hung session


def test_an_unreachable_host_is_one_failed_row(inv: inventory.Inventory) -> None:
    fleet = FakeFleet({"a": {"gpus": {"n": 1}}}, unreachable=("b",))
    with connector(fleet):
        outcomes = for_each_host(inv, _hosts(inv, "a", "b"), lambda s: s.gpus())
    assert outcomes[0].ok and isinstance(outcomes[1].error, ConnectError) and outcomes[1].error.host == "b"


def test_stop_sends_one_request_shape_and_reports_the_worst_exit_code(inv: inventory.Inventory,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    busy = {"kind": "lock_held", "message": "another deploy holds the lock", "hint": "wait for it"}
    fleet = FakeFleet({"a": {"stop": STOPPED}, "b": {"stop": busy}, "c": {"stop": STOPPED}})
    with connector(fleet):
        result = stop_hosts(inv, _hosts(inv, "a", "b", "c"), dry_run=False)
    result.for_people()
    code = result.exit_code
    sent = fleet.requests("stop")
    a, c = inv.hosts["a"], inv.hosts["c"]
    assert sent["a"]["target_gpus"] == [0, 1] and sent["c"]["target_gpus"] == [0]
    assert sent["a"]["grace"] == a.timeouts.stop_grace and sent["a"]["lock_wait"] == a.timeouts.lock_wait
    assert sent["a"]["dry_run"] is False and sent["a"]["state_dir"] == a.state_dir
    stop_timeouts = {h: t for h, v, _, t in fleet.calls if v == "stop"}
    # the agent may wait for a deploy in progress (its lock wait) before its own worst case: both bound the call
    assert stop_timeouts["c"] == c.timeouts.lock_wait + 3 * c.timeouts.stop_grace + 30
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
    from fabfile.transport import session

    with connector(FakeFleet({})):
        assert session._connector is not None
    assert session._connector is None


FACTS = {"problems": [], "unsafe": [], "home": "/home/u",
         "sglang": {"version": "0.5.5", "site_packages": "/opt/venv/lib/python3.11/site-packages"},
         "gpu": {"gpus": [{"index": 0}, {"index": 1}]}}


def test_a_failed_rank_cancels_the_waiting_ranks_and_stops_the_ones_up(inv: inventory.Inventory) -> None:
    from fabfile.commands.cluster import deploy_cluster
    from fabfile.plan.deploy_plan import Options

    up = {"pid": 100, "config_name": "eagle-3", "deploy_id": "x"}
    failed = {"kind": "launch_failed", "message": "rank 1 exited with code 1", "hint": "read its log"}
    cancel_seen = threading.Event()

    def waiting_rank(_: dict[str, Any]) -> dict[str, Any]:  # rank 2 waits at the rendezvous until cancelled
        assert cancel_seen.wait(30)
        # its agent had started the new server (so the host changed) and stopped it on the cancel
        return {"kind": "cancelled", "message": "cancelled: another rank failed", "details": {"changed": True}}

    def cancel(_: dict[str, Any]) -> dict[str, Any]:
        cancel_seen.set()
        return {}

    status = {"running": False, "record": {}}
    fleet = FakeFleet({
        "n0": {"facts": FACTS, "patch_apply": {}, "deploy": up, "cancel": {}, "stop": STOPPED, "status": status},
        "n1": {"facts": FACTS, "deploy": failed, "cancel": {}, "stop": STOPPED, "status": status},
        "n2": {"facts": FACTS, "deploy": waiting_rank, "cancel": cancel, "stop": STOPPED, "status": status},
    })
    with connector(fleet):
        res = deploy_cluster(inv, inv.clusters["trio"], Options(steps=1), quiet=True)
    by = {r.host.name: r for r in res.hosts}
    assert not res.ok and res.extra["failed_first"] == ["n1"]
    deploys = fleet.requests("deploy")
    assert [deploys[n]["node"]["rank"] for n in ("n0", "n1", "n2")] == [0, 1, 2]
    assert len({deploys[n]["deploy_id"] for n in deploys}) == 1  # one shared deploy id
    assert by["n0"].outcome == "stopped (another rank failed)"
    assert fleet.requests("stop")["n0"]["lock_wait"] == 30
    assert "n1" not in fleet.requests("stop")  # a failed rank's own agent already tore its server down
    assert set(fleet.requests("cancel")) == {"n0", "n2"}  # every other rank, with the reason
    assert "node rank 1 (n1) failed: rank 1 exited with code 1" in fleet.requests("cancel")["n2"]["reason"]
    assert by["n2"].outcome == "cancelled (another rank failed)" and by["n1"].outcome.startswith("failed")


def test_status_exits_non_zero_when_the_recorded_deploy_failed_and_nothing_serves(inv: inventory.Inventory) -> None:
    """After a failed deploy `inv status` showed `state: failed`, nothing running, and exit 0: a script checking it
    believed the host fine."""
    from fabfile.commands.operations import status

    failed = {"running": False, "record": {"deploy_id": "d-9", "config_name": "eagle3-s2-k1-d3", "status": "failed"}}
    stopped = {"running": False, "record": {"deploy_id": "d-8", "config_name": "baseline", "status": "stopped"}}
    fleet = FakeFleet({"a": {"status": failed}, "b": {"status": stopped}})
    with connector(fleet):
        both = status(inv, _hosts(inv, "a", "b"))
        only_b = status(inv, _hosts(inv, "b"))
    assert both.exit_code == 1 and only_b.exit_code == 1  # nothing serves on either (README: exit 1)
    view = both.outcomes[0].data["state"]
    assert view["state"] == "failed" and "d-9" in view["problem"] and "nothing serves" in view["problem"]


UP = {"running": True, "record": {"deploy_id": "d-1", "config_name": "baseline", "pid": 7, "status": "running"},
      "health": {"status": 200, "path": "/health_generate"}}
LOCK = {"deploy_id": "d-2", "step": "wait_ready", "pid": 99, "client": "ops@laptop", "since": "12:00"}
STATES = {
    # state: (the host's `status` answer, exit code, the sentence on stderr)
    "running": (UP, 0, None),
    "deploying, the old server still up": ({**UP, "deploy_in_progress": LOCK}, 0, None),
    "deploying, nothing up yet": ({"running": False, "record": {**UP["record"], "status": "stopped"},
                                   "deploy_in_progress": LOCK}, 1, "nothing serves yet: deploy d-2"),
    "stopped": ({"running": False, "record": {**UP["record"], "status": "stopped"}}, 1, "was stopped"),
    "failed": ({"running": False, "record": {**UP["record"], "status": "failed"}}, 1, "failed and nothing serves"),
    "exited": ({"running": False, "record": UP["record"]}, 1, "is gone"),
    "not ready": ({**UP, "health": {"status": 503, "path": "/health_generate"}}, 1, "answered 503"),
    "none": ({"running": False, "record": None}, 1, "no deploy is recorded"),
    "a router's host": ({"running": False, "record": None, "routers": [{"name": "front", "running": True,
                                                                         "health": 200, "workers": []}]}, 0, None),
}


@pytest.mark.parametrize("name", list(STATES))
def test_status_exits_0_only_when_the_host_serves_and_json_says_ok_only_then(
        inv: inventory.Inventory, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`inv status` exited 0 with `"ok": true` while a deploy was under way with nothing serving and after `inv stop`;
    the README says it exits 1 when nothing serves. Each state: its exit code, `ok` in --json, the sentence why."""
    from fabfile.commands.operations import status_hosts

    answer, code, sentence = STATES[name]
    with connector(FakeFleet({"a": {"status": answer}})):
        r = status_hosts(inv, _hosts(inv, "a"))
    assert r.exit_code == code
    doc = r.document.as_dict()
    assert doc["ok"] is (code == 0) and doc["hosts"][0]["ok"] is (code == 0), doc
    r.for_people()
    err = capsys.readouterr().err
    if sentence is None:
        assert "nothing serves" not in err, err
    else:
        assert sentence in " ".join(err.split()), err


def test_host_all_covers_the_inventory_and_json_has_one_shape_for_one_host_or_many(inv: inventory.Inventory,
                                                                                   tmp_path: Path) -> None:
    """`--host all` was unknown; `status --json` was a host's document for one host and {"hosts": [...]} for many."""
    from fabfile.commands.bench import BenchParams, bench_hosts
    from fabfile.commands.operations import status

    assert [h.name for h in inv.select("all")] == list(inv.hosts)
    picked = [h.name for h in inv.select("b,all")]
    assert picked[0] == "b" and len(picked) == len(inv.hosts)
    up = {"running": True, "record": {"deploy_id": "d", "config_name": "baseline", "pid": 7},
          "health": {"status": 200, "path": "/health_generate"}}
    fleet = FakeFleet({n: {"status": up} for n in inv.hosts})
    with connector(fleet):
        many = status(inv, inv.select("all")).as_dict()
        one = status(inv, inv.select("b")).as_dict()
    assert many["ok"] is True and [d["host"] for d in many["hosts"]] == list(inv.hosts)
    assert one["ok"] is True and [d["host"] for d in one["hosts"]] == ["b"] and set(one) == set(many)
    assert set(one["hosts"][0]) == set(many["hosts"][0])

    def bench(req: dict[str, Any]) -> dict[str, Any]:
        return {"bench_id": req["bench_id"], "output_tok_s": 100.0, "config_name": "baseline"}

    fleet = FakeFleet({"a": {"bench": bench}, "b": {"bench": bench},
                       "c": {"bench": {"kind": "not_running", "message": "no server is running"}}})
    with connector(fleet):
        code = bench_hosts(inv, _hosts(inv, "a", "b", "c"), BenchParams(), tmp_path).exit_code
    assert code == 1 and set(fleet.requests("bench")) == {"a", "b", "c"}  # every host measured at once
    assert sorted(p.parent.name for p in tmp_path.glob("*/*.json")) == ["a", "b"]


def test_sweep_predict_says_up_front_when_prediction_cannot_save_a_load(inv: inventory.Inventory, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`--predict` over steps 0..3 said "model loads: 4 (the full grid would have taken 4)" only at the end."""
    from fabfile.commands.bench import BenchParams
    from fabfile.commands.sweep import run_sweep
    from fabfile.errors import SweepError
    from fabfile.plan.deploy_plan import Options
    from fabfile.plan.sweep_plan import configs

    bad = {"problems": ["the model path /models/m does not exist"], "unsafe": [], "home": "/home/u",
           "sglang": {"version": "0.5.5", "site_packages": "/x"}, "gpu": {"gpus": [{"index": 0}]}}
    fleet = FakeFleet({"b": {"facts": bad, "status": {"running": False, "record": {}}}})
    h = inv.hosts["b"]
    for steps, says in (([0, 1, 2, 3], "here prediction may save none"), ([0, 1, 2], "nothing to predict")):
        with connector(fleet), pytest.raises(SweepError):
            run_sweep(inv, h, configs(h, Options(), steps, None, None), BenchParams(), keep=None,
                      runs_dir=tmp_path, predict=True)
        flat = " ".join(capsys.readouterr().err.split())
        assert flat.startswith("--predict:") and says in flat.split(" ✗ ")[0], flat
        # the counter never passes its total ([3/3] then [4/4]): an upper bound while winners may still be measured
        assert len(steps) == 3 or ("[3/3]" not in flat and "[1/≤4]" in flat), flat
