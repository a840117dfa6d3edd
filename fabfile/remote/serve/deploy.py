"""The host-side half of ``inv deploy``: lock → patch → stop stale → GPU-clean gate → port free → start → wait ready →
verify env → record, in ONE agent process that holds the deploy lock throughout.

Doing the whole sequence in one process on the host costs one SSH round trip, makes the lock exact (an flock that
dies with its holder), and lets a deploy whose SSH session drops finish headless: events also go to a journal the
client re-attaches to. Any failure after the start tears the new server down: no half-started server is left.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, cast

from .. import failpoints, gpus, procs
from ..common import CONTEXT, AgentError, EventSink, expand, unexpected
from ..measure import profilestore
from ..protocol import (
    Accept,
    DeployRecord,
    DeployRequest,
    GateSpec,
    Holder,
    KeptRequest,
    PreviousDeploy,
    RedeployRequest,
    StepName,
    Stopped,
    Verified,
    VerifySpec,
)
from . import health, port, records, server, stop
from .lock import DeployLock
from .prefetch import Prefetch

if TYPE_CHECKING:  # annotations only: the evidence room is imported when the deploy verifies
    from ..evidence.interconnect import GpuFacts


class Steps:
    """Times each step and reports it as ``step`` events; keeps the timings for the record.

    Before each step it looks for a cancel request (``inv cancel``), and it notes the step in the lock's holder file
    (what a waiting deploy and ``inv status`` show). An exception nobody foresaw (a full disk, a bug) becomes an
    AgentError here, so the deploy's failure path still runs: the new server is torn down, the lock released.
    """

    def __init__(self, sink: EventSink, lock: DeployLock | None = None,
                 cancelled: Callable[[], str | None] | None = None) -> None:
        self.sink = sink
        self.lock = lock
        self.cancelled = cancelled
        self.timings: dict[StepName, float] = {}

    def run(self, name: StepName, fn: Callable[[], Any], detail: Callable[[Any], Any] | None = None) -> Any:
        CONTEXT["step"] = name
        if self.lock is not None:
            self.lock.note(step=name, step_since=_now())
            failpoints.stop_here(os.path.dirname(self.lock.info_path), name)
        self.sink.emit("step", name=name, status="start")
        t0 = time.monotonic()
        try:
            reason = self.cancelled() if self.cancelled is not None else None
            if reason is not None:
                raise AgentError("cancelled", f"the deploy was cancelled before step {name}: {reason}",
                                 "deploy again when you want a server")
            out = fn()
        except Exception as e:
            err = e if isinstance(e, AgentError) else unexpected(e)
            self.timings[name] = round(time.monotonic() - t0, 3)
            self.sink.emit("step", name=name, status="fail", elapsed=self.timings[name], message=err.message)
            if err is e:
                raise
            raise err from None
        self.timings[name] = round(time.monotonic() - t0, 3)
        self.sink.emit("step", name=name, status="ok", elapsed=self.timings[name],
                       detail=detail(out) if detail else None)
        return out


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# What a later rollback needs to start this exact server again (the request minus the one-off parts).
def kept(req: DeployRequest) -> KeptRequest:
    """The request's keys a redeploy needs, kept in the record (``.get``: a redeploy's request is a recorded one)."""
    return {"config_name": req.get("config_name"), "plan_hash": req.get("plan_hash"),
            "tool_version": req.get("tool_version"), "log_path": req.get("log_path"), "cwd": req.get("cwd"),
            "listen": req.get("listen"), "port": req.get("port"), "sglang_version": req.get("sglang_version"),
            "target_gpus": req.get("target_gpus"), "gpu_idle_mib": req.get("gpu_idle_mib"),
            "timeouts": req.get("timeouts"), "verify": req.get("verify"), "summary": req.get("summary"),
            "node": req.get("node"), "state_dir": req.get("state_dir"), "patch": req.get("patch"),
            "expected": req.get("expected"), "nccl_debug": req.get("nccl_debug"), "gates": req.get("gates"),
            "profile_dir": req.get("profile_dir"), "measure": req.get("measure")}


def _previous(state_dir: str) -> PreviousDeploy | None:
    """The deploy this one replaces, as a rollback needs it: id, config, and whether its server still ran."""
    rec = records.current(state_dir)
    if not rec:
        return None
    running = bool(rec.get("pid")) and rec.get("status") == "running" and \
        procs.alive(int(rec["pid"]), rec.get("start_ticks"))
    return {"deploy_id": rec.get("deploy_id"), "config_name": rec.get("config_name"),
            "plan_hash": rec.get("plan_hash"), "status": rec.get("status"), "running": running,
            "pid": rec.get("pid"), "redeployable": bool(rec.get("request") and rec.get("script_copy")),
            "client": rec.get("client"), "started_at": rec.get("started_at"), "ended": records.ended_of(rec)}


def _keep_script(state_dir: str, req: DeployRequest, record: DeployRecord) -> None:
    """Copy the launch script next to the record (a later deploy of the same config overwrites the original)."""
    import shutil

    from ..common import sha256_file

    copy = records.script_copy_path(state_dir, req["deploy_id"])
    try:
        shutil.copyfile(req["script"], copy)
        os.chmod(copy, 0o700)
        sha = sha256_file(copy)
    except OSError:
        return
    record["script_copy"], record["script_sha256"] = copy, sha


def _new_record(req: DeployRequest) -> DeployRecord:
    """The deploy's record as it starts: what was asked for, and what a later rollback needs to start it again."""
    return {
        "deploy_id": req["deploy_id"], "status": "running", "client": req.get("client"),
        "started_at": _now(), "config_name": req["config_name"], "plan_hash": req["plan_hash"],
        "tool_version": req.get("tool_version"), "sglang_version": req["sglang_version"],
        "listen": req["listen"], "port": req["port"], "log_path": req["log_path"], "script": req["script"],
        "launch": req.get("summary") or {"argv": [], "env": {}}, "patch_mode": _patch_mode(req) or "env",
        "previous": None, "node": req.get("node"), "rollback_of": req.get("rollback_of"),
        "expected": records.expected_of(req),
        "measure": bool(req.get("measure")), "profile_dir": req.get("profile_dir"),
        "request": kept(req),
    }


