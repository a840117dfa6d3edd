"""The agent's private temporary files (``common.private_temp``, behind every record the agent writes)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fabfile.remote import common


def test_a_private_temp_is_a_new_0600_file_of_ours(tmp_path: Path) -> None:
    fd, path = common.private_temp(str(tmp_path), ".specdeploy-")
    os.close(fd)
    st = os.lstat(path)
    assert Path(path).parent == tmp_path and Path(path).name.startswith(".specdeploy-")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()


def test_a_private_temp_never_opens_a_name_that_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clash (another writer's file, or a link planted under the next name) is skipped, never opened."""
    taken = tmp_path / (".specdeploy-" + (b"\x00" * 6).hex())
    taken.symlink_to(tmp_path / "elsewhere")
    draws = iter([b"\x00" * 6, b"\x01" * 6])
    monkeypatch.setattr(common.os, "urandom", lambda n: next(draws))
    fd, path = common.private_temp(str(tmp_path), ".specdeploy-")
    os.close(fd)
    assert path == str(tmp_path / (".specdeploy-" + (b"\x01" * 6).hex()))
    assert not (tmp_path / "elsewhere").exists()


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "current.json"
    common.atomic_write(str(target), b"{}", 0o600)
    common.atomic_write(str(target), b'{"a": 1}')
    assert target.read_bytes() == b'{"a": 1}' and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["current.json"]
