"""``status``: what runs on the host now, observed (its processes, its health this moment, the last figures of its
own part of the log), and the deploy in progress with its journal's tail. Moved out of ``verbs`` (the verb table) as
the biggest handler; ``watch`` reuses :func:`last_decode`.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ..common import EventSink, expand

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import StateRequest, StatusAnswer


def status(req: StateRequest, sink: EventSink) -> StatusAnswer:
    """What runs on the host now, observed: the recorded server's processes, its health answered this moment, the
    figures of its own part of the log (with their age), the server of a deploy in progress, and strangers."""
    from .. import procs
    from . import health, records
    state_dir = expand(req["state_dir"])
    rec = records.current(state_dir)
    out: StatusAnswer = {"record": rec, "running": False, "deploy_in_progress": None, "other_sglang_processes": []}
    if rec and rec.get("pid") and procs.alive(int(rec["pid"]), rec.get("start_ticks")):
        pid = int(rec["pid"])
        out["running"] = True
        out["schedulers"] = procs.schedulers_of(pid)
        ticks = procs.stat(pid)
        if ticks is not None:
            out["uptime_s"] = round(_uptime_of(ticks.start_ticks), 1)
            # "T": stopped by a signal (SIGSTOP, a debugger): alive, but it serves nothing.
            out["process_state"] = ticks.state
        out["health"] = health.recorded_health(rec, answers=ticks is None or ticks.state != "T")
        out["last_decode"] = found = last_decode(rec["log_path"], int(rec.get("log_offset") or 0))
        if found:
            from ..measure import metrics

            # The window these figures are over (one Decode line's forwards), not a bench's requests.
            found["window_forwards"] = metrics.decode_log_interval(rec)
    lock_holder = None
    from .lock import DeployLock

    if os.path.isdir(state_dir):
        lock_holder = DeployLock(state_dir).live_holder()
        if lock_holder and lock_holder.get("journal"):
            lock_holder["journal_tail"] = _journal_tail(str(lock_holder["journal"]))
    out["deploy_in_progress"] = lock_holder
    ours = {int(rec["pid"])} if rec and rec.get("pid") and out["running"] else set()
    if lock_holder and lock_holder.get("server_pid") and \
            procs.alive(int(lock_holder["server_pid"]), lock_holder.get("server_start_ticks")):
        # The deploy in progress has started its server: those processes are ours, not strangers.
        ours.add(int(lock_holder["server_pid"]))
        out["deploying_server"] = {"pid": lock_holder["server_pid"], "config_name": lock_holder.get("config_name"),
                                   "deploy_id": lock_holder.get("deploy_id")}
    others = [p.as_dict() for p in procs.all_procs()
              if (procs.is_sglang_title(p.cmdline) or procs.is_sglang_launcher(p.cmdline))
              and procs.same_pid_namespace(p.pid)
              and not any(p.pid == root or _descends(p.pid, root) for root in ours)]
    out["other_sglang_processes"] = others
    if os.path.isdir(os.path.join(state_dir, "routers")):
        from . import router
        routers = router.status(state_dir)
        if routers:
            out["routers"] = routers
    return out


def _journal_tail(path: str, n: int = 12, window: int = 256 * 1024) -> list[str]:
    """The last ``n`` steps and notes of a deploy's journal, one short line each (for `inv status`)."""
    import json

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            f.seek(max(0, size - window))
            raw = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    lines: dict[str, str] = {}  # one line per step (its end replaces its start) and per note, in order
    last_log = ""
    for i, text in enumerate(raw):
        try:
            ev = json.loads(text)
        except ValueError:
            continue
        kind = ev.get("event")
        if kind == "step":
            took = f" {ev['elapsed']:.2f}s" if isinstance(ev.get("elapsed"), (int, float)) else ""
            status = "running" if ev.get("status") == "start" else ev.get("status")
            lines[f"step:{ev.get('name')}"] = f"step {ev.get('name')} {status}{took}"
        elif kind in ("info", "started"):
            lines[f"note:{i}"] = str(ev.get("message") or f"server started, pid {ev.get('pid')}")
        elif kind == "log" and ev.get("lines"):
            last_log = "server log: " + str(ev["lines"][-1])[:160]  # only the newest: the steps are the story
    return list(lines.values())[-n:] + ([last_log] if last_log else [])


def _descends(pid: int, root: int) -> bool:
    from .. import procs
    seen = 0
    while pid > 1 and seen < 64:
        info = procs.stat(pid)
        if info is None:
            return False
        if info.ppid == root:
            return True
        pid = info.ppid
        seen += 1
    return False


def _uptime_of(start_ticks: int) -> float:
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime", encoding="ascii") as f:
        up = float(f.read().split()[0])
    return up - start_ticks / hz


def last_decode(log_path: str, offset: int = 0, window: int = 256 * 1024) -> Any:
    """The last ``Decode batch`` figures of the current deploy's part of the log (from ``offset``, where its header
    was written: an earlier server's lines in the same file are not this one's), with their age in seconds."""
    try:
        size = os.path.getsize(log_path)
        if size < offset:
            return None  # truncated since: none of it is known to be this server's
        with open(log_path, "rb") as f:
            f.seek(max(offset, size - window))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [ln for ln in text.splitlines() if "Decode batch" in ln]
    if not lines:
        return None
    from ..measure import metrics

    found = metrics.parse_decode_line(lines[-1])
    if found is not None and found.get("time"):
        try:
            stamp = time.mktime(time.strptime(str(found["time"])[:19], "%Y-%m-%d %H:%M:%S"))
            found["age_s"] = max(0.0, round(time.time() - stamp, 1))
        except ValueError:
            pass
    return found