def run(req: DeployRequest, sink: EventSink) -> DeployRecord:
    state_dir = expand(req["state_dir"])
    t = req["timeouts"]
    cancel_file = records.cancel_path(state_dir, req["deploy_id"])

    def cancelled() -> str | None:
        try:
            with open(cancel_file, encoding="utf-8") as f:
                return f.read().strip() or "asked by the client"
        except OSError:
            return None

    record = _new_record(req)
    _keep_script(state_dir, req, record)
    lock = DeployLock(state_dir)
    steps = Steps(sink, lock, cancelled)
    me = procs.stat(os.getpid())
    # Who runs this deploy: `attach` tells a deploy that is waiting for the lock from one whose agent was killed.
    sink.emit("agent", pid=os.getpid(), start_ticks=me.start_ticks if me else None)
    # Heartbeats from the start: waiting for another deploy's lock can be long and otherwise silent.
    stop_heartbeat = sink.start_heartbeat(float(req.get("heartbeat_s") or 5.0))
    try:
        # The note says "lock" until the next step begins: a deploy refused meanwhile still names the holder's step.
        steps.run("lock", lambda: _take(lock, state_dir, req, float(t.get("lock_wait", 0)), _lock_waiter(sink)))
    except BaseException:
        stop_heartbeat()
        raise
    # Read under the lock: a deploy that waited replaces what the one before it left, not what ran when it came.
    record["previous"] = _previous(state_dir)
    if lock.waited > 0:
        # This deploy queued behind another (--lock-wait): say, before anything changes, what it now replaces.
        sink.emit("info", message=_replacing(record["previous"], lock.waited))
    if lock.stale:
        sink.emit("info", message=f"replaced a stale lock note left by deploy {lock.stale.get('deploy_id')} "
                  f"(agent pid {lock.stale.get('pid')} is gone)")
    deploy = _Sequence(req, sink, state_dir, record, steps, lock, cancelled)
    try:
        deploy.prepare()
        deploy.launch()
        deploy.finish()
        return record
    except AgentError as e:
        deploy.fail(e)
        raise
    finally:
        stop_heartbeat()
        lock.release()


