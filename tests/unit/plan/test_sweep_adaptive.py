"""``inv sweep --adaptive`` and ``--predict`` exclude each other (adaptive speculation picks its own step count)."""

from __future__ import annotations

from pathlib import Path

from tests.support.invoke_cli import run_inv
from tests.support.sim import Sim, http, sim  # noqa: F401 (the fixture)


def test_adaptive_and_predict_exclude_each_other(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {python: /v/bin/python3, model: /m, draft_model: /d}\nhosts:\n  h: {ssh_host: x}\n")
    r = run_inv("sweep", "--steps", "0,1,2,3", "--adaptive", "--predict", inventory=inv)
    assert r.returncode == 2 and "--adaptive" in r.stderr
