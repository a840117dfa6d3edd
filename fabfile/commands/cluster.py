"""One model across several hosts: SGLang's ``--nnodes``, ``--node-rank`` and ``--dist-init-addr``.

Every node gets the same plan (NCCL settings, patch mode, speculative flags, one shared deploy id) with its own rank.
All nodes start together (ranks wait for each other at the dist-init rendezvous), each in its own thread and SSH
session. Rank 0 is judged ready by the version's readiness endpoint (it serves the API); ranks >= 1 serve only
SGLang's stub health server, so they are judged by ``/health``. When any rank fails, every other rank is torn down:
ranks still waiting are cancelled through the agent's ``cancel`` verb (their agent stops the new server), ranks
already up are stopped. Nothing of a half-formed cluster is left running.
"""

from __future__ import annotations

import threading
import time

from fabfile.commands.deploy import deploy_host
from fabfile.commands.fanout import concurrent, reporter_for
from fabfile.commands.rollout import observe, refused_at_preflight, rollback_hosts
from fabfile.errors import SpecDeployError
from fabfile.inventory.hosts import Cluster, Host, Inventory
from fabfile.plan.deploy_plan import Options, build, new_deploy_id
from fabfile.results.deploys import HostRollout, RolloutResult
from fabfile.transport.session import HostSession


def _cancel(inv: Inventory, node: Host, deploy_id: str, reason: str) -> None:
    try:
        with HostSession.open(inv, node) as s:
            s.cancel(deploy_id=deploy_id, reason=reason, timeout=30)
    except SpecDeployError:
        pass  # that node is unreachable: its own stall/ready bounds end its wait


def _stop(inv: Inventory, node: Host) -> None:
    try:
        with HostSession.open(inv, node) as s:
            s.stop(lock_wait=30, slack=60)
    except SpecDeployError:
        pass


def deploy_cluster(inv: Inventory, cluster: Cluster, opts: Options, *, quiet: bool = False,
                   rollback_on_failure: bool = False) -> RolloutResult:
    t0 = time.monotonic()
    nodes = inv.cluster_nodes(cluster.name)
    deploy_id = new_deploy_id()
    plans = {n.name: build(n, opts, deploy_id) for n in nodes}
    rows = {n.name: HostRollout(n, batch=1) for n in nodes}
    result = RolloutResult("cluster", [[n.name for n in nodes]], [rows[n.name] for n in nodes],
                           extra={"cluster": cluster.name, "tp": cluster.tp, "dist_init_addr": cluster.dist_init_addr,
                                  "deploy_id": deploy_id})
    lock = threading.Lock()
    failed_first: list[str] = []

    def one(node: Host) -> None:
        r = deploy_host(inv, node, opts, reporter_for(node, quiet=quiet, shared_console=True), plan=plans[node.name])
        row = rows[node.name]
        row.deploy = r
        if r.ok:
            row.outcome, row.config_now, row.pid_now = "deployed", r.plan.config_name, r.pid
            return
        row.outcome = "unknown" if r.outcome_unknown else ("failed" if row.changed() else "failed (unchanged)")
        with lock:
            first = not failed_first
            failed_first.append(node.name)
        if first:
            reason = f"node rank {node.node.rank if node.node else '?'} ({node.name}) failed: " + \
                (r.error.message if r.error else "unknown error")
            others = [n for n in nodes if n.name != node.name]
            concurrent(others, lambda n: _cancel(inv, n, deploy_id, reason))

    # Every node is checked before any rank is stopped: one node's wrong path would otherwise tear down the others.
    if refused_at_preflight(inv, nodes, opts, rows, result, plans):
        observe(inv, result.hosts)
        result.wall_s = time.monotonic() - t0
        return result
    concurrent(nodes, one)
    if failed_first:
        result.stopped_after_batch = 1
        up = [rows[n.name] for n in nodes if rows[n.name].ok]
        if up:
            concurrent([r.host for r in up], lambda n: _stop(inv, n))
        for r in up:
            r.outcome, r.config_now, r.pid_now = "stopped (another rank failed)", None, None
        for n in nodes:
            row = rows[n.name]
            if row.outcome == "failed" and row.deploy is not None and row.deploy.error is not None and \
                    row.deploy.error.details.get("agent_kind") == "cancelled":
                row.outcome = "cancelled (another rank failed)"
        if rollback_on_failure:
            todo = [r for r in result.hosts if r.changed() or r.unknown()]
            rollback_hosts(todo, inv, quiet=quiet)
            result.rollback_incomplete = [r.host.name for r in todo if r.rollback_error is not None or r.unknown()]
            result.rolled_back = not result.rollback_incomplete
    result.deploy_s = time.monotonic() - t0
    observe(inv, result.hosts)
    result.extra["failed_first"] = failed_first[:1]
    result.wall_s = time.monotonic() - t0
    return result
