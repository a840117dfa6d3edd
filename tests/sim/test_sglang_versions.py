"""The simulator's health endpoints at each matrix release, served by a running simulator, follow what the release's
own http_server.py does (read from the real wheel)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.wheels import health_contract, wheel_path


@pytest.mark.wheels
@pytest.mark.parametrize("version", ["0.4.9", "0.5.3", "0.5.7", "0.5.20"])
def test_simulator_health_endpoints_follow_the_release(version: str, tmp_path: Path) -> None:
    """The simulator's /health and /health_generate do what the release's source does: a generate check (a
    one-token prefill in the log, the answer after SGLang's one-second sleep) or a bare 200."""
    from tests.support.sim import Sim, http

    c = health_contract(wheel_path(version))
    sim = Sim(tmp_path)
    try:
        sim.install(version)
        launcher = sim.launch(tp=1)
        sim.wait_log("fired up", proc=launcher)

        def check(path: str, env_off: bool = False) -> tuple[int, bool, float]:
            before = sim.text().count("#new-token: 1,")
            t0 = time.monotonic()
            code = http(sim.url(path), timeout=30)[0]
            took = time.monotonic() - t0
            return code, sim.text().count("#new-token: 1,") > before, took

        code, generated, took = check("/health_generate")
        assert code == 200 and generated and took >= 1.0  # asyncio.sleep(1) comes before the first look
        code, generated, took = check("/health")
        assert code == 200 and generated == c["health_generates"]
        if generated:
            assert took >= 1.0
        if c["generation_switch"]:
            sim.kill_all()
            launcher = sim.launch(tp=1, extra_env={"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"})
            sim.wait_log("fired up", proc=launcher)
            code, generated, _ = check("/health")
            assert code == 200 and not generated
            assert check("/health_generate")[:2] == (200, True)
    finally:
        sim.kill_all()
