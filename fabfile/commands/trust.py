"""``inv trust-host``: first contact with a host, its key fingerprint shown and trusted only when confirmed."""

from __future__ import annotations

from collections.abc import Callable

from fabfile.commands.result import CommandResult
from fabfile.errors import FlagError, HostKeyError
from fabfile.inventory.hosts import Inventory
from fabfile.transport.trust import already_known, fetch_key, known_hosts_file, trust


def trust_host(inv: Inventory, host: str | None, fingerprint: str | None,
               ask: Callable[[], bool]) -> CommandResult:
    """Fetch the one host's key and write it to known_hosts when ``fingerprint`` is exactly what it offers, or
    (without one) when ``ask()`` says the person verified it out of band; a different key already there is refused."""
    from fabfile.present.output import out

    hosts = inv.select(host)
    if len(hosts) != 1:
        raise FlagError("--host: trust-host takes one host at a time")
    h = hosts[0]
    if h.connection == "local":
        raise FlagError(f"--host: {h.name} is a local host; there is no SSH key to trust")
    offered = fetch_key(inv, h)
    path = known_hosts_file(inv, h)
    out.print(f"{h.name} ({offered.entry_name}) offers a {offered.key.get_name()} key: {offered.fingerprint}")
    state = already_known(path, offered)
    # trust-host has no --json: it talks to a person at a terminal, so its result is only what it prints.
    if state is True:
        return CommandResult(None, lambda: out.print(f"already trusted in {path}"))
    if state is False:
        raise HostKeyError(f"{path} already holds a DIFFERENT key for {offered.entry_name}; not touching it",
                           f"if the host was reinstalled, verify the new key, then `ssh-keygen -R {offered.entry_name} "
                           f"-f {path}` and run trust-host again", host=h.name)
    trust(path, offered, fingerprint, fingerprint is None and ask())
    return CommandResult(None, lambda: out.print(f"trusted: added to {path}"))
