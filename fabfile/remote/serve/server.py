"""Starting SGLang detached, following its log by byte offset, and judging readiness or failure.

The server runs in its own session (``setsid``: it survives the SSH channel closing and its whole process tree
shares one process group to stop), with stdin from /dev/null and every byte of output in its log file.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import TYPE_CHECKING, Callable, TypedDict

from .. import procs
from ..common import AgentError, ensure_private_dir, open_private
from .health import probe_timeout_s, timed_probe

if TYPE_CHECKING:
    from ..protocol import Ready

# (pattern, what it means, what to do). Order matters: the first match names the failure.
FATAL_PATTERNS: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"CUDA out of memory|OutOfMemoryError|Not enough memory\. Please try to increase"),
     "the GPU ran out of memory",
     "lower --mem-fraction-static (sglang_args), reduce --cuda-graph-max-bs, or free the GPUs"),
    (re.compile(r"Port is already in use|[Aa]ddress already in use"),
     "the server's port is already in use",
     "stop whatever listens on that port on the host, or change `port` in the inventory"),
    # Not every "NCCL WARN" is fatal (some hosts warn about sysfs paths or plugins and run fine): only the ones that
    # report a failure, a lost peer or a timeout end the wait.
    (re.compile(r"NCCL error|Watchdog caught collective operation timeout|"
                r"NCCL WARN .*(?:[Ff]ail|[Ee]rror|unhandled|[Tt]imeout|[Tt]imed out|closed by|[Aa]bort)"),
     "NCCL reported an error",
     "check the NCCL settings (an invalid NCCL_* value, P2P level or topology) in the excerpt"),
    (re.compile(r"scheduler is dead|scheduler died during initialization|Child process unexpectedly failed"),
     "a scheduler process died",
     "the excerpt shows the scheduler's last words; exit code -9 usually means the OOM killer (dmesg -T)"),
    (re.compile(r"Capture cuda graph failed"),
     "CUDA graph capture failed",
     "try --cuda-graph-max-bs smaller or --disable-cuda-graph in sglang_args"),
    (re.compile(r"Initialization failed|Received sigquit from a child process"),
     "SGLang's initialization failed",
     "read the excerpt for the first error"),
    (re.compile(r"Traceback \(most recent call last\)"),
     "the server raised a Python exception",
     "read the traceback in the excerpt; fix the argument or file it names"),
]

READY_LINE = "The server is fired up and ready to roll!"
TAIL_LINES = 40
CAUSE_WINDOW = 400


# The launch script starts only once the agent says "go" on the process's stdin. The caller records the pid first:
# an agent killed between the start and the record leaves no unrecorded server, because the gate then reads EOF and
# exits instead of starting it. (``exec`` keeps the pid, so the recorded pid is the server's.)
_GATE = 'read -r go || exit 0; exec /bin/sh "$1" </dev/null'


class Started(TypedDict):
    """A server process just started (``start``): where it is, where its log begins, and its gate's release."""

    pid: int
    pgid: int
    start_ticks: int | None
    log_offset: int
    release: Callable[[], None]  # lets a gated start run (a no-op without ``gated``)


def start(script: str, log_path: str, cwd: str, header: str, gated: bool = False) -> Started:
    """Start ``script`` detached, its output appended to ``log_path``; with ``gated``, it waits until
    ``result["release"]()`` is called (see _GATE).

    The log directory and the working directory must be private (ours, writable by nobody else): Python puts the
    working directory on its import path for ``-m``, and SGLang logs its arguments. The log is created 0600 and
    never opened through a symlink (a planted ``x.log -> /root/.bashrc`` would otherwise grow that file).
    """
    ensure_private_dir(os.path.dirname(log_path) or ".", "log_dir")
    ensure_private_dir(cwd, "the working directory")
    with os.fdopen(open_private(log_path), "ab") as log:
        offset = log.tell()
        log.write(header.encode() + b"\n")
        log.flush()
        argv = ["/bin/sh", "-c", _GATE, "sh", script] if gated else ["/bin/sh", script]
        import subprocess  # here: only a start needs it, and status, watch and logs import this module

        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if gated else subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True, close_fds=True)
    info = procs.stat(proc.pid)

    def release() -> None:
        if proc.stdin is not None:
            proc.stdin.write(b"go\n")
            proc.stdin.close()

    return {"pid": proc.pid, "pgid": proc.pid, "start_ticks": info.start_ticks if info else None,
            "log_offset": offset, "release": release}


