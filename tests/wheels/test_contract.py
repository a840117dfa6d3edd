"""The simulator's contract with SGLang, asserted for every real-wheel matrix version.

For each version of tests/wheels/test_patch_wheels.py's matrix, the facts derived from the real wheel's source
(tools/contract/real.py) must equal what the simulator set to that version shows (tools/contract/sim.py):
flags and choices, routes, log lines, process titles, load_plugins sites, environment writes. The committed
docs/sglang-contract.md and fabfile/remote/evidence/sglang_env_facts.py must be what the wheels give today
(regenerate both with ``python -m tools.contract --write``).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from fabfile.remote.evidence import sglang_env_facts
from fabfile.remote.evidence.sglangnccl import sglang_env_facts_for
from tests.support.wheels import wheels  # noqa: F401 - the session fixture
from tests.support.xdist_groups import RUNNER_PID_NAMESPACE
from tools.contract import envfacts, real, sim, table
from tools.wheels import VERSIONS, fetch_wheel

# The contract checks start the simulated SGLang server as processes of the runner's own PID namespace, like the
# sim tier; a sim test's `local` deploy stops every SGLang-titled process it finds there, and once killed a contract
# probe mid-request (connection refused after "fired up and ready"). So they share the sim tier's one worker
# (tests/conftest.py says why that group exists).
pytestmark = [pytest.mark.wheels, pytest.mark.xdist_group(RUNNER_PID_NAMESPACE)]


def _wheel(label: str, wheels: dict[str, Any]) -> real.Wheel:  # noqa: F811
    info = wheels[label]
    if not isinstance(info, dict):
        if os.environ.get("SPECDEPLOY_WHEELS_REQUIRED"):
            pytest.fail(f"sglang {label}: wheel unavailable ({info})")
        pytest.skip(f"sglang {label}: wheel unavailable ({info}); set SPECDEPLOY_WHEELS_REQUIRED=1 to fail")
    return real.Wheel(info["path"])


@pytest.mark.parametrize("label", VERSIONS)
def test_simulator_matches_sglang(label: str, wheels: dict[str, Any]) -> None:  # noqa: F811
    w = _wheel(label, wheels)
    rows = table.rows(w, table.real_facts(w), sim.facts(w.version))
    bad = [f"{r.fact}\n    SGLang {w.version}: {r.sglang}\n    simulator:    {r.sim}" for r in rows if not r.match]
    assert not bad, "the simulator differs from SGLang (fix tests/simhost/sim):\n" + "\n".join(bad)


@pytest.mark.parametrize("label", VERSIONS)
def test_committed_tables_match_the_wheels(label: str, wheels: dict[str, Any]) -> None:  # noqa: F811
    w = _wheel(label, wheels)
    assert w.version in sglang_env_facts.NCCL_WRITES, (
        f"fabfile/remote/evidence/sglang_env_facts.py has no entry for SGLang {w.version}: run python -m "
        "tools.contract --write")
    assert sglang_env_facts_for(w.version) == (w.version, envfacts.version_facts(w)), (
        f"fabfile/remote/evidence/sglang_env_facts.py drifted from the {w.version} wheel: run python -m tools.contract "
        "--write")
    doc = (table.ROOT / "docs" / "sglang-contract.md").read_text()
    assert f"## SGLang {w.version} (" in doc, f"docs/sglang-contract.md lacks {w.version}: regenerate it"


@pytest.mark.parametrize("label", VERSIONS)
def test_committed_spec_facts_match_the_wheels(label: str, wheels: dict[str, Any]) -> None:  # noqa: F811
    """What the tool refuses per version (fabfile/plan/versioncheck.py) is read from this release's wheel."""
    from fabfile.plan import versioncheck
    from tools.contract import specfacts

    w = _wheel(label, wheels)
    found = versioncheck.facts_for(w.version)
    assert found is not None and found[0] == w.version, (
        f"fabfile/plan/sglang_spec_facts.py has no entry for SGLang {w.version}: run python -m tools.contract --write")
    _, facts, flags = found
    want = specfacts.version_facts(w)
    assert sorted(flags) == want["flags"], f"{w.version}: the launch flags drifted from the wheel"
    assert {k: v for k, v in facts.items() if not k.startswith("flags")} == \
        {k: v for k, v in want.items() if k != "flags"}, f"{w.version}: run python -m tools.contract --write"


