"""Shared fixtures: an isolated HOME for the whole session and the simulated GPU fleet."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests.simhost.fleet import Fleet, SimHost, up

# Randomized tests, one rule for the whole suite. `./dev test` and CI run the "deterministic" profile: the same
# examples on every run of a commit (derandomize), no example database carried between runs, and no shrinking (a
# failure prints its example and the blob to replay it; a shrink of a slow fleet case once took minutes of a CI
# run). `./dev fuzz` (SPECDEPLOY_HYPOTHESIS=explore) draws new examples and shrinks what fails: each failure it
# finds goes into the test as an `@example`, so the deterministic run keeps it from then on.
settings.register_profile(
    "deterministic", derandomize=True, database=None, deadline=None, print_blob=True,
    phases=(Phase.explicit, Phase.reuse, Phase.generate), suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "explore", derandomize=False, deadline=None, print_blob=True, max_examples=1000,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("SPECDEPLOY_HYPOTHESIS", "deterministic"))

# Tiers by folder: tests/unit (no sshd, no simulated server), tests/sim (simulated SGLang servers as local
# processes, seconds each), tests/wheels (real SGLang release wheels, read never installed), tests/fleet (the
# simulated sshd fleet). A test of one tier that needs another's equipment carries that marker itself (a fleet test
# of the real router is also `wheels`).
TIERS = {"fleet": pytest.mark.fleet, "sim": pytest.mark.sim, "wheels": pytest.mark.wheels}
TESTS = Path(__file__).resolve().parent
FLEET_FIXTURES = {"fleet", "sim_host", "sim_hosts"}
FIRST = ("sim", "wheels", "fleet")  # the order tiers are handed to the workers in (below), unit after them


@pytest.fixture(scope="session", autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point HOME at a temp dir so nothing reads or writes the real ~/.ssh (or any dotfile)."""
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(home))
    mp.delenv("XDG_CACHE_HOME", raising=False)  # the CLI's cache (fabfile/inventory/cache.py) goes under this HOME too
    yield home
    mp.undo()


# The group's id reaches pytest 9's node ids only through this plugin (its docstring says why).
pytest_plugins = ["tests.support.xdist_groups"]


# tryfirst: pytest-xdist reads the xdist_group markers in its own collection hook (it suffixes each node id with
# its group); a marker added after that hook ran would put the sim tests on every worker at once.
def tier_of(item: pytest.Item) -> str:
    """The test's tier: its top folder under tests/ (``unit``, ``sim``, ``wheels``, ``fleet``)."""
    return item.path.resolve().relative_to(TESTS).parts[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tiers = {item.nodeid: tier_of(item) for item in items}
    for item in items:
        tier = tiers[item.nodeid]
        if FLEET_FIXTURES & set(getattr(item, "fixturenames", ())) and tier != "fleet":
            raise pytest.UsageError(f"{item.nodeid} uses the simulated fleet: it belongs under tests/fleet/")
        if tier in TIERS:
            item.add_marker(TIERS[tier])
        if tier == "sim":
            # These start SGLang-titled processes in the runner's own PID namespace, and a `local` deploy's stop
            # step stops every such process it finds there: on two workers at once, one module's deploy would stop
            # the other's servers. One worker runs them all (`--dist loadgroup`).
            item.add_marker(pytest.mark.xdist_group("runner-pid-namespace"))
    # Long chains first, short tests last: the sim tier runs on one worker in a row, and the wheels tier's contract
    # checks take up to 20 s each; collected last (the folders' alphabetical order) they were the tail the other
    # workers waited for. Unit tests, a second or less each, fill the end.
    items.sort(key=lambda item: FIRST.index(tiers[item.nodeid]) if tiers[item.nodeid] in FIRST else len(FIRST))


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
