"""Waiting for a condition without making the machine's speed part of the test.

A test waits for something to become true (a process appears, a log line, a 200) and goes on the moment it does.
The bound on that wait is a hang guard, not a speed budget: it only decides how long a broken run takes to fail,
so it is generous, and one constant for the suite. A suite on a loaded 2-core CI machine once missed 15 s budgets
that a quiet machine met in 2 s (the simulator's `/health` still 503, a scheduler not yet spawned). How fast
something happens is a benchmark's question (bench/), never a test's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

# SPECDEPLOY_TEST_HANG_GUARD_S lets a developer fail faster while debugging a hang; CI keeps the default.
HANG_GUARD_S = float(os.environ.get("SPECDEPLOY_TEST_HANG_GUARD_S", "180"))


def deadline() -> float:
    """The monotonic time after which a wait is a hang."""
    return time.monotonic() + HANG_GUARD_S


def wait_until(check: Callable[[], object], what: str, *, poll_s: float = 0.05,
               detail: Callable[[], str] | None = None) -> None:
    """Return as soon as ``check()`` is true; fail naming ``what`` (and ``detail()``) after the hang guard."""
    end = deadline()
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what} did not happen within the {HANG_GUARD_S:.0f} s hang guard"
                                 + (f":\n{detail()}" if detail else ""))
        time.sleep(poll_s)


def stop_process(pid: int) -> None:
    """SIGSTOP ``pid`` and return once it is stopped. ``kill`` returns when the signal is queued; the process stops
    when it next runs, which on a loaded machine can come after the test's next step (a connection the frozen sshd
    still accepted, a status that saw the server running)."""
    import signal

    from fabfile.remote import procs

    def stopped() -> bool:
        info = procs.stat(pid)
        return info is None or info.state in ("T", "t")

    os.kill(pid, signal.SIGSTOP)
    wait_until(stopped, f"process {pid} stopping after SIGSTOP", poll_s=0.01)

