"""What a deploy, a rollout (or cluster) and a router deploy come back with: plain values that ``present`` prints
as tables, ``as_dict`` turns into the ``--json`` document and ``exit_code`` judges. Built by ``fabfile.commands``;
no I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fabfile.errors import AgentCrashError, ConnectError, SpecDeployError
from fabfile.inventory.hosts import Host, Router
from fabfile.plan.deploy_plan import Plan


@dataclass
class DeployResult:
    host: str
    ok: bool
    plan: Plan
    record: dict[str, Any] = field(default_factory=dict)
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

    def as_dict(self) -> dict[str, Any]:
        verify = (self.record.get("verify") or {}).get("evaluation")
        if verify is None and self.error is not None:
            verify = ((self.error.details.get("verify") or {}).get("evaluation"))
        return {
            "host": self.host, "ok": self.ok, "deploy_id": self.plan.deploy_id, "config": self.plan.config_name,
            "plan_hash": self.plan.plan_hash, "pid": self.record.get("pid"),
            "url": self.plan.url, "launch_argv": self.plan.masked_argv(), "env": self.plan.masked_env(),
            "log_path": self.record.get("log_path") or self.plan.log_path, "timings": self.timings,
            "patch_mode": self.patch_mode, "sglang_version": self.sglang_version,
            "schedulers": self.record.get("schedulers"), "ready": self.record.get("ready"), "check_env": verify,
            "first_request": self.record.get("first_request"), "accept": self.record.get("accept"),
            "stopped": self.record.get("stopped"), "error": self.error.as_dict() if self.error else None,
            "transport": self.stats, "notes": list(self.plan.notes), "knob_notes": list(self.plan.knob_notes),
            # SGLang's own warnings about the launch, read from its log while waiting for ready (one per line)
            "sglang_warnings": list(self.record.get("sglang_warnings") or []),
            "outcome_unknown": self.outcome_unknown, "router_notes": list(self.router_notes),
        }


@dataclass
class HostRollout:
    host: Host
    batch: int
    deploy: DeployResult | None = None
    outcome: str = "not started"      # deployed | failed | failed (unchanged) | unknown | rolled back | ...
    config_now: str | None = None     # what runs on the host now: observed there after the run ("unknown": no answer)
    pid_now: int | None = None
    rollback: dict[str, Any] | None = None
    rollback_error: SpecDeployError | None = None
    recheck: dict[str, Any] | None = None    # an unknown outcome, learnt from the host's journal once it answered
    observed: dict[str, Any] | None = None   # operations.server_view of the host after the run
    observe_error: str | None = None         # why the host could not be observed

    @property
    def ok(self) -> bool:
        return self.outcome == "deployed"

    def previous(self) -> dict[str, Any] | None:
        d = self.deploy
        if d is None:
            return None
        if self.recheck is not None:
            prev = self.recheck.get("previous")
        else:
            details = d.record if d.ok else (d.error.details if d.error is not None else {})
            prev = details.get("previous")
        return prev if isinstance(prev, dict) else None

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

    def as_dict(self) -> dict[str, Any]:
        return {**(self.deploy.as_dict() if self.deploy else {"host": self.host.name, "ok": False}),
                "batch": self.batch, "outcome": self.outcome, "config_now": self.config_now,
                "pid_now": self.pid_now, "observed": self.observed, "observe_error": self.observe_error,
                "recheck": self.recheck, "rollback": self.rollback,
                "rollback_error": self.rollback_error.as_dict() if self.rollback_error else None}


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
    extra: dict[str, Any] = field(default_factory=dict)

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

    def as_dict(self) -> dict[str, Any]:
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
    record: dict[str, Any] = field(default_factory=dict)
    error: SpecDeployError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def exit_code(self) -> int:
        return self.error.exit_code if self.error is not None else 0

    def as_dict(self) -> dict[str, Any]:
        r = self.router
        return {"ok": self.ok, "router": r.name, "host": r.host, "group": r.group, "url": self.url,
                "workers": self.workers, "skipped": self.skipped, "pid": self.record.get("pid"),
                "record": self.record, "error": self.error.as_dict() if self.error else None}
