"""One tune per host for the whole tune: a lease beside the deploy lock, held by a long-lived agent process.

A tune deploys one configuration after another and scores each against the others; each deploy takes the deploy
lock (``lock.py``) only for itself, so between two of them another ``inv deploy`` or a second tune could replace
the server, and the tune would score a server it did not deploy. The ``tune_lease`` verb's ``hold`` takes an flock
on ``tune.lock`` (beside ``deploy.lock``) and keeps its agent process alive, holding it, for as long as the tune's
client keeps the call's channel open; every deploy and stop, under the deploy lock, asks ``admit`` and is refused
unless it carries the holder's tune id. Like the deploy lock, the kernel drops the flock when its holder dies, so a
tune never leaves the host leased behind it: the client releases it on every exit path (``release`` ends the
holder), and a client that dies without releasing closes the channel, whose broken stdout ends the holder within a
heartbeat (or its deadline does).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from typing import cast

from ..common import AgentError, EventSink, atomic_write, ensure_private_dir, expand
from ..protocol import Holder, TuneLeaseAnswer, TuneLeaseRequest

HOLD_BEAT_S = 1.0  # how often the holder proves its channel is open (a closed one ends it within this)


class TuneLease:
    def __init__(self, state_dir: str) -> None:
        ensure_private_dir(state_dir)
        self.path = os.path.join(state_dir, "tune.lock")
        self.info_path = self.path + ".json"
        self.fd: int | None = None

    def note(self) -> Holder:
        try:
            with open(self.info_path, encoding="utf-8") as f:
                data = json.load(f)  # the holder's own note (``take``)
                return cast(Holder, data) if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def holder(self) -> Holder | None:
        """The holding tune's note, or None when no process holds the lease (a note left without a holder is none).
        The probe is a shared lock for a moment: a taker that meets it tries again (``take``)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            # The holder takes the flock first and writes its note just after: wait a moment for the note, so a
            # refusal names it.
            end = time.monotonic() + 1.0
            while not self.note() and time.monotonic() < end:
                time.sleep(0.05)
            return self.note() or {"tune_id": "?"}
        finally:
            os.close(fd)  # closing the descriptor drops a shared lock it got
        return None

    def take(self, owner: Holder) -> Holder:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        end = time.monotonic() + 1.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # A holder writes its note as soon as it has the flock; without one, what holds it is a deploy's
                # probe (``admit``: a shared lock for a moment) or a holder about to write: try again, briefly.
                if self.note() or time.monotonic() >= end:
                    os.close(fd)
                    h = self.note() or {"tune_id": "?"}
                    raise AgentError("lock_held", refusal(h), HINT, holder=h) from None
                time.sleep(0.02)
        self.fd = fd
        from .. import procs

        me = procs.stat(os.getpid())
        info: Holder = {**owner, "pid": os.getpid(), "start_ticks": me.start_ticks if me else None,
                "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        atomic_write(self.info_path, json.dumps(info).encode(), 0o600)
        return info

    def let_go(self) -> None:
        from .lock import let_go

        let_go(self.fd, self.info_path)
        self.fd = None


HINT = ("wait for the tune to end (`inv status` shows the deploy it runs), or stop it with Ctrl-C where it runs: "
        "it deploys its best configuration again and lets go of the host")


def refusal(h: Holder) -> str:
    """The one sentence of a deploy, stop or tune refused because a tune holds the host."""
    return (f"a tune (`inv tune`, {h.get('tune_id', '?')}, from {h.get('client', '?')}) holds this host since "
            f"{h.get('since', '?')}, agent pid {h.get('pid', '?')}: a deploy between its deploys would be scored as "
            "its own; nothing was changed here")


def admit(state_dir: str, tune_id: str | None) -> None:
    """Under the deploy lock: refuse a run that would change the server while a tune other than ``tune_id`` holds
    the host (a tune's own deploys carry its id and pass)."""
    h = TuneLease(state_dir).holder()
    if h is None or (tune_id and h.get("tune_id") == tune_id):
        return
    raise AgentError("lock_held", refusal(h), HINT, holder=h)


def run(req: TuneLeaseRequest, sink: EventSink) -> TuneLeaseAnswer:
    """``hold``: take the lease (under the deploy lock, so no deploy is half-way), say ``held``, and keep it while
    the channel is open; ``release``: end the holder of this tune id and wait (bounded) until the lease is free."""
    state_dir = expand(req["state_dir"])
    tune_id = str(req["tune_id"])
    lease = TuneLease(state_dir)
    if req.get("action") == "release":
        return _release(lease, tune_id, float(req.get("wait_s") or 10.0))
    from .lock import DeployLock

    # Another tune's lease refuses this one, naming it; then a deploy in progress (not a tune's) refuses it too,
    # naming that deploy: a tune starts on a host nobody is changing.
    info = lease.take({"tune_id": tune_id, "client": req.get("client")})
    lock = DeployLock(state_dir)
    try:
        lock.acquire({"deploy_id": "tune", "client": req.get("client"), "step": "tune lease"}, 0.0)
    except BaseException:
        lease.let_go()
        raise
    lock.release()
    sink.emit("held", holder=info)
    started = time.monotonic()
    ended: list[int] = []
    # ``release`` ends the holder with SIGTERM: it answers, and the note goes with the flock (finally, below).
    signal.signal(signal.SIGTERM, lambda signum, frame: ended.append(signum))
    try:
        while sink.stdout_ok and not ended:
            time.sleep(HOLD_BEAT_S)
            sink.emit("heartbeat")  # a closed channel breaks stdout: then the loop ends and the lease goes
    finally:
        lease.let_go()
    return {"held_s": round(time.monotonic() - started, 3), "released": True, "holder": info}


def _release(lease: TuneLease, tune_id: str, wait_s: float) -> TuneLeaseAnswer:
    from .. import procs

    h = lease.holder()
    if h is None or h.get("tune_id") != tune_id:
        return {"released": h is None, "holder": h}
    pid = h.get("pid")
    if isinstance(pid, int) and procs.alive(pid, h.get("start_ticks")):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        if isinstance(pid, int) and not procs.alive(pid, h.get("start_ticks")):
            break
        time.sleep(0.05)
    return {"released": True, "holder": h}
