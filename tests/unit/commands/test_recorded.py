"""`inv deploy --previous` follows the recorded chain; a cancelled or failed deploy asks before it starts again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabfile.commands.recorded import Choice, confirm, previous_of
from fabfile.errors import FlagError
from fabfile.inventory import hosts as inventory
from fabfile.remote.protocol import DeploySummary


def _d(deploy_id: str, previous: str | None, rollback_of: str | None = None, kind: str = "ready") -> DeploySummary:
    return {"deploy_id": deploy_id, "config_name": f"cfg-{deploy_id}", "patch_mode": "env", "sglang_version": "0.5.9",
            "plan_hash": "h", "started_at": "t", "client": "me@here", "ended": {"kind": kind}, "previous": previous,
            "rollback_of": rollback_of, "redeployable": True}


def test_previous_goes_back_along_the_chain_never_toggling() -> None:
    # a, b, c (cancelled); --previous started b again as d; the next --previous must give a, not c.
    history = [_d("d", "c", rollback_of="b"), _d("c", "b", kind="cancelled"), _d("b", "a"), _d("a", None)]
    target = previous_of(history, "c")
    assert target is not None and target["deploy_id"] == "b"
    target = previous_of(history, "d")
    assert target is not None and target["deploy_id"] == "a"
    e = _d("e", "d", rollback_of="a")  # a started again: nothing before it
    assert previous_of([e, *history], "e") is None
    # a start again of a start again stands for the first
    f = _d("f", "e", rollback_of="d")
    target = previous_of([f, e, *history], "f")
    assert target is not None and target["deploy_id"] == "a"


def test_a_cancelled_deploy_starts_again_only_with_a_yes(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "inventory.yaml").write_text("defaults: {python: /v/bin/python3, model: /m, port: 9000}\n"
                                             "hosts: {gpu1: {ssh_host: gpu1}}\n")
    host = inventory.load(tmp_path / "inventory.yaml").hosts["gpu1"]
    cancelled = Choice(_d("c", "b", kind="cancelled"), None, "--id")
    asked: list[str] = []

    def say(answer: str) -> Any:
        def ask(prompt: str) -> str:
            asked.append(prompt)
            return answer
        return ask

    with pytest.raises(FlagError) as e:
        confirm(host, cancelled, yes=False, ask=say("n"))
    assert e.value.exit_code == 2 and "not started" in e.value.message
    confirm(host, cancelled, yes=False, ask=say("y"))
    assert len(asked) == 2 and "start deploy c" in asked[0]
    assert "warning:" in capsys.readouterr().err
    confirm(host, cancelled, yes=True, ask=say("n"))  # --yes: no question
    assert len(asked) == 2
    confirm(host, Choice(_d("b", "a"), None, "--previous"), yes=False, ask=say("n"))  # a ready one: no question
    assert len(asked) == 2
