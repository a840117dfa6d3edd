"""The server's HTTP port, checked before the launch: no SGLang release checks it early. uvicorn binds it only once
the schedulers have loaded the model (`http_server.launch_server`), so a port held by another process ends a deploy
after the whole model load — 60 s on a 7B model on an H200, tens of minutes for a model of a trillion parameters —
with `[Errno 98] error while attempting to bind on address`. Binding it here, the way uvicorn will, fails in
milliseconds and names the holder where /proc shows it."""

from __future__ import annotations

import errno
import os
import socket
import time
from typing import TypedDict

from .. import procs
from ..common import AgentError

# /proc/net/tcp's state column for a listening socket (include/net/tcp_states.h: TCP_LISTEN = 10).
_LISTEN = "0A"
# The holder search reads every process's fd table: bounded, so a host with many processes never stalls a deploy.
_HOLDER_SEARCH_S = 1.0


class PortFree(TypedDict):
    address: str  # listen:port, as the server will bind it


def check_free(listen: str, port: int) -> PortFree:
    """Bind ``listen:port`` as uvicorn does (SO_REUSEADDR, so a socket left in TIME_WAIT by the server this deploy
    just stopped does not count) and let it go at once; raise ``port_in_use`` naming the holder when it is taken."""
    address = f"{listen}:{port}"
    try:
        infos = socket.getaddrinfo(listen or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise AgentError("bad_listen", f"the listen address {listen!r} does not resolve on the host: "
                         f"{e.strerror}") from None
    family, kind, proto, _name, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sockaddr)
            s.listen(1)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise AgentError("bad_listen", f"the server could not bind {address}: {e.strerror}") from None
            holder = _holder(port)
            raise AgentError("port_in_use", f"port {port} is already in use on the host"
                             + (f" by {holder}" if holder else
                                " (by a process this user cannot name: another user's, or outside its PID namespace)")
                             + ", so the server could not bind it", address=address, holder=holder) from None
    return {"address": address}


def _holder(port: int) -> str | None:
    """``PID N (cmdline)`` of the process listening on ``port``, when this user may read its fd table."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    deadline = time.monotonic() + _HOLDER_SEARCH_S
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        if time.monotonic() > deadline:
            return None
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                cmd = procs.read_cmdline(int(pid))  # secrets redacted, one printable line
                return f"PID {pid} ({cmd[:160] or '?'})"
        except OSError:  # gone meanwhile, or another user's
            continue
    return None


def _listening_inodes(port: int) -> set[str]:
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                found.add(f"socket:[{cols[9]}]")
    return found
