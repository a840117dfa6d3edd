"""Two operators on one host, and the recorded deploys (issue 36, points 4 and 5).

A second deploy refuses while another holds the host, unless it queues (``--lock-wait``); queued, it says which
deploy it replaces, and `inv status` shows who replaced what. `inv deploys` lists the records; `inv deploy
--previous` follows the recorded chain back (it toggled between the last two); `--id` starts one by id; a deploy
that ended cancelled or failed is started again only with a yes.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

from tests.simhost.fleet import Fleet, SimHost
from tests.support import waiting
from tests.support.invoke_cli import derived_inventory, inv_host_json, run_inv, sglang_pids, start_inv

STATE = "/root/.specdeploy"


def _steps_running(host: SimHost) -> list[int]:
    """The speculative steps of each server launched on the host (0: a baseline)."""
    found = []
    for _pid, cmd in sglang_pids(host):
        if "sglang.launch_server" in cmd:
            m = re.search(r"--speculative-num-steps[= ](\d+)", cmd)
            found.append(int(m.group(1)) if m else 0)
    return found


def _holder(host: SimHost) -> dict[str, Any]:
    r = host.exec(f"cat {STATE}/deploy.lock.json 2>/dev/null || true")
    try:
        doc: dict[str, Any] = json.loads(r.stdout)
        return doc
    except ValueError:
        return {}


def _frozen_at(host: SimHost, step: str) -> dict[str, Any]:
    """The deploy in progress, stopped by its own failpoint as it entered ``step`` (fabfile/remote/failpoints.py)."""
    def stopped_there() -> bool:
        h = _holder(host)
        if h.get("step") != step or not h.get("pid"):
            return False
        state = host.exec(f"awk '{{print $3}}' /proc/{h['pid']}/stat 2>/dev/null || true").stdout.strip()
        return state in ("T", "t")

    waiting.wait_until(stopped_there, f"the deploy stopping at step {step}", poll_s=0.1,
                       detail=lambda: json.dumps(_holder(host)))
    return _holder(host)


def _deploys(inventory: Path) -> dict[str, Any]:
    code, doc, err = inv_host_json("deploys", inventory=inventory)
    assert code == 0, err
    data: dict[str, Any] = doc["data"]
    return data


def test_a_second_deploy_refuses_then_queues_saying_what_it_replaces(fleet: Fleet, sim_host: SimHost,
                                                                     tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path)
    code, first, err = inv_host_json("deploy", "--steps", "0", inventory=inventory)
    assert code == 0, err
    sim_host.exec(f"mkdir -p {STATE}/failpoints && touch {STATE}/failpoints/wait_ready")
    a = start_inv("deploy", "--steps", "2", inventory=inventory)
    b = None
    try:
        held = _frozen_at(sim_host, "wait_ready")
        # B, by default: refused at once, one sentence naming A, since when, its step, and how to queue.
        refused = run_inv("deploy", "--steps", "3", inventory=inventory)
        assert refused.returncode == 1, refused.stderr
        said = " ".join(refused.stderr.split())
        assert f"another deploy ({held['deploy_id']}, from {held['client']}) holds this host since {held['since']}" \
            in said, said
        assert "now at step wait_ready" in said and "`--lock-wait SECONDS` queues behind it" in said, said
        # B queued: it says who holds the host, then, once A is done, that it replaces A.
        b = start_inv("deploy", "--steps", "3", "--lock-wait", "120", inventory=inventory)
        assert b.stderr is not None
        lines: list[str] = []
        for line in b.stderr:
            lines.append(line)
            if "holds this host" in line:
                break
        sim_host.exec(f"kill -CONT {held['pid']}")
        _a_out, a_err = a.communicate(timeout=waiting.HANG_GUARD_S)
        _b_out, rest = b.communicate(timeout=waiting.HANG_GUARD_S)
    finally:
        sim_host.exec(f"rm -f {STATE}/failpoints/wait_ready; kill -CONT {_holder(sim_host).get('pid', 0)} || true")
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    b_err = " ".join(("".join(lines) + rest).split())
    assert a.returncode == 0 and b.returncode == 0, (a_err, b_err)
    assert f"deploy {held['deploy_id']}" in b_err and "holds this host" in b_err, b_err
    assert f"this deploy now replaces deploy {held['deploy_id']} (eagle3-s2-k1-d3" in b_err, b_err
    assert _steps_running(sim_host) == [3]
    # `inv status`: who replaced what.
    code, st, err = inv_host_json("status", inventory=inventory)
    assert code == 0, err
    b_id = st["data"]["record"]["deploy_id"]
    assert st["data"]["record"]["previous"]["deploy_id"] == held["deploy_id"]
    text = " ".join(run_inv("status", inventory=inventory).stdout.split())
    assert f"deploy {b_id} (from {held['client']}" in text and f"replaced deploy {held['deploy_id']} " \
        "(eagle3-s2-k1-d3" in text, text
    # The records say how each ended: the first replaced by A, A replaced by B, B ready (and current).
    listed = {d["deploy_id"]: d for d in _deploys(inventory)["deploys"]}
    assert listed[first["deploy_id"]]["ended"]["kind"] == "replaced"
    assert listed[held["deploy_id"]]["ended"]["kind"] == "replaced" and \
        listed[held["deploy_id"]]["ended"]["by"] == b_id
    assert listed[b_id]["ended"]["kind"] == "ready"


def test_previous_follows_the_chain_and_a_cancelled_deploy_needs_a_yes(fleet: Fleet, sim_host: SimHost,
                                                                       tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path)
    ids = []
    for steps in ("0", "2"):
        code, doc, err = inv_host_json("deploy", "--steps", steps, inventory=inventory)
        assert code == 0, err
        ids.append(doc["deploy_id"])
    x, y = ids
    sim_host.set_sim_config(fail="slow_load", load_seconds=60)
    z_client = start_inv("deploy", "--steps", "3", inventory=inventory)
    try:
        waiting.wait_until(lambda: _holder(sim_host).get("step") == "wait_ready", "the deploy reaching wait_ready")
        z = _holder(sim_host)["deploy_id"]
        assert run_inv("cancel", inventory=inventory).returncode == 0
        z_client.communicate(timeout=waiting.HANG_GUARD_S)
    finally:
        if z_client.poll() is None:
            z_client.send_signal(signal.SIGKILL)
            z_client.communicate()
    sim_host.set_sim_config(fail=None, load_seconds=0.3)  # the simulator's own default
    listed = _deploys(inventory)
    kinds = {d["deploy_id"]: d["ended"]["kind"] for d in listed["deploys"]}
    assert listed["current"] == z and kinds[z] == "cancelled" and kinds[y] == "replaced" and kinds[x] == "replaced"
    table = " ".join(run_inv("deploys", inventory=inventory).stdout.split())
    assert z in table and "cancelled" in table and f"replaced by {z}" in table, table

    # --previous --dry-run: says what would start, starts nothing.
    code, doc, err = inv_host_json("deploy", "--previous", "--dry-run", inventory=inventory)
    assert code == 0 and doc["would_start"]["deploy_id"] == y and doc["replaces"]["deploy_id"] == z, (doc, err)
    assert _steps_running(sim_host) == []
    # --previous, twice: y, then x (the old code went back to the cancelled z the second time).
    r = run_inv("deploy", "--previous", inventory=inventory, timeout=180)
    assert r.returncode == 0 and f"deploy {y}" in r.stdout, r.stdout + r.stderr
    assert _steps_running(sim_host) == [2]
    r = run_inv("deploy", "--previous", inventory=inventory, timeout=180)
    assert r.returncode == 0 and f"deploy {x}" in r.stdout, r.stdout + r.stderr
    assert _steps_running(sim_host) == [0]
    r = run_inv("deploy", "--previous", "--dry-run", inventory=inventory)
    assert r.returncode == 2 and f"no deploy recorded before {x}" in r.stderr, r.stderr

    # --id of the cancelled one: a warning; no terminal and no --yes: refused, nothing touched.
    r = run_inv("deploy", "--id", z, inventory=inventory)
    flat = " ".join(r.stderr.split())
    assert r.returncode == 2 and f"deploy {z}" in flat and "ended cancelled" in flat and "--yes" in flat, flat
    assert "warning:" in flat and "never became ready" in flat, flat
    assert _steps_running(sim_host) == [0]
    r = run_inv("deploy", "--id", z, "--dry-run", inventory=inventory)
    assert r.returncode == 0 and "warning:" in r.stderr and f"would start deploy {z}" in r.stdout, r.stderr
    r = run_inv("deploy", "--id", z, "--yes", inventory=inventory, timeout=180)
    assert r.returncode == 0 and f"deploy {z}" in r.stdout, r.stdout + r.stderr
    assert _steps_running(sim_host) == [3]
    r = run_inv("deploy", "--id", "nope-1", "--dry-run", inventory=inventory)
    assert r.returncode == 2 and "no recorded deploy nope-1" in r.stderr, r.stderr
