"""The port check before a launch (fabfile/remote/serve/port.py), against real sockets and a real child process: a
port another process listens on is refused naming that process; a free port, and one whose last server just left
it in TIME_WAIT, pass; an address the host cannot bind is said as such."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabfile.remote.common import AgentError
from fabfile.remote.protocol import ERROR_KINDS
from fabfile.remote.serve import port

HOLDER = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
sys.stdin.read()
"""


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """A port held by a child process that listens and never answers (what a stale server of another tool does),
    started by hand with a secret and a newline in its argv."""
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    child = subprocess.Popen([sys.executable, str(script), "two\nlines", "--api-key", "sk-hidden-1234"],
                             stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        yield int(child.stdout.readline()), child.pid
    finally:
        child.kill()
        child.wait()


def test_a_held_port_is_refused_naming_its_holder(held: tuple[int, int]) -> None:
    number, pid = held
    with pytest.raises(AgentError) as e:
        port.check_free("127.0.0.1", number)
    assert e.value.kind == "port_in_use"
    assert e.value.message.startswith(f"port {number} is already in use on the host by PID {pid} (")
    # one line, however the holder's argv was written; a secret in it never shown
    assert "\n" not in e.value.message and "two\\nlines" in e.value.message
    assert "--api-key ***" in e.value.message and "sk-hidden-1234" not in e.value.message
    assert e.value.details == {"address": f"127.0.0.1:{number}", "holder": e.value.details["holder"]}
    assert ERROR_KINDS["port_in_use"][0] == "launch"  # the client raises a LaunchError with the protocol's hint


def test_a_wildcard_listen_conflicts_with_a_holder_on_loopback(held: tuple[int, int]) -> None:
    # SGLang's default --host is 127.0.0.1, an inventory often says 0.0.0.0: uvicorn fails on either, so must we.
    with pytest.raises(AgentError) as e:
        port.check_free("0.0.0.0", held[0])
    assert e.value.kind == "port_in_use"


def test_a_free_port_passes_and_is_left_free() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        number = s.getsockname()[1]
    assert port.check_free("127.0.0.1", number) == {"address": f"127.0.0.1:{number}"}
    assert port.check_free("127.0.0.1", number) == {"address": f"127.0.0.1:{number}"}  # nothing kept bound


def test_a_port_left_in_time_wait_by_the_last_server_passes() -> None:
    # The server a redeploy just stopped leaves its accepted connections in TIME_WAIT for a minute; uvicorn binds
    # with SO_REUSEADDR and starts regardless, so the check must not refuse either.
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    number = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", number))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end goes to TIME_WAIT
    client.close()
    server.close()
    assert port.check_free("127.0.0.1", number)["address"] == f"127.0.0.1:{number}"


def test_an_address_the_host_lacks_is_said_not_taken_for_busy() -> None:
    with pytest.raises(AgentError) as e:
        port.check_free("192.0.2.1", 30000)  # TEST-NET-1: never an address of this machine
    assert e.value.kind == "bad_listen" and "192.0.2.1:30000" in e.value.message
