"""`inv trust-host`: first contact with a host, done safely.

The tool never adds an unknown host key by itself (Fabric's default would). This fetches the key the host offers,
over the same route a deploy uses (ssh_config HostName, Port, ProxyCommand), prints its SHA256 fingerprint, and
writes it to known_hosts only when the operator confirms: by passing the fingerprint they verified out of band
(`--fingerprint SHA256:...`, the scriptable way) or by answering "yes" at a terminal.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko
from fabric import Config, Connection
from paramiko.ssh_exception import SSHException

from fabfile.errors import ConnectError, FlagError
from fabfile.inventory.hosts import Host, Inventory


@dataclass(frozen=True)
class OfferedKey:
    entry_name: str        # how known_hosts names this host (HostName, or [HostName]:port)
    key: paramiko.PKey

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.key.asbytes()).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")

    def line(self) -> str:
        return f"{self.entry_name} {self.key.get_name()} {self.key.get_base64()}\n"


def _connection(inv: Inventory, host: Host) -> Any:
    cfg = Config(runtime_ssh_path=str(inv.ssh_config)) if inv.ssh_config else Config()
    return Connection(host.ssh_host, config=cfg, connect_timeout=host.timeouts.connect)


def known_hosts_file(inv: Inventory, host: Host) -> Path:
    """Where the key goes: the alias's UserKnownHostsFile, else the inventory's known_hosts, else ~/.ssh/known_hosts."""
    cxn = _connection(inv, host)
    entries = (cxn.ssh_config.get("userknownhostsfile") or "").split()
    if entries:
        return Path(os.path.expanduser(entries[0]))
    if inv.known_hosts is not None:
        return inv.known_hosts
    return Path(os.path.expanduser("~/.ssh/known_hosts"))


def _harden(inv: Inventory, cxn: Any) -> None:
    """Every jump host is verified like a deploy verifies it: known_hosts loaded, unknown keys refused."""
    from fabfile.transport.proxy import hops

    files = [Path(os.path.expanduser(e)) for e in (cxn.ssh_config.get("userknownhostsfile") or "").split()]
    if inv.known_hosts is not None:
        files.append(inv.known_hosts)
    for hop in hops(cxn):
        hop.client.load_system_host_keys()
        for f in files:
            if f.is_file():
                hop.client.load_host_keys(str(f))
        hop.client.set_missing_host_key_policy(paramiko.RejectPolicy())


def fetch_key(inv: Inventory, host: Host) -> OfferedKey:
    """The host key the host offers (key exchange only: no authentication, nothing run), over the route a deploy
    takes: ProxyJump hops (each verified against known_hosts, as a deploy does), a ProxyCommand, or directly."""
    cxn = _connection(inv, host)
    hostname, port = cxn.host, int(cxn.port)
    gateway = cxn.gateway
    route = ""
    jump: Any = None
    try:
        if isinstance(gateway, Connection):
            route = f" through ProxyJump {gateway.host}"
            _harden(inv, gateway)
            gateway.open()
            jump = gateway
            sock: Any = gateway.transport.open_channel("direct-tcpip", (hostname, port), ("127.0.0.1", 0),
                                                       timeout=host.timeouts.connect)
        elif isinstance(gateway, str) and gateway:
            route = " through its ProxyCommand"
            sock = paramiko.ProxyCommand(gateway)
        else:
            sock = socket.create_connection((hostname, port), timeout=host.timeouts.connect)
        transport = paramiko.Transport(sock)
        try:
            transport.start_client(timeout=host.timeouts.connect)
            key = transport.get_remote_server_key()
        finally:
            transport.close()
    except (OSError, SSHException, EOFError) as e:
        hint = "check that the host is up and the ssh_config alias is right"
        if jump is None and route.startswith(" through ProxyJump") and "known_hosts" in str(e):
            hint = f"trust the jump host {gateway.host} first (its key must be in known_hosts)"
        raise ConnectError(f"could not fetch the host key of {host.ssh_host} ({hostname}:{port}){route}: "
                           f"{e or type(e).__name__}", hint, host=host.name) from None
    finally:
        if jump is not None:
            jump.close()
    name = hostname if port == 22 else f"[{hostname}]:{port}"
    return OfferedKey(entry_name=name, key=key)


def already_known(path: Path, offered: OfferedKey) -> bool | None:
    """True: this exact key is known; False: another key is known for this host (refuse); None: not known."""
    if not path.is_file():
        return None
    keys = paramiko.HostKeys(str(path))
    known = keys.lookup(offered.entry_name)
    if not known:
        return None
    same = known.get(offered.key.get_name())
    return same is not None and same.asbytes() == offered.key.asbytes()


def trust(path: Path, offered: OfferedKey, fingerprint: str | None, confirmed: bool) -> None:
    if fingerprint is not None and fingerprint.strip() != offered.fingerprint:
        raise FlagError(f"--fingerprint: the host offers {offered.fingerprint}, not {fingerprint.strip()}; "
                        "nothing was written", "verify the fingerprint out of band (the host's console: "
                        "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)")
    if fingerprint is None and not confirmed:
        raise FlagError(f"not trusted: confirm the fingerprint {offered.fingerprint} with --fingerprint",
                        "verify it out of band first (ssh-keygen -lf on the host's console)")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path, "a", encoding="utf-8") as f:
        f.write(offered.line())
    os.chmod(path, 0o600)
