"""The real SGLang router in front of simulated replicas.

`sglang-router` 0.3.2 (the Rust gateway SGLang ships, `smg` inside) is installed from the package index with pip
(tests/simhost/realrouter.py; cached in $SPECDEPLOY_WHEEL_CACHE) into the hosts' Python in place of the
simulator's stand-in. What it calls on a worker, observed in the simulator's access log: `GET /health`,
`GET /server_info`, `GET /model_info` when a worker is added, then `/generate` forwarded; the simulator serves them
as SGLang does. The stand-in (tests/simhost/sim/site/sglang_router) stays for the tests that only need a router
process on a host (test_multihost, test_fleet_state): they run without network, where pip cannot fetch the real one.

Four hosts (sim1..sim4, the router on sim1): `deploy-router`, a rolling deploy of the four behind it while a client
load runs through it (no request may fail: the deploy takes each replica out of the router first and puts it back
once it answers), and a replica that dies (the router stops sending to it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simhost import realrouter
from tests.simhost.fleet import Fleet, SimHost, up
from tests.support import waiting
from tests.support.invoke_cli import derived_inventory, inv_json

# One worker runs the module (`--dist loadgroup`), so its four-host fleet is built once: spread over three workers,
# each built its own at the same moment (the suite starts with these, its longest tests), and the three tests took
# 92-129 s each instead of 45-58.
pytestmark = [pytest.mark.fleet, pytest.mark.wheels, pytest.mark.xdist_group("real-router-fleet4")]

ROUTER_PORT = 30000


@pytest.fixture(scope="module")
def fleet4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    try:
        target = realrouter.install()
    except RuntimeError as e:
        if os.environ.get("SPECDEPLOY_WHEELS_REQUIRED"):
            raise
        pytest.skip(str(e))
    f = up(4, tmp_path_factory.mktemp("fleet4"), gpus=8, tp=2, mode="auto")
    f.router_target = target  # type: ignore[attr-defined]
    try:
        yield f
    finally:
        f.down()


@pytest.fixture
def hosts(fleet4: Fleet) -> dict[str, SimHost]:
    for h in fleet4.hosts.values():
        h.reset()  # reinstalls the simulator, stand-in router included: the real one replaces it again
        realrouter.put_in(h.site_packages(), fleet4.router_target)  # type: ignore[attr-defined]
    return dict(fleet4.hosts)


def _inventory(fleet: Fleet, tmp_path: Path, router_args: list[str] | None = None) -> Path:
    path = derived_inventory(fleet, tmp_path, defaults={"listen": "0.0.0.0"})
    data = yaml.safe_load(path.read_text())
    data["groups"] = {"replicas": ["sim1", "sim2", "sim3", "sim4"]}
    data["routers"] = {"front": {"host": "sim1", "group": "replicas", "port": ROUTER_PORT, "policy": "round_robin",
                                 "drain_s": 2, "args": router_args or []}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _router_get(host: SimHost, path: str) -> tuple[int, Any]:
    code = ("import json,sys,urllib.request,urllib.error\n"
            f"u='http://127.0.0.1:{ROUTER_PORT}{path}'\n"
            "try:\n r=urllib.request.urlopen(u,timeout=10); b=r.read().decode(); print(r.status)\n"
            "except urllib.error.HTTPError as e: print(e.code); b=e.read().decode()\n"
            "print(b)\n")
    r = host.exec([host.python_in_host, "-c", code])
    status, _, body = r.stdout.partition("\n")
    try:
        return int(status), json.loads(body) if body.strip() else None
    except ValueError:
        return int(status or 0), body


# A client load inside sim1, through the router: C threads, each sending one non-streamed /generate after the
# other, until /root/load.stop appears; every outcome is counted, failures kept with their answer.
LOAD = """
import json, os, threading, time, urllib.request, urllib.error
os.chdir(os.path.expanduser('~'))
url = 'http://127.0.0.1:%d/generate'
body = json.dumps({'input_ids': [11, 12, 13, 14], 'sampling_params': {'max_new_tokens': 16}}).encode()
ok, failed, lock = [0], [], threading.Lock()
def worker():
    while not os.path.exists('load.stop'):
        try:
            req = urllib.request.Request(url, data=body, headers={'Content-Type': 'application/json'})
            with urllib.request.urlopen(req, timeout=60) as r:
                good = r.status == 200 and json.loads(r.read())['meta_info']['completion_tokens'] == 16
            with lock:
                if good: ok[0] += 1
                else: failed.append('bad answer')
            if good and not os.path.exists('load.first'):
                open('load.first', 'w').close()
        except Exception as e:
            with lock:
                failed.append('%%s: %%s' %% (type(e).__name__, getattr(e, 'read', lambda: b'')()[:200] or e))
        time.sleep(0.01)
threads = [threading.Thread(target=worker) for _ in range(%d)]
t0 = time.monotonic()
[t.start() for t in threads]
[t.join() for t in threads]
with open('load.json.tmp', 'w') as f:  # renamed when whole: the test reads it the moment it appears
    json.dump({'ok': ok[0], 'failed': len(failed), 'errors': [str(x) for x in failed[:10]],
               'seconds': time.monotonic() - t0}, f)
