"""Processes on the host, read straight from /proc (no ps/pgrep parsing): who is SGLang, who holds what, stopping."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .common import split_argv

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from .protocol import Proc, Scheduler, Stopped

PROC = "/proc"


class ProcInfo:
    __slots__ = ("_cmdline", "pgid", "pid", "ppid", "start_ticks", "state")

    def __init__(self, pid: int, ppid: int, pgid: int, state: str, start_ticks: int, cmdline: str | None) -> None:
        self.pid = pid
        self.ppid = ppid
        self.pgid = pgid
        self.state = state
        self.start_ticks = start_ticks
        self._cmdline = cmdline

    @property
    def cmdline(self) -> str:
        """The command line (``read_cmdline``), read on first use when :func:`all_procs` listed the process: a scan
        of the host needs every process's parent, and only the few it looks at further need their command line
        (check-env reads the launcher's descendants only; a GPU host runs hundreds of processes)."""
        if self._cmdline is None:
            self._cmdline = read_cmdline(self.pid)
        return self._cmdline

    def as_dict(self) -> Proc:
        return {"pid": self.pid, "ppid": self.ppid, "pgid": self.pgid, "state": self.state,
                "start_ticks": self.start_ticks, "cmdline": self.cmdline}


def read_cmdline(pid: int) -> str:
    """The process's command line as one string; for setproctitle'd processes, the title (NUL padding dropped).

    Secrets are redacted and every character that is not printable is written escaped (``\\n``, ``\\x1b``): any
    user's process can put a newline or a terminal escape in its argv, and this string ends up in messages and
    tables a person reads (stop, GPU holders, a held port)."""
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    parts = [p.decode("utf-8", "replace") for p in raw.split(b"\0") if p]
    text = " ".join(redact_argv(parts)).strip()
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# Flags whose value is a secret. A server started by hand (or by an SGLang too old for --config) carries its key in
# its command line; whatever the agent reports (status, stop, check-env, journals) shows *** instead.
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--hf-token")


def redact_argv(args: list[str]) -> list[str]:
    """``args`` with each secret flag's value as ``***`` (``--api-key=***``, or ``--api-key ***``)."""
    out: list[str] = []
    for f in split_argv(args, values=SECRET_FLAGS):
        if f.name not in SECRET_FLAGS or f.value is None:
            out.extend(f.words)
        elif len(f.words) == 1:
            out.append(f"{f.name}=***")
        else:
            out.extend((f.name, "***"))
    return out


def read_environ(pid: int) -> dict[str, str] | None:
    """Start-time environment of ``pid``; ``{}`` when wiped by setproctitle (all NULs); None when unreadable."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            env[k.decode("utf-8", "replace")] = v.decode("utf-8", "replace")
    return env


def stat(pid: int, cmdline: bool = True) -> ProcInfo | None:
    """The process's stat line (and command line, unless ``cmdline`` is False: then read on first use)."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(")") + 2:].split()
    try:
        state, ppid, pgid, start = rest[0], int(rest[1]), int(rest[2]), int(rest[19])
    except (IndexError, ValueError):
        return None
    return ProcInfo(pid, ppid, pgid, state, start, read_cmdline(pid) if cmdline else None)


def all_procs() -> list[ProcInfo]:
    out = []
    for name in os.listdir(PROC):
        if name.isdigit():
            info = stat(int(name), cmdline=False)
            if info is not None:
                out.append(info)
    return out


def alive(pid: int, start_ticks: int | None = None) -> bool:
    """True if ``pid`` still runs (and, when given, is the same process: same start time).

    A zombie counts as gone only when all its threads are gone. Seen on a real H200: after SIGKILL, a CUDA
    process's main thread turns ``Z`` at once while other threads spend about a second tearing down the CUDA
    context; the process holds its GPU memory until the last thread exits.
    """
    info = stat(pid, cmdline=False)
    if info is None or info.state == "X":
        return False
    if start_ticks is not None and info.start_ticks != start_ticks:
        return False
    if info.state == "Z":
        return _threads_still_running(pid)
    return True


def _threads_still_running(pid: int) -> bool:
    try:
        tasks = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"{PROC}/{pid}/task/{tid}/stat", "rb") as f:
                raw = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        state = raw[raw.rfind(")") + 2:].split()[:1]
        if state and state[0] not in ("Z", "X"):
            return True
    return False


def descendants(root: int, procs: Iterable[ProcInfo] | None = None) -> list[ProcInfo]:
    procs = list(procs if procs is not None else all_procs())
    children: dict[int, list[ProcInfo]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    out: list[ProcInfo] = []
    stack = [root]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c.pid)
    return out


def same_pid_namespace(pid: int) -> bool:
    """Whether ``pid`` lives in this agent's PID namespace (a container's processes do not)."""
    try:
        return os.readlink(f"{PROC}/{pid}/ns/pid") == os.readlink(f"{PROC}/self/ns/pid")
    except OSError:
        return True  # cannot tell (permissions): treat it as ours, as ps would show it


def is_sglang_title(cmdline: str) -> bool:
    return cmdline.startswith("sglang::")


def is_sglang_launcher(cmdline: str) -> bool:
    return "sglang.launch_server" in cmdline or " sglang serve" in f" {cmdline}" or "/sglang serve" in cmdline


# SGLang titles a scheduler ``sglang::scheduler`` + ``_DP{d}`` ``_PP{p}`` ``_ATTN_CP{c}`` ``_MOE_DP{m}`` ``_TP{t}``
# ``_EP{e}``, each part only when that parallelism is on (0.4.x: ``_DP``, ``_TP``, ``_PP``, in that order).
SCHEDULER_TITLE = "sglang::scheduler"
RANK_PARTS = ("DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP")
_RANK_PART_RE = re.compile(r"_(ATTN_CP|MOE_DP|DP|PP|TP|EP)(\d+)")


