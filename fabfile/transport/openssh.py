"""The read-only commands' carrier: OpenSSH's own client, one connection kept open and reused (ControlMaster).

Why: status, check-env, gpus, logs and watch run many times a day and from scripts, and in them Paramiko's import
(~65 ms) and handshake (30-80 ms) cost as much as the network; through an open OpenSSH master connection a command
takes ~10 ms (docs/measured.md). Each call is one ``ssh`` process with ControlMaster=auto and ControlPersist, as
Ansible runs its commands: the first one becomes the master, the next ones ride on it until it has been idle
``CONTROL_PERSIST_S``. Only the carrier changes: the agent's command line and its JSON lines are the ones
``agentclient`` sends over Paramiko, and a deploy or any SFTP transfer keeps Paramiko (``ssh``).

As strict as the Paramiko path, option by option (given on the command line, which wins over any ssh_config):
the same ssh_config file (user, port, key and ProxyCommand are its own, read by the client it was written for);
host keys checked with StrictHostKeyChecking=yes against exactly the files Paramiko loads (~/.ssh/known_hosts, the
alias's UserKnownHostsFile, the inventory's ``known_hosts``; no global file, no DNS, no KnownHostsCommand, never an
added or updated key); never a prompt (BatchMode). The control socket lives in a directory only this user can reach
(0700, under $XDG_RUNTIME_DIR, else the cache directory), named by ``%C`` and by a tag of everything ``ssh -G``
resolved for the alias, so a connection is reused only under the settings and trust store it was opened with.

A changed or unknown host key, a refused login and a name that does not resolve are refused at once, in the words
of the Paramiko path (``sshfailures``). A connection that fails for the network's sake (a timeout, a refused port, a
ProxyCommand that ended) is handed to Paramiko for the rest of the command: it retries within the same budget and
reports what the ProxyCommand said, which ssh sends to /dev/null once a master may persist.

``open_openssh`` returns None where this carrier cannot be used, and the caller takes Paramiko: no ``ssh`` binary,
no private directory, a socket path too long for the system's limit, a path ``ssh`` could not take as an option
value, an ssh_config ``ssh -G`` refuses, or an alias with ProxyJump (OpenSSH checks each hop with the jump alias's
own settings, not the ones above; Paramiko checks every hop as strictly).
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import math
import os
import re
import select
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fabfile.errors import ConnectError, ConnectionLost, RemoteError, SpecDeployError
from fabfile.inventory.values import Timeouts
from fabfile.transport import sshfailures
from fabfile.transport.base import LineBuffer, ProcessResult, Transport

CONTROL_PERSIST_S = 120  # a connection idle this long closes (a cron check every minute keeps reusing one)
KEEPALIVE_S = 15         # as the Paramiko transport's keepalive
# sun_path holds 108 bytes with its NUL, and the master first binds "PATH.<16 random characters>", then links it.
SUN_PATH_MAX = 107 - 17
_HEX_C = 40              # %C: the SHA-1 of the local host, host, port, user and jump host, in hex
_UNSAFE_IN_OPTION = r"[\s\"'\\]"


def control_dir() -> Path | None:
    """The directory of the control sockets, created 0700; None when none is private to this user.

    $XDG_RUNTIME_DIR (the user's own, per its spec, and gone at logout) when set, else $XDG_CACHE_HOME or ~/.cache;
    never a shared /tmp. A directory that exists with another owner or a looser mode is not used, nor fixed: what
    another account could have put in it (a socket posing as our master) cannot be trusted."""
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    cache = os.environ.get("XDG_CACHE_HOME") or ""
    try:
        if os.path.isabs(runtime):
            d = Path(runtime) / "specdeploy" / "ssh"
        else:
            d = (Path(cache) if os.path.isabs(cache) else Path.home() / ".cache") / "specdeploy" / "ssh"
        d.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except (OSError, RuntimeError):  # RuntimeError: no HOME and no passwd entry
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return d


def resolved(ssh: str, ssh_config: Path | None, alias: str, timeout: float) -> dict[str, list[str]] | None:
    """``ssh -G``: every setting as the client resolves it for ``alias`` (Include, Match, tokens); None if refused."""
    argv = [ssh, *(["-F", str(ssh_config)] if ssh_config else []), "-G", "--", alias]
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    settings: dict[str, list[str]] = {}
    for line in r.stdout.splitlines():
        key, _, value = line.partition(" ")
        settings.setdefault(key.lower(), []).append(value)
    return settings


def known_hosts_files(settings: dict[str, list[str]], extra: Path | None) -> list[str]:
    """The files Paramiko's path trusts (``SSHTransport._build``): ~/.ssh/known_hosts, the alias's own
    UserKnownHostsFile, the inventory's ``known_hosts``. ``ssh -G`` prints OpenSSH's default pair when the
    ssh_config names none; Paramiko reads only the first of those, so the second is left out."""
    import pwd

    named = " ".join(settings.get("userknownhostsfile", [])).split()
    try:  # ssh expands ~ to the account's home (its passwd entry), Paramiko to $HOME
        account = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        account = os.path.expanduser("~")
    if named == [f"{account}/.ssh/known_hosts", f"{account}/.ssh/known_hosts2"]:
        named = []
    files = [os.path.expanduser("~/.ssh/known_hosts"), *named]
    if extra is not None:
        files.append(str(extra))
    return list(dict.fromkeys(files))


def on_path(name: str) -> str | None:
    """``shutil.which(name)``: the first executable ``name`` on PATH. Written out because importing shutil (and with
    it bz2, lzma and zlib) is a few milliseconds of every read-only command's start, for this one lookup."""
    for d in os.get_exec_path():
        p = os.path.join(d, name)
        if os.access(p, os.F_OK | os.X_OK) and not os.path.isdir(p):
            return p
    return None


def open_openssh(host_name: str, alias: str, *, ssh_config: Path | None, known_hosts: Path | None,
                 timeouts: Timeouts, on_open: Callable[[Transport], None] | None = None) -> OpenSSHTransport | None:
    """The OpenSSH carrier for this host, or None where it cannot be used (the module's docstring says when)."""
    ssh = on_path("ssh")
    d = control_dir() if ssh else None
    if ssh is None or d is None:
        return None
    settings = resolved(ssh, ssh_config, alias, max(timeouts.connect, 5.0))
    if settings is None or any(v != "none" for v in settings.get("proxyjump", ["none"])):
        return None
    files = known_hosts_files(settings, known_hosts)
    tag = hashlib.sha256(repr((ssh, str(ssh_config), alias, files, sorted(settings.items()))).encode())
    path = f"{d}/{tag.hexdigest()[:10]}-%C"
    if len(path) - 2 + _HEX_C > SUN_PATH_MAX or any(re.search(_UNSAFE_IN_OPTION, p) for p in [path, *files]):
        return None
    return OpenSSHTransport(host_name, alias, ssh=ssh, ssh_config=ssh_config, known_hosts=files,
                            control_path=path, timeouts=timeouts, extra_known_hosts=known_hosts, on_open=on_open)


# -- what ssh said (patterns compiled only when ssh failed: ``re`` caches them then) -----------------------------
_CHANGED = r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for \S+ has changed"
_GOT = r"key sent by the remote host is\s*MD5:((?:[0-9a-f]{2}:){15}[0-9a-f]{2})"
_OFFENDING = r"(?m)Offending \S+ key in (.+):(\d+)\s*$"
_UNKNOWN = r"host key is known for|Host key verification failed"
_AUTH = r"(Permission denied \([^)]*\)|Too many authentication failures)"
_RESOLVE = r"(?m)Could not resolve hostname [^:]+: (.+?)\s*$"
_DROPPED = r"Connection to \S+ closed by remote host|client_loop: |mux_client_\w+: "
# The network's failures (a ProxyCommand that ended shows as a connection closed in the key exchange).
_TRANSIENT = (r"Connection refused|timed out|Connection reset|No route to host|Network is unreachable|"
              r"kex_exchange_identification|banner exchange|Connection closed by|Broken pipe")


def _md5_of_known(entry: str) -> str:
    """The MD5 hex of the key on ``FILE:LINE`` (known_hosts: [marker] hosts type base64 [comment])."""
    path, _, line = entry.rpartition(":")
    try:
        fields = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()[int(line) - 1].split()
        if fields and fields[0].startswith("@"):
            fields = fields[1:]
        return hashlib.md5(base64.b64decode(fields[2])).hexdigest()
    except (OSError, IndexError, ValueError):
        return "an unreadable key"


def _last_words(stderr: str) -> str:
    return " ".join(" ".join(ln.split()) for ln in stderr.splitlines() if ln.strip())[-300:]


class _Failed(Exception):
    """ssh could not open the connection; a ``transient`` failure is handed to Paramiko, which retries it."""

    def __init__(self, error: SpecDeployError, why: str, transient: bool = False) -> None:
        super().__init__(why)
        self.error, self.why, self.transient = error, why, transient


class _HandedOver(Exception):
    """The call goes over Paramiko from now on (``OpenSSHTransport.paramiko``)."""


class OpenSSHTransport(Transport):
    def __init__(self, host_name: str, alias: str, *, ssh: str, ssh_config: Path | None, known_hosts: list[str],
                 control_path: str, timeouts: Timeouts, extra_known_hosts: Path | None = None,
                 on_open: Callable[[Transport], None] | None = None) -> None:
        super().__init__(host_name)
        self.alias = alias
        self.timeouts = timeouts
        self.control_path = control_path
        # Every value written as ssh reads it after token expansion (a % in a path is written %%).
        options = {
            "BatchMode": "yes", "StrictHostKeyChecking": "yes",
            "UserKnownHostsFile": " ".join(f.replace("%", "%%") for f in known_hosts),
            "GlobalKnownHostsFile": "/dev/null", "KnownHostsCommand": "none", "VerifyHostKeyDNS": "no",
            "UpdateHostKeys": "no", "CheckHostIP": "no",
            "FingerprintHash": "md5",  # the offered key's fingerprint as Paramiko's refusal names it
            "LogLevel": "ERROR", "ConnectTimeout": str(max(1, math.ceil(timeouts.connect))),
            "ServerAliveInterval": str(KEEPALIVE_S),
            "ControlMaster": "auto", "ControlPath": control_path.replace("%", "%%").replace("%%C", "%C"),
            "ControlPersist": str(CONTROL_PERSIST_S),
            # what Paramiko never does either: no local command, no forwarding, no terminal
            "PermitLocalCommand": "no", "ClearAllForwardings": "yes", "ForwardX11": "no", "RequestTTY": "no",
        }
        self.argv = [ssh, *(["-F", str(ssh_config)] if ssh_config else [])]
        for key, value in options.items():
            self.argv += ["-o", f"{key}={value}"]
        self.ssh_config, self.extra_known_hosts = ssh_config, extra_known_hosts
        self.paramiko: Transport | None = None  # once a connection failed for the network's sake (``_call``)
        self.held: Transport | None = None      # that Paramiko transport from its first moment, for abort()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self.aborted = False
        self.stats.connections = 1
        if on_open is not None:
            on_open(self)  # before the first call, which is where a hung handshake would be

    # -- one ssh process ----------------------------------------------------------------------------------------
    def _exchange(self, command: str, timeout: float, on_text: Callable[[str], object], *, data: bytes | None = None,
                  idle_timeout: float | None = None, last_activity: Callable[[], float] | None = None,
                  ) -> tuple[int, str, bool]:
        """Run ``command`` on the host once: (exit code, stderr, whether any stdout came). Each stdout chunk goes
        to ``on_text`` as it arrives; past ``timeout`` or ``idle_timeout`` of silence the ssh process is ended."""
        if self.aborted:
            raise ConnectError(f"the session to {self.alias} was aborted", host=self.host_name)
        proc = subprocess.Popen([*self.argv, "--", self.alias, command], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
                                start_new_session=True)  # a Ctrl-C is ours to handle: the finally ends it
        with self._lock:
            self._procs.add(proc)
        errs: list[bytes] = []
        readers = [threading.Thread(target=lambda: errs.append(proc.stderr.read() if proc.stderr else b""),
                                    daemon=True)]
        if data is not None:
            readers.append(threading.Thread(target=self._feed, args=(proc, data), daemon=True))
        for t in readers:
            t.start()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        got_output = False
        start = time.monotonic()
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        try:
            while True:
                now = time.monotonic()
                if now - start > timeout:
                    raise RemoteError(f"a remote command ran past its {timeout:.0f} s bound", host=self.host_name,
                                      command=command)
                if idle_timeout and last_activity is not None and now - last_activity() > idle_timeout:
                    raise ConnectionLost(f"no word from {self.alias} for {idle_timeout:.0f} s: the link looks dead",
                                         host=self.host_name)
                if not select.select([fd], [], [], min(1.0, max(0.0, timeout - (now - start))))[0]:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                got_output = True
                on_text(decoder.decode(chunk))
            on_text(decoder.decode(b"", final=True))
            code = proc.wait()
        finally:
            self._end(proc)
        for t in readers:
            t.join(timeout=5)
        if self.aborted:
            raise ConnectionLost(f"the session to {self.alias} was closed", host=self.host_name)
        return code, b"".join(errs).decode("utf-8", "replace"), got_output

    @staticmethod
    def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except OSError:  # ssh ended first: its exit says why
            pass

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        """Let go of an ssh process, ending it if it still runs (its channel closes; the master stays)."""
        with self._lock:
            self._procs.discard(proc)
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass
        if proc.stdout is not None:
            proc.stdout.close()

    def _failure(self, code: int, stderr: str, got_output: bool) -> _Failed | None:
        """What ssh's own words say when it exited 255 before the command answered; None: the command's own exit."""
        if code != 255 or got_output:
            return None
        alias, name = self.alias, self.host_name
        if re.search(_CHANGED, stderr):
            got, offending = re.search(_GOT, stderr), re.search(_OFFENDING, stderr)
            expected = _md5_of_known(f"{offending[1]}:{offending[2]}") if offending else "another key"
            return _Failed(sshfailures.changed_key(alias, name, expected,
                                                   got[1].replace(":", "") if got else "another key"), "changed")
        if re.search(_UNKNOWN, stderr):
            return _Failed(sshfailures.unknown_key(alias, name), "unknown")
        if m := re.search(_AUTH, stderr):
            return _Failed(sshfailures.auth_refused(alias, name, m[1]), m[1])
        if m := re.search(_RESOLVE, stderr):
            return _Failed(sshfailures.unresolvable(alias, name, m[1]), m[1])
        said = _last_words(stderr)
        if re.search(_DROPPED, stderr):
            return _Failed(ConnectionLost(f"the SSH session to {alias} dropped while a command ran: {said}",
                                          host=name), said)
        if re.search(_TRANSIENT, stderr):
            error = ConnectError(f"could not reach {alias}: {said}", "check the network, the ssh_config alias "
                                 "and sshd", host=name)
            return _Failed(error, said, transient=True)
        return None

    def _call(self, command: str, timeout: float, on_text: Callable[[str], object], *, data: bytes | None = None,
              idle_timeout: float | None = None, last_activity: Callable[[], float] | None = None,
              ) -> tuple[int, str]:
        """``_exchange``; a refused host key, login or name is refused at once, in Paramiko's words. A connection
        that failed for the network's sake (a timeout, a reset, a refused port, a ProxyCommand that ended) is handed
        to Paramiko (:meth:`_over_paramiko`), which retries it within the same budget and says what the proxy said:
        ssh sends a ProxyCommand's own words to /dev/null once a master may persist."""
        self.count_command(command)
        code, stderr, got_output = self._exchange(command, timeout, on_text, data=data, idle_timeout=idle_timeout,
                                                  last_activity=last_activity)
        failed = self._failure(code, stderr, got_output)
        if failed is None:
            return code, stderr
        if not failed.transient or self.aborted:
            raise failed.error from None
        self._over_paramiko()
        raise _HandedOver

    def _over_paramiko(self) -> None:
        from fabfile.transport.ssh import SSHTransport

        with self._lock:
            if self.aborted:
                raise ConnectError(f"the session to {self.alias} was aborted", host=self.host_name)
        self.paramiko = SSHTransport(self.host_name, self.alias, ssh_config=self.ssh_config,
                                     known_hosts=self.extra_known_hosts, timeouts=self.timeouts,
                                     on_open=self._hold)

    def _hold(self, t: Transport) -> None:
        with self._lock:
            self.held = t
        if self.aborted:
            t.abort()

    # -- the Transport interface ------------------------------------------------------------------------------
    def run(self, command: str, timeout: float) -> ProcessResult:
        if self.paramiko is None:
            out: list[str] = []
            try:
                code, stderr = self._call(command, timeout, out.append)
                return ProcessResult(code, "".join(out), stderr)
            except _HandedOver:
                pass
        assert self.paramiko is not None
        return self.paramiko.run(command, timeout)

    def stream(self, command: str, on_line: Callable[[str], None], timeout: float,
               idle_timeout: float | None = None) -> ProcessResult:
        if self.paramiko is None:
            sink = LineBuffer(on_line)
            try:
                code, stderr = self._call(command, timeout, sink.write, idle_timeout=idle_timeout,
                                          last_activity=lambda: sink.last_activity)
                sink.close()
                return ProcessResult(code, "", stderr)
            except _HandedOver:
                pass  # nothing came on stdout: nothing was handed to on_line
        assert self.paramiko is not None
        return self.paramiko.stream(command, on_line, timeout, idle_timeout)

    def put(self, data: bytes, path: str, mode: int = 0o600) -> None:
        """A shell write through the same connection (the agent's install, when a read-only command finds none)."""
        if self.paramiko is None:
            out: list[str] = []
            try:
                code, stderr = self._call(self.shell_write_command(path, mode), self.timeouts.command, out.append,
                                          data=data)
                self.shell_write_done(ProcessResult(code, "".join(out), stderr), path)
                return
            except _HandedOver:
                pass
        assert self.paramiko is not None
        self.paramiko.put(data, path, mode)

    def abort(self) -> None:
        """End whatever ssh process runs now (from another thread: a host past its bound); the master stays."""
        with self._lock:
            self.aborted = True
            procs, held = list(self._procs), self.held
        if held is not None:
            held.abort()
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """The master connection outlives this command on purpose (ControlPersist); a Paramiko one is closed."""
        if self.paramiko is not None:
            self.paramiko.close()
