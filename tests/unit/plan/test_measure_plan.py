"""Measurement in a deploy's plan: the inventory's ``measure`` and ``--measure/--no-measure`` turn SGLang's per-phase
device timer on where the release has it, the profiler writes into a private directory under the state dir, and the
plan says what that costs and who can reach ``/start_profile``; bench and explain read the phases SGLang measured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from fabfile.errors import FlagError, InventoryError
from fabfile.inventory import hosts as inventory
from fabfile.plan import measure, versioncheck
from fabfile.plan.deploy_plan import Options, build, for_version
from fabfile.remote.common import AgentError
from fabfile.remote.measure.profilestore import ensure_dir as ensure_profile_dir
from tests.support.cli import run_cli
from tests.support.invoke_cli import run_inv

BASE = """
hosts:
  g1:
    python: /usr/bin/python3
    model: /m/target
    draft_model: /m/draft
{extra}
"""
TIMER = versioncheck.DEVICE_TIMER_ENV


def _host(tmp_path: Path, extra: str = "") -> inventory.Host:
    p = tmp_path / "i.yaml"
    p.write_text(BASE.format(extra="".join(f"    {line}\n" for line in extra.splitlines())))
    return inventory.load(p).hosts["g1"]


def test_measure_flag_turns_the_timer_on_and_the_plan_says_its_cost(tmp_path: Path) -> None:
    plan = build(_host(tmp_path), Options(measure=True), sglang_version="0.5.16")
    assert "--enable-metrics" in plan.argv and plan.env[TIMER] == "1" and plan.measure
    note = next(n for n in plan.notes if n.startswith("measurement on (--measure)"))
    assert "% of served tok/s" in note and "0.5.16" in note  # the recorded cost, with where it was measured


def test_a_plain_deploy_leaves_the_timer_off_and_says_nothing(tmp_path: Path) -> None:
    plan = build(_host(tmp_path), Options(), sglang_version="0.5.16")
    assert "--enable-metrics" not in plan.argv and TIMER not in plan.env and not plan.measure
    assert not [n for n in plan.notes if "measurement" in n]


def test_a_sweeps_deploy_measures_unless_the_inventory_says_no(tmp_path: Path) -> None:
    on = build(_host(tmp_path), Options(measuring=True), sglang_version="0.5.23")
    assert on.measure and "--enable-metrics" in on.argv
    off = build(_host(tmp_path, "measure: false"), Options(measuring=True), sglang_version="0.5.23")
    assert not off.measure and TIMER not in off.env
    # a release without the per-phase timer: the sweep still deploys, off, and the plan says why
    old = build(_host(tmp_path), Options(measuring=True), sglang_version="0.5.9")
    assert not old.measure and any("has no per-phase device timer" in n and "0.5.11–" in n for n in old.notes)


def test_the_inventory_turns_it_on_and_the_flag_wins(tmp_path: Path) -> None:
    host = _host(tmp_path, "measure: true")
    assert build(host, Options(), sglang_version="0.5.23").measure
    assert not build(host, Options(measure=False), sglang_version="0.5.23").measure


def test_deciding_again_for_the_version_takes_back_what_it_added(tmp_path: Path) -> None:
    """The plan is built before preflight (newest release assumed) and decided again for the host's version."""
    plan = build(_host(tmp_path), Options(measuring=True))
    assert plan.measure
    again = for_version(plan, "0.5.9")
    assert "--enable-metrics" not in again.argv and TIMER not in again.env and not again.measure
    assert not [n for n in again.notes if n.startswith("measurement on")]
    back = for_version(again, "0.5.16")
    assert back.argv.count("--enable-metrics") == 1


def test_enable_metrics_already_in_sglang_args_is_not_added_twice(tmp_path: Path) -> None:
    plan = build(_host(tmp_path, "sglang_args: [--enable-metrics]"), Options(measure=True), sglang_version="0.5.23")
    assert plan.argv.count("--enable-metrics") == 1
    assert for_version(plan, "0.5.9").argv.count("--enable-metrics") == 1  # the operator's own flag stays


