"""``inv trust-host``: first contact with hosts, each key's fingerprint shown and trusted only when confirmed.

Several hosts (``--host all``, a group): every fingerprint is shown first, then one question covers the new ones
(or ``--fingerprint FP1,FP2,...`` names each), and either every new key is written or none is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fabfile.commands.result import CommandResult
from fabfile.errors import FlagError, HostKeyError, SpecDeployError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.transport.trust import OfferedKey, already_known, fetch_key, known_hosts_file, trust


def trust_host(inv: Inventory, host: str | None, fingerprint: str | None,
               ask: Callable[[int], bool]) -> CommandResult:
    """Fetch each host's key and write the new ones to known_hosts when ``fingerprint`` names exactly what each
    offers (a comma list for several), or (without one) when ``ask(n)`` says the person verified the ``n`` new
    fingerprints out of band; a different key already there is refused for its host, never overwritten."""
    from fabfile.present.output import out, print_error

    hosts = inv.select(host)
    local = [h for h in hosts if h.connection == "local"]
    if len(hosts) == 1 and local:
        raise FlagError(f"--host: {hosts[0].name} is a local host; there is no SSH key to trust")
    for h in local:
        out.print(f"{h.name}: a local host, no SSH key to trust")
    new: list[tuple[Host, OfferedKey, Path]] = []
    failed: list[SpecDeployError] = []
    for h in (h for h in hosts if h.connection != "local"):
        try:
            offered = fetch_key(inv, h)
        except SpecDeployError as e:
            if len(hosts) == 1:
                raise
            e.host = e.host or h.name
            failed.append(e)
            continue
        path = known_hosts_file(inv, h)
        out.print(f"{h.name} ({offered.entry_name}) offers a {offered.key.get_name()} key: {offered.fingerprint}",
                  markup=False, highlight=False)
        state = already_known(path, offered)
        if state is True:
            out.print(f"  already trusted in {path}" if len(hosts) > 1 else f"already trusted in {path}",
                      markup=False)
        elif state is False:
            changed = HostKeyError(f"{path} already holds a DIFFERENT key for {offered.entry_name}; not touching it",
                                   f"if the host was reinstalled, verify the new key, then `ssh-keygen -R "
                                   f"{offered.entry_name} -f {path}` and run trust-host again", host=h.name)
            if len(hosts) == 1:
                raise changed
            failed.append(changed)
        else:
            new.append((h, offered, path))
    # trust-host has no --json: it talks to a person at a terminal, so its result is only what it prints.
    code = max((e.exit_code for e in failed), default=0)

    def errors() -> None:
        for e in failed:
            print_error(e)

    if not new:
        return CommandResult(None, errors, code)
    if len(hosts) == 1:
        (_, offered, path), = new
        # trust() checks the fingerprint given against the one offered, and says so (exit 2)
        trust(path, offered, fingerprint, fingerprint is None and ask(1))
    else:
        given = [f.strip() for f in fingerprint.split(",") if f.strip()] if fingerprint is not None else None
        wrong = [(h, o) for h, o, _ in new if given is not None and o.fingerprint not in given]
        if wrong:
            raise FlagError(f"--fingerprint: {', '.join(f'{h.name} offers {o.fingerprint}' for h, o in wrong)}, "
                            "not among those given; nothing was written", "verify each fingerprint out of band "
                            "(the host's console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)")
        if given is None and not ask(len(new)):
            raise FlagError(f"not trusted: confirm the {len(new)} new fingerprint(s) with --fingerprint FP1,FP2,...; "
                            "nothing was written", "verify them out of band first (ssh-keygen -lf on each host's "
                            "console)")
        for _, offered, path in new:  # every new key confirmed: all are written, after the last check
            trust(path, offered, offered.fingerprint, True)

    def for_people() -> None:
        for h, _, path in new:
            out.print(f"trusted: added to {path}" if len(hosts) == 1 else f"{h.name}: trusted, added to {path}",
                      markup=False)
        errors()

    return CommandResult(None, for_people, code)
