"""``inv deploy`` after its flags are checked: the one place that picks how a deploy runs.

One host (``fabfile.commands.deploy``), a rollout over several (``fabfile.commands.rollout``: parallel or rolling)
or a multi-node cluster (``fabfile.commands.cluster``). It sits above the strategies, so none of them imports another's
caller.
"""

from __future__ import annotations

from typing import Any

from fabfile.commands.cluster import deploy_cluster
from fabfile.commands.deploy import deploy_behind_routers
from fabfile.commands.rollout import BatchSize, run_rollout
from fabfile.inventory.hosts import Host, Inventory
from fabfile.plan.deploy_plan import Options, build
from fabfile.present.deploy_report import deploy_summary
from fabfile.present.output import show
from fabfile.present.progress import Reporter
from fabfile.present.rollout_report import print_cluster, print_rollout
from fabfile.results.deploys import RolloutResult


def deploy_command(inv: Inventory, hosts: list[Host], cluster: Any, opts: Options, *, strategy: str | None,
                   batch: BatchSize, canary: bool, rollback_on_failure: bool, as_json: bool) -> int:
    """`inv deploy` after its flags are checked: one host, a rollout over several, or a multi-node cluster.

    Every host's plan is built (and so validated) before the first host is touched. Returns the exit code.
    """
    for h in hosts:
        build(h, opts)
    if cluster is not None:
        cres = deploy_cluster(inv, cluster, opts, quiet=as_json, rollback_on_failure=rollback_on_failure)
        show(cres, lambda: print_cluster(cres), as_json=as_json)
        return 0 if cres.ok else refused_code(cres)
    if len(hosts) == 1 and strategy is None and not rollback_on_failure:
        r = deploy_behind_routers(inv, hosts[0], opts, Reporter(hosts[0].name))
        show(r, lambda: deploy_summary(r), as_json=as_json)
        return 0 if r.ok else (r.error.exit_code if r.error else 1)
    res = run_rollout(inv, hosts, opts, strategy=strategy or "rolling", batch=batch, canary=canary,
                      rollback_on_failure=rollback_on_failure, quiet=as_json)
    show(res, lambda: print_rollout(res), as_json=as_json)
    return 0 if res.ok else refused_code(res)


def refused_code(res: RolloutResult) -> int:
    """1 for a failed run; a run refused at preflight for bad input (what a host's SGLang does not accept) alone
    exits 2 like any bad input, nothing having been touched."""
    errs = [r.deploy.error for r in res.hosts if r.deploy is not None and r.deploy.error is not None]
    if res.extra.get("preflight_failed") and errs and all(e.exit_code == 2 for e in errs):
        return 2
    return 1
