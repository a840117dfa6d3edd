"""A server's scheduler ranks: which run, which are gone, and where the host says a rank died.

A rank is one scheduler process (``sglang::scheduler_TP3``). When one dies, what the tool measured or judged since
is not the server's: a profile's figures and traces, check-env's "every rank". The launcher often takes the others
down a moment later (SGLang's watchdog), so by the time anyone looks every rank is gone; its log line is then the one
place that says which rank it was. A launcher that never notices (sglang#6624) leaves the rest running, and the
process table says which one is missing.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING

from .. import procs

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import Scheduler

# The launcher's words for a dead rank (read in the wheels). SGLang's SubprocessWatchdog (0.5.12+,
# sglang/srt/utils/watchdog.py): ``Subprocess scheduler_{i} (pid={pid}) crashed with exit code {code}``, i the
# process's place in the launcher's list; before 0.5.10 the launcher's wait: ``Rank {i} scheduler is dead``.
DEATH_LINES = (
    re.compile(r"Subprocess scheduler_(?P<index>\d+) \(pid=(?P<pid>\d+)\) crashed with exit code (?P<code>-?\d+)"),
    re.compile(r"Rank (?P<index>\d+) scheduler is dead"),
)
TAIL_BYTES = 256 * 1024  # the death line is among the last lines the launcher wrote


def snapshot(launcher_pid: int) -> list[Scheduler]:
    """The live scheduler processes under ``launcher_pid``, in rank order: pid, start time, title, label, rank."""
    out: list[Scheduler] = [
        {"pid": p.pid, "start_ticks": p.start_ticks, "title": p.cmdline.split()[0],
         "label": procs.scheduler_label(p.cmdline), "rank": procs.scheduler_rank(p.cmdline)}
        for p in procs.descendants(launcher_pid)
        if p.cmdline.startswith(procs.SCHEDULER_TITLE) and p.state not in ("Z", "X")]
    return sorted(out, key=lambda r: (procs.scheduler_sort_key(str(r["title"])), r["pid"]))


def gone(ranks: list[Scheduler]) -> list[Scheduler]:
    """The ranks of ``ranks`` (a snapshot) that no longer run (a pid reused since counts as gone)."""
    return [r for r in ranks if not procs.alive(int(r["pid"]), r.get("start_ticks"))]


def name(rank: Scheduler) -> str:
    """``TP3 (pid 4242)``."""
    label = rank.get("label") or (f"TP{rank['rank']}" if rank.get("rank") is not None else "a scheduler")
    return f"{label} (pid {rank['pid']})"


def death_line(log_path: str | None, offset: int = 0) -> tuple[str, dict[str, str]] | None:
    """The launcher's last line naming a dead rank in its log after ``offset``, with the parts it names."""
    if not log_path:
        return None
    try:
        with open(log_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(offset if offset <= size else 0, size - TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        for pattern in DEATH_LINES:
            m = pattern.search(line)
            if m:
                return line.strip()[-300:], {k: v for k, v in m.groupdict().items() if v is not None}
    return None


def death(launcher_pid: int, launcher_ticks: int | None, ranks: list[Scheduler], log_path: str | None,
          offset: int = 0, word_wait: float = 2.0) -> str | None:
    """None while the launcher and every rank of ``ranks`` run; else one clause: which rank died and where the host
    says so (the launcher's log line, else the process table)."""
    launcher_alive = procs.alive(launcher_pid, launcher_ticks)
    seen = gone(ranks)
    if launcher_alive and not seen:
        return None
    said = death_line(log_path, offset)
    deadline = time.monotonic() + word_wait
    while said is None and launcher_alive and time.monotonic() < deadline:
        # A launcher with a watchdog says which rank died within its poll (1 s in SGLang): its word names the
        # rank even after it has taken the others down; one that never notices (sglang#6624) costs this wait.
        time.sleep(0.1)
        said = death_line(log_path, offset)
        launcher_alive = procs.alive(launcher_pid, launcher_ticks)
    if said is not None:
        line, parts = said
        by_pid = next((r for r in ranks if parts.get("pid") and str(r["pid"]) == parts["pid"]), None)
        index = int(parts["index"])
        named = by_pid or (ranks[index] if index < len(ranks) else None)
        who = name(named) if named else f"scheduler {index} (pid {parts.get('pid', '?')})"
        return f"{who} is gone (the server log {log_path} says: \"{line}\")"
    if seen and (launcher_alive or len(seen) < len(ranks)):
        running = len(ranks) - len(seen)
        return (f"{', '.join(name(r) for r in seen)} {'is' if len(seen) == 1 else 'are'} gone ({running} of "
                f"{len(ranks)} ranks run, by the host's process table; the server log names no rank)")
    if not ranks:
        return f"its launcher (pid {launcher_pid}) is gone"
    return (f"its launcher (pid {launcher_pid}) and its {len(ranks)} rank(s) are gone (the server log names no "
            "rank that died first)")
