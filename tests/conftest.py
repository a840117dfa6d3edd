"""Shared fixtures: an isolated HOME for the whole session and the simulated GPU fleet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simhost.fleet import Fleet, SimHost, up

FLEET_FIXTURES = {"fleet", "sim_host", "sim_hosts"}
# Modules whose tests start simulated SGLang servers as local processes (seconds each): not the unit tier.
SIM_MODULES = {"test_simulator.py", "test_local.py"}


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point HOME at a temp dir so nothing reads or writes the real ~/.ssh (or any dotfile)."""
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(home))
    mp.delenv("XDG_CACHE_HOME", raising=False)  # the CLI's cache (fabfile/inventory/cache.py) goes under this HOME too
    yield home
    mp.undo()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if FLEET_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.fleet)
        if item.path.name in SIM_MODULES:
            item.add_marker(pytest.mark.sim)


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three simulated hosts (sim1..sim3; 8 GPUs, tp 2), netns mode when possible, else loopback."""
    directory = tmp_path_factory.mktemp("fleet")
    f = up(3, directory, gpus=8, tp=2, mode="auto")
    try:
        yield f
    finally:
        f.down()


@pytest.fixture
def sim_host(fleet: Fleet) -> SimHost:
    """sim1, reset to its state right after `up`."""
    host = fleet.host("sim1")
    host.reset()
    return host


@pytest.fixture
def sim_hosts(fleet: Fleet) -> dict[str, SimHost]:
    """All hosts, each reset."""
    for host in fleet.hosts.values():
        host.reset()
    return dict(fleet.hosts)
