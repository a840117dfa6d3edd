"""A deploy's step names have one home, the wire protocol: the client titles every step the protocol names, the plan
runs them in the protocol's order, and a step name the client does not know is shown as the agent wrote it."""

from __future__ import annotations

from typing import get_args

from fabfile.present.progress import STEP_TITLES, step_title
from fabfile.remote.protocol import DEPLOY_STEPS, StepName


def test_every_step_the_protocol_names_has_a_title() -> None:
    assert set(STEP_TITLES) == set(get_args(StepName))


def test_the_deploy_order_holds_only_named_steps_once_each() -> None:
    assert len(set(DEPLOY_STEPS)) == len(DEPLOY_STEPS)
    assert set(DEPLOY_STEPS) <= set(get_args(StepName))
    # the port is checked last before the launch: after the stale servers are gone, before anything starts
    assert DEPLOY_STEPS.index("stop") < DEPLOY_STEPS.index("port_free") < DEPLOY_STEPS.index("start")


def test_a_step_a_newer_agent_names_is_shown_as_written() -> None:
    assert step_title("gpu_clean") == "GPU-clean gate"
    assert step_title("warm_cache") == "warm_cache"
