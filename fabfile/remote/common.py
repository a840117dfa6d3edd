"""Shared pieces of the host-side agent: the error type, JSON event output, hashing and atomic file writes."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
from typing import Any, Callable, Dict, Optional


class AgentError(Exception):
    """A failure the agent understood: reported to the client as an error result, never as a traceback."""

    def __init__(self, kind: str, message: str, hint: str = "", **details: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint
        self.details = details

    def as_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "hint": self.hint, "details": self.details}


class EventSink:
    """Writes JSON event lines to stdout and, when given, to a journal file on the host.

    If the client's SSH channel goes away, stdout breaks; the sink then stops writing there but keeps the journal,
    so a host-side operation (a deploy holding the lock) can finish headless and the client can re-attach.
    """

    def __init__(self, journal: Optional[str] = None) -> None:
        self.stdout_ok = True
        self._lock = threading.Lock()
        self.journal = None
        if journal:
            ensure_private_dir(os.path.dirname(journal))
            # 0600, not through a link: the journal carries log lines, and SGLang logs its arguments.
            self.journal = os.fdopen(open_private(journal), "a", encoding="utf-8")

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}, sort_keys=True, default=str) + "\n"
        with self._lock:  # the heartbeat thread writes too
            if self.journal is not None:
                self.journal.write(line)
                self.journal.flush()
            if self.stdout_ok:
                try:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                except (BrokenPipeError, OSError):
                    self.stdout_ok = False

    def start_heartbeat(self, every: float = 5.0) -> Callable[[], None]:
        """Emit ``heartbeat`` events every ``every`` seconds until the returned function is called.

        A long step (a model that loads for minutes) can be silent; the heartbeat lets the client tell a quiet
        deploy from a dead link and re-attach instead of waiting out the whole deadline.
        """
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(every):
                self.emit("heartbeat")

        threading.Thread(target=beat, name="heartbeat", daemon=True).start()
        return stop.set


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_write(path: str, data: bytes, mode: Optional[int] = None) -> None:
    """Write ``data`` to ``path`` so readers see either the old or the new file, never a torn one.

    Keeps the original file's mode (and owner, when we may) unless ``mode`` is given; fsyncs before the rename.
    """
    directory = os.path.dirname(os.path.abspath(path)) or "."
    st = None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".specdeploy-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        elif st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except PermissionError:
                pass
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def ensure_private_dir(path: str, what: str = "directory") -> None:
    """Create ``path`` (and parents) with mode 0700, or tighten our own to 0700: deploy records, journals, logs and
    backups are the operator's business. A directory another account owns or can write is refused (see boot)."""
    from .boot import Unsafe, check_dir

    try:
        check_dir(path, what)
    except Unsafe as e:
        raise AgentError("unsafe_path", str(e), e.hint) from None


def open_private(path: str, append: bool = True) -> int:
    """A file descriptor on ``path`` created 0600, never through a link, ours alone (see boot.open_private)."""
    from .boot import Unsafe
    from .boot import open_private as _open

    try:
        return _open(path, append)
    except Unsafe as e:
        raise AgentError("unsafe_path", str(e), e.hint) from None
