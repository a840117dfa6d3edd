"""``inv deploy`` after its flags are checked: the one place that picks how a deploy runs.

One host (``fabfile.commands.deploy``), a rollout over several (``fabfile.commands.rollout``: parallel or rolling)
or a multi-node cluster (``fabfile.commands.cluster``). It sits above the strategies, so none of them imports another's
caller.
"""

from __future__ import annotations

from typing import Any

from fabfile.commands.cluster import deploy_cluster
from fabfile.commands.deploy import deploy_behind_routers
from fabfile.commands.result import CommandResult
from fabfile.commands.rollout import BatchSize, run_rollout
from fabfile.inventory.hosts import Host, Inventory
from fabfile.plan.deploy_plan import Options, build
from fabfile.present.deploy_report import deploy_summary
from fabfile.present.progress import Reporter
from fabfile.present.rollout_report import print_cluster, print_rollout
from fabfile.results.hosts import hosts_document


def deploy_targets(inv: Inventory, host: str | None, *, rollout_flags: bool) -> tuple[list[Host], Any]:
    """The hosts a deploy of ``--host`` covers and its cluster (None unless it names one). A cluster's nodes always
    start together, so the rollout flags are refused for one, and a node of a cluster is refused on its own: its
    deploy alone would stop its rank and leave the cluster broken."""
    from fabfile.errors import FlagError

    cluster = inv.cluster_named(host)
    if cluster is not None:
        if rollout_flags:
            raise FlagError("--strategy/--batch/--no-canary: a cluster's nodes always start together (one model "
                            "across nodes); leave these flags out")
        return inv.cluster_nodes(cluster.name), cluster
    hosts = inv.select(host)
    for h in hosts:
        for c_name, c_def in inv.clusters.items():
            if h.name in c_def.hosts:
                raise FlagError(f"--host: {h.name} is node {c_def.hosts.index(h.name)} of cluster {c_name}; a "
                                "deploy of it alone would stop its rank and leave the cluster broken",
                                f"deploy the whole cluster with --host {c_name}, or take {h.name} out of "
                                "`clusters:` to run it on its own")
    return hosts, None


def deploy_command(inv: Inventory, hosts: list[Host], cluster: Any, opts: Options, *, strategy: str | None,
                   batch: BatchSize, canary: bool, rollback_on_failure: bool, as_json: bool) -> CommandResult:
    """`inv deploy` after its flags are checked: one host, a rollout over several, or a multi-node cluster.

    Every host's plan is built (and so validated) before the first host is touched. ``as_json`` keeps the step
    lines off the terminal (the JSON document is the whole answer).
    """
    for h in hosts:
        build(h, opts)
    if cluster is not None:
        cres = deploy_cluster(inv, cluster, opts, quiet=as_json, rollback_on_failure=rollback_on_failure)
        return CommandResult(cres, lambda: print_cluster(cres, inv.ssh_config), cres.exit_code)
    if len(hosts) == 1 and strategy is None and not rollback_on_failure:
        r = deploy_behind_routers(inv, hosts[0], opts, Reporter(hosts[0].name))
        if as_json and r.error is not None:
            # The step line says only "failed"; with --json the summary (which prints the error) is the document,
            # so the sentence goes to stderr once here, as for people.
            from fabfile.present.output import print_error

            print_error(r.error)
        # The one shape of every host command: a single host's deploy is the list of one, without a rollout's keys
        # (no strategy or batches ran).
        return CommandResult(hosts_document([r.as_dict()]), lambda: deploy_summary(r, inv.ssh_config), r.exit_code)
    res = run_rollout(inv, hosts, opts, strategy=strategy or "rolling", batch=batch, canary=canary,
                      rollback_on_failure=rollback_on_failure, quiet=as_json)
    return CommandResult(res, lambda: print_rollout(res, inv.ssh_config), res.exit_code)