class _Prober(threading.Thread):
    """Probes readiness in its own thread, so a probe that legitimately takes seconds (SGLang's /health runs a
    one-token generate and sleeps a second) never holds up following the log, where failures show first."""

    def __init__(self, host: str, port: int, path: str, timeout: float, interval: float) -> None:
        super().__init__(name="ready-probe", daemon=True)
        self.args = (host, port, path, timeout)
        self.interval = interval
        self.stopped = threading.Event()
        self.ready_latency: float | None = None  # seconds the 200 took, once seen
        self.ready = threading.Event()  # set with ready_latency: wakes the log follower at once
        self.last: tuple[int | None, float] | None = None
        self.count = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            code, took = timed_probe(*self.args)
            self.last = (code, took)
            self.count += 1
            if code == 200:
                self.ready_latency = took
                self.ready.set()
                return
            self.stopped.wait(self.interval)


class LogFollower:
    """Reads a growing log by byte offset; decodes only whole lines, so a UTF-8 sequence is never split."""

    def __init__(self, path: str, offset: int) -> None:
        self.path = path
        self.offset = offset
        self.partial = b""
        self.tail: list[str] = []
        self.window: list[str] = []   # a longer tail, to find the root cause above a long traceback
        self.last_growth = time.monotonic()

    def read_lines(self, cap: int = 4 << 20) -> list[str]:
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return []
        if size < self.offset:  # truncated or rotated underneath us
            self.offset = 0
        if size == self.offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(min(size - self.offset, cap))
        self.offset += len(data)
        self.last_growth = time.monotonic()
        chunks = (self.partial + data).split(b"\n")
        self.partial = chunks.pop()
        lines = [c.decode("utf-8", "replace").rstrip("\r") for c in chunks]
        self.tail = (self.tail + lines)[-TAIL_LINES:]
        self.window = (self.window + lines)[-CAUSE_WINDOW:]
        return lines


# The line that says what went wrong, as SGLang (or Python, or argparse) printed it: the last exception line of a
# traceback, argparse's "error:" line, a RuntimeError SGLang raises. Tracebacks' frames and NCCL/info chatter are not.
_ERROR_LINE = re.compile(r"(?:^|\s)(?:[A-Za-z_][\w.]*(?:Error|Exception)\b|error:)|CUDA out of memory|"
                         r"[Aa]ddress already in use|Port is already in use|scheduler died|scheduler is dead")
_NOT_CAUSE = re.compile(r"NCCL INFO|Traceback \(most recent call last\)|^\s*File \"|Received sigquit|^\s*\^+\s*$")


def cause_line(lines: list[str]) -> str | None:
    """SGLang's own error line in a log window, for the message the user reads: the exception line that ends the
    first traceback (the root cause, e.g. a scheduler's CUDA OOM; the launcher's "scheduler died" follows it), else
    the last line naming an error (argparse's "error: unrecognized arguments"). An exception line is an unindented
    line right after a traceback's indented frames; indented lines themselves are never the cause."""
    prev_indented = False
    for line in lines:
        indented = line[:1] in (" ", "\t")
        if (prev_indented and not indented and _ERROR_LINE.search(line) and not _NOT_CAUSE.search(line)):
            return line.strip()[:300]
        prev_indented = indented
    for line in reversed(lines):
        text = line.strip()
        if text and line[:1] not in (" ", "\t") and not _NOT_CAUSE.search(text) and _ERROR_LINE.search(text):
            return text[:300]
    return None


def classify(line: str) -> tuple[str, str] | None:
    for pattern, what, hint in FATAL_PATTERNS:
        if pattern.search(line):
            return what, hint
    return None


