"""Following files on the host (fabfile/remote/serve/follow.py): a deploy's journal replayed to a client that
re-attaches, and the server log's tail, on a real state folder; the events the agent sends are read from its stdout
as the client reads them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fabfile.remote.common import AgentError, EventSink
from fabfile.remote.serve import follow, records


def _sent(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _journal(state: str, deploy_id: str, events: list[dict[str, Any]]) -> None:
    sink = EventSink(records.journal_path(state, deploy_id))
    sink.stdout_ok = False  # the deploy's own client is gone: only the journal is written
    for e in events:
        sink.emit(e.pop("event"), **e)


def test_attach_replays_from_skip_passes_heartbeats_and_never_skips_the_result(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "state")
    _journal(state, "d1", [{"event": "step", "name": "lock"}, {"event": "heartbeat"},
                           {"event": "step", "name": "start"}, {"event": "result", "ok": True}])
    got = follow.attach({"state_dir": state, "deploy_id": "d1", "skip": 1}, EventSink())
    assert got["replayed"] is True and got["result"]["ok"] is True
    sent = _sent(capsys)
    assert [e["event"] for e in sent] == ["heartbeat", "replay"]  # the first step was seen already
    assert sent[1]["original"]["name"] == "start"
    # A skip past the result (a rollout's re-check) still ends with it: a finished deploy is never "lost".
    assert follow.attach({"state_dir": state, "deploy_id": "d1", "skip": 99}, EventSink())["result"]["ok"] is True


def test_attach_to_a_deploy_whose_agent_is_gone_without_a_result_says_it_was_lost(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _journal(state, "d2", [{"event": "agent", "pid": dead.pid, "start_ticks": None}, {"event": "step"}])
    with pytest.raises(AgentError) as e:
        follow.attach({"state_dir": state, "deploy_id": "d2"}, EventSink())
    assert e.value.kind == "deploy_lost" and "d2" in e.value.message


def test_logs_sends_the_last_lines_and_the_offset_to_follow_from(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    got = follow.logs({"state_dir": str(tmp_path / "state"), "log_path": str(log), "lines": 3}, EventSink())
    assert got == {"log_path": str(log), "offset": log.stat().st_size}
    assert _sent(capsys) == [{"event": "log", "lines": ["line 97", "line 98", "line 99"], "count": 3}]


def test_logs_of_the_recorded_deploy_and_of_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "state")
    with pytest.raises(AgentError) as e:
        follow.logs({"state_dir": state}, EventSink())
    assert e.value.kind == "not_running" and "no server log" in e.value.message
    log = tmp_path / "server.log"
    log.write_text("ready\n")
    records.write(state, {"deploy_id": "d3", "log_path": str(log)})
    assert follow.logs({"state_dir": state, "lines": 5}, EventSink())["log_path"] == str(log)
    assert _sent(capsys)[-1]["lines"] == ["ready"]
