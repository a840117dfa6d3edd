"""PID 1 of one simulated GPU host (test equipment; stdlib only, run as a script).

Usage: ``python hostinit.py INIT_JSON``. The JSON names the mode and what to set up:

netns mode (started by ``ip netns exec NS unshare --mount --pid --fork --mount-proc ...``):
    sets the hostname, bind-mounts the host's HOME at ``/root`` and a private tmpfs at ``/tmp``
    (paths in ``keep`` that those mounts would cover are bound back in, e.g. the base Python),
    runs ``sshd -D`` as its child, reaps every orphan (as init does on a real host), and on a
    SIGTERM sent from outside the host ends every process of the host and exits. A SIGTERM sent
    from inside the host is ignored, as a real init does.

loopback mode (no namespaces):
    becomes a child subreaper so that detached processes started over SSH stay its descendants,
    runs ``sshd -D`` on 127.0.0.1:PORT, and on SIGTERM ends its descendants and exits.

When sshd answers with its banner, the file named by ``ready_file`` is written.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import signal
import socket
import subprocess
import sys
import time

MS_BIND = 4096
MS_REC = 16384
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = _libc.mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _covered(path: str, covers: list[str]) -> bool:
    return any(path == c or path.startswith(c.rstrip("/") + "/") for c in covers)


def setup_mounts(cfg: dict) -> None:
    home = cfg["home"]
    keep = [os.path.realpath(p) for p in cfg.get("keep", [])]
    covers = ["/root", "/tmp"]
    # Open what must stay visible before anything covers it; bind it back through /proc/self/fd.
    fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in keep if _covered(p, covers)}
    _mount(home, "/root", None, MS_BIND | MS_REC)
    _mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777,size=512m")
    for path, fd in sorted(fds.items()):
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)


def _children_of(pid: int) -> list[int]:
    """Every live process whose ancestry leads to ``pid`` (loopback mode)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(name)] = int(fields[1])
    out: list[int] = []
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p:
                out.append(child)
                frontier.append(child)
    return out


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _signal_all(sig: int, netns: bool) -> None:
    if netns:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, sig)  # PID 1 of the namespace: every process of the host but itself
        return
    for pid in _children_of(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _shutdown(netns: bool) -> None:
    _signal_all(signal.SIGTERM, netns)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        _reap()
        if not _children_of(os.getpid()):
            return
        time.sleep(0.02)
    _signal_all(signal.SIGKILL, netns)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        _reap()
        if not _children_of(os.getpid()):
            return
        time.sleep(0.02)


def _wait_banner(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-2.0-"):
                    return True
        except OSError:
            pass
        time.sleep(0.01)
    return False


def main() -> int:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    netns = cfg["mode"] == "netns"
    try:
        import setproctitle  # type: ignore[import-not-found]

        setproctitle.setproctitle(f"simhost-init {cfg['hostname']}")
    except ImportError:
        pass
    if netns:
        socket.sethostname(cfg["hostname"])
        setup_mounts(cfg)
        os.chdir("/root")
    else:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    sigs = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    sshd = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-f", cfg["sshd_config"], "-E", cfg["sshd_log"]],
        env=env,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs),
    )
    ok = _wait_banner(cfg["port"], 10.0)
    tmp = cfg["ready_file"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"ok": ok, "sshd_pid": sshd.pid}, f)
    os.replace(tmp, cfg["ready_file"])
    if not ok:
        _shutdown(netns)
        return 1
    while True:
        info = signal.sigwaitinfo(sigs)
        if info.si_signo == signal.SIGCHLD:
            _reap()
            continue
        if info.si_signo in (signal.SIGTERM, signal.SIGINT):
            # si_pid is 0 when the sender lives outside this PID namespace.
            if netns and info.si_pid != 0:
                continue
            _shutdown(netns)
            return 0


if __name__ == "__main__":
    sys.exit(main())
