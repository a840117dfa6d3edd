"""An in-process fake host for orchestration tests: scripted agent replies behind a transport that does nothing.

``FakeFleet`` is handed to ``fabfile.transport.session.connector``; every ``HostSession.open`` then gets a session whose
agent answers from ``replies[host][verb]`` (a dict, a callable taking the request, or an agent error dict with a
``kind``), and records each request. No SSH, no subprocess: rollout, cluster and the multi-host commands run their
real code in this process, in milliseconds. A reply callable may block until the session is aborted
(``FakeTransport.aborted``), as a hung host does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fabfile.errors import ConnectError, from_agent
from fabfile.inventory.hosts import Host, Inventory
from fabfile.transport.base import ProcessResult, Transport
from fabfile.transport.session import HostSession

Reply = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class FakeTransport(Transport):
    """A transport nothing travels over: the scripted agent answers above it. ``abort`` wakes a blocked reply."""

    def __init__(self, host_name: str) -> None:
        super().__init__(host_name)
        self.aborted = threading.Event()
        self.stats.connections = 1
        self.files: dict[str, tuple[bytes, int]] = {}

    def run(self, command: str, timeout: float) -> ProcessResult:
        raise AssertionError(f"{self.host_name}: the fake host runs no commands ({command!r})")

    def stream(self, command: str, on_line: Callable[[str], None], timeout: float,
               idle_timeout: float | None = None) -> ProcessResult:
        raise AssertionError(f"{self.host_name}: the fake host runs no commands ({command!r})")

    def put(self, data: bytes, path: str, mode: int = 0o600) -> None:
        self.files[path] = (data, mode)  # what a deploy uploads (launch script, env file), kept to be read

    def close(self) -> None:
        self.aborted.set()


class ScriptedAgent:
    """Stands where ``AgentClient`` stands: ``call(verb, request, timeout, **kw)`` → data, or the tool's error."""

    def __init__(self, fleet: FakeFleet, host: Host, transport: FakeTransport) -> None:
        self.fleet, self.host, self.transport = fleet, host, transport

    def call(self, verb: str, request: dict[str, Any], timeout: float = 60.0, **_: Any) -> dict[str, Any]:
        with self.fleet.lock:
            self.fleet.calls.append((self.host.name, verb, dict(request), timeout))
        reply = self.fleet.replies.get(self.host.name, {}).get(verb)
        if reply is None:
            raise AssertionError(f"{self.host.name}: no scripted reply for verb {verb!r}")
        data = reply(request) if callable(reply) else reply
        if "kind" in data:
            raise from_agent(data, self.host.name)
        return dict(data)


class FakeFleet:
    """Scripted hosts. ``unreachable``: hosts whose connect fails (``ConnectError``), as a host that is down."""

    def __init__(self, replies: dict[str, dict[str, Reply]], unreachable: tuple[str, ...] = ()) -> None:
        self.replies = replies
        self.unreachable = set(unreachable)
        self.calls: list[tuple[str, str, dict[str, Any], float]] = []
        self.transports: dict[str, FakeTransport] = {}
        self.lock = threading.Lock()

    def __call__(self, inv: Inventory, host: Host,
                 on_open: Callable[[Transport], None] | None = None) -> HostSession:
        if host.name in self.unreachable:
            raise ConnectError(f"cannot connect to {host.ssh_host}", "check that it is up", host=host.name)
        t = FakeTransport(host.name)
        with self.lock:
            self.transports[host.name] = t
        if on_open is not None:
            on_open(t)
        return HostSession(host=host, transport=t, agent=ScriptedAgent(self, host, t))  # type: ignore[arg-type]

    def requests(self, verb: str) -> dict[str, dict[str, Any]]:
        """The request each host got for ``verb`` (the last one)."""
        return {h: req for h, v, req, _ in self.calls if v == verb}