def scheduler_ranks(cmdline: str) -> dict[str, int] | None:
    """The ranks a scheduler title names (``sglang::scheduler_DP0_PP1_TP2`` → ``{"DP": 0, "PP": 1, "TP": 2}``);
    ``{}`` for a bare ``sglang::scheduler``; None for anything else."""
    head = cmdline.split()[0] if cmdline.strip() else ""
    if not head.startswith(SCHEDULER_TITLE):
        return None
    rest = head[len(SCHEDULER_TITLE):]
    out: dict[str, int] = {}
    pos = 0
    for m in _RANK_PART_RE.finditer(rest):
        if m.start() != pos:
            break
        out[m.group(1)] = int(m.group(2))
        pos = m.end()
    return out


def scheduler_rank(cmdline: str) -> int | None:
    """The TP rank a scheduler title names (``sglang::scheduler_TP3`` → 3; ``sglang::scheduler`` → 0, TP 1).

    None for a title that names other ranks but no TP rank (``sglang::scheduler_PP1``): several such processes
    would all be "rank 0", so the title's label (:func:`scheduler_sort_key`, ``PP1``) identifies them instead.
    """
    ranks = scheduler_ranks(cmdline)
    if ranks is None:
        return None
    if "TP" in ranks:
        return ranks["TP"]
    return 0 if not ranks else None


def scheduler_label(cmdline: str) -> str:
    """``sglang::scheduler_DP0_TP1`` → ``DP0_TP1``; ``sglang::scheduler`` → ``TP0``."""
    ranks = scheduler_ranks(cmdline) or {}
    return "_".join(f"{k}{v}" for k, v in ranks.items()) or "TP0"


def scheduler_sort_key(cmdline: str) -> tuple[int, ...]:
    """Numeric order of scheduler titles (TP2 before TP10; DP, then PP, ..., then TP, then EP)."""
    ranks = scheduler_ranks(cmdline) or {}
    return tuple(ranks.get(part, -1) for part in RANK_PARTS)


def schedulers_of(pid: int) -> list[Scheduler]:
    """The SGLang-titled processes under ``pid`` (schedulers first, by rank). Here rather than in the deploy: the
    status verb reads them too and should not import the deploy machinery (~25 ms a call on the host)."""
    out: list[Scheduler] = []
    for p in descendants(pid):
        if p.cmdline.startswith("sglang::"):
            out.append({"pid": p.pid, "title": p.cmdline, "rank": scheduler_rank(p.cmdline)})
    return sorted(out, key=lambda d: (not str(d["title"]).startswith(SCHEDULER_TITLE),
                                      scheduler_sort_key(str(d["title"])), d["title"]))


def protected_pids() -> set[int]:
    """This agent and its ancestors: never signalled, whatever they look like."""
    out: set[int] = set()
    pid = os.getpid()
    while pid > 1:
        out.add(pid)
        info = stat(pid, cmdline=False)
        if info is None:
            break
        pid = info.ppid
    out.add(1)
    return out


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            pass


def signal_groups(pgids: Iterable[int], sig: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(pids: dict[int, int], timeout: float, interval: float = 0.02) -> list[int]:
    """Wait until every pid (mapped to its start ticks) has exited; return the ones still alive at the deadline."""
    deadline = time.monotonic() + timeout
    remaining = dict(pids)
    while True:
        remaining = {p: t for p, t in remaining.items() if alive(p, t)}
        for p in list(remaining):
            _reap(p)
        if not remaining or time.monotonic() >= deadline:
            return sorted(remaining)
        time.sleep(interval)


def _reap(pid: int) -> None:
    # A server this very agent started is our child: reap it so it does not linger as a zombie.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def send_term(targets: list[ProcInfo], protected: set[int] | None = None) -> set[int]:
    """SIGTERM every target (its whole group when it leads one); returns the pids signalled."""
    protected = protected_pids() if protected is None else protected
    targets = [t for t in targets if t.pid not in protected]
    signal_groups({t.pgid for t in targets if t.pgid == t.pid and t.pgid not in protected}, signal.SIGTERM)
    signal_all([t.pid for t in targets], signal.SIGTERM)
    return {t.pid for t in targets}


def terminate(targets: list[ProcInfo], grace: float, termed: set[int] | frozenset[int] = frozenset()
              ) -> Stopped:
    """SIGTERM every target (its whole group when it leads one), wait ``grace``, SIGKILL the rest, confirm gone.

    ``termed``: pids the caller has already sent SIGTERM (:func:`send_term`, while it did other work); they are not
    sent a second one, so each target gets one SIGTERM as when this function signalled them all itself."""
    protected = protected_pids()
    targets = [t for t in targets if t.pid not in protected]
    if not targets:
        return {"terminated": [], "killed": [], "survivors": []}
    pids = {t.pid: t.start_ticks for t in targets}
    send_term([t for t in targets if t.pid not in termed], protected)
    left = wait_gone(pids, grace)
    killed = [t for t in targets if t.pid in left]
    if left:
        signal_groups({t.pgid for t in killed if t.pgid == t.pid}, signal.SIGKILL)
        signal_all(left, signal.SIGKILL)
        left = wait_gone({p: pids[p] for p in left}, 5.0)
    by_pid = {t.pid: t for t in targets}
    return {
        "terminated": [by_pid[p].as_dict() for p in pids if p not in {k.pid for k in killed}],
        "killed": [k.as_dict() for k in killed if k.pid not in left],
        "survivors": [by_pid[p].as_dict() for p in left],
    }
