"""The SSH transport: one hardened Fabric connection per host.

Fabric's defaults are unsafe or surprising (shared/reference/fabric-invoke.md): it auto-adds unknown host keys,
never loads known_hosts, ignores ssh_config on cloned configs, leaves a 3600 s channel timeout, and its inline env
is unquoted. Here every hop uses ``RejectPolicy`` with known_hosts loaded from ~/.ssh/known_hosts, the ssh_config's
``UserKnownHostsFile`` and the inventory's ``known_hosts``; timeouts are bounded; nothing uses ``run(env=...)``.
Connecting retries only transient failures (refused, reset, banner timeouts), never auth or host-key failures.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko
from fabric import Config
from fabric.runners import Remote
from invoke.exceptions import CommandTimedOut
from paramiko.ssh_exception import (
    AuthenticationException,
    BadHostKeyException,
    NoValidConnectionsError,
    SSHException,
)

from fabfile.errors import ConnectError, ConnectionLost, RemoteError
from fabfile.inventory.hosts import Timeouts
from fabfile.transport import sshfailures
from fabfile.transport.base import LineBuffer, ProcessResult, Transport
from fabfile.transport.proxy import HopConnection, hops

if TYPE_CHECKING:  # tenacity is imported where a connection is retried: a CLI start should not pay for it
    from tenacity import RetryCallState

# Paramiko's transport thread logs its own tracebacks (a broken ProxyCommand pipe, a reset connection) through the
# logging module, which would print them on stderr. The failures reach the user as this module's exceptions, in
# sentences; the raw tracebacks are noise.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


def _unknown_host(e: BaseException) -> bool:
    return isinstance(e, SSHException) and "not found in known_hosts" in str(e)


def _refused(e: BaseException | None) -> bool:
    """Something answered "no" (the ProxyCommand exited, the port is closed): retried only briefly."""
    return isinstance(e, (paramiko.ProxyCommandFailure, ConnectionRefusedError, NoValidConnectionsError))


def _transient(e: BaseException) -> bool:
    # A name that does not resolve will not resolve on the next try either: a typo in the alias or ssh_config.
    if isinstance(e, (BadHostKeyException, AuthenticationException, socket.gaierror)) or _unknown_host(e):
        return False
    return isinstance(e, (NoValidConnectionsError, socket.timeout, EOFError, SSHException, OSError))


class _LettingGoRemote(Remote):  # type: ignore[misc]
    """Fabric's remote runner, letting go of the command on Ctrl-C. Without a pty Fabric re-raises the interrupt,
    but the runner then joins its stdout reader, which waits for the remote command to end: Ctrl-C during a deploy
    did nothing until the deploy finished (minutes of model load). Closing the channel first ends the readers at
    once; the agent on the host goes on without us (a deploy finishes or tears itself down; `inv cancel` stops it)."""

    def send_interrupt(self, interrupt: KeyboardInterrupt) -> None:
        channel = getattr(self, "channel", None)
        if channel is not None:
            channel.close()
        raise interrupt

    # Invoke's wait polls the command's end and its reader threads every ``input_sleep`` (10 ms): a hundred wake-ups
    # a second per running command, a deploy's whole load long, the largest part of the client's CPU in a parallel
    # deploy once the version lookups were cached (measured on 8 simulated hosts). Paramiko sets the channel's
    # ``status_event`` when the exit status arrives or the channel closes (what ``exit_status_ready`` reads), so
    # waiting on it ends at that very moment; a reader thread that died (an error) is noticed within DEAD_CHECK_S.
    DEAD_CHECK_S = 0.2

    def wait(self) -> None:
        while not (self.process_is_finished or self.has_dead_threads):
            self.channel.status_event.wait(self.DEAD_CHECK_S)
def _close_failed_handshake(cxn: Any) -> None:
    """Close the socket of a handshake that failed, and reap its ProxyCommand.

    ``Transport.close()`` does nothing once the transport is inactive, which a failed banner or key exchange leaves
    it; ``ProxyCommand.close()`` sends SIGTERM and never waits. So the socket is closed here and the command's
    process reaped (bounded: a command that ignores SIGTERM is killed)."""
    transport = getattr(getattr(cxn, "client", None), "_transport", None)
    sock = getattr(transport, "sock", None)
    if sock is None:
        return
    try:
        sock.close()
    except OSError:
        pass
    process = getattr(sock, "process", None)
    if process is not None:
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class _NudgingTransport(paramiko.Transport):
    """paramiko's Transport, answering the server's first global request (OpenSSH sends ``hostkeys-00@openssh.com``
    right after login, asking no reply) with one SSH_MSG_IGNORE.

    Why: sshd writes that request and, a moment later, its answer to our first channel open. Until a session runs,
    its socket still has Nagle's algorithm on, so the answer waits for the ACK of the request, and our side's TCP
    delays that ACK (up to 40 ms on Linux) because it has nothing to send. Any packet from us carries the ACK at
    once. Measured on the simulated host: the first channel of every connection opened in ~45 ms, now in ~2 ms.
    """

    _nudged = False

    def _parse_global_request(self, m: Any) -> None:
        super()._parse_global_request(m)  # type: ignore[misc]
        if not self._nudged:
            self._nudged = True
            msg = paramiko.Message()
            msg.add_byte(paramiko.common.cMSG_IGNORE)
            msg.add_string(b"")
            self._send_message(msg)  # type: ignore[attr-defined]


class SSHTransport(Transport):
    def __init__(self, host_name: str, alias: str, *, ssh_config: Path | None, known_hosts: Path | None,
                 timeouts: Timeouts, on_open: Callable[[Transport], None] | None = None) -> None:
        super().__init__(host_name)
        self.alias = alias
        self.ssh_config = ssh_config
        self.extra_known_hosts = known_hosts
        self.timeouts = timeouts
        self.cxn: Any = None
        self.sftp_refused = False
        self._pending: Any = None  # the connection being opened (so abort() can close it mid-handshake)
        self.aborted = False
        if on_open is not None:
            on_open(self)  # registered before connecting: a hang in the handshake can be aborted too
        self._connect()

    # -- connecting -------------------------------------------------------------------------------------------
    def _build(self) -> Any:
        cfg = Config(runtime_ssh_path=str(self.ssh_config)) if self.ssh_config else Config()
        cfg.run.in_stream = False  # never mirror our stdin to remote commands
        cfg.runners.remote = _LettingGoRemote
        t = self.timeouts
        cxn = HopConnection(self.alias, config=cfg, connect_timeout=t.connect,
                            connect_kwargs={"transport_factory": _NudgingTransport,
                                            "banner_timeout": t.connect, "auth_timeout": t.connect,
                                            "channel_timeout": max(t.connect, 10.0)})
        files = self._known_hosts_files(cxn)
        for hop in hops(cxn):
            hop.client.load_system_host_keys()
            for f in files:
                hop.client.load_host_keys(str(f))
            hop.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        return cxn

    def _known_hosts_files(self, cxn: Any) -> list[Path]:
        files: list[Path] = []
        for entry in (cxn.ssh_config.get("userknownhostsfile") or "").split():
            p = Path(os.path.expanduser(entry))
            if p.is_file():
                files.append(p)
        if self.extra_known_hosts is not None:
            files.append(self.extra_known_hosts)
        return files

    def _open_once(self) -> Any:
        if self.aborted:
            raise ConnectError(f"the session to {self.alias} was aborted", host=self.host_name)
        cxn = self._build()
        self._pending = cxn
        try:
            cxn.open()
        except BaseException:
            # Fabric closes only a connection that opened; paramiko leaves the transport of a failed handshake (and
            # its ProxyCommand) running. Each retry against a frozen sshd left one more ProxyCommand process alive,
            # holding a half-open connection in the host's accept queue until the command ended.
            _close_failed_handshake(cxn)
            cxn.close()
            raise
        finally:
            self._pending = None
        cxn.transport.set_keepalive(15)
        return cxn

    def _say_retrying(self, state: RetryCallState) -> None:
        """The first failed attempt is said at once (what the ProxyCommand printed, or the socket error)."""
        if state.attempt_number != 1 or state.outcome is None:
            return
        e = state.outcome.exception()
        why = f"its ProxyCommand {e.error}" if isinstance(e, paramiko.ProxyCommandFailure) else \
            (str(e) or type(e).__name__)
        sshfailures.say_retrying(self.host_name, why, self.timeouts, _refused(e))

    def _stop_connecting(self, state: RetryCallState) -> bool:
        """Give up after the budget ``sshfailures.retry_budget`` names: connect_total, or connect_refused after a
        refusal (the ProxyCommand exited, the port is closed), which ``ssh`` reports at once."""
        from tenacity import stop_before_delay

        e = state.outcome.exception() if state.outcome is not None else None
        budget, _ = sshfailures.retry_budget(self.timeouts, _refused(e))
        return bool(stop_before_delay(budget)(state))

    def _connect(self) -> None:
        from tenacity import Retrying, retry_if_exception, wait_exponential_jitter

        try:
            for attempt in Retrying(retry=retry_if_exception(lambda e: _transient(e) and not self.aborted),
                                    stop=self._stop_connecting,
                                    wait=wait_exponential_jitter(multiplier=0.3, max=4), reraise=True,
                                    before_sleep=self._say_retrying):
                with attempt:
                    self.cxn = self._open_once()
        except BadHostKeyException as e:
            raise sshfailures.changed_key(self.alias, self.host_name, e.expected_key.get_fingerprint().hex(),
                                          e.key.get_fingerprint().hex()) from None
        except AuthenticationException as e:
            raise sshfailures.auth_refused(self.alias, self.host_name, str(e)) from None
        except paramiko.ProxyCommandFailure as e:
            raise ConnectError(f"could not reach {self.alias}: its ProxyCommand (`{e.command}`) {e.error}",
                               f"run the ProxyCommand by hand to see why; it was retried for "
                               f"{self.timeouts.connect_refused:g} s (timeouts.connect_refused)",
                               host=self.host_name) from None
        except SSHException as e:
            if _unknown_host(e):
                raise sshfailures.unknown_key(self.alias, self.host_name) from None
            raise ConnectError(f"could not open an SSH session to {self.alias}: {e}",
                               "check that the host is up and its sshd answers", host=self.host_name) from None
        except socket.gaierror as e:
            raise sshfailures.unresolvable(self.alias, self.host_name, str(e.strerror or e)) from None
        except (OSError, EOFError) as e:
            raise ConnectError(f"could not reach {self.alias} within {self.timeouts.connect_total:.0f} s: "
                               f"{e or type(e).__name__}", "check the network, the ssh_config alias and sshd",
                               host=self.host_name) from None
        self.stats.connections += 1

    def reconnect(self) -> None:
        self.close()
        self._connect()
        self.stats.reconnects += 1

    # -- commands ---------------------------------------------------------------------------------------------
    def _alive(self) -> bool:
        t = getattr(self.cxn, "transport", None)
        return bool(t is not None and t.is_active())

    def _run(self, command: str, timeout: float, **kw: Any) -> ProcessResult:
        if not self._alive():
            raise ConnectionLost(f"the SSH session to {self.alias} is closed", host=self.host_name)
        self.count_command(command)
        try:
            kw.setdefault("in_stream", False)
            r = self.cxn.run(command, warn=True, pty=False, timeout=timeout, **kw)
        except CommandTimedOut:
            raise RemoteError(f"a remote command ran past its {timeout:.0f} s bound", host=self.host_name,
                              command=command) from None
        except (SSHException, EOFError, OSError) as e:
            raise ConnectionLost(f"the SSH session to {self.alias} dropped: {e or type(e).__name__}",
                                 host=self.host_name) from None
        if r.exited == -1 or not self._alive():
            raise ConnectionLost(f"the SSH session to {self.alias} dropped while a command ran",
                                 host=self.host_name)
        return ProcessResult(int(r.exited), r.stdout if isinstance(r.stdout, str) else "", r.stderr)

    def run(self, command: str, timeout: float) -> ProcessResult:
        return self._run(command, timeout, hide=True)

    def stream(self, command: str, on_line: Callable[[str], None], timeout: float,
               idle_timeout: float | None = None) -> ProcessResult:
        sink = LineBuffer(on_line)
        done = threading.Event()
        went_silent = threading.Event()

        def watchdog() -> None:
            # Keepalives do not notice a black-holed link; a command that should emit heartbeats and went silent
            # has lost its link: close the session so the blocked run() returns and the caller can re-attach.
            assert idle_timeout is not None
            while not done.wait(1.0):
                if time.monotonic() - sink.last_activity > idle_timeout:
                    went_silent.set()
                    t = getattr(self.cxn, "transport", None)
                    if t is not None:
                        t.close()
                    return

        if idle_timeout:
            threading.Thread(target=watchdog, name=f"silence-{self.host_name}", daemon=True).start()
        try:
            result = self._run(command, timeout, hide="err", out_stream=sink)
        except ConnectionLost:
            if went_silent.is_set():
                raise ConnectionLost(f"no word from {self.alias} for {idle_timeout:.0f} s: the link looks dead",
                                     host=self.host_name) from None
            raise
        finally:
            done.set()
            sink.close()
        return ProcessResult(result.exit_code, "", result.stderr)

    # -- files ------------------------------------------------------------------------------------------------
    def put(self, data: bytes, path: str, mode: int = 0o600) -> None:
        if not self._alive():
            raise ConnectionLost(f"the SSH session to {self.alias} is closed", host=self.host_name)
        if self.sftp_refused:
            self._put_by_shell(data, path, mode)
            return
        try:
            sftp = self.cxn.sftp()
        except SSHException:
            # Some hosts disable the sftp subsystem; fall back to a shell write for the rest of this session.
            self.sftp_refused = True
            self._put_by_shell(data, path, mode)
            return
        try:
            self._put_by_sftp(sftp, data, path, mode)
        except (OSError, SSHException) as e:
            if not self._alive():
                raise ConnectionLost(f"the SSH session to {self.alias} dropped while writing {path}",
                                     host=self.host_name) from None
            raise RemoteError(f"could not write {path} on the host: {e}",
                              "check that the directory is writable by the SSH user and the disk is not full",
                              host=self.host_name) from None
        self.stats.uploads += 1

    def get(self, path: str, dest: Path, max_bytes: int) -> int:
        """SFTP: the host's file, bounded by its size (stat first, then at most ``max_bytes`` read)."""
        from fabfile.transport.base import write_local

        if not self._alive():
            raise ConnectionLost(f"the SSH session to {self.alias} is closed", host=self.host_name)
        rel = path[2:] if path.startswith("~/") else path
        try:
            sftp = self.cxn.sftp()
            size = int(sftp.stat(rel).st_size or 0)
            if size > max_bytes:
                raise RemoteError(f"{path} weighs {size} bytes, over the bound of {max_bytes}: not fetched",
                                  host=self.host_name)
            with sftp.open(rel, "rb") as f:
                f.prefetch(size)
                data = f.read(max_bytes + 1)
        except (OSError, SSHException) as e:
            if not self._alive():
                raise ConnectionLost(f"the SSH session to {self.alias} dropped while reading {path}",
                                     host=self.host_name) from None
            raise RemoteError(f"could not fetch {path} from the host over SFTP: {e}",
                              "check that the host allows SFTP for the SSH user", host=self.host_name) from None
        if len(data) > max_bytes:
            raise RemoteError(f"{path} grew over the bound of {max_bytes} bytes while it was read: not fetched",
                              host=self.host_name)
        self.stats.downloads += 1
        return write_local(dest, data)

    def _put_by_shell(self, data: bytes, path: str, mode: int) -> None:
        """``cat`` the bytes from stdin into a temporary file in the target directory, then rename: atomic, and the
        mode is set before any content lands. The bytes go straight onto the channel: Invoke's stdin pump is
        text-only and reads a non-terminal stream one byte per 10 ms tick."""
        r = self._exec_with_stdin(self.shell_write_command(path, mode), data, self.timeouts.command)
        self.shell_write_done(r, path, "no SFTP; ")

    def _exec_with_stdin(self, command: str, data: bytes, timeout: float) -> ProcessResult:
        self.count_command(command)
        try:
            chan = self.cxn.transport.open_session(timeout=timeout)
            chan.settimeout(timeout)
            chan.exec_command(command)
            chan.sendall(data)
            chan.shutdown_write()
            out = chan.makefile("rb").read()
            err = chan.makefile_stderr("rb").read()
            code = chan.recv_exit_status()
            chan.close()
        except (SSHException, EOFError, OSError) as e:
            raise ConnectionLost(f"the SSH session to {self.alias} dropped while writing a file: "
                                 f"{e or type(e).__name__}", host=self.host_name) from None
        return ProcessResult(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def _put_by_sftp(self, sftp: Any, data: bytes, path: str, mode: int) -> None:
        # SFTP has no ~ expansion; its working directory is the login HOME.
        rel = path[2:] if path.startswith("~/") else path
        parent = os.path.dirname(rel)
        self._makedirs(sftp, parent)
        tmp = f"{parent}/.specdeploy-{secrets.token_hex(6)}" if parent else f".specdeploy-{secrets.token_hex(6)}"
        try:
            with sftp.open(tmp, "wb") as f:
                f.chmod(mode)  # before any byte lands: secrets in launch scripts are never world-readable
                f.set_pipelined(True)
                f.write(data)
            sftp.posix_rename(tmp, rel)
        except BaseException:
            try:
                sftp.remove(tmp)
            except (OSError, SSHException):
                pass
            raise

    @staticmethod
    def _makedirs(sftp: Any, path: str) -> None:
        if not path:
            return
        try:
            sftp.stat(path)
            return
        except OSError:
            pass
        SSHTransport._makedirs(sftp, os.path.dirname(path))
        try:
            sftp.mkdir(path, 0o700)
        except OSError:
            sftp.stat(path)  # raced with another creator: fine if it exists now

    def abort(self) -> None:
        """Close the session from another thread (paramiko threads cannot be killed; this unblocks them)."""
        self.aborted = True
        for cxn in (self._pending, self.cxn):
            if cxn is None:
                continue
            try:
                client = getattr(cxn, "client", None)
                if client is not None:
                    client.close()
                cxn.close()
            except Exception:  # best effort from a foreign thread
                pass

    def close(self) -> None:
        """Let go of the connection; never raises. Closing says goodbye over the link (the SFTP channel's close
        message), and a link that died under us — Ctrl-C reaches the whole process group, ProxyCommand included —
        fails that send: the error would replace whatever the caller was handling (a Ctrl-C, a failed deploy) with
        a paramiko traceback, and nothing is left to say goodbye to. The transport is then closed without the
        goodbye, so its thread and socket (or ProxyCommand) are let go either way."""
        cxn, self.cxn = self.cxn, None
        if cxn is None:
            return
        try:
            cxn.close()
        except (SSHException, EOFError, OSError):
            try:
                client = getattr(cxn, "client", None)
                if client is not None:
                    client.close()
            except (SSHException, EOFError, OSError):
                pass


