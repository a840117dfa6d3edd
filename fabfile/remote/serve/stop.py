"""Finding and stopping stale SGLang servers: by recorded process group first, then anything that looks like SGLang
or holds one of the GPUs the new server needs. TERM, grace, KILL, and confirmation that each one is gone."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, NamedTuple

from .. import gpus, procs
from ..common import EventSink, expand
from . import records

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import GpuApp, Proc, StopAnswer, Stopped, StopRequest

ROUTER_TITLE = "sglang::router"


def _router_pids(state_dir: str, table: list[procs.ProcInfo]) -> set[int]:
    """The routers this tool started on the host (``inv deploy-router``) and their children: a deploy of the
    host's server must not stop the router in front of the replicas (measured: it did, as its title is
    ``sglang::router``, and every request through it failed until it was started again)."""
    import os

    if not os.path.isdir(os.path.join(state_dir, "routers")):
        return set()
    from . import router

    out: set[int] = set()
    for rec in router.all_records(state_dir):
        if router.is_running(rec):
            out.add(int(rec["pid"]))
            out.update(d.pid for d in procs.descendants(int(rec["pid"]), table))
    return out


class Stale(NamedTuple):
    """A process a stop would end, and why it counts as a stale server's."""

    proc: procs.ProcInfo
    why: str


class Found(NamedTuple):
    targets: dict[int, Stale]  # pid -> the process and why
    gpu_holders: list[GpuApp]  # what holds the target GPUs (nvidia-smi's view)


def find_stale(state_dir: str, target_gpus: list[int], include_gpu_holders: bool = True,
               gpu_queries: gpus.Queries | None = None,
               before_gpu_read: Callable[[dict[int, Stale]], None] | None = None) -> Found:
    """The stale servers' processes (``targets``: pid → proc and why) and what holds the target GPUs.

    ``gpu_queries``: the GPU snapshot, already started by the caller (nvidia-smi then runs while /proc is read).
    ``before_gpu_read(targets)``: called with the processes found in /proc before the snapshot is read, so the
    caller can start stopping them while nvidia-smi still runs (the GPU holders are added after)."""
    if include_gpu_holders and gpu_queries is None:
        gpu_queries = gpus.start_snapshot()
    table = procs.all_procs()
    by_pid = {p.pid: p for p in table}
    protected = procs.protected_pids() | _router_pids(state_dir, table)
    found: dict[int, Stale] = {}

    def add(p: procs.ProcInfo, why: str) -> None:
        if p.pid in protected or (p.state in ("Z", "X") and not procs.alive(p.pid)):
            return
        found.setdefault(p.pid, Stale(p, why))

    rec = records.current(state_dir)
    if rec and rec.get("pid") and procs.alive(int(rec["pid"]), rec.get("start_ticks")):
        leader_info = by_pid.get(int(rec["pid"]))
        if leader_info is not None:
            leader = leader_info
            add(leader, f"recorded server of deploy {rec.get('deploy_id')}")
            for d in procs.descendants(leader.pid, table):
                add(d, "child of the recorded server")
    # A server brought under the tool by `inv adopt`: stopped by its recorded pid and start time, whatever its
    # process looks like (a wrapper script, a renamed interpreter).
    from . import adoption
    adopted = adoption.adopted(state_dir)
    if adopted is not None and int(adopted["pid"]) in by_pid:
        add(by_pid[int(adopted["pid"])], "adopted server (inv adopt)")
        for d in procs.descendants(int(adopted["pid"]), table):
            add(d, "child of the adopted server")
    for p in table:
        # An SGLang server in another container (another PID namespace) is not ours to stop by its name; it is
        # stopped only if it holds one of the GPUs this deploy needs (below).
        if not procs.same_pid_namespace(p.pid):
            continue
        if p.cmdline.startswith(ROUTER_TITLE):
            continue  # SGLang's router (it sets this title) serves no model and holds no GPU: not a server
        if procs.is_sglang_title(p.cmdline):
            add(p, "SGLang process title")
        elif procs.is_sglang_launcher(p.cmdline):
            add(p, "SGLang launcher")
            for d in procs.descendants(p.pid, table):
                add(d, "child of an SGLang launcher")
    if before_gpu_read is not None:
        before_gpu_read(found)
    holders: list[GpuApp] = []
    if include_gpu_holders and gpu_queries is not None:
        snap = gpus.read_snapshot(gpu_queries)
        for app in snap["apps"]:
            if app["gpu"] in target_gpus:
                holders.append(app)
                holder = by_pid.get(app["pid"])
                if holder is not None:
                    add(holder, f"holds GPU {app['gpu']} ({app['used_mib']} MiB)")
    return Found(found, holders)


def stop_servers(state_dir: str, target_gpus: list[int], grace: float) -> Stopped:
    """Stop every stale server. The GPU snapshot (tens of ms per nvidia-smi run on a real host) runs while /proc is
    read and while the servers found there already shut down; holders it adds get their SIGTERM after."""
    termed: set[int] = set()

    def stop_found(found: dict[int, Stale]) -> None:
        termed.update(procs.send_term([v.proc for v in found.values()]))

    found = find_stale(state_dir, target_gpus, gpu_queries=gpus.start_snapshot(), before_gpu_read=stop_found)
    targets = [v.proc for v in found.targets.values()]
    why = {pid: v.why for pid, v in found.targets.items()}
    result = procs.terminate(targets, grace, termed)
    for key in ("terminated", "killed", "survivors"):
        for item in result[key]:
            item["why"] = why.get(item["pid"], "")
    return result


def _listed(found: Found) -> list[Proc]:
    """The stale processes ``find_stale`` found, each with why it counts as one."""
    return [{**v.proc.as_dict(), "why": v.why} for v in found.targets.values()]


def run(req: StopRequest, sink: EventSink) -> StopAnswer:
    """The ``stop`` verb: under the deploy lock (never under a deploy's feet), stop the servers on the target GPUs
    (or, ``dry_run``, say which would stop) and mark the recorded deploy stopped. Routers stay up: named only."""
    from . import router
    from .lock import DeployLock

    state_dir = expand(req["state_dir"])
    targets = list(req.get("target_gpus") or [])
    lock = DeployLock(state_dir)
    lock.acquire({"deploy_id": "stop", "client": req.get("client"), "step": "stop"}, float(req.get("lock_wait", 0)))
    try:
        from .tunelease import admit

        if not req.get("dry_run"):
            admit(state_dir, None)  # a tune holds the host: its next score would be of no server
        routers = [r["name"] for r in router.all_records(state_dir) if router.is_running(r)]
        if req.get("dry_run"):
            return {"dry_run": True, "would_stop": _listed(find_stale(state_dir, targets)),
                    "routers_running": routers}
        result = stop_servers(state_dir, targets, float(req.get("grace", 15)))
        rec = records.current(state_dir)
        if rec and rec.get("status") in ("running", "starting"):
            rec["status"] = "stopped"
            rec["stopped_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            records.write(state_dir, rec)
        return {"terminated": result["terminated"], "killed": result["killed"], "survivors": result["survivors"],
                "routers_running": routers}
    finally:
        lock.release()

