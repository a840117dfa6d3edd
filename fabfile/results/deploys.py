"""What a deploy, a rollout (or cluster) and a router deploy come back with: plain values that ``present`` prints
as tables, ``as_dict`` turns into the ``--json`` document and ``exit_code`` judges. Built by ``fabfile.commands``;
no I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, cast

from fabfile.errors import AgentCrashError, ConnectError, SpecDeployError
from fabfile.inventory.hosts import Host, Router
from fabfile.plan.deploy_plan import Plan
from fabfile.results.hosts import ServerView

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.remote import protocol as p


@dataclass
class DeployResult:
    host: str
    ok: bool
    plan: Plan
    record: p.DeployRecord | None = None  # the host's record of it (``deploy``'s answer), once it served
    timings: dict[str, float] = field(default_factory=dict)
    patch_mode: str | None = None
    sglang_version: str | None = None
    error: SpecDeployError | None = None
    stats: dict[str, int] = field(default_factory=dict)
    # True once the host-side deploy was asked for: from then on, a lost link leaves its outcome unknown (the
    # deploy goes on without us), unlike a failure before it, which changed nothing.
    remote_started: bool = False
    # what the routers in front of this host were told (taken out before, put back after), in sentences
    router_notes: list[str] = field(default_factory=list)

    @property
    def outcome_unknown(self) -> bool:
        """The host-side deploy ran but its result never reached us (the link died and did not come back)."""
        e = self.error
        if self.ok or not self.remote_started or e is None or "changed" in e.details:
            return False
        return isinstance(e, (ConnectError, AgentCrashError)) or "command" in e.details or \
            e.details.get("agent_kind") in ("deadline", "deploy_lost") or e.details.get("timed_out") is True

    @property
    def exit_code(self) -> int:
        """0 when it serves; else its error's code (2: bad input, refused before anything changed), 1 without one."""
        return 0 if self.ok else (self.error.exit_code if self.error is not None else 1)

    @property
    def pid(self) -> int | None:
        """The server's pid, once the host recorded it."""
        return self.record.get("pid") if self.record else None

    def as_dict(self) -> dict[str, object]:
        rec: p.DeployRecord | dict[str, object] = self.record or {}
        verified = self.record.get("verify") if self.record else None
        verify: object = verified["evaluation"] if verified else None
        if verify is None and self.error is not None:
            # A deploy refused by its own check-env carries the evaluation in its error.
            failed = self.error.details.get("verify")
            verify = failed.get("evaluation") if isinstance(failed, Mapping) else None
        return {
            "host": self.host, "ok": self.ok, "deploy_id": self.plan.deploy_id, "config": self.plan.config_name,
            "plan_hash": self.plan.plan_hash, "pid": self.pid,
            "url": self.plan.url, "launch_argv": self.plan.masked_argv(), "env": self.plan.masked_env(),
            "log_path": rec.get("log_path") or self.plan.log_path, "timings": self.timings,
            "patch_mode": self.patch_mode, "sglang_version": self.sglang_version,
            "schedulers": rec.get("schedulers"), "ready": rec.get("ready"), "check_env": verify,
            "first_request": rec.get("first_request"), "accept": rec.get("accept"),
            "stopped": rec.get("stopped"), "error": self.error.as_dict() if self.error else None,
            "transport": self.stats, "notes": list(self.plan.notes), "knob_notes": list(self.plan.knob_notes),
            # SGLang's own warnings about the launch, read from its log while waiting for ready (one per line)
            "sglang_warnings": list(self.record.get("sglang_warnings") or []) if self.record else [],
            "outcome_unknown": self.outcome_unknown, "router_notes": list(self.router_notes),
        }


class Recheck(TypedDict, total=False):
    """How a deploy whose link died has ended, learnt from the host's journal (``rollout.recheck``)."""

    finished: str  # deployed | failed | lost
    changed: bool  # whether it changed the host (a failed deploy may have stopped the server before it)
    previous: p.PreviousDeploy | None  # the deploy it replaced, what a rollback starts again
    message: str | None


class PatchRestore(TypedDict, total=False):
    """What a rollback did to a stopped host's SGLang files (``rollout.restore_patches``)."""

    action: str  # none | reapplied | restored
    why: str
    mode: str
    deploy_id: str
    files: int


class RollbackNote(TypedDict, total=False):
    """What a rollback did on one host: started its previous deploy again, or stopped it (nothing ran before)."""

    action: str  # redeployed | stopped
    deploy_id: str
    from_deploy_id: str
    config: str | None
    why: str
    patches: PatchRestore | None