os.rename('load.json.tmp', 'load.json')
"""


def _start_load(host: SimHost, threads: int = 4) -> None:
    """Start the load and return once it has been served once (a loaded machine may take seconds to start it)."""
    (host.home / "load.py").write_text(LOAD % (ROUTER_PORT, threads))
    host.exec(["sh", "-c", f"cd && rm -f load.stop load.json load.first && setsid {host.python_in_host} load.py "
                           "</dev/null >load.log 2>&1 &"])
    waiting.wait_until(lambda: (host.home / "load.first").exists(), "the load's first answered request",
                       poll_s=0.1, detail=lambda: (host.home / "load.log").read_text()[-2000:])


def _stop_load(host: SimHost) -> dict[str, Any]:
    (host.home / "load.stop").write_text("")
    waiting.wait_until(lambda: (host.home / "load.json").exists(), "the load client's end", poll_s=0.1,
                       detail=lambda: (host.home / "load.log").read_text()[-2000:])
    return dict(json.loads((host.home / "load.json").read_text()))


def _deploy_replicas_and_router(inventory: Path) -> dict[str, Any]:
    code, doc, err = inv_json("deploy", "--host", "replicas", "--strategy", "parallel", "--steps", "2",
                              inventory=inventory, timeout=300)
    assert code == 0, err
    code, doc, err = inv_json("deploy-router", inventory=inventory)
    assert code == 0, err
    return doc


def test_deploy_router_runs_the_real_router_in_front_of_the_replicas(fleet4: Fleet, hosts: dict[str, SimHost],
                                                                     tmp_path: Path) -> None:
    inventory = _inventory(fleet4, tmp_path)
    doc = _deploy_replicas_and_router(inventory)
    assert len(doc["workers"]) == 4
    # The real one: its /workers entries carry the gateway's own ids and connection mode (the stand-in has none),
    # and it read each worker's /server_info (the model it serves).
    code, listing = _router_get(hosts["sim1"], "/workers")
    assert code == 200, listing
    workers = listing["workers"]
    assert sorted(w["url"] for w in workers) == sorted(doc["workers"])
    assert all(w["id"] and w["connection_mode"] == "HTTP" and w["is_healthy"] for w in workers), workers
    assert all(w["model_id"] for w in workers)
    # Requests through it are served by the replicas.
    _start_load(hosts["sim1"], threads=2)
    time.sleep(1.0)
    load = _stop_load(hosts["sim1"])
    assert load["ok"] > 0 and load["failed"] == 0, load
    code, st, err = inv_json("status", "--host", "sim1", inventory=inventory)
    assert code == 0, err
    router = st["hosts"][0]["data"]["routers"][0]
    assert router["running"] and router["health"] == 200
    assert all(w["router_says_healthy"] is True and w["health"] == 200 for w in router["workers"]), router


def test_a_rolling_deploy_of_4_hosts_behind_the_real_router_loses_no_request(fleet4: Fleet,
                                                                              hosts: dict[str, SimHost],
                                                                              tmp_path: Path) -> None:
    inventory = _inventory(fleet4, tmp_path)
    _deploy_replicas_and_router(inventory)
    _start_load(hosts["sim1"])
    try:
        code, doc, err = inv_json("deploy", "--host", "replicas", "--strategy", "rolling", "--batch", "1",
                                  "--steps", "3", inventory=inventory, timeout=300)
    finally:
        load = _stop_load(hosts["sim1"])
    assert code == 0, err
    assert [r["outcome"] for r in doc["hosts"]] == ["deployed"] * 4
    notes = [n for r in doc["hosts"] for n in r["router_notes"]]
    assert sum("taken out" in n for n in notes) == 4 and sum("back in" in n for n in notes) == 4, notes
    print(f"\nclient load through the real router during a rolling deploy of 4 hosts: {load['ok']} requests "
          f"served, {load['failed']} failed, in {load['seconds']:.1f} s")
    assert load["ok"] > 0
    assert load["failed"] == 0, load
    # every replica now runs the new configuration, and the router lists all four healthy again
    code, listing = _router_get(hosts["sim1"], "/workers")
    assert len(listing["workers"]) == 4 and all(w["is_healthy"] for w in listing["workers"]), listing


def test_the_router_stops_sending_to_a_replica_that_dies(fleet4: Fleet, hosts: dict[str, SimHost],
                                                         tmp_path: Path) -> None:
    # The router's own health checks find a dead worker; at its default interval (60 s) that takes a minute, so
    # the inventory passes the router's flags for a quicker check, as an operator would.
    inventory = _inventory(fleet4, tmp_path, router_args=["--health-check-interval-secs", "1",
                                                          "--health-failure-threshold", "2"])
    _deploy_replicas_and_router(inventory)
    victim = hosts["sim4"]
    launcher = [p for p, c in _procs(victim) if "sglang.launch_server" in c]
    assert launcher
    victim.exec(["kill", "-9", str(launcher[0])])
    dead = f"http://{victim.address}:{victim.sglang_port}"
    for _ in range(150):
        _, listing = _router_get(hosts["sim1"], "/workers")
        entry = [w for w in listing["workers"] if w["url"] == dead]
        if not entry or entry[0]["is_healthy"] is False:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the router still calls the dead replica healthy: {listing}")
    # From now on every request is served by the three that live.
    _start_load(hosts["sim1"], threads=2)
    time.sleep(1.5)
    load = _stop_load(hosts["sim1"])
    assert load["ok"] > 0 and load["failed"] == 0, load
    _, st, _ = inv_json("status", "--host", "sim1", inventory=inventory)
    w = {x["url"]: x for x in st["hosts"][0]["data"]["routers"][0]["workers"]}
    assert w.get(dead, {}).get("health") in (None, 0) or dead not in w


def _procs(host: SimHost) -> list[tuple[int, str]]:
    r = host.exec(["sh", "-c", "for p in /proc/[0-9]*; do printf '%s ' ${p#/proc/}; tr '\\0' ' ' < $p/cmdline; "
                               "echo; done 2>/dev/null"])
    out = []
    for line in r.stdout.splitlines():
        pid, _, cmd = line.partition(" ")
        if pid.isdigit():
            out.append((int(pid), cmd))
    return out
