"""Starting SGLang detached, following its log by byte offset, and judging readiness or failure.

The server runs in its own session (``setsid``: it survives the SSH channel closing and its whole process tree
shares one process group to stop), with stdin from /dev/null and every byte of output in its log file.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import procs
from .common import AgentError, ensure_private_dir, open_private

# (pattern, what it means, what to do). Order matters: the first match names the failure.
FATAL_PATTERNS: List[Tuple[re.Pattern[str], str, str]] = [
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


def version_tuple(v: str) -> Tuple[int, ...]:
    out = []
    for part in re.split(r"[.+-]", v):
        if part.isdigit():
            out.append(int(part))
        else:
            break
    return tuple(out)


def readiness_path(sglang_version: str) -> str:
    """The cheapest endpoint that means "ready" on this SGLang version (shared/reference/sglang.md, section 5)."""
    v = version_tuple(sglang_version)
    if v >= (0, 5, 20):
        return "/ready"
    if v >= (0, 5, 1):
        return "/health"
    return "/health_generate"  # 0.4.x: /health answers 200 as soon as uvicorn is up, before warmup


def start(script: str, log_path: str, cwd: str, header: str) -> Dict[str, Any]:
    """Start ``script`` detached, its output appended to ``log_path``.

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
        proc = subprocess.Popen(["/bin/sh", script], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=cwd, start_new_session=True, close_fds=True)
    info = procs.stat(proc.pid)
    return {"pid": proc.pid, "pgid": proc.pid, "start_ticks": info.start_ticks if info else None,
            "log_offset": offset}


def probe(host: str, port: int, path: str, timeout: float = 1.0) -> Optional[int]:
    """HTTP status of ``GET path`` on the server, or None when nothing answers.

    A bare HTTP/1.0 request on a socket: urllib costs ~12 ms of imports per agent start, and all we need is the
    status line from a server on this host.
    """
    target = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    try:
        with socket.create_connection((target, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode())
            head = b""
            while b"\r\n" not in head and len(head) < 4096:
                chunk = s.recv(1024)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return None
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return None


class LogFollower:
    """Reads a growing log by byte offset; decodes only whole lines, so a UTF-8 sequence is never split."""

    def __init__(self, path: str, offset: int) -> None:
        self.path = path
        self.offset = offset
        self.partial = b""
        self.tail: List[str] = []
        self.window: List[str] = []   # a longer tail, to find the root cause above a long traceback
        self.last_growth = time.monotonic()

    def read_lines(self, cap: int = 4 << 20) -> List[str]:
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


def cause_line(lines: List[str]) -> Optional[str]:
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


def classify(line: str) -> Optional[Tuple[str, str]]:
    for pattern, what, hint in FATAL_PATTERNS:
        if pattern.search(line):
            return what, hint
    return None


def wait_ready(*, pid: int, start_ticks: Optional[int], log_path: str, log_offset: int, listen: str, port: int,
               sglang_version: str, ready_s: float, stall_s: float, on_lines: Callable[[List[str]], None],
               interval: float = 0.1, ready_path: Optional[str] = None,
               cancelled: Optional[Callable[[], Optional[str]]] = None) -> Dict[str, Any]:
    """Follow the log and probe readiness until ready; raise AgentError at the first sign of failure.

    Fails at once on a fatal log line or the launcher's death (exit status when it is our child), on no log growth
    for ``stall_s``, and at ``ready_s`` overall. Probes every ``interval`` so readiness is seen within ~0.1 s.
    ``ready_path`` overrides the version's endpoint (a multi-node rank >= 1 serves only SGLang's stub health server);
    ``cancelled`` returns a reason when the client asked to abandon the wait (another rank of the cluster failed).
    """
    path = ready_path or readiness_path(sglang_version)
    follower = LogFollower(log_path, log_offset)
    started = time.monotonic()
    fired_up = False
    while True:
        lines = follower.read_lines()
        if lines:
            on_lines(lines)
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
        code_now = probe(listen, port, path, timeout=1.0)
        if code_now == 200:
            return {"ready_path": path, "ready_after_s": round(time.monotonic() - started, 3),
                    "log_offset": follower.offset, "fired_up_line": fired_up}
        now = time.monotonic()
        if now - follower.last_growth > stall_s:
            raise AgentError("stalled", f"the server's log has not grown for {stall_s:.0f} s and it is not ready",
                             "it may hang in weight loading or NCCL init; raise timeouts.stall for very slow "
                             "storage", excerpt=follower.tail, log_path=log_path)
        if now - started > ready_s:
            raise AgentError("ready_timeout", f"the server was not ready after {ready_s:.0f} s "
                             f"({path} never answered 200)", "raise --timeout or timeouts.ready",
                             excerpt=follower.tail, log_path=log_path)
        time.sleep(interval)


def _exit_status(pid: int) -> Optional[int]:
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
