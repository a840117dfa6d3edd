"""What a user reads when an SSH connection cannot be made, the same words whichever client made it.

Both carriers (Paramiko in ``ssh``, the OpenSSH client in ``openssh``) build their refusals here, so a changed
host key, an unknown one, a refused login or a name that does not resolve reads alike on either path, and both
retry a transient failure for the same budget. Imports no SSH library: the OpenSSH path must not pay for Paramiko.
"""

from __future__ import annotations

from fabfile.errors import AuthError, ConnectError, HostKeyError
from fabfile.inventory.values import Timeouts


def changed_key(alias: str, host_name: str, expected_md5: str, got_md5: str) -> HostKeyError:
    """The host offers another key than known_hosts names (both as MD5 hex, Paramiko's ``get_fingerprint``)."""
    return HostKeyError(
        f"the host key of {alias} does not match known_hosts: expected {expected_md5}, got {got_md5}; refusing to "
        "connect (this is what a man-in-the-middle looks like)",
        f"if the host was reinstalled, verify the new key out of band, then `ssh-keygen -R {alias}` "
        "and add the new one", host=host_name)


def unknown_key(alias: str, host_name: str) -> HostKeyError:
    return HostKeyError(
        f"{alias} is not in known_hosts, and the tool never trusts an unknown host key silently",
        f"run `inv trust-host --host {host_name}`: it shows the fingerprint to check out of band "
        "and adds the key once you confirm it", host=host_name)


def auth_refused(alias: str, host_name: str, why: str) -> AuthError:
    return AuthError(f"SSH authentication to {alias} was refused ({why})",
                     "check User and IdentityFile for this alias in your ssh_config", host=host_name)


def unresolvable(alias: str, host_name: str, why: str) -> ConnectError:
    return ConnectError(f"cannot resolve the host name of {alias} ({why})",
                        f"is `{alias}` a Host in your ssh_config (or `ssh_host` in the inventory) with a "
                        "HostName that resolves?", host=host_name)


def retry_budget(timeouts: Timeouts, refused: bool) -> tuple[float, str]:
    """How long a failed connection is retried: after a refusal (the port is closed, the ProxyCommand exited)
    only ``connect_refused``, since something answered "no" and retrying for a minute only hides it; otherwise
    ``connect_total``. The seconds and how the user reads them."""
    if refused:
        budget = min(timeouts.connect_refused, timeouts.connect_total)
        return budget, f"{timeouts.connect_refused:g} s (timeouts.connect_refused)"
    return timeouts.connect_total, f"{timeouts.connect_total:.0f} s (timeouts.connect_total)"


def say_retrying(host_name: str, why: str, timeouts: Timeouts, refused: bool) -> None:
    """The first failed attempt, said at once, so a dead path is visible now and not only after the budget."""
    from rich.markup import escape

    from fabfile.present.output import err

    _, budget = retry_budget(timeouts, refused)
    err.print(f"[yellow]{host_name}[/yellow]: cannot connect yet ({escape(why)}); retrying for up to {budget}",
              markup=True, highlight=False)
