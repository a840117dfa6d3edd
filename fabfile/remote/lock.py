"""One deploy per host at a time: an flock held by the deploying agent process for its whole life.

Because the kernel drops an flock when its holder dies, a crashed deploy can never leave a lock behind; the holder
file only describes who holds it (and, when found without a live holder, is reported as stale and replaced).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import Any, Dict, Optional

from .common import AgentError, atomic_write, ensure_private_dir


class DeployLock:
    def __init__(self, state_dir: str) -> None:
        ensure_private_dir(state_dir)
        self.path = os.path.join(state_dir, "deploy.lock")
        self.info_path = self.path + ".json"
        self.fd: Optional[int] = None
        self.stale: Optional[Dict[str, Any]] = None

    def holder(self) -> Optional[Dict[str, Any]]:
        try:
            with open(self.info_path, encoding="utf-8") as f:
                data: Dict[str, Any] = json.load(f)
                return data
        except (OSError, ValueError):
            return None

    def acquire(self, owner: Dict[str, Any], wait_s: float = 0.0) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    h = self.holder() or {}
                    who = h.get("deploy_id", "an unknown deploy")
                    since = h.get("since", "?")
                    by = h.get("client", "?")
                    raise AgentError(
                        "lock_held",
                        f"another deploy ({who}, from {by}, started {since}, agent pid {h.get('pid', '?')}) is "
                        "running on this host",
                        "wait for it to finish (or pass a lock wait with timeouts.lock_wait), then try again",
                        holder=h) from None
                time.sleep(0.2)
        self.fd = fd
        previous = self.holder()
        if previous is not None:
            # We hold the flock, so whoever wrote this file is gone without cleaning up.
            self.stale = previous
        atomic_write(self.info_path, json.dumps({**owner, "pid": os.getpid(),
                                                 "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode(), 0o600)

    def annotate(self, **fields: Any) -> None:
        """Add facts to the holder note (the new server's pid once started), so ``status`` can tell the deploy's own
        processes from strangers while it runs."""
        if self.fd is None:
            return
        note = self.holder() or {}
        note.update(fields)
        atomic_write(self.info_path, json.dumps(note).encode(), 0o600)

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.info_path)
        except FileNotFoundError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None
