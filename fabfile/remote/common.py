"""Shared pieces of the host-side agent: the error type, JSON event output, hashing, atomic file writes, and the one
reading of a command line as flags (the client reads SGLang's argv through it too: ``fabfile/plan/argv.py``)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from .protocol import ErrorDoc


def expand(path: str) -> str:
    """A state or log path as the host spells it: ``~`` is the agent user's home (the client never expands it)."""
    return os.path.expanduser(path) if path.startswith("~") else path


class AgentError(Exception):
    """A failure the agent understood: reported to the client as an error result, never as a traceback."""

    def __init__(self, kind: str, message: str, hint: str = "", **details: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint
        self.details = details

    def as_dict(self) -> ErrorDoc:
        return {"kind": self.kind, "message": self.message, "hint": self.hint, "details": self.details}


# What this agent run is doing, for the one-sentence report of an unexpected failure: the verb, the step inside it
# (a deploy's lock/patch/stop/...), and the state dir where the traceback file goes.
CONTEXT: dict[str, str | None] = {"verb": None, "step": None, "state_dir": None}


def _save_traceback(text: str) -> str:
    """Write a full traceback to ``STATE/errors/<time>-<verb>-<pid>.txt`` (0600); when that cannot be written
    (a full disk, say) to a private temp file instead. Returns the path, or '' when nothing could be written."""
    name = "{}-{}-{}".format(time.strftime("%Y%m%dT%H%M%S"), CONTEXT.get("verb") or "agent", os.getpid())
    data = text.encode("utf-8", "replace")
    state_dir = CONTEXT.get("state_dir")
    if state_dir:
        path = os.path.join(os.path.expanduser(state_dir), "errors", name + ".txt")
        try:
            ensure_private_dir(os.path.dirname(path))
            atomic_write(path, data, 0o600)
            return path
        except OSError:
            pass
    try:
        import tempfile

        fd, path = tempfile.mkstemp(prefix=f"specdeploy-{name}-", suffix=".txt")  # mode 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path
    except OSError:
        return ""


def unexpected(exc: BaseException) -> AgentError:
    """An exception the agent did not foresee, as ONE sentence: what failed, in which step, and where on the host the
    full traceback is. A full disk is no bug but a condition the user fixes, so it gets its own kind."""
    verb = CONTEXT.get("verb") or "agent"
    step = CONTEXT.get("step")
    where = f"the host-side {verb!r}" + (f" in step {step!r}" if step else "")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what = exc.filename or "a file"
        return AgentError("disk_full", f"{where} could not write {what}: no space left on the device",
                          step=step, file=exc.filename)
    import traceback  # only on the way out of a bug: not every call's start

    path = _save_traceback("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    saved = f"; the full traceback is in {path} on the host" if path else " (the traceback could not be saved)"
    return AgentError("internal_error", f"{where} failed unexpectedly ({type(exc).__name__}: {exc}){saved}",
                      step=step, traceback_file=path or None)


class EventSink:
    """Writes JSON event lines to stdout and, when given, to a journal file on the host.

    If the client's SSH channel goes away, stdout breaks; the sink then stops writing there but keeps the journal,
    so a host-side operation (a deploy holding the lock) can finish headless and the client can re-attach.
    """

    def __init__(self, journal: str | None = None) -> None:
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
                try:
                    self.journal.write(line)
                    self.journal.flush()
                except OSError:  # a full disk: the client still gets the events; `attach` cannot follow then
                    self.journal = None
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


def atomic_write(path: str, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` so readers see either the old or the new file, never a torn one.

    Keeps the original file's mode (and owner, when we may) unless ``mode`` is given; fsyncs before the rename.
    """
    directory = os.path.dirname(os.path.abspath(path)) or "."
    st = None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        pass
    fd, tmp = private_temp(directory, ".specdeploy-")
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


def private_temp(directory: str, prefix: str) -> tuple[int, str]:
    """A new file of ours in ``directory``, mode 0600, as ``tempfile.mkstemp`` makes it (O_EXCL, never through a
    link, a random name tried again on a clash). Not tempfile itself: importing it (random, shutil, bz2, lzma)
    cost every agent call about 5 ms, and nearly every call writes a record."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        path = os.path.join(directory, prefix + os.urandom(6).hex())
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", os.path.join(directory, prefix + "*"))


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


# argparse's own test for a word that is a negative number, not a flag (``_negative_number_matcher``).
_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")


def is_flag_word(word: str) -> bool:
    """Whether argparse reads ``word`` as a flag rather than a value: it starts with ``-`` and is neither ``-`` nor a
    negative number, and its name (before any ``=``) holds no space (argparse's ``_parse_optional``: "-my model" is
    a value, "--api-key=a b" a flag); ``--`` alone ends the flags."""
    return (word.startswith("-") and word not in ("-", "--") and " " not in word.split("=", 1)[0]
            and not _NEGATIVE_NUMBER.fullmatch(word))


class Flag(NamedTuple):
    """One flag of a command line as :func:`split_argv` reads it."""

    name: str  # "--tp-size", "-m"; "" for a word that belongs to no flag (the program, a module's name, a stray)
    value: str | None  # from "--flag=value" or the next word; None for a switch (or a flag whose value is missing)
    words: tuple[str, ...]  # the words it was read from, as written


def split_argv(argv: Sequence[str], values: Collection[str] = ()) -> list[Flag]:
    """SGLang's (or any argparse program's) command line as flags, in order, read as argparse reads it: a flag's
    value is ``--flag=value`` in one word, or the next word unless that word is a flag itself (:func:`is_flag_word`).
    A flag in ``values`` takes the next word whatever it is (a secret flag's value must never be left as a word of
    its own). Every word is in exactly one item's ``words``, so joining them gives ``argv`` back."""
    out: list[Flag] = []
    i, n = 0, len(argv)
    while i < n:
        word = argv[i]
        if not is_flag_word(word):
            out.append(Flag("", None, (word,)))
        elif "=" in word:
            name, _, value = word.partition("=")
            out.append(Flag(name, value, (word,)))
        elif i + 1 < n and (word in values or not is_flag_word(argv[i + 1])):
            out.append(Flag(word, argv[i + 1], (word, argv[i + 1])))
            i += 1
        else:
            out.append(Flag(word, None, (word,)))
        i += 1
    return out


def flag_value(argv: Sequence[str], *names: str) -> str | None:
    """The value ``argv`` gives the last of ``names`` it sets (the last one wins, as in argparse); None when it
    gives none of them a value."""
    found: str | None = None
    for f in split_argv(argv):
        if f.name in names and f.value is not None:
            found = f.value
    return found
