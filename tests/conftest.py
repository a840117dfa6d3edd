"""Shared fixtures: an isolated HOME for the whole session and the simulated GPU fleet."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests.simhost.fleet import Fleet, SimHost, up
from tests.support.ordering import longest_first

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


@pytest.fixture(autouse=True)
def control_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test its own directory of OpenSSH control sockets (fabfile/transport/openssh.py), so a connection a
    read-only command left open never carries into the next test (one that rotates a host key, say), and every
    master it opened is told to exit at its end. Short and private (/tmp/sd-XXXXXXXX, 0700): a pytest tmp_path
    would make the socket's path longer than sun_path allows."""
    import shutil
    import subprocess
    import tempfile

    runtime = Path(tempfile.mkdtemp(prefix="sd-"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    yield runtime / "specdeploy" / "ssh"
    for sock in (runtime / "specdeploy" / "ssh").glob("*") if shutil.which("ssh") else ():
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "master"], capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=30, check=False)
    shutil.rmtree(runtime, ignore_errors=True)


UNIT = TESTS / "unit"
FLEET_WORKERS = 6


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: a run without xdist (`-p no:xdist`) has no such hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many workers `-n auto` (what `./dev test` passes) starts: one per core for the unit tier alone, six
    otherwise. Much of the fleet tier's time is waiting on simulated hosts, not CPU: with four workers on two
    cores the CPU sat idle while several waited at once (a host-lost re-check, a hung host's timeout); measured
    from fresh clones, 4 workers took 549-571 s of pytest, 6 took 489 s. The unit tier only computes, and each
    worker imports and collects it again (~3 s of CPU): on two cores, 6 workers took 34-44 s for tests/unit, 2 took
    26 s. xdist's own PYTEST_XDIST_AUTO_NUM_WORKERS still decides when it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    paths = [Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve() for arg in config.args]
    if paths and all(path.is_relative_to(UNIT) for path in paths):
        return len(os.sched_getaffinity(0))
    return FLEET_WORKERS


# The group's id reaches pytest 9's node ids only through this plugin (its docstring says why).
pytest_plugins = ["tests.support.xdist_groups"]


def tier_of(item: pytest.Item) -> str:
    """The test's tier: its top folder under tests/ (``unit``, ``sim``, ``wheels``, ``fleet``)."""
    return item.path.resolve().relative_to(TESTS).parts[0]


# tryfirst: pytest-xdist reads the xdist_group markers in its own collection hook (it suffixes each node id with
# its group); a marker added after that hook ran would put the sim tests on every worker at once.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Imported here, not at the top: the module is also a plugin (pytest_plugins above), which pytest must import
    # first to rewrite its asserts.
    from tests.support.xdist_groups import RUNNER_PID_NAMESPACE

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
            item.add_marker(pytest.mark.xdist_group(RUNNER_PID_NAMESPACE))
    # Longest first (tests/support/ordering.py says why and how). Each test's length comes from tests/durations.json,
    # recorded by a whole run (`./dev test --record-durations`); a test it does not list sorts by its tier (the sim
    # tier's one-worker chain, the wheels tier's contract checks, fleet, then unit tests, a second or less each,
    # which fill the end). A stale file only makes the order less good, never a test different. The sim group runs
    # first whatever this order: xdist hands out the largest group before single tests.
    known = recorded_durations()
    rank = {tier: FIRST.index(tier) if tier in FIRST else len(FIRST) for tier in set(tiers.values())}
    items[:] = longest_first(items, length=lambda item: known.get(plain_id(item.nodeid), 0.0),
                             rank=lambda item: rank[tiers[item.nodeid]])


DURATIONS = TESTS / "durations.json"
RECORD_FROM_S = 2.0  # shorter tests are not listed: their order hardly matters, and the file stays small


def plain_id(nodeid: str) -> str:
    """A node id without the ``@group`` suffix xdist's groups add (tests/support/xdist_groups.py)."""
    return nodeid.split("@", 1)[0]


def recorded_durations() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", action="store_true",
                     help=f"write each test's setup+call+teardown time to {DURATIONS.name} (tests of "
                          f"{RECORD_FROM_S:g} s or more), the order the next runs hand tests out in")


_timings: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # On the controller this sees every worker's reports too.
    _timings[plain_id(report.nodeid)] = _timings.get(plain_id(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not session.config.getoption("--record-durations") or hasattr(session.config, "workerinput"):
        return
    long = {k: round(v, 1) for k, v in sorted(_timings.items()) if v >= RECORD_FROM_S}
    DURATIONS.write_text(json.dumps(long, indent=1) + "\n", encoding="utf-8")


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
