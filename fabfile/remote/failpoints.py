"""Fault-injection points: a test stops a deploy exactly at a step, not when a poller happens to see it.

A test of "the agent was killed (or frozen) during step X" used to poll the lock's holder note and signal the agent
when it saw X. A step that takes a millisecond (verify env, record) was often over before a loaded machine ran the
poller, and the fault landed in the next step. With a failpoint the agent itself stops (SIGSTOP) on entering the
step, so the test finds it stopped there every time and does what it wants with it (SIGKILL, SIGCONT).

A failpoint is the empty file ``<state_dir>/failpoints/<step>``, owned by the agent's user and not a symlink; it is
consumed (removed) when it fires, so the next deploy runs through. The state dir is private to the deploying user
(0700), so whoever could arm one could already stop the agent. A production host has no such directory: the cost
is one failed ``lstat`` per step.
"""

from __future__ import annotations

import os
import signal
import stat

DIRNAME = "failpoints"


def stop_here(state_dir: str, step: str) -> bool:
    """Stop this process (SIGSTOP) if a failpoint for ``step`` is armed in ``state_dir``; True if it fired."""
    path = os.path.join(state_dir, DIRNAME, step)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        return False  # only a plain file of our own user arms it
    try:
        os.unlink(path)
    except OSError:
        return False
    os.kill(os.getpid(), signal.SIGSTOP)
    return True
