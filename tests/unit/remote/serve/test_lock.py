"""The host's deploy lock (fabfile/remote/serve/lock.py): one holder at a time, and a refusal that names the
holder even when it comes in the instant between the holder's flock and its note."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from pathlib import Path

import pytest

from fabfile.remote import procs
from fabfile.remote.common import AgentError
from fabfile.remote.serve.lock import DeployLock


def _note(state: Path, deploy_id: str) -> None:
    me = procs.stat(os.getpid())
    (state / "deploy.lock.json").write_text(json.dumps({
        "deploy_id": deploy_id, "client": "alice@laptop", "config_name": "eagle3-s3-k1-d4", "journal": "j",
        "pid": os.getpid(), "start_ticks": me.start_ticks if me else None, "since": "2026-12-03T08:00:00+0000",
        "step": "wait_ready"}))


def test_a_refusal_names_the_holder_whose_note_comes_just_after_its_flock(tmp_path: Path) -> None:
    state = tmp_path / "state"
    DeployLock(str(state))  # makes the private state directory
    fd = os.open(state / "deploy.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the holder: flocked, its note not yet written
    writer = threading.Timer(0.3, _note, (state, "20261203T080000-abc123"))
    writer.start()
    try:
        with pytest.raises(AgentError) as e:
            DeployLock(str(state)).acquire({"deploy_id": "second"}, wait_s=0.0)
    finally:
        writer.join()
        os.close(fd)
    assert e.value.kind == "lock_held"
    assert "another deploy (20261203T080000-abc123, from alice@laptop) holds this host since " \
           "2026-12-03T08:00:00+0000, now at step wait_ready" in e.value.message, e.value.message


def test_a_second_holder_is_refused_and_the_first_release_lets_it_in(tmp_path: Path) -> None:
    first, second = DeployLock(str(tmp_path)), DeployLock(str(tmp_path))
    first.acquire({"deploy_id": "one", "client": "a@b", "config_name": "baseline"})
    t0 = time.monotonic()
    with pytest.raises(AgentError) as e:
        second.acquire({"deploy_id": "two"}, wait_s=0.0)
    assert "(one, from a@b)" in e.value.message and time.monotonic() - t0 < 1.0  # the note was there: no wait
    first.release()
    second.acquire({"deploy_id": "two"}, wait_s=0.0)
    assert second.holder() and second.holder()["deploy_id"] == "two"  # type: ignore[index]
    second.release()