def _take(lock: DeployLock, state_dir: str, req: DeployRequest, wait_s: float,
          on_wait: Callable[[Holder | None, float], None]) -> None:
    """The deploy lock, then the tune lease's word (``tunelease.admit``): a tune that holds the host admits only its
    own deploys, and a refused deploy lets go of the lock before it says so."""
    from . import tunelease

    lock.acquire({"deploy_id": req["deploy_id"], "client": req.get("client"), "config_name": req["config_name"],
                  "journal": req.get("journal"), "step": "lock"}, wait_s, on_wait)
    try:
        tunelease.admit(state_dir, req.get("tune_id"))
    except BaseException:
        lock.release()
        raise


class _Sequence:
    """The steps after the lock, in order: ``prepare`` (patch, stop stale, GPU-clean gate, port free), ``launch``
    (start, wait ready), ``finish`` (gates, verify env, record); ``fail`` tears down a server this deploy started."""

    def __init__(self, req: DeployRequest, sink: EventSink, state_dir: str, record: DeployRecord, steps: Steps,
                 lock: DeployLock, cancelled: Callable[[], str | None]) -> None:
        self.req, self.sink, self.state_dir, self.record, self.steps = req, sink, state_dir, record, steps
        self.lock, self.cancelled = lock, cancelled
        self.started: server.Started | None = None  # set the moment the server process exists
        self.prefetch: Prefetch | None = None  # started with the wait for ready (see prefetch.py)

    def prepare(self) -> None:
        req, record, steps, state_dir, t = self.req, self.record, self.steps, self.state_dir, self.req["timeouts"]
        patch_req = req.get("patch")
        if patch_req:
            from ..patch.apply import apply

            record["patch"] = steps.run("patch", lambda: apply(patch_req), _patch_detail)
        stopped = steps.run("stop", lambda: stop.stop_servers(state_dir, req["target_gpus"], float(t["stop_grace"])),
                            _stop_detail)
        if stopped["survivors"]:
            s = stopped["survivors"][0]
            raise AgentError("gpu_busy", f"PID {s['pid']} ({s['cmdline']}) survived SIGKILL",
                             "it may be stuck in the kernel (D state); the host may need attention")
        record["stopped"] = stopped
        prev = record.get("previous")
        if prev and prev.get("running") and prev.get("deploy_id"):
            # Its server is gone now, stopped by this deploy: that deploy ended "replaced" (`inv deploys`).
            records.mark_ended(state_dir, str(prev["deploy_id"]), "replaced", by=req["deploy_id"],
                               by_client=req.get("client"))
        steps.run("gpu_clean", lambda: gpus.wait_clean(req["target_gpus"], int(req["gpu_idle_mib"]),
                                                          float(t["gpu_clean"])),
                  lambda r: f"{len(r['gpus'])} GPU(s) idle")
        steps.run("port_free", lambda: port.check_free(req["listen"], int(req["port"])),
                  lambda r: f"{r['address']} free")

    def launch(self) -> None:
        req, record, sink, t = self.req, self.record, self.sink, self.req["timeouts"]
        header = (f"=== specdeploy deploy {req['deploy_id']} config {req['config_name']} plan {req['plan_hash']} "
                  f"started {_now()} ===")

        def start() -> server.Started:
            if req.get("profile_dir"):
                profilestore.ensure_dir(expand(str(req["profile_dir"])))
            self.started = started = server.start(req["script"], req["log_path"], expand(req["cwd"]), header,
                                                  gated=True)
            record.update({"pid": started["pid"], "pgid": started["pgid"], "start_ticks": started["start_ticks"],
                           "log_offset": started["log_offset"], "status": "starting"})
            # Recorded before it may run: should this agent be killed from here on, the server is no orphan (`inv
            # status` shows it; the next deploy or `inv stop` stops it through the recorded process group); killed
            # before, the gated server never starts. A record that cannot be written means no server.
            records.write(self.state_dir, record)
            self.lock.annotate(server_pid=started["pid"], server_start_ticks=started["start_ticks"],
                               log_path=req["log_path"], log_offset=started["log_offset"])
            started["release"]()
            return started

        self.steps.run("start", start, lambda r: f"pid {r['pid']}")
        started = self.started
        assert started is not None
        sink.emit("started", pid=started["pid"], log_path=req["log_path"], log_offset=started["log_offset"])

        def on_lines(lines: list[str]) -> None:
            sink.emit("log", lines=lines[-20:], count=len(lines))

        self.prefetch = Prefetch(gpu_facts=bool(req.get("verify")))

        ready = self.steps.run("wait_ready", lambda: server.wait_ready(
            pid=started["pid"], start_ticks=started["start_ticks"], log_path=req["log_path"],
            log_offset=started["log_offset"], listen=req["listen"], port=int(req["port"]),
            ready_path=health.ready_path_of(req, req["sglang_version"]), ready_s=float(t["ready"]),
            stall_s=float(t["stall"]), on_lines=on_lines, cancelled=self.cancelled,
            env=(req.get("summary") or {}).get("env")),
            lambda r: f"{r['ready_path']} answered 200 in {r['probe_latency_s']:.2f} s")
        record["ready"] = ready
        record["sglang_warnings"] = list(ready.pop("sglang_warnings", None) or [])

    def finish(self) -> None:
        req, record, steps, started = self.req, self.record, self.steps, self.started
        assert started is not None
        record["schedulers"] = procs.schedulers_of(started["pid"])
        gate_req = req.get("gates")
        if gate_req:
            _gates(gate_req, req, started, record, steps)
        verify = req.get("verify")
        if verify:
            def verify_step() -> Verified:
                gpu_facts = self.prefetch.gpu_facts() if self.prefetch is not None else None
                record["verify"] = v = _verify(req, verify, started, gpu_facts)
                if not v["evaluation"]["ok"]:
                    # raised inside the step, so the step is reported failed (never "✓ verify env 10/12")
                    raise AgentError("env_not_proven", "check-env could not prove the NCCL settings in every "
                                     f"scheduler ({_verify_detail(v)})", "see the table and its hints",
                                     verify=v)
                return v

            steps.run("verify_env", verify_step, _verify_detail)
        _still_serving(started, req["log_path"])
        record["status"] = "running"
        record["ready_at"] = _now()
        record["ended"] = {"kind": "ready", "at": record["ready_at"]}
        record["timings"] = steps.timings
        steps.run("record", lambda: records.write(self.state_dir, record))
        record["timings"] = steps.timings

    def fail(self, e: AgentError) -> None:
        """Record the failure; never leave a half-started server: its whole session goes, and we confirm it is gone."""
        record, steps, started = self.record, self.steps, self.started
        record["status"] = "failed"
        record["error"] = e.as_dict()
        record["ended_at"] = _now()
        if e.kind == "cancelled":
            # Who cancelled and when, for `inv status` ("cancelled by ... at ..."), not a bare "failed".
            cancel_file = records.cancel_path(self.state_dir, self.req["deploy_id"])
            try:
                at = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(os.path.getmtime(cancel_file)))
            except OSError:
                at = record["ended_at"]
            record["cancelled"] = {"reason": self.cancelled() or e.message, "at": at}
        # A cancel is no failure of the configuration: `inv deploys` and a later start by id tell them apart.
        record["ended"] = {"kind": "cancelled" if e.kind == "cancelled" else "failed",
                           "at": record["cancelled"]["at"] if e.kind == "cancelled" else record["ended_at"],
                           "why": e.message}
        e.details["previous"] = record["previous"]
        e.details["changed"] = any(k in steps.timings for k in ("patch", "stop"))
        if started is not None:
            leader = procs.stat(started["pid"])
            victims = [leader] if leader else []
            victims += procs.descendants(started["pid"])
            down = procs.terminate([v for v in victims if v is not None], float(self.req["timeouts"]["stop_grace"]))
            e.details["torn_down"] = [d["pid"] for k in ("terminated", "killed") for d in down[k]]
            self.sink.emit("info", message=f"stopped the failed server (pid {started['pid']}) and its children")
        record["timings"] = steps.timings
        try:
            records.write(self.state_dir, record)
        except OSError as we:  # a full disk: the failure itself still reaches the client
            self.sink.emit("info", message=f"could not record the failed deploy on the host ({we.strerror})")


