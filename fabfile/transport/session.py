"""A session with one host: its transport (SSH or local) and the agent on it, opened once and reused for a run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fabfile.inventory.hosts import Host, Inventory
from fabfile.remote.protocol import StopRequest
from fabfile.transport.agentclient import AgentClient
from fabfile.transport.base import LocalTransport, Transport


def open_transport(inv: Inventory, host: Host,
                   on_open: Callable[[Transport], None] | None = None) -> Transport:
    if host.connection == "local":
        local = LocalTransport(host.name)
        if on_open is not None:
            on_open(local)
        return local
    from fabfile.transport.ssh import SSHTransport  # paramiko is slow to import; `inv --list` should not pay for it

    return SSHTransport(host.name, host.ssh_host, ssh_config=inv.ssh_config, known_hosts=inv.known_hosts,
                        timeouts=host.timeouts, on_open=on_open)


# How a session is opened. None: a real transport (``open_transport``). Tests swap in an in-process fake for a
# block (``connector``), the way httpx takes a mock transport: every command opens sessions through
# ``HostSession.open``, so rollout, cluster and the multi-host commands run unchanged against scripted hosts.
# A module global, not a context variable: the fan-out runs each host in its own thread.
Connector = Callable[["Inventory", Host, "Callable[[Transport], None] | None"], "HostSession"]
_connector: Connector | None = None


@contextmanager
def connector(fn: Connector) -> Iterator[None]:
    """Open every ``HostSession`` through ``fn`` inside the block (test equipment: ``tests/support/fakehost.py``)."""
    global _connector
    before, _connector = _connector, fn
    try:
        yield
    finally:
        _connector = before


@dataclass
class HostSession:
    host: Host
    transport: Transport
    agent: AgentClient
    facts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, inv: Inventory, host: Host,
             on_open: Callable[[Transport], None] | None = None) -> HostSession:
        """Connect; ``on_open`` gets the transport before the handshake, so another thread can abort it."""
        if _connector is not None:
            return _connector(inv, host, on_open)
        transport = open_transport(inv, host, on_open)
        return cls(host=host, transport=transport, agent=AgentClient(transport, host.python, host.state_dir))

    def resolve(self, path: str) -> str:
        """A remote path with ``~/`` replaced by the host's HOME (known after the first agent call)."""
        home = self.facts.get("home")
        if path.startswith("~/") and home:
            return f"{home.rstrip('/')}/{path[2:]}"
        return path

    def call(self, verb: str, request: Mapping[str, Any], timeout: float | None = None, **kw: Any) -> dict[str, Any]:
        req = {"state_dir": self.host.state_dir, **request}
        return self.agent.call(verb, req, timeout or self.host.timeouts.command, **kw)

    def stop(self, *, dry_run: bool = False, lock_wait: float | None = None, slack: float = 30) -> dict[str, Any]:
        """Stop the SGLang server(s) on this host's GPUs: the one place the ``stop`` request is built.

        ``lock_wait``: how long the agent waits for another run's lock (default: the host's ``lock_wait``);
        ``slack``: seconds the client waits beyond the agent's own worst case (a TERM grace, then a KILL grace).
        """
        t = self.host.timeouts
        wait = t.lock_wait if lock_wait is None else lock_wait
        req: StopRequest = {"target_gpus": list(range(self.host.tp)), "grace": t.stop_grace, "dry_run": dry_run,
               "lock_wait": wait, "client": _client()}
        # The agent's bound includes its wait for a deploy in progress (it waits for the lock by default).
        return self.call("stop", req, timeout=wait + 3 * t.stop_grace + slack)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> HostSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _client() -> str:
    """``user@machine`` of this client: who holds a host's lock, as `inv status` and a waiting deploy say."""
    import getpass
    import socket

    return f"{getpass.getuser()}@{socket.gethostname()}"
