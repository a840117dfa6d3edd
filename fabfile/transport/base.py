"""How commands and files reach a host. One transport per host per run; the deploy logic never knows which.

``SSHTransport`` (``fabfile.transport.ssh``) drives a hardened Fabric connection; ``LocalTransport`` runs on this
machine (the ``local`` connection kind, for the GPU box itself). Both run a command through ``sh -c`` so quoting is
identical, and both count what they do so benchmarks can report connections and round trips per deploy.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fabfile.errors import RemoteError


@dataclass
class ProcessResult:
    """One process run on a host through a transport: its exit status and what it wrote (``stream`` hands stdout to
    its callback line by line, so its ``stdout`` is empty). Not a command's result for the command line: that is
    ``commands.result.CommandResult``."""

    exit_code: int
    stdout: str
    stderr: str


@dataclass
class TransportStats:
    connections: int = 0
    commands: int = 0
    uploads: int = 0
    downloads: int = 0
    reconnects: int = 0
    commands_log: list[str] = field(default_factory=list)


class Transport(ABC):
    def __init__(self, host_name: str) -> None:
        self.host_name = host_name
        self.stats = TransportStats()
        # Set once the first command is on its way (its connection up): the fan-out's calling thread starts its
        # own work then (``for_each_host``'s ``meanwhile``), not before, since a host's thread still opening its
        # connection would wait on the interpreter lock at each of its reads. ``on_sent``: told at that moment.
        self.sent = threading.Event()
        self.on_sent: Callable[[], None] | None = None

    def count_command(self, command: str) -> None:
        """A command is about to go to the host: counted for the benchmarks; the first one sets ``sent``."""
        self.stats.commands += 1
        self.stats.commands_log.append(command)
        if not self.sent.is_set():
            self.sent.set()
            if self.on_sent is not None:
                self.on_sent()

    @abstractmethod
    def run(self, command: str, timeout: float) -> ProcessResult: ...

    @abstractmethod
    def stream(self, command: str, on_line: Callable[[str], None], timeout: float,
               idle_timeout: float | None = None) -> ProcessResult:
        """Run ``command``, handing each complete stdout line to ``on_line`` as it arrives.

        ``idle_timeout``: with no output for that long, treat the link as dead (``ConnectionLost``); used for
        commands that emit heartbeats, so a black-holed connection is noticed in seconds, not at the deadline.
        """

    @abstractmethod
    def put(self, data: bytes, path: str, mode: int = 0o600) -> None:
        """Write ``data`` to ``path`` atomically (temporary file + rename), with ``mode``."""

    def get(self, path: str, dest: Path, max_bytes: int) -> int:
        """Copy the host's file ``path`` to the local ``dest`` (0600, through a temporary file), refusing one over
        ``max_bytes``; the bytes copied. Transports that cannot read files back say so."""
        raise RemoteError(f"cannot fetch {path} from {self.host_name}: this connection does not copy files back",
                          host=self.host_name)

    @abstractmethod
    def close(self) -> None: ...

    def abort(self) -> None:
        """Close the session from another thread to unblock whatever waits on it (default: close)."""
        self.close()

    def reconnect(self) -> None:  # noqa: B027 (optional hook: only sessions that can drop override it)
        """Re-open the session after a drop (no-op for local)."""

    def shell_path(self, path: str) -> str:
        """Quote a remote path for ``sh``; a leading ``~/`` becomes ``"$HOME"/`` so it still expands."""
        if path.startswith("~/"):
            return '"$HOME"/' + shlex.quote(path[2:])
        return shlex.quote(path)

    def shell_write_command(self, path: str, mode: int) -> str:
        """The command that writes its stdin to ``path``: ``cat`` into a temporary file in the target directory,
        then rename: atomic, and the mode is set before any content lands."""
        import secrets  # here: only writing a file needs it, and with hmac it is ~1.5 ms of every command's start

        target = self.shell_path(path)
        tmp = self.shell_path(f"{path}.specdeploy-{secrets.token_hex(6)}")
        cmd = (f"umask 077 && mkdir -p -- \"$(dirname -- {target})\" && cat > {tmp} && chmod {mode:o} {tmp} "
               f"&& mv -f -- {tmp} {target} || {{ rm -f -- {tmp}; exit 1; }}")
        return f"sh -c {shlex.quote(cmd)}"

    def shell_write_done(self, r: ProcessResult, path: str, why: str = "") -> None:
        """Count a shell write, or say why it failed."""
        if r.exit_code != 0:
            raise RemoteError(f"could not write {path} on the host ({why}shell write failed): "
                              f"{r.stderr.strip()[-300:]}",
                              "check that the directory is writable by the SSH user and the disk is not full",
                              host=self.host_name)
        self.stats.uploads += 1

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LineBuffer:
    """Turns arbitrary chunks into whole lines (a chunk may end mid-line or mid-UTF-8 sequence)."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self.on_line = on_line
        self.buf = ""
        self.last_activity = time.monotonic()

    def write(self, text: str) -> int:
        self.last_activity = time.monotonic()
        self.buf += text
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            self.on_line(line)
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self.buf:
            self.on_line(self.buf)
            self.buf = ""


class LocalTransport(Transport):
    """Runs on this machine through the same ``sh -c`` path the SSH transport uses remotely."""

    def __init__(self, host_name: str) -> None:
        super().__init__(host_name)
        self.stats.connections = 1

    def _popen(self, command: str) -> subprocess.Popen[str]:
        self.count_command(command)
        return subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    @staticmethod
    def _kill(proc: subprocess.Popen[str]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def run(self, command: str, timeout: float) -> ProcessResult:
        proc = self._popen(command)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            proc.communicate()
            raise RemoteError(f"a command ran past its {timeout:.0f} s bound and was killed",
                              host=self.host_name, command=command) from None
        return ProcessResult(proc.returncode, out, err)

    def stream(self, command: str, on_line: Callable[[str], None], timeout: float,
               idle_timeout: float | None = None) -> ProcessResult:
        del idle_timeout  # a local pipe cannot black-hole
        proc = self._popen(command)
        timer = threading.Timer(timeout, self._kill, args=(proc,))
        timer.start()
        err_chunks: list[str] = []
        reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read() if proc.stderr else ""))
        reader.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                on_line(line.rstrip("\n"))
            proc.wait()
        finally:
            timer.cancel()
            reader.join()
        return ProcessResult(proc.returncode, "", "".join(err_chunks))

    def put(self, data: bytes, path: str, mode: int = 0o600) -> None:
        target = Path(os.path.expanduser(path))
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        import tempfile  # here: only a deploy writes files; a read-only command's start spares it (and shutil)

        fd, tmp = tempfile.mkstemp(prefix=".specdeploy-", dir=str(target.parent))
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.stats.uploads += 1

    def get(self, path: str, dest: Path, max_bytes: int) -> int:
        src = Path(os.path.expanduser(path))
        size = src.stat().st_size
        if size > max_bytes:
            raise RemoteError(f"{path} weighs {size} bytes, over the bound of {max_bytes}: not fetched",
                              host=self.host_name)
        return write_local(dest, src.read_bytes())

    def close(self) -> None:
        pass


def write_local(dest: Path, data: bytes) -> int:
    """Write a fetched file locally: 0600, through a temporary file beside it, then renamed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # here, as in ``put``

    fd, tmp = tempfile.mkstemp(prefix=".specdeploy-", dir=str(dest.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(data)