@pytest.mark.parametrize(("version", "refused"), [("0.5.9", True), ("0.5.10", True), ("0.5.11", False),
                                                  ("0.5.23", False)])
def test_a_release_without_the_phase_timer_is_refused_with_those_that_have_it(tmp_path: Path, version: str,
                                                                              refused: bool) -> None:
    plan = build(_host(tmp_path), Options(measure=True), sglang_version=version)
    if not refused:
        versioncheck.check(list(plan.argv)[3:], dict(plan.env), version, "g1")
        return
    with pytest.raises(FlagError) as e:
        versioncheck.check(list(plan.argv)[3:], dict(plan.env), version, "g1")
    assert e.value.exit_code == 2
    assert f"SGLang {version} on g1 has no per-phase device timer" in e.value.message
    assert "releases that have it: 0.5.11–0.5.23" in e.value.message


def test_every_deploy_points_the_profiler_at_the_state_dir(tmp_path: Path) -> None:
    plan = build(_host(tmp_path, "state_dir: ~/st"), Options(), sglang_version="0.5.16")
    assert plan.env[measure.PROFILER_DIR_ENV] == "~/st/profiles" == plan.profile_dir
    # expanded by the launch script's shell, as the log directory is (never a literal "~" directory)
    assert 'SGLANG_TORCH_PROFILER_DIR="$HOME"/st/profiles \\' in plan.script
    assert "/tmp" not in plan.env[measure.PROFILER_DIR_ENV]


def test_open_start_profile_is_said_beyond_loopback_without_an_admin_key(tmp_path: Path) -> None:
    wide = build(_host(tmp_path, "listen: 0.0.0.0"), Options(), sglang_version="0.5.16")
    assert any("/start_profile on port 30000 is open to anyone" in n for n in wide.notes)
    keyed = build(_host(tmp_path, "listen: 0.0.0.0\nsglang_args: [--admin-api-key, s3cret-key]"), Options(),
                  sglang_version="0.5.16")
    assert not any("/start_profile" in n for n in keyed.notes)
    local = build(_host(tmp_path), Options(), sglang_version="0.5.16")
    assert not any("/start_profile" in n for n in local.notes)


