"""Settings that hurt, said before they hurt: the plan's NCCL notes at render and deploy (fabfile/plan/ncclnotes.py),
each with the value kept as the operator wrote it."""

from __future__ import annotations

from pathlib import Path

from fabfile.inventory import hosts as inventory
from fabfile.plan.deploy_plan import Options, build, for_version
from fabfile.plan.ncclnotes import nccl_notes


def _plan(tmp_path: Path, host: str, sglang_version: str | None = None, **opts: object) -> tuple[tuple[str, ...],
                                                                                                 dict[str, str]]:
    p = tmp_path / "inventory.yaml"
    p.write_text("defaults: {python: /v/bin/python3, model: /m, draft_model: /d, gpus: 8, tp: 8}\nhosts:\n" + host)
    plan = build(inventory.load(p).hosts["h"], Options(steps=3, **opts), sglang_version=sglang_version)  # type: ignore[arg-type]
    return plan.notes, plan.env


def test_forcing_ll_on_the_pcie_preset_says_it_takes_simple_from_prefill_and_keeps_the_value(tmp_path: Path) -> None:
    notes, env = _plan(tmp_path, "  h: {nccl_preset: pcie}\n")
    (ll,) = [n for n in notes if n.startswith("NCCL_PROTO=LL")]
    assert "no Simple protocol" in ll and "prefill" in ll and "TTFT" in ll and "kept as written" in ll
    assert "NCCL_PROTO=\"LL,Simple\"" in ll and "per-collective" in ll
    assert env["NCCL_PROTO"] == "LL"  # never changed behind the operator's back


def test_per_collective_values_are_offered_only_where_the_hosts_nccl_takes_them() -> None:
    (old,) = nccl_notes({"NCCL_PROTO": "LL"}, [], "0.5.16", nccl_version="2.21.5")
    assert "per-collective" not in old
    (new,) = nccl_notes({"NCCL_PROTO": "LL"}, [], "0.5.16", nccl_version="2.28.9+cuda13.0")
    assert "allreduce:LL,Simple" in new
    assert nccl_notes({"NCCL_PROTO": "LL,Simple"}, [], "0.5.16") == []
    (bad,) = nccl_notes({"NCCL_PROTO": "allreduce:LL"}, [], "0.5.16", nccl_version="2.21.5")
    assert "need NCCL 2.24 or later" in bad and "will not start" in bad


def test_max_nchannels_is_named_deprecated_with_its_current_name(tmp_path: Path) -> None:
    notes, env = _plan(tmp_path, "  h: {nccl_preset: pcie}\n")
    assert any("NCCL_MAX_NCHANNELS is deprecated since NCCL 2.17" in n and "NCCL_MAX_CTAS=16" in n for n in notes)
    assert env["NCCL_MAX_NCHANNELS"] == "16" and "NCCL_MAX_CTAS" not in env


def test_sglangs_own_algo_and_channel_writes_under_deterministic_inference_are_said(tmp_path: Path) -> None:
    host = "  h: {nccl_preset: pcie, sglang_args: [--enable-deterministic-inference]}\n"
    notes, _ = _plan(tmp_path, host, sglang_version="0.5.23")
    algo = [n for n in notes if n.startswith("SGLang replaces NCCL_ALGO=Ring with allreduce:tree")]
    assert algo and "deterministic" in algo[0]
    assert any(n.startswith("SGLang replaces NCCL_MAX_NCHANNELS=16 with 8") for n in notes)
    plain, _ = _plan(tmp_path, "  h: {nccl_preset: pcie}\n", sglang_version="0.5.23")
    assert not any(n.startswith("SGLang") for n in plain)  # not without the flag


def test_the_notes_follow_the_version_the_deploy_finds(tmp_path: Path) -> None:
    p = tmp_path / "inventory.yaml"
    p.write_text("defaults: {python: /v/bin/python3, model: /m, draft_model: /d, gpus: 8, tp: 8}\nhosts:\n"
                 "  h: {nccl_preset: pcie, sglang_args: [--enable-deterministic-inference]}\n")
    plan = build(inventory.load(p).hosts["h"], Options(steps=3))
    at_23 = for_version(plan, "0.5.23").notes
    assert sum(n.startswith("SGLang replaces NCCL_ALGO") for n in at_23) == 1
    assert not any("may replace NCCL_ALGO" in n for n in at_23)


def test_tuning_in_the_debug_subsystems_is_said_to_grow_the_log(tmp_path: Path) -> None:
    notes, _ = _plan(tmp_path, "  h: {env: {NCCL_DEBUG_SUBSYS: 'INIT,ENV,TUNING'}}\n")
    assert any("TUNING" in n and "verification deploy" in n for n in notes)


def test_the_hosts_nccl_release_is_read_from_its_wheel_and_decides_the_offer(tmp_path: Path) -> None:
    from fabfile.remote.facts import nccl_info

    site = tmp_path / "site-packages"
    (site / "nvidia_nccl_cu12-2.21.5.dist-info").mkdir(parents=True)
    assert nccl_info(str(site)) == {"version": "2.21.5", "source": "nvidia-nccl-cu12"}
    assert nccl_info(str(tmp_path)) is None
    p = tmp_path / "inventory.yaml"
    p.write_text("defaults: {python: /v/bin/python3, model: /m, draft_model: /d, gpus: 8, tp: 8}\nhosts:\n"
                 "  h: {nccl_preset: pcie}\n")
    plan = build(inventory.load(p).hosts["h"], Options(steps=3))
    old = [n for n in for_version(plan, "0.5.16", "2.21.5").notes if n.startswith("NCCL_PROTO=LL")]
    new = [n for n in for_version(plan, "0.5.16", "2.28.9").notes if n.startswith("NCCL_PROTO=LL")]
    assert len(old) == len(new) == 1 and "per-collective" not in old[0] and "allreduce:LL,Simple" in new[0]


def test_the_proto_note_is_short_and_said_once_per_command() -> None:
    """Issue 40: the ~600-character note was printed twice per deploy, per host and on every sweep deploy."""
    from fabfile.present import text as output

    (note,) = nccl_notes({"NCCL_PROTO": "LL"}, [], "0.5.16", nccl_version="2.28.9+cuda13.0")
    assert len(note) < 300, len(note)
    output.begin_command()
    assert output.first_time(note) and not output.first_time(note)  # the second host, the summary: not again
    output.begin_command()  # the next command says it again
    assert output.first_time(note)


def test_ll128_alone_is_not_called_ll_and_keeping_simple_offers_ll128_with_it() -> None:
    """With NCCL_PROTO: LL128 the note said "every size runs LL at half the bandwidth": LL128 is another protocol
    (about 95 % of the bandwidth), and naming it forces it on links where NCCL keeps it off by default."""
    (note,) = nccl_notes({"NCCL_PROTO": "LL128"}, [], "0.5.16", nccl_version="2.28.9")
    assert "runs LL " not in note and "runs LL at" not in note, note
    assert "every size runs LL128" in note and "NVLink" in note and "forced" in note
    assert "NCCL_PROTO=\"LL128,Simple\"" in note and "allreduce:LL128,Simple" in note
    (excluded,) = nccl_notes({"NCCL_PROTO": "^Simple"}, [], "0.5.16")
    # an exclusion leaves LL128 at its default (off away from NVLink): no word of forcing it
    assert "without NVLink every size runs LL" in excluded and "forced" not in excluded
