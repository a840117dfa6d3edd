"""What the tool says that needs no Rich: a host's text made safe for a terminal, the notes said once per command,
and the quiet end of a closed stdout.

Apart from ``output`` (Rich's consoles: ~25 ms to import) so that a command's start and its work on the hosts import
no Rich: a read-only command imports what prints its answer while the hosts answer (``fanout.for_each_host``'s
``meanwhile``), in the shadow of the round trip instead of before it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

PIPE_CLOSED_EXIT = 141  # 128 + SIGPIPE: what a shell reports for `cat` when its reader went away


def pipe_closed() -> NoReturn:
    """stdout's reader has gone (``inv logs | head -1``): end the process at once and quietly, as ``cat`` does
    when SIGPIPE kills it. Python ignores SIGPIPE, so every later write (from any thread, and the flush at exit)
    would raise BrokenPipeError, one traceback each. Nothing a command leaves on a host depends on this process
    (a deploy goes on there, as after Ctrl-C)."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(PIPE_CLOSED_EXIT)


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), *range(0x7f, 0xa0)] if c != 0x09}


def terminal_safe(text: str) -> str:
    """Host text (log lines, excerpts) with control characters shown as ``\\xNN``: an ESC sequence in a log line
    must not drive the operator's terminal (retitle it, rewrite what was shown, answer back)."""
    return text.translate(_CONTROL)


_SAID: set[str] = set()


def begin_command() -> None:
    """A new command starts: nothing has been said in it yet. The CLI wrapper calls it, so a process that runs
    several commands (the tests' in-process runner, a script importing the tasks) says each note once per command,
    not once per process."""
    _SAID.clear()


def first_time(note: str) -> bool:
    """Whether ``note`` is said for the first time in this command (one process runs one command): a plan's note
    about the tool's own preset is the same on every host and every sweep deploy, so it is said once, not per
    deploy, per host and again in the summary."""
    if note in _SAID:
        return False
    _SAID.add(note)
    return True
