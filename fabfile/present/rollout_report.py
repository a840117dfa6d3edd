"""What a rollout (or a cluster) prints: one row per host (batch, outcome, what runs there now as observed, notes),
then the failures and a one-line verdict. ``RolloutResult.as_dict`` is the JSON form; this is the table for people."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from fabfile.present.deploy_report import deploy_summary, tunnel_line
from fabfile.present.output import err, out, print_error
from fabfile.present.tables import Col, cell, print_table
from fabfile.results.deploys import HostRollout, RolloutResult


def running_now(row: HostRollout) -> str:
    """The "running now" cell: the configuration observed on the host, with its state when it is not plainly
    running, or why nothing could be observed."""
    if row.observed is None:
        return "unknown (unreachable)" if row.config_now == "unknown" else cell(row.config_now)
    v = row.observed
    if v["state"] == "running":
        return str(v["config"])
    if v["config"]:
        return f"{v['config']} ({v['state']})"
    return "nothing" if v["state"] in ("none", "stopped", "failed", "exited") else f"nothing ({v['state']})"


def rollout_notes(row: HostRollout) -> list[str]:
    notes: list[str] = []
    d = row.deploy
    if row.recheck is not None:
        notes.append(f"link lost mid-deploy; re-checked: its deploy {row.recheck.get('finished')}")
    elif d is not None and d.outcome_unknown:
        notes.append("link lost mid-deploy: whether it changed is unknown")
    if d is not None and d.error is not None and row.recheck is None:
        notes.append("error above")  # printed once, whole, before the table (deploy_summary)
    if row.rollback:
        notes.append(f"back to deploy {row.rollback.get('from_deploy_id')}" if row.rollback.get("action") ==
                     "redeployed" else f"stopped: {row.rollback.get('why')}")
    if row.rollback_error is not None:
        notes.append("rollback failed (error above)")
    if row.observe_error:
        notes.append(f"not observed: {row.observe_error[:60]}")
    v = row.observed
    ended = v is not None and v.get("state") in ("failed", "cancelled")
    if v is not None and v.get("problem") and not (ended and d is not None and d.error):
        notes.append(str(v["problem"])[:80])
    if row.ok and d is not None and v is not None and v.get("config") != d.plan.config_name:
        notes.append(f"deployed {d.plan.config_name}, but the host now runs {v.get('config') or 'nothing'}")
    return notes


def print_rollout(result: RolloutResult, ssh_config: Path | None = None) -> None:
    """The final word: per host, what happened and what runs there now (observed), each deployed host's address
    and tunnel line; then each failure in detail."""
    for row in result.hosts:
        if row.deploy is not None and not row.deploy.ok:
            deploy_summary(row.deploy)
        if row.rollback_error is not None:
            print_error(row.rollback_error)
    title = f"{result.strategy} deploy, batches: " + " | ".join(",".join(b) for b in result.batches)
    # Host and the configuration running now are never cut (the outcome and the notes wrap between words).
    cols = [Col("host"), Col("batch", justify="right"), Col("outcome", key=False), Col("running now"),
            Col("pid", justify="right"), Col("note", key=False)]
    rows = []
    for row in result.hosts:
        color = "green" if row.ok else ("yellow" if row.outcome.startswith(("rolled back", "not started")) else "red")
        rows.append([row.host.name, str(row.batch), f"[{color}]{row.outcome}[/{color}]", escape(running_now(row)),
                     cell(row.pid_now or None), escape("; ".join(rollout_notes(row)))])
    print_table(out, cols, rows, title=title)
    print_addresses(result, ssh_config)
    unknown = [r.host.name for r in result.hosts if r.config_now == "unknown"]
    if result.extra.get("preflight_failed"):
        err.print(f"[red]deploy refused at preflight[/red] on {', '.join(result.extra['preflight_failed'])}: no "
                  "host was touched (every host is checked before the first one changes); fix it and deploy again")
    elif result.stopped_after_batch is not None and result.strategy == "cluster":
        err.print("[red]the cluster did not come up[/red]; every rank was torn down"
                  + (" and the nodes were put back to their previous deploys" if result.rolled_back else "")
                  + (f"; [red]rollback incomplete[/red] on {', '.join(result.rollback_incomplete)}"
                     if result.rollback_incomplete else ""))
    elif result.stopped_after_batch is not None:
        left = [r.host.name for r in result.hosts if r.outcome.startswith("not started")]
        text = f"[red]rollout stopped after batch {result.stopped_after_batch}[/red]"
        text += f"; not started: {', '.join(left)}" if left else ""
        if result.rollback_incomplete:
            text += (f"; [red]rollback incomplete[/red]: {', '.join(result.rollback_incomplete)} could not be put "
                     "back (see the table)")
        elif result.rolled_back:
            text += "; changed hosts were rolled back"
        else:
            new = [r.host.name for r in result.hosts if r.ok and r.deploy is not None and r.observed is not None
                   and r.observed.get("config") == r.deploy.plan.config_name]
            text += (f"; {', '.join(new)} {'stays' if len(new) == 1 else 'stay'} on the new version" if new
                     else "; no host runs the new version")
            text += " (--rollback-on-failure puts changed hosts back)"
        idle = [r.host.name for r in result.hosts if r.observed is not None and r.observed.get("config") is None]
        if idle:
            text += f"; nothing runs now on {', '.join(idle)}"
        err.print(text)
    else:
        out.print(f"[green]all {len(result.hosts)} host(s) deployed[/green] in {result.wall_s:.2f} s")
    if unknown:
        err.print(f"[red]not observed:[/red] {', '.join(unknown)} did not answer after the run; what runs there is "
                  "unknown: check with `inv status` once it answers")


def print_addresses(result: RolloutResult, ssh_config: Path | None) -> None:
    """Each deployed host's address, deploy id and ``ssh -L`` line, one line a host (``inv deploy --host all | grep
    'ssh -F'``: a line per host, whole): a one-host deploy prints them, a rollout printed none. Hosts serving on
    the same port get a local port each (8000, 8001, ...), so every tunnel can be open at once. A cluster's API is
    its rank 0's alone."""
    used: set[int] = set()
    for row in result.hosts:
        d = row.deploy
        if not row.ok or d is None or (row.host.node is not None and row.host.node.rank != 0):
            continue
        here = row.host.port
        while here in used:
            here += 1
        used.add(here)
        tunnel = tunnel_line(row.host, ssh_config, here)
        out.print(f"  {row.host.name}: ready at {d.plan.url}  deploy id: {d.plan.deploy_id}"
                  + (f"  {tunnel}" if tunnel else ""), markup=False, highlight=False, soft_wrap=True)


def print_cluster(result: RolloutResult, ssh_config: Path | None = None) -> None:
    print_rollout(result, ssh_config)
    if result.ok:
        rank0 = result.hosts[0]
        url = rank0.deploy.plan.url if rank0.deploy else "?"
        out.print(f"cluster [bold]{result.extra['cluster']}[/bold]: TP {result.extra['tp']} over "
                  f"{len(result.hosts)} nodes, rendezvous {result.extra['dist_init_addr']}; the API is served by "
                  f"rank 0 ({rank0.host.name}) at {url}")
