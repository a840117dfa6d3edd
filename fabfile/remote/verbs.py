"""The agent's verbs: name → function(request, sink) → result data. One line each; the work lives in the modules."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, cast

from .common import AgentError, EventSink, expand
from .protocol import BenchRequest, CheckEnvRequest, DeployRequest, ProfileRequest, StopRequest

# Each verb imports what it needs: every agent call starts a fresh Python, and a status call should not pay for
# the deploy machinery (measured: importing everything costs ~50 ms per call).


def _facts(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    from . import facts
    data = facts.collect(req)
    data["problems"] = facts.problems(data, req)
    return data


def _deploy(req: DeployRequest, sink: EventSink) -> dict[str, Any]:
    from .serve import deploy
    return deploy.run(req, sink)


def _stop(req: StopRequest, sink: EventSink) -> dict[str, Any]:
    from .serve import records, stop
    state_dir = expand(req["state_dir"])
    from .serve.lock import DeployLock

    lock = DeployLock(state_dir)
    lock.acquire({"deploy_id": "stop", "client": req.get("client"), "step": "stop"}, float(req.get("lock_wait", 0)))
    try:
        from .serve import router
        routers = [r["name"] for r in router.all_records(state_dir) if router.is_running(r)]
        if req.get("dry_run"):
            found = stop.find_stale(state_dir, list(req.get("target_gpus") or []))
            return {"dry_run": True, "would_stop": [dict(v["proc"].as_dict(), why=v["why"])
                                                    for v in found["targets"].values()], "routers_running": routers}
        result = stop.stop_servers(state_dir, list(req.get("target_gpus") or []), float(req.get("grace", 15)))
        result["routers_running"] = routers
        rec = records.current(state_dir)
        if rec and rec.get("status") in ("running", "starting"):
            rec["status"] = "stopped"
            rec["stopped_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            records.write(state_dir, rec)
        return result
    finally:
        lock.release()


def _gpus(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    from . import gpus
    snap = gpus.snapshot()
    if req.get("topology"):
        snap["topology"] = gpus.topology()
    return snap


def _evidence(req: CheckEnvRequest, sink: EventSink) -> dict[str, Any]:
    """check-env: judge the running server by what its deploy asked for (the record), with evidence that belongs
    to it (its launcher's pid and start time, its part of the log, its deploy id). A server that is not the
    recorded deploy is reported as such and judged only by its own processes."""
    from . import procs
    from .evidence import judge as evidence
    from .evidence import ncclenv
    from .patch.modes import explain_unloaded_plugin
    from .serve import deploy, records

    state_dir = expand(req["state_dir"])
    rec = records.current(state_dir) or {}
    asked = {str(k): str(v) for k, v in (req.get("expected") or {}).items()}
    running = bool(rec.get("pid")) and procs.alive(int(rec["pid"]), rec.get("start_ticks"))
    if running:
        recorded = deploy.expected_of(rec) or deploy.expected_of(rec.get("request") or {})
        expected = asked if recorded is None else recorded
        ev_req = deploy.evidence_request(
            {**(rec.get("request") or {}), **rec}, deploy_id=str(rec.get("deploy_id")),
            log_path=str(rec.get("log_path")), log_offset=int(rec.get("log_offset") or 0), pid=int(rec["pid"]),
            start_ticks=rec.get("start_ticks"), expected=expected)
        ev_req["nccl_debug_file"] = req.get("nccl_debug_file") or ev_req.get("nccl_debug_file")
        differs = {} if recorded is None else {
            k: {"record": recorded.get(k), "inventory": asked.get(k)}
            for k in sorted(set(recorded) | set(asked))
            if not (recorded.get(k) == asked.get(k) or ncclenv.same(k, recorded.get(k), asked.get(k)))}
    else:
        expected, differs = asked, {}
        why = None
        if rec:
            why = (f"its launcher pid {rec.get('pid')} is gone" if rec.get("pid") else "it never started") + \
                f"; the record says {rec.get('status')}"
        # Nothing recorded runs: the log, deploy id, version and launch flags of the record say nothing about
        # whatever runs now; only the processes themselves are read.
        ev_req = {"log_path": None, "launcher_pid": None, "expected": expected,
                  "nccl_debug_file": req.get("nccl_debug_file"),
                  "server": {"recorded_deploy": rec.get("deploy_id"), "record_status": rec.get("status"),
                             "is_recorded_deploy": False if rec else None, "why": why}}
    ev = evidence.gather(ev_req, sink)
    ev["expected_source"] = "record" if running and expected is not asked else "inventory"
    ev["inventory_differs"] = differs
    evaluation = evidence.evaluate(ev, expected)
    if running:
        request = rec.get("request") or {}
        explain_unloaded_plugin(evaluation, (request.get("patch") or {}).get("mode"),
                                ev_req["launcher_pid"], (request.get("summary") or {}).get("env"))
    return {"evidence": ev, "evaluation": evaluation, "record": rec or None}


def _patch(fn_name: str) -> Callable[[dict[str, Any], EventSink], dict[str, Any]]:
    def verb(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
        from .patch import apply, rollback
        from .serve.lock import DeployLock

        req = dict(req)
        req["state_dir"] = expand(req["state_dir"])
        lock = None
        if fn_name == "rollback" and not req.get("dry_run"):
            # Not under a running deploy's feet: it patched these files for the server it is starting.
            lock = DeployLock(req["state_dir"])
            lock.acquire({"deploy_id": "rollback-patches", "client": req.get("client")},
                         float(req.get("lock_wait", 0)))
        try:
            engine = {"apply": apply.apply, "rollback": rollback.rollback, "status": rollback.status}[fn_name]
            result: dict[str, Any] = engine(req)
        finally:
            if lock is not None:
                lock.release()
        return result

    return verb


def _status(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    from .serve import hoststatus
    return hoststatus.status(req, sink)


def _logs(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    from .serve import follow
    return follow.logs(req, sink)


def _attach(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    from .serve import follow
    return follow.attach(req, sink)


def _bench(req: BenchRequest, sink: EventSink) -> dict[str, Any]:
    from .measure import bench
    return bench.run(req, sink)


def _profile(req: ProfileRequest, sink: EventSink) -> dict[str, Any]:
    from .measure import profile
    return dict(profile.run(req, sink))


def _records(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    """The current deploy record and the one it replaced (what a rollback would put back)."""
    from .serve import records
    state_dir = expand(req["state_dir"])
    cur = records.current(state_dir)
    prev = (cur or {}).get("previous") or None
    full_prev = records.load(state_dir, prev["deploy_id"]) if prev and prev.get("deploy_id") else None
    out: dict[str, Any] = {"current": cur, "previous": full_prev}
    if req.get("ids"):  # `inv diff`: named records (None for an id this host has no record of)
        out["loaded"] = {str(i): records.load(state_dir, str(i)) if str(i).replace("-", "").isalnum() else None
                         for i in req["ids"]}
    return out


def _redeploy(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    """Start a recorded deploy again from its own copy of the launch script (rollback), with its own patch state:
    the patch engine reconciles the host to that deploy's mode and values."""
    from .common import sha256_file
    from .serve import deploy, records
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
    new = dict(old["request"])
    new.update(deploy_id=req["deploy_id"], client=req.get("client"), journal=req.get("journal"),
               script=old["script_copy"], patch=old["request"].get("patch"), rollback_of=old["deploy_id"],
               state_dir=req["state_dir"])
    # The record's request was a DeployRequest when that deploy ran (its ``_KEEP`` keys), plus the one-off keys.
    return deploy.run(cast(DeployRequest, new), sink)


def _cancel(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    """Ask a running deploy to give up and tear its new server down (`inv cancel`, or another cluster rank failed).

    ``deploy_id`` omitted: the deploy holding the host's lock now. With ``wait_s``, wait (bounded) until that deploy
    has let go of the host and report how it ended, from its record.
    """
    from .common import atomic_write
    from .serve import records
    from .serve.lock import DeployLock
    state_dir = expand(req["state_dir"])
    deploy_id = req.get("deploy_id")
    holder = DeployLock(state_dir).live_holder() if os.path.isdir(state_dir) else None
    if not deploy_id:
        if holder is None or not holder.get("journal"):
            return {"cancelled": None, "holder": holder}  # no deploy in progress (maybe a stop): nothing to cancel
        deploy_id = holder["deploy_id"]
    atomic_write(records.cancel_path(state_dir, deploy_id), str(req.get("reason", "")).encode(), 0o600)
    out: dict[str, Any] = {"cancelled": deploy_id, "step": (holder or {}).get("step")}
    until = time.monotonic() + float(req.get("wait_s") or 0)
    while time.monotonic() < until:
        now = DeployLock(state_dir).live_holder()
        if now is None or now.get("deploy_id") != deploy_id:
            rec = records.load(state_dir, deploy_id) or {}
            out.update(ended=True, status=rec.get("status"), error=rec.get("error"))
            return out
        time.sleep(0.1)
    out["ended"] = False
    return out


def _router_start(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    from .serve import router
    req = dict(req)
    for key in ("cwd", "script", "log_path"):
        req[key] = expand(req[key])
    return router.start(expand(req["state_dir"]), req)


def _router_stop(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    from .serve import router
    return router.stop(expand(req["state_dir"]), req["name"], float(req.get("grace", 5)))


def _router_worker(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    """Take a replica out of a router before its server restarts, or put it back once it answers again."""
    from .serve import router
    state_dir = expand(req["state_dir"])
    if req.get("action") == "remove":
        return router.remove_worker(state_dir, req["name"], req["url"], float(req.get("drain_s", 5)))
    return router.add_worker(state_dir, req["name"], req["url"], float(req.get("wait_s", 30)))


def _watch(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    from .measure import watch
    from .serve import hoststatus
    return watch.sample(expand(req["state_dir"]), hoststatus.last_decode)


def _stale(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    from .serve import stop
    found = stop.find_stale(expand(req["state_dir"]), list(req.get("target_gpus") or []))
    items: list[dict[str, Any]] = [dict(v["proc"].as_dict(), why=v["why"]) for v in found["targets"].values()]
    return {"processes": items, "gpu_holders": found["gpu_holders"]}


def _adopt(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    """Read the hand-started server (argv, the variables it was given, its log) and record it as adopted, so the
    next deploy stops exactly it."""
    from . import facts
    from .serve import adoption
    state_dir = expand(req["state_dir"])
    server = adoption.read_server(state_dir, req.get("port"))
    server["record"] = adoption.write_record(state_dir, server)
    server["sglang"] = facts.sglang_info().get("version")
    return server


# A verb takes the request as the wire's JSON (``Any``): each annotates the shape it reads (``protocol``).
TABLE: dict[str, Callable[[Any, EventSink], dict[str, Any]]] = {
    "facts": _facts,
    "deploy": _deploy,
    "attach": _attach,
    "stop": _stop,
    "status": _status,
    "logs": _logs,
    "gpus": _gpus,
    "stale": _stale,
    "adopt": _adopt,
    "records": _records,
    "redeploy": _redeploy,
    "cancel": _cancel,
    "router_start": _router_start,
    "router_stop": _router_stop,
    "router_worker": _router_worker,
    "watch": _watch,
    "bench": _bench,
    "profile": _profile,
    "evidence": _evidence,
    "patch_apply": _patch("apply"),
    "patch_rollback": _patch("rollback"),
    "patch_status": _patch("status"),
}