def test_contract_holds_on_the_oldest_release_outside_the_matrix() -> None:
    """CI stays on the matrix; ``python -m tools.contract --all`` checks every release. This one release outside the
    matrix keeps the harness honest there: 0.4.5 crashed it (its spec-defaults function raises ValueError, which a
    stubbed builtin turned into "exceptions must derive from BaseException"), and differs from 0.4.9 in flags,
    scheduler titles and the Decode batch line."""
    from tools.contract import OLDEST

    try:
        w = real.Wheel(fetch_wheel(OLDEST)["path"])
    except (OSError, ValueError, LookupError) as e:
        if os.environ.get("SPECDEPLOY_WHEELS_REQUIRED"):
            raise
        pytest.skip(f"sglang {OLDEST}: wheel unavailable ({e})")
    assert OLDEST not in VERSIONS
    rows = table.rows(w, table.real_facts(w), sim.facts(w.version))
    bad = [f"{r.fact}\n    SGLang {w.version}: {r.sglang}\n    simulator:    {r.sim}" for r in rows if not r.match]
    assert not bad, "the simulator differs from SGLang (fix tests/simhost/sim):\n" + "\n".join(bad)
    assert table.lookups(w) == [], "run python -m tools.contract --all"


def test_spec_v2_and_entry_point_by_release() -> None:
    """The spec facts the tool gates on, as the wheels give them (committed table): SGLANG_ENABLE_SPEC_V2 is read by
    0.5.4.post1 ... 0.5.20 and by no later release (a post release between two matrix releases: the table keeps
    the boundaries `--all` found); `sglang serve` exists from 0.5.5; STANDALONE from 0.5.2."""
    from fabfile.plan import versioncheck

    def f(v: str) -> dict[str, Any]:
        found = versioncheck.facts_for(v)
        assert found is not None
        return found[1]

    assert [f(v)["spec_v2_env"] for v in ("0.5.4", "0.5.4.post1", "0.5.5", "0.5.20", "0.5.21", "0.5.23")] == \
        [False, True, True, True, False, False]
    assert [f(v)["sglang_serve"] for v in ("0.5.4", "0.5.5", "0.5.23")] == [False, True, True]
    assert "STANDALONE" not in f("0.5.1")["speculative_algorithms"] and \
        "STANDALONE" in f("0.5.2")["speculative_algorithms"]
    assert f("0.5.12")["speculative_algorithms"] == "any"


def test_device_timer_by_release() -> None:
    """What ``inv deploy --measure`` needs, as the wheels give it (committed table): SGLANG_ENABLE_METRICS_DEVICE_TIMER
    is read from 0.5.7, but it feeds the per-phase counter only from 0.5.11 (before: gpu_execution_seconds_total, one
    category per batch), so measurement is refused below 0.5.11."""
    from fabfile.plan import versioncheck

    def f(v: str) -> dict[str, Any]:
        found = versioncheck.facts_for(v)
        assert found is not None
        return found[1]

    assert [f(v)["device_timer_env"] for v in ("0.5.6", "0.5.7", "0.5.23")] == [False, True, True]
    assert [f(v)["device_timer_counter"] for v in ("0.5.6", "0.5.10", "0.5.11", "0.5.23")] == \
        [None, "sglang:gpu_execution_seconds_total", versioncheck.PHASE_COUNTER, versioncheck.PHASE_COUNTER]
    assert versioncheck.device_timer_releases() == "0.5.11–0.5.23"
    assert [versioncheck.has_device_timer(v) for v in ("0.4.9", "0.5.10", "0.5.11", "0.5.16")] == \
        [False, False, True, True]


def test_committed_nccl_table_other_cached_releases() -> None:
    """Releases read only for the generated tables' boundaries: one of each list always (fetched like the matrix's
    wheels), the others when their wheel is already cached. Only cached ones used to be read, so whether the test ran
    or skipped depended on whether another test had fetched one first (runs of one commit differed by a skip)."""
    from tools.contract import ENV_EXTRA
    from tools.wheels import cache_dir

    def wanted(v: str, always: str) -> bool:
        return v == always or (cache_dir() / f"sglang-{v}.json").exists()

    def wheel(v: str) -> real.Wheel:
        try:
            return real.Wheel(fetch_wheel(v)["path"])
        except (OSError, ValueError, LookupError) as e:
            if os.environ.get("SPECDEPLOY_WHEELS_REQUIRED"):
                raise
            pytest.skip(f"sglang {v}: wheel unavailable ({e})")

    checked = 0
    for v in ENV_EXTRA:
        if not wanted(v, ENV_EXTRA[-1]):
            continue
        w = wheel(v)
        assert sglang_env_facts_for(v) == (v, envfacts.version_facts(w)), v
        checked += 1
    from fabfile.plan import versioncheck
    from tools.contract import SPEC_EXTRA, specfacts

    for v in SPEC_EXTRA:
        if not wanted(v, SPEC_EXTRA[-1]):
            continue
        w = wheel(v)
        found = versioncheck.facts_for(v)
        assert found is not None and found[0] == v and sorted(found[2]) == specfacts.version_facts(w)["flags"], v
        checked += 1
    assert checked >= 2