@dataclass
class HostRollout:
    host: Host
    batch: int
    deploy: DeployResult | None = None
    outcome: str = "not started"      # deployed | failed | failed (unchanged) | unknown | rolled back | ...
    config_now: str | None = None     # what runs on the host now: observed there after the run ("unknown": no answer)
    pid_now: int | None = None
    rollback: RollbackNote | None = None
    rollback_error: SpecDeployError | None = None
    recheck: Recheck | None = None    # an unknown outcome, learnt from the host's journal once it answered
    observed: ServerView | None = None   # operations.server_view of the host after the run
    observe_error: str | None = None         # why the host could not be observed

    @property
    def ok(self) -> bool:
        return self.outcome == "deployed"

    def previous(self) -> p.PreviousDeploy | None:
        """The deploy this run replaced on the host (what a rollback starts again), as the host said it."""
        d = self.deploy
        if d is None:
            return None
        if self.recheck is not None:
            return self.recheck.get("previous")
        if d.ok:
            return d.record.get("previous") if d.record else None
        prev = d.error.details.get("previous") if d.error is not None else None
        # A failed deploy's error carries its record's ``previous`` (the agent's AgentError details).
        return cast("p.PreviousDeploy", prev) if isinstance(prev, dict) else None

    def changed(self) -> bool:
        d = self.deploy
        if d is None:
            return False
        if d.ok:
            return True
        if self.recheck is not None:
            return bool(self.recheck.get("changed"))
        return bool(d.error is not None and d.error.details.get("changed"))

    def unknown(self) -> bool:
        """This run cannot tell whether the host changed (its link died mid-deploy and no re-check answered)."""
        return self.deploy is not None and self.deploy.outcome_unknown and self.recheck is None

    def as_dict(self) -> dict[str, object]:
        return {**(self.deploy.as_dict() if self.deploy else {"host": self.host.name, "ok": False}),
                "batch": self.batch, "outcome": self.outcome, "config_now": self.config_now,
                "pid_now": self.pid_now, "observed": self.observed, "observe_error": self.observe_error,
                "recheck": self.recheck, "rollback": self.rollback,
                "rollback_error": self.rollback_error.as_dict() if self.rollback_error else None}


class RolloutExtra(TypedDict, total=False):
    """What describes a whole rollout beside its hosts, in its ``--json`` document: a cluster's name, TP size,
    rendezvous and deploy id, the node that failed first; the hosts that refused it at preflight."""

    cluster: str
    tp: int
    dist_init_addr: str
    deploy_id: str
    failed_first: list[str]
    preflight_failed: list[str]


@dataclass
class RolloutResult:
    strategy: str
    batches: list[list[str]]
    hosts: list[HostRollout]
    stopped_after_batch: int | None = None
    rolled_back: bool = False                 # a rollback ran and every host it had to put back is back
    rollback_incomplete: list[str] = field(default_factory=list)  # hosts a rollback could not put back
    wall_s: float = 0.0
    deploy_s: float = 0.0                     # the batches alone (before rollback and the final observation)
    extra: RolloutExtra = field(default_factory=lambda: RolloutExtra())

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    @property
    def exit_code(self) -> int:
        """1 for a failed run; a run refused at preflight (bad input, what a host's SGLang does not accept, a host
        that does not meet the inventory: every refusing host's error an exit-2 one) exits 2 like any bad input,
        nothing having been touched; a host that could not be reached there keeps it 1 (try again)."""
        if self.ok:
            return 0
        errs = [r.deploy.error for r in self.hosts if r.deploy is not None and r.deploy.error is not None]
        if self.extra.get("preflight_failed") and errs and all(e.exit_code == 2 for e in errs):
            return 2
        return 1

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "strategy": self.strategy, "batches": self.batches,
                "stopped_after_batch": self.stopped_after_batch, "rolled_back": self.rolled_back,
                "rollback_incomplete": self.rollback_incomplete,
                "wall_s": round(self.wall_s, 3), "deploy_s": round(self.deploy_s, 3),
                "hosts": [h.as_dict() for h in self.hosts], **self.extra}


@dataclass
class RouterResult:
    router: Router
    url: str = ""
    workers: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)   # member → why it is not a worker
    record: p.RouterRecord | None = None
    error: SpecDeployError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def exit_code(self) -> int:
        return self.error.exit_code if self.error is not None else 0

    def as_dict(self) -> dict[str, object]:
        r = self.router
        return {"ok": self.ok, "router": r.name, "host": r.host, "group": r.group, "url": self.url,
                "workers": self.workers, "skipped": self.skipped, "pid": self.record["pid"] if self.record else None,
                "record": self.record, "error": self.error.as_dict() if self.error else None}
