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
        return 0 if cres.ok else 1
    if len(hosts) == 1 and strategy is None and not rollback_on_failure:
        r = deploy_behind_routers(inv, hosts[0], opts, Reporter(hosts[0].name))
        show(r, lambda: deploy_summary(r), as_json=as_json)
        return 0 if r.ok else (r.error.exit_code if r.error else 1)
    res = run_rollout(inv, hosts, opts, strategy=strategy or "rolling", batch=batch, canary=canary,
                      rollback_on_failure=rollback_on_failure, quiet=as_json)
    show(res, lambda: print_rollout(res), as_json=as_json)
    return 0 if res.ok else 1
