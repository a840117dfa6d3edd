"""The recorded deploys of a host: `inv deploys` lists them; `inv deploy --previous` and `inv deploy --id ID` start
one again from its own launch script and patch state (the agent's ``redeploy`` verb, as a rollback does).

``--previous`` follows the recorded chain rather than the latest record's ``previous``: a deploy started again from
a record stands for that record, so a second ``--previous`` goes one further back instead of toggling between the
last two. A deploy that ended cancelled or failed is started again only after a warning and a yes (``--yes``; with
no terminal to ask, refused with exit 2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabfile.commands.fanout import for_each_host, reporter_for
from fabfile.commands.result import CommandResult
from fabfile.commands.rollout import redeploy
from fabfile.errors import FlagError, SpecDeployError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.present import deploys_report as report
from fabfile.remote.protocol import DeploySummary
from fabfile.results.hosts import HostsResult, hosts_document

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.results.hosts import DeployHistory
from fabfile.transport.session import HostSession

# How a deploy ended that makes starting it again a question first: it never became ready.
UNSAFE_ENDS = ("cancelled", "failed")


def list_deploys(inv: Inventory, hosts: list[Host], *, host_timeout: float | None) -> CommandResult:
    """`inv deploys`: every recorded deploy of each host, newest first, the current one marked."""
    def work(s: HostSession) -> DeployHistory:
        recs = s.records(history=True)
        cur = recs["current"]
        return {"current": cur["deploy_id"] if cur else None, "deploys": recs.get("history") or []}

    r = HostsResult(for_each_host(inv, hosts, work, host_timeout=host_timeout))
    return CommandResult(r, lambda: report.print_deploys(r), r.exit_code)


def origin(history: list[DeploySummary], deploy_id: str | None) -> DeploySummary | None:
    """The recorded deploy ``deploy_id`` stands for: a start again of a record (``rollback_of``) is that record's
    configuration, followed back to the deploy that first ran it (bounded: a damaged chain cannot loop)."""
    by_id = {d["deploy_id"]: d for d in history}
    d = by_id.get(deploy_id or "")
    for _ in range(len(history)):
        if d is None or not d.get("rollback_of") or d["rollback_of"] not in by_id:
            break
        d = by_id[str(d["rollback_of"])]
    return d


def previous_of(history: list[DeploySummary], current_id: str | None) -> DeploySummary | None:
    """``--previous``: the deploy recorded before the one whose configuration is the current one (its origin)."""
    here = origin(history, current_id)
    if here is None or not here.get("previous"):
        return None
    return next((d for d in history if d["deploy_id"] == here["previous"]), None)


@dataclass(frozen=True)
class Choice:
    """What ``--previous`` or ``--id`` picks on one host: the record to start, and what it replaces."""

    target: DeploySummary
    current: DeploySummary | None
    how: str  # "--previous" | "--id"


def choose(host: Host, history: list[DeploySummary], current_id: str | None, deploy_id: str | None) -> Choice:
    """The recorded deploy to start on ``host``; a FlagError (exit 2, nothing touched) when there is none."""
    current = next((d for d in history if d["deploy_id"] == current_id), None)
    if deploy_id is not None:
        target = next((d for d in history if d["deploy_id"] == deploy_id), None)
        if target is None:
            raise FlagError(f"--id: {host.name} has no recorded deploy {deploy_id}",
                            f"`inv deploys --host {host.name}` lists the recorded ones", host=host.name)
        how = "--id"
    else:
        found = previous_of(history, current_id)
        if found is None:
            here = origin(history, current_id)
            raise FlagError(f"--previous: {host.name} has no deploy recorded before "
                            f"{here['deploy_id'] if here else current_id or 'its latest'}; nothing to go back to",
                            f"`inv deploys --host {host.name}` lists the recorded deploys (`--id ID` starts one); "
                            f"or deploy a configuration explicitly: inv deploy --host {host.name} --steps N",
                            host=host.name)
        target, how = found, "--previous"
    if not target.get("redeployable"):
        raise FlagError(f"{how}: deploy {target['deploy_id']} on {host.name} has no saved launch script to start "
                        "again (it predates rollback records, or was adopted)",
                        "deploy that configuration explicitly", host=host.name)
    return Choice(target, current, how)


def confirm(host: Host, choice: Choice, *, yes: bool, ask: Callable[[str], str] | None = None) -> None:
    """A deploy that ended cancelled or failed: the warning, then a yes (``--yes``, or the answer at a terminal).
    With no terminal and no ``--yes``: refused (exit 2), nothing touched."""
    t = choice.target
    kind = str(t["ended"].get("kind"))
    if kind not in UNSAFE_ENDS:
        return
    report.print_unsafe_warning(host.name, t)
    if yes:
        return
    flag = f"--id {t['deploy_id']}" if choice.how == "--id" else "--previous"
    if ask is None:
        if not sys.stdin.isatty():
            raise FlagError(f"{choice.how}: deploy {t['deploy_id']} on {host.name} ended {kind}; starting it again "
                            "needs a yes, and there is no terminal to ask",
                            f"add --yes to start it anyway (inv deploy {flag} --host {host.name} --yes), or "
                            f"`inv deploys --host {host.name}` to pick another", host=host.name)
        from fabfile.present.output import err

        ask = err.input
    answer = ask(f"start deploy {t['deploy_id']} ({t.get('config_name')}) on {host.name} again anyway? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise FlagError(f"{choice.how}: not started (deploy {t['deploy_id']} ended {kind}; the answer was not yes)",
                        f"`inv deploys --host {host.name}` lists the recorded deploys", host=host.name)


def start_recorded(inv: Inventory, hosts: list[Host], *, deploy_id: str | None, dry_run: bool, yes: bool,
                   as_json: bool) -> CommandResult:
    """``inv deploy --previous`` / ``--id ID`` (``--dry-run``: say what would start, start nothing). Hosts one after
    another; the exit code of the worst. ``--id`` names one host's record, so it takes one host."""
    if deploy_id is not None and len(hosts) != 1:
        raise FlagError(f"--id: a deploy id is one host's record and {len(hosts)} hosts are selected",
                        "name the host: inv deploy --id ID --host H")
    docs: list[dict[str, Any]] = []
    code = 0
    for h in hosts:
        try:
            with HostSession.open(inv, h) as s:
                recs = s.records(history=True)
                cur = recs["current"]
                choice = choose(h, recs.get("history") or [], cur["deploy_id"] if cur else None, deploy_id)
                if dry_run:
                    if choice.target["ended"].get("kind") in UNSAFE_ENDS:
                        report.print_unsafe_warning(h.name, choice.target)
                    docs.append({"host": h.name, "ok": True, "dry_run": True, "would_start": choice.target,
                                 "replaces": choice.current})
                    if not as_json:
                        report.print_would_start(h.name, choice.target, choice.current)
                    continue
                confirm(h, choice, yes=yes)
                data = redeploy(s, choice.target["deploy_id"], reporter_for(h, quiet=as_json, shared_console=False))
            docs.append({"host": h.name, "ok": True, "from_deploy_id": choice.target["deploy_id"], **data})
            if not as_json:
                report.print_started(h.name, choice.target, dict(data))
        except SpecDeployError as e:
            e.host = e.host or h.name
            code = max(code, e.exit_code)
            docs.append({"host": h.name, "ok": False, "error": e.as_dict()})
            if not as_json:
                from fabfile.present.output import print_error

                print_error(e)

    def for_people() -> None:  # each host's line was printed as it finished
        if code and len(docs) > 1:
            report.print_failed_count(sum(1 for d in docs if not d["ok"]), len(docs))

    return CommandResult(hosts_document(docs), for_people, code)
