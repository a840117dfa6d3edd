"""``for_each_host``'s ``meanwhile`` (issue 42): a read-only command imports what prints its answers while its hosts
answer, not before the round trip. Over real processes (``LocalTransport``: ``sh -c``), checked by the order things
happened in, never by how long they took."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from fabfile.commands import fanout
from fabfile.commands.fanout import for_each_host
from fabfile.inventory import hosts as inventory
from fabfile.transport.agentclient import AgentClient
from fabfile.transport.base import LocalTransport, Transport
from fabfile.transport.session import HostSession, connector

INV = """
defaults:
  python: /opt/venv/bin/python3
  model: /models/m
  draft_model: /models/d
hosts:
  a: {ssh_host: gpu-a}
  b: {ssh_host: gpu-b}
"""


@pytest.fixture
def inv(tmp_path: Path) -> inventory.Inventory:
    p = tmp_path / "inventory.yaml"
    p.write_text(INV)
    return inventory.load(p)


def local_sessions(transports: dict[str, Transport],
                   hold: dict[str, threading.Event]) -> Callable[..., HostSession]:
    """Sessions over ``sh -c`` on this machine; a host named in ``hold`` stays "connecting" until its event."""
    def connect(inv: inventory.Inventory, host: inventory.Host,
                on_open: Callable[[Transport], None] | None) -> HostSession:
        if host.name in hold:
            hold[host.name].wait(30)
        t = LocalTransport(host.name)
        transports[host.name] = t
        if on_open is not None:
            on_open(t)
        return HostSession(host=host, transport=t, agent=AgentClient(t, host.python, host.state_dir))
    return connect


def answer_once(marker: Path) -> str:
    """A host's command that runs until ``marker`` exists (at most 30 s), then answers."""
    return f"i=0; while [ ! -e {marker} ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; echo answered"


def test_meanwhile_runs_in_the_calling_thread_once_every_host_has_sent_and_before_any_answer(
        inv: inventory.Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "MEANWHILE_AFTER_S", 30.0)  # a loaded machine's slow start is not the bound's case
    transports: dict[str, Transport] = {}
    seen: list[tuple[str, object]] = []
    marker = tmp_path / "answer-now"

    def work(s: HostSession) -> str:
        out = s.transport.run(answer_once(marker), 60).stdout.strip()
        seen.append(("answer", s.host.name))
        return out

    def meanwhile() -> None:
        sent = sorted(n for n, t in transports.items() if t.sent.is_set())
        seen.append(("meanwhile", (threading.current_thread() is threading.main_thread(), sent)))
        marker.touch()  # the hosts answer only after meanwhile ran: it ran while they were answering

    with connector(local_sessions(transports, {})):
        outcomes = for_each_host(inv, [inv.hosts["a"], inv.hosts["b"]], work, host_timeout=60, meanwhile=meanwhile)
    assert [o.answer for o in outcomes] == ["answered", "answered"]
    assert seen[0] == ("meanwhile", (True, ["a", "b"])), seen
    assert sorted(seen[1:]) == [("answer", "a"), ("answer", "b")]


def test_a_host_that_never_sends_holds_meanwhile_back_only_for_its_bound(
        inv: inventory.Inventory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host stuck connecting (a hung handshake) does not keep the others' printing imports waiting for its
    timeout: meanwhile runs after ``MEANWHILE_AFTER_S``, and the stuck host still gets its own outcome."""
    monkeypatch.setattr(fanout, "MEANWHILE_AFTER_S", 0.2)
    transports: dict[str, Transport] = {}
    connecting = threading.Event()
    order: list[str] = []

    def work(s: HostSession) -> str:
        out = s.transport.run("echo answered", 30).stdout.strip()
        order.append(f"answer {s.host.name}")
        return out

    def meanwhile() -> None:
        order.append(f"meanwhile, b connected: {'b' in transports}")
        connecting.set()  # b connects only once meanwhile ran (else after 30 s): it was not waited for

    with connector(local_sessions(transports, {"b": connecting})):
        outcomes = for_each_host(inv, [inv.hosts["a"], inv.hosts["b"]], work, host_timeout=60, meanwhile=meanwhile)
    assert [o.answer for o in outcomes] == ["answered", "answered"]
    assert order[-1] == "answer b" and "meanwhile, b connected: False" in order, order


def test_without_meanwhile_and_with_one_host_the_work_runs_as_before(inv: inventory.Inventory) -> None:
    transports: dict[str, Transport] = {}
    with connector(local_sessions(transports, {})):
        (o,) = for_each_host(inv, [inv.hosts["a"]], lambda s: s.transport.run("echo hi", 30).stdout.strip())
    assert o.answer == "hi" and transports["a"].sent.is_set() and transports["a"].stats.commands == 1
