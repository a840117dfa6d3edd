"""Deploying to several hosts: ``parallel`` (every host at once) or ``rolling`` (a canary host first, then batches).

Each host's deploy runs in its own thread with its own SSH session (``fabfile.commands.deploy.deploy_host``), so a batch
takes as long as its slowest host, not the sum. A failed batch stops the rollout: later batches are not started.
The hosts already changed then stay on the new version where it is healthy, or, with ``rollback_on_failure``, are
put back to what they ran before: the host's previous deploy record (kept by the agent with its own copy of the
launch script) is started again by the ``redeploy`` verb; a host that ran nothing before is stopped.

The result says exactly which host runs what, observed on each host after the run (``status``: processes and
health at that moment), never taken from what this run believes it did. A host whose link died during its deploy
has an unknown outcome: it is reported as such; with ``rollback_on_failure`` it is re-checked when it answers again
(its deploy's journal says how it ended) and put back if it changed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from fabfile import flags
from fabfile.commands.deploy import deploy_behind_routers
from fabfile.commands.fanout import concurrent, reporter_for
from fabfile.errors import SpecDeployError, from_agent
from fabfile.inventory.hosts import Host, Inventory
from fabfile.plan.deploy_plan import Options, Plan, new_deploy_id
from fabfile.present.progress import Reporter
from fabfile.remote.protocol import DeployRecord
from fabfile.results.deploys import HostRollout, PatchRestore, RolloutResult
from fabfile.transport.session import HostSession

STRATEGIES = ("parallel", "rolling")


@dataclass(frozen=True)
class BatchSize:
    count: int | None = None      # hosts per batch
    percent: float | None = None  # or a share of all hosts, rounded up

    def size(self, total: int) -> int:
        if self.count is not None:
            return max(1, min(self.count, total))
        return max(1, min(total, math.ceil(total * (self.percent or 100) / 100)))

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent:g}%"


# More hosts per batch than any fleet has is a typo; a count above the fleet is then capped to it (``size``).
MAX_BATCH = 100000


def parse_batch(value: Any) -> BatchSize:
    """``--batch``: a whole number of hosts (``2``) or a share of them (``25%``)."""
    text = str(value).strip()
    if text.endswith("%"):
        pct = flags.number("--batch", text[:-1], minimum=0.0, open_minimum=True, maximum=100.0, unit="%",
                           what="a percentage of the hosts (e.g. 25%)")
        return BatchSize(percent=pct)
    return BatchSize(count=flags.whole("--batch", text, minimum=1, maximum=MAX_BATCH,
                                       what="a number of hosts (e.g. 2) or a percentage (e.g. 25%)"))


def make_batches(hosts: list[Host], strategy: str, batch: BatchSize, canary: bool) -> list[list[Host]]:
    """Parallel: one batch of every host. Rolling: the canary (first host) alone, then batches of ``batch``."""
    if strategy not in STRATEGIES:
        flags.choice("--strategy", strategy, STRATEGIES, what="strategy")
    if strategy == "parallel":
        return [list(hosts)]
    rest = list(hosts)
    out: list[list[Host]] = []
    if canary and len(rest) > 1:
        out.append([rest.pop(0)])
    n = batch.size(len(hosts))
    while rest:
        out.append(rest[:n])
        rest = rest[n:]
    return out


def run_rollout(inv: Inventory, hosts: list[Host], opts: Options, *, strategy: str, batch: BatchSize,
                canary: bool, rollback_on_failure: bool, quiet: bool = False,
                on_batch: Callable[[int, list[HostRollout]], None] | None = None) -> RolloutResult:
    import time

    t0 = time.monotonic()
    plan_batches = make_batches(hosts, strategy, batch, canary)
    rows = {h.name: HostRollout(h, batch=i + 1) for i, b in enumerate(plan_batches) for h in b}
    result = RolloutResult(strategy, [[h.name for h in b] for b in plan_batches], [rows[h.name] for h in hosts])

    if len(hosts) > 1 and refused_at_preflight(inv, hosts, opts, rows, result):
        observe(inv, result.hosts)
        result.wall_s = time.monotonic() - t0
        return result
    for i, b in enumerate(plan_batches):
        shared = len(b) > 1

        def one(h: Host, shared: bool = shared) -> None:
            r = deploy_behind_routers(inv, h, opts, reporter_for(h, quiet=quiet, shared_console=shared))
            row = rows[h.name]
            row.deploy = r
            if r.ok:
                row.outcome, row.config_now, row.pid_now = "deployed", r.plan.config_name, r.pid
            elif r.outcome_unknown:
                row.outcome = "unknown"
            else:
                row.outcome = "failed" if row.changed() else "failed (unchanged)"

        concurrent(b, one)
        if on_batch is not None:
            on_batch(i + 1, [rows[h.name] for h in b])
        if any(not rows[h.name].ok for h in b):
            result.stopped_after_batch = i + 1
            break
    result.deploy_s = time.monotonic() - t0
    for row in result.hosts:
        if row.outcome == "not started":
            row.outcome = "not started (rollout stopped)" if result.stopped_after_batch else row.outcome
    if result.stopped_after_batch is not None and rollback_on_failure:
        todo = [r for r in result.hosts if r.changed() or r.unknown()]
        rollback_hosts(todo, inv, quiet=quiet)
        result.rollback_incomplete = [r.host.name for r in todo if r.rollback_error is not None or r.unknown()]
        result.rolled_back = not result.rollback_incomplete
    observe(inv, result.hosts)
    result.wall_s = time.monotonic() - t0
    return result


def preflight_all(inv: Inventory, hosts: list[Host], plans: dict[str, Plan]) -> dict[str, SpecDeployError]:
    """Every host's preflight (facts, paths, GPUs, what its SGLang version accepts) at once, before any host is
    touched: the errors by host name (empty when every host passed)."""
    from fabfile.commands.deploy import preflight_only

    errors: dict[str, SpecDeployError] = {}

    def one(h: Host) -> None:
        e = preflight_only(inv, h, plans[h.name])
        if e is not None:
            errors[h.name] = e

    concurrent(hosts, one)
    return errors


def refused_at_preflight(inv: Inventory, hosts: list[Host], opts: Options, rows: dict[str, HostRollout],
                         result: RolloutResult, plans: dict[str, Plan] | None = None) -> bool:
    """Run :func:`preflight_all`; when a host fails it, fill the rows (that host failed, unchanged; the others not
    started) and say so in ``result``: nothing was changed on any host. Returns whether the run must stop."""
    from fabfile.plan.deploy_plan import build
    from fabfile.results.deploys import DeployResult

    if plans is None:
        from fabfile.errors import Collector

        found = Collector()  # every host's refusals at once (exit 2), before any host is asked anything
        plans = {h.name: found.check(build, h, opts) for h in hosts}
        found.done()
    errors = preflight_all(inv, hosts, plans)
    if not errors:
        return False
    for h in hosts:
        row = rows[h.name]
        e = errors.get(h.name)
        if e is not None:
            row.deploy = DeployResult(host=h.name, ok=False, plan=plans[h.name], error=e)
            row.outcome = "failed (unchanged)"
        else:
            row.outcome = f"not started (preflight failed on {', '.join(sorted(errors))})"
    result.stopped_after_batch = 0
    result.extra["preflight_failed"] = sorted(errors)
    return True


def observe(inv: Inventory, rows: list[HostRollout]) -> None:
    """Fill each row's "running now" from the host itself (the ``status`` verb, all hosts at once, each bounded):
    what this run believes it did is only the intent; the table shows what runs."""
    from fabfile.commands.fanout import for_each_host
    from fabfile.commands.operations import server_view
    from fabfile.errors import ConnectError

    # A host this run already failed to reach twice (deploy, then rollback) is not waited for a third time.
    gone = [r for r in rows if isinstance(r.rollback_error, ConnectError)]
    for r in gone:
        r.config_now, r.pid_now = "unknown", None
        r.observe_error = f"unreachable: {r.rollback_error.message if r.rollback_error else ''}"
    targets = [r for r in rows if r not in gone]
    if not targets:
        return
    bound = max(r.host.timeouts.connect_total + r.host.timeouts.command for r in targets)
    outcomes = for_each_host(inv, [r.host for r in targets], lambda s: s.status(), host_timeout=bound)
    for row, o in zip(targets, outcomes, strict=True):
        if o.error is not None:
            row.config_now, row.pid_now = "unknown", None
            row.observe_error = o.error.message
            continue
        view = server_view(o.answer)
        row.observed = view
        row.config_now, row.pid_now = view["config"], view["pid"]


def rollback_hosts(rows: list[HostRollout], inv: Inventory, *, quiet: bool) -> None:
    """Put each changed host back to its previous deploy (or stop it when nothing ran before), concurrently."""

    def one(row: HostRollout) -> None:
        h = row.host
        try:
            with HostSession.open(inv, h) as s:
                if row.unknown():
                    recheck(s, row)
                    if not row.changed():
                        row.outcome = "failed (unchanged)" if row.recheck and row.recheck.get("finished") == \
                            "failed" else "unchanged (re-checked)"
                        return
                prev = row.previous()
                if prev and prev.get("running") and prev.get("redeployable"):
                    data = redeploy(s, str(prev["deploy_id"]),
                                    reporter_for(h, quiet=quiet, shared_console=len(rows) > 1))
                    row.rollback = {"action": "redeployed", "deploy_id": data["deploy_id"],
                                    "from_deploy_id": str(prev["deploy_id"]), "config": data.get("config_name")}
                    row.outcome = "rolled back"
                    row.config_now, row.pid_now = data.get("config_name"), data.get("pid")
                    if row.deploy is not None:
                        from fabfile.commands.router import drain

                        row.deploy.router_notes += drain(inv, h, back=True)
                else:
                    s.stop()
                    why = "nothing ran before" if not prev or not prev.get("running") else \
                        "its previous deploy predates rollback records"
                    patches = restore_patches(s, row.deploy.plan.deploy_id) if row.deploy else None
                    row.rollback = {"action": "stopped", "why": why, "patches": patches}
                    row.outcome = "rolled back (stopped)"
                    row.config_now, row.pid_now = None, None
        except SpecDeployError as e:
            if e.host is None:
                e.host = h.name
            row.rollback_error = e
            row.outcome = "unknown" if row.unknown() else "rollback failed"
            row.config_now, row.pid_now = "unknown", None

    if rows:
        concurrent(rows, one)


def recheck(session: HostSession, row: HostRollout) -> None:
    """Learn how a deploy whose link died has ended, from its journal on the host (``attach``; it waits while the
    deploy still runs there). A deploy that left no journal never started: nothing changed."""
    from fabfile.commands.deploy import deadline_for

    assert row.deploy is not None
    plan = row.deploy.plan
    try:
        # skip: only the result is wanted, not a replay of its progress.
        data = session.attach(plan.deploy_id, skip=1 << 30, timeout=deadline_for(plan))
    except SpecDeployError as e:
        if e.details.get("agent_kind") != "deploy_lost":
            raise
        rec = session.records()["current"]
        mine = rec is not None and rec["deploy_id"] == plan.deploy_id
        row.recheck = {"finished": "lost", "changed": mine, "previous": rec["previous"] if rec and mine else None,
                       "message": e.message}
        return
    final = data["result"]
    if final.get("ok"):
        record = final.get("data")  # the deploy's own answer, its DeployRecord
        previous = cast("DeployRecord", record).get("previous") if isinstance(record, dict) else None
        row.recheck = {"finished": "deployed", "changed": True, "previous": previous}
    else:
        err = final.get("error")
        details = (err.get("details") or {}) if err else {}
        row.recheck = {"finished": "failed", "changed": bool(details.get("changed")),
                       "previous": details.get("previous"), "message": err.get("message") if err else None}


def restore_patches(session: HostSession, deploy_id: str) -> PatchRestore:
    """After stopping a host that ran nothing before, put its SGLang files back as they were before this run: the
    patch state of the deploy recorded before it (stopped, but its files stay as it left them), or the pristine
    files when there was none. Otherwise the failed deploy's patch mode would stay behind."""
    recs = session.records()
    cur, prev = recs["current"], recs["previous"]
    if cur is None or cur["deploy_id"] != deploy_id:
        return {"action": "none", "why": "the host's latest deploy is not this run's"}
    patch = (prev["request"] or {}).get("patch") if prev is not None else None
    if prev is not None and patch:
        session.patch_apply(patch)
        return {"action": "reapplied", "mode": patch.get("mode"), "deploy_id": prev["deploy_id"]}
    return {"action": "restored", "files": len(session.patch_rollback(dry_run=False)["files"])}


def redeploy(session: HostSession, from_deploy_id: str, reporter: Reporter) -> DeployRecord:
    """Start a recorded deploy again on the host (the agent's ``redeploy`` verb), following its events."""
    from fabfile.commands.deploy import deadline_for
    from fabfile.plan.deploy_plan import build

    h = session.host
    deploy_id = new_deploy_id()
    try:
        return session.redeploy(from_deploy_id, deploy_id, timeout=deadline_for(build(h, Options())),
                                on_event=reporter.event)
    except SpecDeployError:
        raise
    except Exception as e:  # a session closed under us can raise anything
        raise from_agent({"kind": "deploy_lost", "message": str(e)}, h.name) from None
    finally:
        reporter.close()
