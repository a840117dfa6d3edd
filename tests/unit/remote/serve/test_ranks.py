"""Which scheduler rank died (fabfile/remote/serve/ranks.py), with real processes for the ranks and the launcher and
a real log file: the launcher's own line names the rank when it wrote one (in either release's words), else the
process table says which are gone."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabfile.remote import procs
from fabfile.remote.serve import ranks


@pytest.fixture
def live() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()


def _dead() -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p


def _rank(p: subprocess.Popen[bytes], tp: int, start_ticks: int | None = None) -> dict[str, Any]:
    st = procs.stat(p.pid)
    return {"pid": p.pid, "start_ticks": start_ticks if start_ticks is not None else (st.start_ticks if st else None),
            "label": f"TP{tp}", "rank": tp}


def test_the_launchers_line_names_the_rank_in_either_releases_words(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("loading\nSubprocess scheduler_1 (pid=4242) crashed with exit code -9\nshutting down\n")
    assert ranks.death_line(str(log)) == ("Subprocess scheduler_1 (pid=4242) crashed with exit code -9",
                                          {"index": "1", "pid": "4242", "code": "-9"})
    log.write_text("Rank 3 scheduler is dead\n")
    assert ranks.death_line(str(log)) == ("Rank 3 scheduler is dead", {"index": "3"})
    # Only after the deploy's own offset: an earlier deploy's death in the same log is not this one's.
    assert ranks.death_line(str(log), offset=log.stat().st_size) is None
    assert ranks.death_line(None) is None and ranks.death_line(str(tmp_path / "missing.log")) is None


def test_nothing_is_said_while_the_launcher_and_every_rank_run(
        tmp_path: Path, live: subprocess.Popen[bytes]) -> None:
    launcher_ticks = _rank(live, 0)["start_ticks"]
    assert ranks.death(live.pid, launcher_ticks, [_rank(live, 0)], str(tmp_path / "log")) is None


def test_a_rank_gone_under_a_live_launcher_is_named_from_the_log_or_the_process_table(
        tmp_path: Path, live: subprocess.Popen[bytes]) -> None:
    launcher_ticks = _rank(live, 0)["start_ticks"]
    dead = _rank(_dead(), 1, start_ticks=1)  # its start time is not the (reused or gone) pid's
    both = [_rank(live, 0), dead]
    assert ranks.gone(both) == [dead]
    log = tmp_path / "server.log"
    log.write_text(f"Subprocess scheduler_1 (pid={dead['pid']}) crashed with exit code -9\n")
    said = ranks.death(live.pid, launcher_ticks, both, str(log))
    assert said is not None and said.startswith(f"TP1 (pid {dead['pid']}) is gone (the server log {log} says:")
    log.write_text("")
    said = ranks.death(live.pid, launcher_ticks, both, str(log), word_wait=0.0)
    assert said == f"TP1 (pid {dead['pid']}) is gone (1 of 2 ranks run, by the host's process table; the server " \
        "log names no rank)"


def test_a_launcher_gone_with_every_rank_says_so(tmp_path: Path) -> None:
    launcher = _dead()
    assert ranks.death(launcher.pid, 1, [], None) == f"its launcher (pid {launcher.pid}) is gone"
    rank = _rank(_dead(), 0, start_ticks=1)
    assert ranks.death(launcher.pid, 1, [rank], None) == \
        f"its launcher (pid {launcher.pid}) and its 1 rank(s) are gone (the server log names no rank that died first)"
