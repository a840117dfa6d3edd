"""The host's deploy records (fabfile/remote/serve/records.py), on a real state folder: what `inv deploys`,
`inv diff`, a rollback and `inv cancel` read back is what a deploy wrote, private, and a record that is not one (a
stray file, an id that is a path) reads as nothing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from fabfile.remote.common import EventSink
from fabfile.remote.serve import records


def _rec(deploy_id: str, **fields: Any) -> dict[str, Any]:
    return {"deploy_id": deploy_id, "config_name": "eagle3-s3-k1-d4", "status": "running",
            "started_at": "2026-12-03T08:00:00+0000", **fields}


def test_a_record_is_written_private_and_read_back_as_current(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    path = records.write(state, _rec("a"))
    assert records.load(state, "a") == records.current(state) == _rec("a")
    for p in (path, os.path.join(state, "current.json")):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600  # a record carries the launch's argv and environment
    records.write(state, _rec("b"), make_current=False)
    assert records.current(state) == _rec("a") and records.load(state, "b") == _rec("b")


def test_the_records_verb_gives_the_replaced_deploy_whole_and_refuses_an_id_that_is_a_path(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    records.write(state, _rec("old", config_name="baseline"))
    records.write(state, _rec("new", previous={"deploy_id": "old", "config_name": "baseline"}))
    (tmp_path / "state" / "secret.json").write_text("{}")
    got = records.read({"state_dir": state, "ids": ["old", "../secret", "nope"]}, EventSink())
    assert got["current"] is not None and got["current"]["deploy_id"] == "new"
    assert got["previous"] == _rec("old", config_name="baseline")  # the full record a rollback starts again
    assert got.get("loaded") == {"old": _rec("old", config_name="baseline"), "../secret": None, "nope": None}


def test_a_state_folder_without_records_or_with_a_torn_one_reads_as_none(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert records.current(str(state)) is None and records.history(str(state)) == []
    records.write(str(state), _rec("a"))
    (state / "current.json").write_text('{"deploy_id": "a", "sta')  # cut short (a full disk, a crash)
    (state / "deploys" / "junk.json").write_text("[]")  # not a record: no deploy_id
    assert records.current(str(state)) is None
    assert [s["deploy_id"] for s in records.history(str(state))] == ["a"]


def test_history_is_newest_first_by_start_time(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    for deploy_id, started in (("b", "2026-12-03T09:00:00+0000"), ("a", "2026-12-03T08:00:00+0000"),
                               ("c", "2026-12-03T10:00:00+0000")):
        records.write(state, _rec(deploy_id, started_at=started))
    assert [s["deploy_id"] for s in records.history(state)] == ["c", "b", "a"]


def test_how_a_deploy_ended_is_read_from_older_records_too() -> None:
    """Records written before ``ended`` existed say it through their status and error."""
    assert records.ended_of({"status": "failed", "error": {"kind": "cancelled"}}) == {"kind": "cancelled"}
    assert records.ended_of({"status": "failed", "error": {"kind": "ready_timeout"}}) == {"kind": "failed"}
    assert records.ended_of({"status": "running", "ready_at": "t"}) == {"kind": "ready", "at": "t"}
    assert records.ended_of({"status": "starting"}) == {"kind": "unfinished"}
    # `inv stop` of a deploy that had been ready: stopped, after ready.
    assert records.ended_of({"status": "stopped", "ready_at": "t", "stopped_at": "u"}) == \
        {"kind": "stopped", "at": "u", "after": "ready"}
    assert records.ended_of({"status": "failed", "ended": {"kind": "replaced"}}) == {"kind": "replaced"}


def test_marking_an_earlier_deploy_replaced_keeps_how_it_ended_before(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    records.write(state, _rec("old", ended={"kind": "ready", "at": "t"}))
    records.write(state, _rec("new"))
    records.mark_ended(state, "old", "replaced", by="new")
    old = records.load(state, "old")
    assert old is not None and old["ended"]["kind"] == "replaced" and old["ended"]["after"] == "ready"
    assert old["ended"]["by"] == "new"
    cur = records.current(state)
    assert cur is not None and cur["deploy_id"] == "new"  # the current record is not the one marked
    records.mark_ended(state, "gone", "replaced")  # no such record: nothing written
    assert not os.path.exists(os.path.join(state, "deploys", "gone.json"))


def test_one_line_of_inv_deploys_says_whether_it_can_be_deployed_again(tmp_path: Path) -> None:
    line = records.summary(_rec("a", previous={"deploy_id": "z"}, request={"x": 1}, script_copy="/s"))
    assert line["deploy_id"] == "a" and line["previous"] == "z" and line["redeployable"] is True
    assert records.summary(_rec("a", request={"x": 1}))["redeployable"] is False  # its script was not kept


def test_cancel_without_a_deploy_in_progress_cancels_nothing(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    assert records.cancel({"state_dir": state}, EventSink()) == {"cancelled": None, "holder": None}


def test_cancel_of_a_named_deploy_leaves_its_reason_and_reports_how_it_ended(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    records.write(state, _rec("a", status="failed", error={"kind": "cancelled", "message": "m"}))
    got = records.cancel({"state_dir": state, "deploy_id": "a", "reason": "rank 1 failed", "wait_s": 5},
                         EventSink())
    # No deploy holds the host's lock, so the wait ends at once with the record's word.
    assert got == {"cancelled": "a", "step": None, "ended": True, "status": "failed",
                   "error": {"kind": "cancelled", "message": "m"}}
    assert Path(records.cancel_path(state, "a")).read_text() == "rank 1 failed"


def test_the_expected_nccl_values_of_a_request_are_read_from_either_place() -> None:
    assert records.expected_of({"expected": {"NCCL_PROTO": "LL"}}) == {"NCCL_PROTO": "LL"}
    assert records.expected_of({"verify": {"expected": {"NCCL_ALGO": "Ring"}}}) == {"NCCL_ALGO": "Ring"}
    assert records.expected_of({"verify": None}) is None
    assert json.loads(json.dumps(records.expected_of({"expected": {}}))) == {}
