"""SGLang's adaptive speculation as a sweep configuration (``inv sweep --adaptive``): refused before anything
starts on releases without ``--speculative-adaptive`` (naming those that have it, from the table read off the
wheels), measured like any other configuration, with the step count SGLang settled on (``sglang:spec_num_steps``)."""

from __future__ import annotations

from pathlib import Path

from tests.support.invoke_cli import run_inv
from tests.support.sim import Sim, http, sim  # noqa: F401 (the fixture)


def test_adaptive_and_predict_exclude_each_other(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {python: /v/bin/python3, model: /m, draft_model: /d}\nhosts:\n  h: {ssh_host: x}\n")
    r = run_inv("sweep", "--steps", "0,1,2,3", "--adaptive", "--predict", inventory=inv)
    assert r.returncode == 2 and "--adaptive" in r.stderr