def wait_ready(*, pid: int, start_ticks: int | None, log_path: str, log_offset: int, listen: str, port: int,
               ready_path: str, ready_s: float, stall_s: float, on_lines: Callable[[list[str]], None],
               interval: float = 0.1,
               cancelled: Callable[[], str | None] | None = None,
               env: dict[str, str] | None = None) -> Ready:
    """Follow the log and probe readiness until ready; raise AgentError at the first sign of failure.

    Fails at once on a fatal log line or the launcher's death (exit status when it is our child), on no log growth
    for ``stall_s``, and at ``ready_s`` overall. The readiness probe runs in its own thread, one GET after another
    ``interval`` apart, each allowed :func:`probe_timeout_s`; its 200 is seen within ``interval``.
    ``ready_path``: the endpoint whose 200 means ready (a deploy's: :func:`ready_path_of`; a router's:
    ``versions.ROUTER_HEALTH_PATH``);
    ``cancelled`` returns a reason when the client asked to abandon the wait (another rank of the cluster failed).
    ``env`` is the server's environment (SGLANG_HEALTH_CHECK_TIMEOUT bounds how long its health endpoint may take).
    """
    path = ready_path
    timeout = probe_timeout_s(path, env)
    follower = LogFollower(log_path, log_offset)
    started = time.monotonic()
    prober = _Prober(listen, port, path, timeout, interval)
    prober.start()
    try:
        return _follow(prober, follower, pid=pid, start_ticks=start_ticks, log_path=log_path, path=path,
                       timeout=timeout, started=started, ready_s=ready_s, stall_s=stall_s, on_lines=on_lines,
                       interval=interval, cancelled=cancelled)
    finally:
        prober.stopped.set()


def _follow(prober: _Prober, follower: LogFollower, *, pid: int, start_ticks: int | None, log_path: str,
            path: str, timeout: float, started: float, ready_s: float, stall_s: float,
            on_lines: Callable[[list[str]], None], interval: float,
            cancelled: Callable[[], str | None] | None) -> Ready:
    from .launchwarnings import Collector

    fired_up = False
    warned = Collector()
    while True:
        lines = follower.read_lines()
        if lines:
            on_lines(lines)
            warned.feed(lines)
        for line in lines:
            if READY_LINE in line:
                fired_up = True
            verdict = classify(line)
            if verdict:
                # Give the rest of a traceback a moment to land so the excerpt is whole.
                time.sleep(0.3)
                follower.read_lines()
                # A traceback's first line says nothing: name its exception line (SGLang's own words) instead.
                said = line.strip()[:300]
                if said.endswith("Traceback (most recent call last):") or not _ERROR_LINE.search(said):
                    said = cause_line(follower.window) or said
                raise AgentError("fatal_log", f"{verdict[0]}: {said}", verdict[1],
                                 excerpt=follower.tail, log_path=log_path)
        reason = cancelled() if cancelled is not None else None
        if reason:
            raise AgentError("cancelled", f"the deploy was cancelled: {reason}",
                             "the server was stopped; see the failing host's error", excerpt=follower.tail,
                             log_path=log_path)
        status = _exit_status(pid)
        if status is not None or not procs.alive(pid, start_ticks):
            time.sleep(0.2)
            follower.read_lines()
            code = "unknown" if status is None else str(status)
            cause = cause_line(follower.window)
            raise AgentError("process_died", f"the server process {pid} exited (status {code}) before it was ready"
                             + (f": {cause}" if cause else ""),
                             "the excerpt is the end of its log", excerpt=follower.tail, log_path=log_path)
        if prober.ready_latency is not None:
            return {"ready_path": path, "ready_after_s": round(time.monotonic() - started, 3),
                    "log_offset": follower.offset, "fired_up_line": fired_up,
                    "probe_latency_s": prober.ready_latency, "probe_timeout_s": timeout, "probes": prober.count,
                    "sglang_warnings": warned.lines}
        now = time.monotonic()
        if now - follower.last_growth > stall_s:
            raise AgentError("stalled", f"the server's log has not grown for {stall_s:.0f} s and it is not ready",
                             "it may hang in weight loading or NCCL init; raise timeouts.stall for very slow "
                             "storage", excerpt=follower.tail, log_path=log_path)
        if now - started > ready_s:
            last = prober.last
            said = "never answered" if last is None or last[0] is None else f"last answered {last[0]}"
            raise AgentError("ready_timeout", f"the server was not ready after {ready_s:.0f} s "
                             f"({path} {said}, not 200)", "raise --timeout or timeouts.ready",
                             excerpt=follower.tail, log_path=log_path, probe_timeout_s=timeout)
        # Woken by the probe's 200 at once (the loop then reads the log and checks the process one last time);
        # otherwise one log read per interval.
        prober.ready.wait(interval)


def _exit_status(pid: int) -> int | None:
    """Exit status if ``pid`` is our child and has exited (reaping it); None otherwise."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if done == 0:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)