def test_measure_must_be_a_boolean(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as e:
        _host(tmp_path, "measure: sometimes")
    assert "measure" in e.value.message


def test_recorded_costs_decide_a_plain_deploys_default() -> None:
    lo, hi = measure.MEASURED_COSTS[1].cost_pct
    assert 2.5 < lo < 3.5 and hi > 10  # the hand-measured pairs with CUDA graphs on (profiling.md)
    assert not measure.decide(None, "", False, True, "0.5.11–0.5.23", "0.5.16").on  # 14 % recorded: off
    assert measure.recorded_costs("0.5.12") == []
    assert "not measured for this release" in measure.cost_note("0.5.12")
    cheap = measure.TimerCost("0.5.16", "x", ((99.0, 100.0),), "test")
    assert cheap.cost_pct == (1.0, 1.0)


def test_profile_dir_is_private_and_never_a_symlink(tmp_path: Path) -> None:
    d = tmp_path / "state" / "profiles"
    ensure_profile_dir(str(d))
    assert d.is_dir() and (d.stat().st_mode & 0o777) == 0o700 and d.stat().st_uid == os.geteuid()
    link = tmp_path / "state2"
    link.mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (link / "profiles").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(AgentError) as e:
        ensure_profile_dir(str(link / "profiles"))
    assert e.value.kind == "unsafe_path" and "symlink" in e.value.message


def test_cli_measure_and_no_measure_together_is_exit_2(tmp_path: Path) -> None:
    p = tmp_path / "i.yaml"
    p.write_text(BASE.format(extra=""))
    r = run_inv("render", "--measure", "--no-measure", inventory=p)
    assert r.returncode == 2 and "--measure and --no-measure" in r.stderr


# --- on the simulator, over SSH -------------------------------------------------------------------------------


# --- bench and sweep use the measured phases (point 4) ---------------------------------------------------------------

REAL_METRICS = Path(__file__).resolve().parents[2] / "data" / "real-0.5.16-h200" / "metrics-device-timer.txt"


def test_bench_phases_from_real_sglang_metrics() -> None:
    """The H200's /metrics (real 0.5.16, CUDA graphs off, 194 verify calls, 202 decode batches): the verify pass is
    Δtarget_verify / Δdecode batches ≈ 5 ms, by the device timer; the cycle and accept length are the bench's own."""
    from fabfile.remote.measure.bench import phases
    from fabfile.remote.protocol import SOURCE_TIMER, SOURCE_TOOL

    result = {"speculative": {"algorithm": "EAGLE3", "steps": 3, "draft_tokens": 4}, "accept_len": 3.6,
              "accept_len_source": "meta_info", "cycle_ms": 12.0, "config_name": "eagle3-s3-k1-d4", "completed": 6}
    got = phases("", REAL_METRICS.read_text(), result, {"cycle_ms": {"mean": 12.0}},
                 {"meta": {"verify_ct": 194}, "decode": {}}, "0.5.16", 1)
    assert got["missing"] is None and got["cuda_graph"] is False
    (rank,) = got["ranks"]
    assert rank["verify"]["source"] == SOURCE_TIMER and 4.5 < rank["verify"]["ms"] < 5.5
    assert rank["cycle"] == {"ms": 12.0, "source": SOURCE_TOOL, "count": 194}
    assert rank["accept_length"]["ms"] == 3.6 and "other" in rank


def test_bench_without_the_timer_says_how_to_turn_it_on() -> None:
    from fabfile.remote.measure.bench import phases

    got = phases("", "# no timer here\n", {"speculative": {}}, {}, {}, "0.5.16", 1)
    assert got["ranks"] == [] and "--measure" in got["missing"]
    old = phases("", "", {"speculative": {}}, {}, {}, "0.5.9", 1)
    assert "SGLang 0.5.9 has no per-phase device timer" in old["missing"]


def test_explain_from_a_file_refuses_the_live_flags(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"bench_id": "b1"}')
    r = run_cli("explain", "--from", str(p), "--trace")
    assert r.returncode == 2 and "--trace: only without --from" in r.stderr


def test_the_tool_measures_the_timers_cost_from_two_benches(tmp_path: Path) -> None:
    """A bench with the timer on against the newest saved bench of the same configuration and load without it."""
    import json

    from fabfile.commands.bench import timer_cost

    def doc(bid: str, tok_s: float, timed: bool, when: str, **kw: Any) -> dict[str, Any]:
        return {"bench_id": bid, "host": "h", "config_name": "eagle3-s3-k1-d4", "sglang_version": "0.5.16",
                "client": "loadgen", "params": {"concurrency": 1, "input_len": 256, "output_len": 128},
                "output_tok_s": tok_s, "started_at": when,
                "phases": {"ranks": [{"rank": 0}], "missing": None} if timed else
                {"ranks": [], "missing": "the server runs without the device timer: deploy with measurement on"},
                **kw}

    runs = tmp_path / "runs" / "h"
    runs.mkdir(parents=True)
    for d in (doc("b1", 300.0, False, "2026-12-01T01"), doc("b2", 320.0, False, "2026-12-01T02"),
              doc("b3", 500.0, False, "2026-12-01T03", client="sglang.bench_serving")):
        (runs / f"{d['bench_id']}.json").write_text(json.dumps(d))
    cost = timer_cost(doc("b4", 304.0, True, "2026-12-01T04"), tmp_path / "runs")
    assert cost is not None and cost["pct"] == 5.0 and cost["against"].endswith("b2.json")  # newest, same client
    assert timer_cost(doc("b5", 304.0, False, "2026-12-01T05"), tmp_path / "runs") is None  # no run with the timer
    other_load = doc("b6", 304.0, True, "2026-12-01T06")
    other_load["params"] = {**other_load["params"], "concurrency": 8}
    assert timer_cost(other_load, tmp_path / "runs") is None


def test_a_baseline_whose_metrics_report_accept_length_zero_is_not_speculative() -> None:
    from fabfile.remote.measure.bench import is_speculative

    assert not is_speculative({"algorithm": None}, {"prometheus": 0.0, "meta_info": None})
    assert is_speculative({"algorithm": None}, {"prometheus": 2.5})
    assert is_speculative({"algorithm": "EAGLE3"}, {"prometheus": 0.0})


def test_a_cost_measured_on_both_sides_of_zero_is_said_not_measurable() -> None:
    """Issue 40: "−41.6–28.7 %" read as a cost; pairs on both sides of zero measured the deploy-to-deploy spread."""
    across = measure.TimerCost("0.5.16", "x", ((1149.2, 811.7), (932.4, 1307.1)), "docs/measured.md")
    assert "not measurable against the deploy-to-deploy spread" in across.sentence()
    assert "41.6" not in across.sentence() and "28.7" not in across.sentence()
    assert "3.0–14.0 %" in measure.TimerCost("0.5.16", "x", ((97.0, 100.0), (86.0, 100.0)), "t").sentence()


def test_every_recorded_cost_cites_a_file_in_the_repository() -> None:
    import re

    root = Path(__file__).resolve().parents[3]
    for cost in measure.MEASURED_COSTS:
        cited = re.findall(r"[\w./-]+\.(?:md|py|log)", cost.measured_by)
        assert cited and all((root / c).is_file() for c in cited), cost.measured_by


def test_the_inventory_silences_the_notes_on_its_own_preset_and_the_timer_cost(tmp_path: Path) -> None:
    """Issue 40, point 4: the tool's notes about its own built-in preset and the timer's recorded cost, silenced by
    `notes: {quiet: [...]}`; said, and short, without it."""
    from fabfile.inventory.schema import NotesFields
    from fabfile.inventory.values import QUIET_NOTES

    said = build(_host(tmp_path, "nccl_preset: pcie"), Options(measure=True), sglang_version="0.5.16")
    timer = next(n for n in said.notes if n.startswith("measurement on (--measure)"))
    assert len(timer) < 330 and "docs/measured.md" in timer and "not measurable against" in timer, timer
    assert any(n.startswith("NCCL_PROTO=LL leaves all-reduce") for n in said.notes)
    assert any(n.startswith("NCCL_MAX_NCHANNELS is deprecated") for n in said.notes)
    quiet = build(_host(tmp_path, "nccl_preset: pcie\nnotes: {quiet: [nccl_preset, timer_cost]}"),
                  Options(measure=True), sglang_version="0.5.16")
    assert "measurement on (--measure)" in quiet.notes  # who turned it on is still said, its cost not
    assert not [n for n in quiet.notes if "NCCL_PROTO" in n or "NCCL_MAX_NCHANNELS" in n or "% of served" in n]
    assert quiet.summary()["notes_quiet"] == ["nccl_preset", "timer_cost"]
    # A value the operator wrote over the preset is theirs: its advice stays.
    own = build(_host(tmp_path, "nccl_preset: pcie\nnccl_env: {NCCL_PROTO: LL128}\nnotes: {quiet: [nccl_preset]}"),
                Options(), sglang_version="0.5.16")
    assert any(n.startswith("NCCL_PROTO=LL128 leaves") for n in own.notes)
    assert not any("NCCL_MAX_NCHANNELS" in n for n in own.notes)
    assert tuple(NotesFields.model_fields["quiet"].annotation.__args__[0].__args__) == QUIET_NOTES
    with pytest.raises(InventoryError) as e:
        _host(tmp_path, "notes: {quiet: [nccl_proto]}")
    assert "hosts.g1.notes.quiet.0" in e.value.message and "'nccl_preset' or 'timer_cost'" in e.value.message
