"""``inv sweep --resume DIR`` of a folder that holds no sweep: exit 2, nothing started."""

from __future__ import annotations

from pathlib import Path

from tests.support.invoke_cli import run_inv


def test_resume_of_something_that_is_no_sweep_exits_2(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {python: /v/bin/python3, model: /m, draft_model: /d}\nhosts:\n  h: {ssh_host: x}\n")
    (tmp_path / "empty").mkdir()
    r = run_inv("sweep", "--steps", "0,1", "--resume", str(tmp_path / "empty"), inventory=inv)
    assert r.returncode == 2 and "--resume: cannot read" in r.stderr, r.stderr
