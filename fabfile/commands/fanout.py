"""The one way to run work on several hosts at once (as fabric's ``Group`` is): every multi-host command uses it.

``for_each_host`` opens a session per host, caps how many run at once, and bounds each host's part by a per-host
timeout, so one hung host is reported as timed out while the others finish. ``concurrent`` is its bare form for
work that opens its own session and carries its own deadlines (a deploy follows its plan's deadline; a rollback or
a cluster's teardown are bounded by each call's timeout): every item at once, nothing capped, nothing cut short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fabfile.errors import HostTimeoutError, RemoteError, SpecDeployError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.results.hosts import HostOutcome
from fabfile.transport.base import Transport
from fabfile.transport.session import HostSession

if TYPE_CHECKING:  # the live display (rich.live, rich.spinner) is imported by the commands that show one
    from fabfile.present.progress import Reporter

MAX_PARALLEL = 16
# ``meanwhile`` waits for every running host's first command to be on its way, at most this long (a host whose
# connection hangs is reported by its timeout; the calling thread's own work need not wait for that).
MEANWHILE_AFTER_S = 0.5

# What a host's work answers (a verb's answer shape, typed by ``HostSession``): each outcome carries it.
T = TypeVar("T")

def _run_one(inv: Inventory, h: Host, work: Callable[[HostSession], T],
             on_open: Callable[[Transport], None] | None, read_only: bool) -> HostOutcome[T]:
    """One host's part: open its session, run ``work``; any failure becomes the host's outcome, never a raise."""
    try:
        with HostSession.open(inv, h, on_open, read_only=read_only) as s:
            return HostOutcome(h, data=work(s))
    except SpecDeployError as e:
        if e.host is None:
            e.host = h.name
        return HostOutcome(h, error=e)
    except Exception as e:  # a session closed under a thread can raise anything
        return HostOutcome(h, error=RemoteError(f"{type(e).__name__}: {e}", host=h.name))


def _timed_out(h: Host, host_timeout: float) -> HostTimeoutError:
    return HostTimeoutError(
        f"no answer within {host_timeout:.0f} s; its session was closed and its result is unknown",
        "the host, its sshd or its network may hang: check it over SSH; raise --host-timeout "
        "if it is only slow", host=h.name, timed_out=True)


def for_each_host(inv: Inventory, hosts: list[Host], work: Callable[[HostSession], T],
                  parallel: bool = True, host_timeout: float | None = None,
                  answered: set[str] | None = None, read_only: bool = False,
                  meanwhile: Callable[[], object] | None = None) -> list[HostOutcome[T]]:
    """Run ``work`` on every host (at most MAX_PARALLEL at once); outcomes in the order of ``hosts``.

    With ``host_timeout``, a host whose part takes longer (counted from when it started, connecting included) is
    reported as timed out while the others finish. Its thread cannot be killed (paramiko), so the main thread closes
    that host's SSH session, which unblocks the thread; the thread is a daemon and its late result is ignored.
    ``answered``: a set the work adds its host's name to once the host has answered; from then on ``host_timeout``
    no longer applies to it (a long ``logs --follow`` is bounded by its own duration, only its start by this).
    ``read_only``: ``work`` only reads the hosts (``session.open_transport`` says what carries it then).
    ``meanwhile``: what this thread does while the hosts answer, needing none of their answers: a read-only
    command imports what prints them (Rich's console and tables, ~30 ms), which the round trip then hides. It starts
    once every running host's first command is on its way (``Transport.sent``), or after ``MEANWHILE_AFTER_S``: a
    host's thread still connecting would wait on the interpreter lock at each of its reads while this one imports.
    """
    if not parallel or (len(hosts) == 1 and host_timeout is None):
        outcomes = [_run_one(inv, h, work, None, read_only) for h in hosts]
        if meanwhile is not None:
            meanwhile()
        return outcomes
    cv = threading.Condition()
    results: dict[str, HostOutcome[T]] = {}
    started: dict[str, float] = {}
    transports: dict[str, Transport] = {}

    def wake() -> None:
        with cv:
            cv.notify_all()

    def runner(h: Host) -> None:
        def on_open(t: Transport) -> None:
            with cv:
                transports[h.name] = t
                t.on_sent = wake

        outcome = _run_one(inv, h, work, on_open, read_only)
        with cv:
            results.setdefault(h.name, outcome)
            cv.notify_all()

    pending = list(hosts)
    running: set[str] = set()
    first = time.monotonic()
    with cv:
        while len(results) < len(hosts):
            running -= set(results)
            while pending and len(running) < MAX_PARALLEL:
                h = pending.pop(0)
                running.add(h.name)
                started[h.name] = time.monotonic()
                threading.Thread(target=runner, args=(h,), name=f"host-{h.name}", daemon=True).start()
            if meanwhile is not None and (time.monotonic() - first > MEANWHILE_AFTER_S or all(
                    n in results or (n in transports and transports[n].sent.is_set()) for n in running)):
                cv.release()  # the hosts' threads take it (on_open, their results) while this one works
                try:
                    meanwhile()
                finally:
                    meanwhile = None
                    cv.acquire()
                continue  # the hosts' timeouts are looked at again now, not after a wait
            to_abort: list[Transport] = []
            now = time.monotonic()
            for h in hosts:
                if h.name in running and host_timeout is not None and now - started[h.name] > host_timeout and \
                        not (answered is not None and h.name in answered):
                    results[h.name] = HostOutcome(h, error=_timed_out(h, host_timeout))
                    running.discard(h.name)
                    t = transports.get(h.name)
                    if t is not None:
                        to_abort.append(t)
            if to_abort:
                cv.release()
                try:
                    for t in to_abort:
                        threading.Thread(target=t.abort, daemon=True).start()
                finally:
                    cv.acquire()
                continue
            if len(results) < len(hosts):
                cv.wait(0.05)
    return [results[h.name] for h in hosts]


def concurrent(items: list[Any], fn: Callable[[Any], None]) -> None:
    """Run ``fn`` on every item in its own thread (one SSH session each) and wait for all of them."""
    if len(items) == 1:
        fn(items[0])
        return
    threads = [threading.Thread(target=fn, args=(it,), name=f"deploy-{i}", daemon=True)
               for i, it in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def reporter_for(host: Host, *, quiet: bool, shared_console: bool) -> Reporter:
    """Several hosts at once print plain step lines (no spinner: one live display cannot serve many threads)."""
    from fabfile.present import output
    from fabfile.present.progress import Reporter

    if quiet:
        return Reporter(host.name, enabled=False)
    console = output.console(stderr=True, force_terminal=False) if shared_console else None
    return Reporter(host.name, console=console)