def _still_serving(started: server.Started, log_path: str) -> None:
    """The record is about to say "running": the server must still run. It can die after it was ready (its launcher
    killed while the deploy verified its environment, seen in the fault tests once a failpoint held the deploy there),
    and the evidence read a moment before can still show its schedulers. An exited main thread (a zombie) is dying,
    whatever threads are left."""
    info = procs.stat(int(started["pid"]))
    moved = started.get("start_ticks") is not None and info is not None and info.start_ticks != started["start_ticks"]
    if info is None or info.state in ("Z", "X") or moved:
        raise AgentError("process_died", f"the server process {started['pid']} exited after it was ready, before "
                         "the deploy was recorded", "see its log (`inv logs`); deploy again once the cause is fixed",
                         log_path=log_path)


def _gates(gate_req: GateSpec, req: DeployRequest, started: server.Started, record: DeployRecord,
           steps: Steps) -> None:
    """Ready means it answers: one real generation, then (speculative configurations) the accept-length gate."""
    from ..measure.bench import api_key_of
    from . import gates

    key = api_key_of(int(started["pid"]))
    timeout = float(gate_req.get("timeout") or 60.0)
    listen, port = req["listen"], int(req["port"])
    gate = gate_req.get("accept_gate")
    # The burst runs beside the first request (each is the server's own generation time); a first request that
    # fails is still reported as such, and the burst then dies with the server the failure tears down.
    burst = gates.AcceptBurst(listen, port, key, timeout) if gate is not None else None
    record["first_request"] = steps.run(
        "first_request", lambda: gates.first_request(listen, port, key, timeout),
        lambda r: f"{r['completion_tokens']} tokens in {r['latency_s']:.2f} s")
    if burst is None or gate is None:
        return

    def accept_step(burst: gates.AcceptBurst = burst, gate: float = float(gate)) -> Accept:
        record["accept"] = out = gates.judge_accept(burst.result(), gate)
        return out

    steps.run("accept_gate", accept_step,
              lambda r: f"accept length {r['accept_length']:.2f} over {r['requests']} requests (gate {r['gate']:g})")


