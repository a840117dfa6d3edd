"""``logs`` and ``attach``: following a file as it grows, the server's log (``inv logs -f``, across redeploys) or a
deploy's event journal (re-attaching after a dropped SSH session). Moved out of ``verbs`` (the verb table).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ..common import AgentError, EventSink, expand

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import AttachAnswer, AttachRequest, LogsAnswer, LogsRequest


def logs(req: LogsRequest, sink: EventSink) -> LogsAnswer:
    from . import records, server
    state_dir = expand(req["state_dir"])
    rec = records.current(state_dir)
    path = req.get("log_path") or (rec.get("log_path") if rec else None)
    if not path or not os.path.exists(path):
        raise AgentError("not_running", "no server log found on this host (no deploy recorded here yet)",
                         "deploy first, or pass the log path")
    lines = int(req.get("lines", 50))
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(max(0, size - 1024 * max(lines, 1) * 2))
        tail = f.read().decode("utf-8", "replace").splitlines()[-lines:]
    sink.emit("log", lines=tail, count=len(tail))
    if not req.get("follow"):
        return {"log_path": path, "offset": size}
    follower = server.LogFollower(path, size)
    until = time.monotonic() + float(req.get("follow_s", 3600))
    next_check = 0.0
    while time.monotonic() < until:
        if not req.get("log_path") and time.monotonic() >= next_check:
            # A redeploy to another configuration writes another file: follow the server that runs (or is being
            # started) now, not the one we began with.
            next_check = time.monotonic() + 1.0
            moved = _current_log(state_dir)
            if moved is not None and moved[0] != follower.path:
                rest = follower.read_lines()
                if rest:
                    sink.emit("log", lines=rest, count=len(rest))
                new_path, offset = moved
                sink.emit("log", lines=[f"=== specdeploy: a new deploy writes {new_path}; following it ==="], count=1)
                follower = server.LogFollower(new_path, offset)
        new = follower.read_lines()
        if new:
            sink.emit("log", lines=new, count=len(new))
            if not sink.stdout_ok:
                break
        else:
            time.sleep(0.2)
    return {"log_path": follower.path, "offset": follower.offset}


def _current_log(state_dir: str) -> tuple[str, int] | None:
    """(log path, offset of its deploy's header) of the deploy in progress, else of the recorded deploy."""
    from . import records
    from .lock import DeployLock

    holder = DeployLock(state_dir).holder() or {}
    if holder.get("log_path"):
        return str(holder["log_path"]), int(holder.get("log_offset") or 0)
    rec = records.current(state_dir)
    if rec and rec.get("log_path"):
        return str(rec["log_path"]), int(rec.get("log_offset") or 0)
    return None


def attach(req: AttachRequest, sink: EventSink) -> AttachAnswer:
    """Replay a deploy's journal from event ``skip`` and follow it until its result (after a dropped connection)."""
    from . import records
    from .lock import DeployLock

    state_dir = expand(req["state_dir"])
    path = records.journal_path(state_dir, req["deploy_id"])
    seen = 0
    skip = int(req.get("skip", 0))
    pos = 0
    partial = b""
    lock = DeployLock(state_dir)
    idle_checks = 0
    agent: dict[str, Any] = {}
    while True:
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read()
        except FileNotFoundError:
            data = b""
        pos += len(data)
        chunks = (partial + data).split(b"\n")
        partial = chunks.pop()
        for raw in chunks:
            import json

            event = json.loads(raw)
            if event.get("event") == "agent":
                agent = event
            if event.get("event") == "heartbeat":
                # Proof of life for the client's silence watchdog; not counted (the client never counts them).
                sink.emit("heartbeat")
                continue
            if event.get("event") == "result":
                # Whatever ``skip`` says: the result is what the caller follows the journal for, and a skip past
                # it (a rollout's re-check asks for one) must not hide it, or a finished deploy reads as lost.
                return {"replayed": True, "result": event}
            seen += 1
            if seen <= skip:
                continue
            sink.emit("replay", original=event)
        if not data:
            from .. import procs

            if agent.get("pid"):  # the deploy said which process runs it: gone means lost
                gone = not procs.alive(int(agent["pid"]), agent.get("start_ticks"))
            else:
                holder = lock.holder()
                gone = holder is None or holder.get("deploy_id") != req["deploy_id"]
            if gone:
                idle_checks += 1
                if idle_checks > 5:
                    raise AgentError("deploy_lost", f"deploy {req['deploy_id']} ended without a result in its "
                                     "journal (its agent was killed)", "run `inv status` to see what runs now")
            time.sleep(0.1)
