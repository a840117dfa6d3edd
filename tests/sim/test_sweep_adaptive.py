"""The simulator's adaptive speculation moves its step count the way SGLang's does (``sglang:spec_num_steps``)."""

from __future__ import annotations

import pytest

from tests.support.sim import Sim, http, sim  # noqa: F401 (the fixture)


@pytest.mark.sim
def test_the_simulated_adaptive_mode_moves_its_steps_like_sglangs(sim: Sim) -> None:  # noqa: F811
    sim.install("0.5.16", time_scale=0.05, accept_prob=[0.95] * 7)
    launcher = sim.launch("--speculative-adaptive", "--enable-metrics", tp=1, spec=True)
    sim.wait_log("fired up", proc=launcher)
    assert http(sim.url("/generate"), {"input_ids": list(range(16)), "sampling_params": {"max_new_tokens": 300}})[0] \
        == 200
    text = sim.wait_log(r"Adaptive spec params updated: steps 3 -> 7")
    assert "Adaptive spec params updated: steps 3 -> 7 (ema_accept_len=" in text
    metrics = http(sim.url("/metrics"))[1].decode()
    assert 'sglang:spec_num_steps{' in metrics and metrics.split("sglang:spec_num_steps{", 1)[1].split("} ")[1] \
        .startswith("7.0")