def _replacing(prev: PreviousDeploy | None, waited: float) -> str:
    """The queued deploy's line once it holds the host: the deploy it replaces (its id), or that none runs."""
    head = f"got the host after queueing {waited:.0f} s"
    if not prev or not prev.get("deploy_id"):
        return f"{head}; no deploy was recorded here before: this one replaces nothing"
    who = f"deploy {prev['deploy_id']} ({prev.get('config_name')}, from {prev.get('client') or '?'})"
    if prev.get("running"):
        return f"{head}; this deploy now replaces {who}, whose server runs (pid {prev.get('pid')})"
    return f"{head}; the last deploy here, {who}, ended {(prev.get('ended') or {}).get('kind', '?')}: nothing of " \
        "it runs to replace"


def _patch_mode(req: DeployRequest) -> str | None:
    patch = req.get("patch")
    return patch["mode"] if patch else None


def _lock_waiter(sink: EventSink) -> Callable[[Holder | None, float], None]:
    """While another deploy holds the host: a ``lock_wait`` event at once, on each step it moves to, and every 10 s
    (so the waiting user sees who holds the host and what it does)."""
    last: dict[str, Any] = {"key": None, "at": 0.0}

    def on_wait(holder: Holder | None, left: float) -> None:
        key = (holder or {}).get("deploy_id"), (holder or {}).get("step")
        now = time.monotonic()
        if key != last["key"] or now - last["at"] >= 10.0:
            last.update(key=key, at=now)
            sink.emit("lock_wait", holder=holder, left_s=round(left, 1))

    return on_wait


