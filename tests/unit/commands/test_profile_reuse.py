"""Issue 40, point 5: `inv explain` reuses a saved profile of the deploy running now, younger than the stated age,
at the same concurrency (with a trace when one is asked for); anything else is measured again."""

from __future__ import annotations

from pathlib import Path

from fabfile.commands.bench import BenchParams, saved
from fabfile.commands.profile import ProfileParams, reusable, save_profile

NOW = 1_800_000_000.0


def _saved(runs: Path, pid: str, age: float, deploy: str = "d1", concurrency: int = 1, trace: bool = False) -> None:
    save_profile({"host": "g1", "profile_id": pid, "deploy_id": deploy, "measured_at": NOW - age,
                  "requested": {"concurrency": concurrency, "trace": trace}, "ranks": []}, runs)


def test_the_youngest_matching_profile_of_the_running_deploy_is_reused(tmp_path: Path) -> None:
    plain, traced = ProfileParams(load=BenchParams(concurrency=1)), ProfileParams(load=BenchParams(concurrency=1),
                                                                                  trace=True)
    assert reusable(tmp_path, "g1", "d1", plain, 300, NOW) is None  # nothing saved yet
    _saved(tmp_path, "p-old", 200)
    _saved(tmp_path, "p-new", 40)
    _saved(tmp_path, "p-other-deploy", 5, deploy="d0")
    _saved(tmp_path, "p-c8", 5, concurrency=8)
    got = reusable(tmp_path, "g1", "d1", plain, 300, NOW)
    assert got is not None and got.doc["profile_id"] == "p-new" and got.age_s == 40
    assert got.sentence().startswith("reusing the profile of deploy d1 measured 40 s ago [tool] (")
    assert reusable(tmp_path, "g1", "d1", plain, 30, NOW) is None  # older than the age asked
    assert reusable(tmp_path, "g1", "d2", plain, 300, NOW) is None  # another deploy runs now
    assert reusable(tmp_path, "g1", None, plain, 300, NOW) is None  # none runs
    assert reusable(tmp_path, "g1", "d1", traced, 300, NOW) is None  # a trace asked for, none saved
    _saved(tmp_path, "p-traced", 100, trace=True)
    traced_got = reusable(tmp_path, "g1", "d1", traced, 300, NOW)
    assert traced_got is not None and traced_got.doc["profile_id"] == "p-traced"
    assert saved(tmp_path, "g1") == []  # a saved profile is never read as a bench
