"""A server's health this moment: one HTTP GET of its health endpoint, and the recorded server's health as `status`
and `watch` show it.

Apart from ``server`` (starting SGLang, following its log, the launch's failure patterns) because `status` and
`watch` need only this: every agent call is a fresh Python on the host, and the rest of ``server`` (its patterns
compiled at import, the log follower's threads) is a start's.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import versions

if TYPE_CHECKING:
    from ..protocol import Health


def ready_path_of(request: Mapping[str, Any], sglang_version: str) -> str:
    """The endpoint whose 200 means a deploy's server is ready: its version's, at its node's rank (a deploy's
    ``node``; none on one node)."""
    node = request.get("node") or {}
    return versions.readiness_path(sglang_version, node_rank=int(node.get("rank") or 0))


def recorded_health(rec: Mapping[str, Any], *, answers: bool = True) -> Health:
    """The recorded server's health this moment (``status`` and ``watch`` both show it): the endpoint its deploy
    waited on, what it answers, how long that took. ``answers=False`` (a process stopped by a signal cannot
    answer): the probe's bound is not spent to learn it."""
    request = rec.get("request") or {}
    path = ready_path_of(request, rec.get("sglang_version") or "")
    timeout = probe_timeout_s(path, (request.get("summary") or {}).get("env"))
    code, took = timed_probe(rec["listen"], int(rec["port"]), path, timeout) if answers else (None, None)
    return {"path": path, "status": code, "latency_s": took, "timeout_s": timeout}


def probe_timeout_s(path: str, env: dict[str, str] | None = None) -> float:
    """How long one GET of ``path`` may take before the probe gives up on it.

    ``/health`` (0.4.10.post2 ... 0.5.19) and ``/health_generate`` run SGLang's health-generate handler: it sends a
    one-token request, then ``await asyncio.sleep(1)`` before it first looks for an answer, and keeps looking each
    second up to ``SGLANG_HEALTH_CHECK_TIMEOUT`` (20 s unless the server's environment says otherwise), answering 503
    then. So a healthy server needs a little over a second, a loaded one a few; the probe waits for the server's own
    verdict (plus a margin), never less. ``/ready`` and the older ``/health`` (to 0.4.10.post1) answer at once.
    """
    if path not in ("/health", "/health_generate"):
        return 5.0
    raw = (env or {}).get("SGLANG_HEALTH_CHECK_TIMEOUT", "")
    try:
        server_limit = int(raw) if raw else versions.HEALTH_CHECK_TIMEOUT_S
    except ValueError:
        server_limit = versions.HEALTH_CHECK_TIMEOUT_S  # SGLang itself would fail to start on such a value
    return float(max(1, server_limit) + 5)


def probe(host: str, port: int, path: str, timeout: float) -> int | None:
    """HTTP status of ``GET path`` on the server, or None when nothing answers within ``timeout`` (see
    :func:`probe_timeout_s`: SGLang's health endpoints take over a second by design).

    A bare HTTP/1.0 request on a socket: urllib costs ~12 ms of imports per agent start, and all we need is the
    status line from a server on this host.
    """
    target = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    # An ASCII name goes to getaddrinfo as bytes (which it takes, though typeshed says str): given a str it encodes
    # it through the idna codec, whose import (with stringprep) is ~1.3 ms of every `status` call.
    addr: str | bytes = target.encode() if target.isascii() else target
    try:
        with socket.create_connection((addr, port), timeout=timeout) as s:  # type: ignore[arg-type]
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


def timed_probe(host: str, port: int, path: str, timeout: float) -> tuple[int | None, float]:
    """(status or None, seconds the answer took)."""
    t0 = time.monotonic()
    code = probe(host, port, path, timeout)
    return code, round(time.monotonic() - t0, 3)