def _verify(req: DeployRequest, verify: VerifySpec, started: server.Started,
            gpu_facts: GpuFacts | None) -> Verified:
    from ..evidence import judge as evidence
    from ..evidence.gather import evidence_request
    from ..patch.modes import explain_unloaded_plugin

    ev_req = evidence_request(req, deploy_id=req["deploy_id"], log_path=req["log_path"],
                              log_offset=started["log_offset"], pid=started["pid"],
                              start_ticks=started["start_ticks"], expected=verify["expected"])
    # NCCL prints its lines when each communicator initialises, which can trail readiness by a moment.
    deadline = time.monotonic() + float(verify.get("settle_s", 3.0))
    while True:
        ev = evidence.gather(ev_req, _NullSink(), gpu_facts)
        ev_eval = evidence.evaluate(ev, verify["expected"])
        explain_unloaded_plugin(ev_eval, _patch_mode(req), started["pid"], (req.get("summary") or {}).get("env"))
        if ev_eval["ok"] or time.monotonic() >= deadline:
            return {"evidence": ev, "evaluation": ev_eval}
        time.sleep(0.2)


class _NullSink(EventSink):
    def __init__(self) -> None:
        super().__init__(None)
        self.stdout_ok = False


def _patch_detail(r: Any) -> Any:
    if not isinstance(r, dict):
        return None
    counts: dict[str, int] = {}
    for f in r.get("files") or []:
        counts[str(f.get("action", "?"))] = counts.get(str(f.get("action", "?")), 0) + 1
    mode = r.get("mode", "?")
    return f"mode {mode}: " + ", ".join(f"{n} file(s) {a}" for a, n in sorted(counts.items())) if counts else None


def _stop_detail(r: Stopped) -> str:
    n_term, n_kill = len(r["terminated"]), len(r["killed"])
    if not n_term and not n_kill:
        return "nothing running"
    return f"{n_term} stopped with SIGTERM, {n_kill} needed SIGKILL"


def _verify_detail(r: Verified) -> str:
    rows = r["evaluation"].get("rows") or []
    proven = sum(1 for x in rows if x.get("status") == "proven")
    return f"{proven}/{len(rows)} values proven across {len(r['evidence'].get('schedulers') or [])} scheduler(s)"


def redeploy(req: RedeployRequest, sink: EventSink) -> DeployRecord:
    """The ``redeploy`` verb (rollback): start a recorded deploy again from its own copy of the launch script, with
    its own patch state (the patch engine reconciles the host to that deploy's mode and values)."""
    from ..common import sha256_file

    state_dir = expand(req["state_dir"])
    old = records.load(state_dir, req["from_deploy_id"])
    if not old or not old.get("request") or not old.get("script_copy"):
        raise AgentError("no_record", f"deploy {req['from_deploy_id']} has no redeployable record on this host",
                         "it predates rollback support or was removed; deploy that configuration explicitly")
    try:
        sha = sha256_file(old["script_copy"])
    except OSError:
        sha = None
    if sha != old.get("script_sha256"):
        raise AgentError("script_changed", f"the saved launch script of deploy {old['deploy_id']} is missing or "
                         "changed since it ran", "deploy that configuration explicitly")
    # The record's request was a DeployRequest when that deploy ran (its ``kept`` keys), plus the one-off keys.
    new = cast(DeployRequest, {**old["request"], "deploy_id": req["deploy_id"], "client": req.get("client"),
                               "journal": req.get("journal"), "script": old["script_copy"],
                               "rollback_of": old["deploy_id"], "state_dir": req["state_dir"]})
    timeouts = new.get("timeouts")
    if "lock_wait" in req and timeouts:
        # This run's own choice (--lock-wait; by default refuse), never the wait recorded with the old deploy.
        new["timeouts"] = {**timeouts, "lock_wait": float(req["lock_wait"])}
    return run(new, sink)
