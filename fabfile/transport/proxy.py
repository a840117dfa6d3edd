"""The hops of an SSH connection: Fabric's ``Connection`` whose ssh_config ``ProxyCommand`` is watched, so a proxy
that exits is reported at once with its own words, and the walk over a connection's gateways (each hop is
hardened the same way by ``ssh`` and ``trust``)."""

from __future__ import annotations

import os
import select
import subprocess
from collections.abc import Iterator
from typing import Any

import paramiko
from fabric import Connection


class WatchedProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand, but a proxy that has exited is noticed at once and reported with what it printed.

    paramiko reads the proxy's stdout in a loop until it has the bytes it wants; once the proxy is dead each read
    returns b"" at once, so the loop spins a core until the banner timeout and then says "Error reading SSH protocol
    banner" (measured: ~57 s at 100 % CPU for a refused connection, which ``ssh`` reports in 12 ms). Here EOF on
    its stdout ends the read with the proxy's own words (its stderr) and exit status.
    """

    def recv(self, size: int) -> bytes:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            r, _, _ = select.select([stdout], [], [], self.timeout)
        except (OSError, ValueError) as e:
            raise paramiko.ProxyCommandFailure(" ".join(self.cmd), str(e)) from None
        if not r:
            raise TimeoutError()
        data = os.read(stdout.fileno(), size)
        if data:
            return data
        raise paramiko.ProxyCommandFailure(" ".join(self.cmd), self.last_words())

    def send(self, content: Any) -> int:
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(content)
        except OSError:
            # It died before reading what we sent (a refused connection exits at once): say what it said.
            raise paramiko.ProxyCommandFailure(" ".join(self.cmd), self.last_words()) from None
        return len(content)

    def close(self) -> None:
        # The proxy may be gone already (it exited, and last_words reaped it): nothing to signal then.
        if self.process.poll() is None:
            try:
                self.process.terminate()
            except ProcessLookupError:
                pass

    def last_words(self) -> str:
        """The proxy's exit status and the end of its stderr (it has closed its stdout: it is exiting)."""
        try:
            code = self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        text = b""
        stderr = self.process.stderr
        if stderr is not None:
            try:
                while select.select([stderr], [], [], 0)[0]:
                    chunk = os.read(stderr.fileno(), 4096)
                    if not chunk or len(text) > 16384:
                        break
                    text += chunk
            except (OSError, ValueError):
                pass
        said = " ".join(text.decode("utf-8", "replace").split())[-300:]
        status = "closed its output but was still running" if code is None else f"exited with status {code}"
        return status + (f": {said}" if said else " without a word")


class HopConnection(Connection):  # type: ignore[misc]
    """Fabric's ``Connection`` whose ssh_config ``ProxyCommand`` gateway is a :class:`WatchedProxyCommand`."""

    def open_gateway(self) -> Any:
        gw = super().open_gateway()
        if isinstance(gw, paramiko.ProxyCommand) and not isinstance(gw, WatchedProxyCommand):
            # Fabric built a plain ProxyCommand from ssh_config: re-wrap its already running process.
            watched = WatchedProxyCommand.__new__(WatchedProxyCommand)
            watched.cmd, watched.process, watched.timeout = gw.cmd, gw.process, gw.timeout
            return watched
        return gw


def hops(cxn: Any) -> Iterator[Any]:
    while isinstance(cxn, Connection):
        yield cxn
        cxn = cxn.gateway
