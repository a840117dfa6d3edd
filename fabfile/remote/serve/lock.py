"""One deploy per host at a time: an flock held by the deploying agent process for its whole life.

Because the kernel drops an flock when its holder dies, a crashed deploy can never leave a lock behind; the holder
file only describes who holds it (and, when found without a live holder, is reported as stale and replaced). The
holder keeps its current step in that file, so a deploy waiting for the lock, ``inv status`` and ``inv cancel`` can
say which deploy holds the host and what it is doing.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import TYPE_CHECKING, Callable, Optional, cast

from ..common import AgentError, atomic_write, ensure_private_dir

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from typing import Unpack

    from ..protocol import Holder

# Called while waiting: (the live holder's note or None, seconds left to wait).
OnWait = Callable[[Optional["Holder"], float], None]


class DeployLock:
    def __init__(self, state_dir: str) -> None:
        ensure_private_dir(state_dir)
        self.path = os.path.join(state_dir, "deploy.lock")
        self.info_path = self.path + ".json"
        self.fd: int | None = None
        self.stale: Holder | None = None
        self.info: Holder = {}
        self.waited = 0.0  # seconds this run queued behind another before it got the host

    def holder(self) -> Holder | None:
        try:
            with open(self.info_path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        # Written by this module (``acquire``, ``note``); a note that is no object names nobody.
        return cast("Holder", data) if isinstance(data, dict) else None

    def live_holder(self) -> Holder | None:
        """The holder's note if its agent process still runs (a note left by a killed agent is not a holder)."""
        from .. import procs

        h = self.holder()
        if h is None or not isinstance(h.get("pid"), int) or not procs.alive(h["pid"], h.get("start_ticks")):
            return None
        return h

    def settled_holder(self, within_s: float = 1.0) -> Holder:
        """The live holder's note, waiting up to ``within_s`` for it: the holder takes the flock first and writes
        its note just after, so a refusal in between would name nobody ("another command (`inv ?`) holds this host
        since ?"). A note left by a dead agent is returned only when no live one appears."""
        end = time.monotonic() + within_s
        while True:
            h = self.live_holder()
            if h is not None or time.monotonic() >= end:
                return h or self.holder() or {}
            time.sleep(0.05)

    def acquire(self, owner: Holder, wait_s: float = 0.0, on_wait: OnWait | None = None) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    os.close(fd)
                    h = self.settled_holder()
                    raise AgentError("lock_held", refusal(h, wait_s),
                                     "follow it with `inv status`, stop it with `inv cancel`, or queue behind it "
                                     "with --lock-wait SECONDS", holder=h) from None
                if on_wait is not None:
                    on_wait(self.live_holder(), left)
                time.sleep(min(0.2, max(left, 0.01)))
        self.fd = fd
        self.waited = time.monotonic() + wait_s - deadline if wait_s > 0 else 0.0
        previous = self.holder()
        if previous is not None:
            # We hold the flock, so whoever wrote this file is gone without cleaning up.
            self.stale = previous
        from .. import procs

        me = procs.stat(os.getpid())
        self.info = {**owner, "pid": os.getpid(), "start_ticks": me.start_ticks if me else None,
                     "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            self._write()
        except OSError:
            pass  # the note only describes the holder; the flock is the lock (a full disk must not stop a rollback)

    def note(self, **fields: Unpack[Holder]) -> None:
        """Update the holder's note (the current step); best effort: a full disk must not fail the deploy."""
        if self.fd is None:
            return
        self.info.update(fields)
        try:
            self._write()
        except OSError:
            pass

    def _write(self) -> None:
        atomic_write(self.info_path, json.dumps(self.info).encode(), 0o600)

    def annotate(self, **fields: Unpack[Holder]) -> None:
        """Add facts to the holder note (the new server's pid once started), so ``status`` can tell the deploy's own
        processes from strangers while it runs."""
        self.note(**fields)

    def release(self) -> None:
        let_go(self.fd, self.info_path)
        self.fd = None


def let_go(fd: int | None, info_path: str) -> None:
    """Drop an flock held on ``fd`` and its holder note (the note first: a note never outlives its holder's
    hold): the deploy lock's and the tune lease's."""
    if fd is None:
        return
    try:
        os.unlink(info_path)
    except FileNotFoundError:
        pass
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def describe(h: Holder) -> str:
    """``(ID, from CLIENT, started SINCE, agent pid P, at step S)`` for messages."""
    parts = [str(h.get("deploy_id", "of unknown id")), f"from {h.get('client', '?')}",
             f"started {h.get('since', '?')}", f"agent pid {h.get('pid', '?')}"]
    if h.get("step"):
        parts.append(f"at step {h['step']}")
    return "(" + ", ".join(parts) + ")"


def refusal(h: Holder, wait_s: float) -> str:
    """The one sentence of a run refused because another holds the host: who, since when, at which step, and how
    to queue behind it (a second deploy never replaces the first unasked: waiting is opt-in, ``--lock-wait``)."""
    who = f"from {h.get('client', '?')}"
    what = f"deploy ({h.get('deploy_id', 'of unknown id')}, {who})" if h.get("journal") or "config_name" in h else \
        f"command (`inv {h.get('deploy_id', '?')}`, {who})"
    step = f", now at step {h['step']}" + (f" (since {h['step_since']})" if h.get("step_since") else "") \
        if h.get("step") else ""
    waited = f"; waited {wait_s:.0f} s for it (--lock-wait)" if wait_s > 0 else \
        "; nothing was changed here: `--lock-wait SECONDS` queues behind it (then replaces what it leaves running)"
    return f"another {what} holds this host since {h.get('since', '?')}{step}, agent pid {h.get('pid', '?')}{waited}"
