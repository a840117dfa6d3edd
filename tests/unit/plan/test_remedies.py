"""``inv tune``'s remedy catalog: every row proposes its change on a configuration it applies to, each knob's name
and presence follow the release (the generated flag table, the env-variable table), and a knob that acts on no
release is never proposed."""

from __future__ import annotations

import pytest

from fabfile.plan import remedies
from fabfile.plan.remedies import CATALOG, Config, Context

FIGURES = {"cycle": 5.0, "draft": 2.0, "verify": 1.0, "other": 2.0, "launch_gap": 0.5, "allreduce": 0.4,
           "steps": 3}
POOR = Config(flags=(("--disable-cuda-graph", None), ("--disable-overlap-schedule", None),
                     ("--speculative-num-steps", "3")))
GRAPH_LOW = Config(flags=(("--cuda-graph-max-bs-decode", "4"), ("--speculative-num-steps", "3")))


@pytest.mark.parametrize("remedy", CATALOG, ids=lambda r: r.id)
def test_every_row_proposes_a_change_with_a_positive_predicted_saving(remedy: remedies.Remedy) -> None:
    ctx = Context("0.5.23", concurrency=16, tp=2, figures=FIGURES)
    start = GRAPH_LOW if remedy.id == "graph-bs" else POOR
    cfg = remedy.candidate(start, ctx)
    assert cfg is not None and remedies.diff(start, cfg)
    assert remedy.saving(ctx) > 0
    assert remedy.candidate(cfg, ctx) is None or remedy.id == "fewer-steps"  # applied once, it is done


def test_the_graph_batch_size_flag_follows_the_release() -> None:
    assert remedies.graph_bs_flag("0.5.12") == "--cuda-graph-max-bs"
    assert remedies.graph_bs_flag("0.5.16") == "--cuda-graph-max-bs-decode"
    ctx = Context("0.5.12", concurrency=16, figures=FIGURES)
    cfg = remedies.by_id("graph-bs").candidate(Config(flags=(("--cuda-graph-max-bs", "4"),)), ctx)
    assert cfg is not None and cfg.flag("--cuda-graph-max-bs") == "16"


def test_a_graph_batch_size_at_or_above_the_load_is_left_alone() -> None:
    ctx = Context("0.5.16", concurrency=16, figures=FIGURES)
    assert remedies.by_id("graph-bs").candidate(Config(flags=(("--cuda-graph-max-bs-decode", "32"),)), ctx) is None


@pytest.mark.parametrize("knob, version, acts", [
    ("SGLANG_ENABLE_SPEC_V2", "0.5.9", True),
    ("SGLANG_ENABLE_SPEC_V2", "0.5.16", False),  # removed in 0.5.14: V2 always runs
    ("SGLANG_ENABLE_METADATA_GLUE_GRAPH", "0.5.16", False),
    ("SGLANG_ENABLE_METADATA_GLUE_GRAPH", "0.5.20", True),
    ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "0.5.20", False),
    ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "0.5.23", True),
    ("--num-continuous-decode-steps", "0.5.16", False),  # parses, read nowhere
    ("--speculative-adaptive", "0.5.9", False),
    ("--speculative-adaptive", "0.5.16", True),
    ("SGLANG_NOT_A_KNOB", "0.5.23", False),
    # parsed and read nowhere on these releases (plan/knob_effects, read from the wheels), though not in NEVER
    ("--triton-attention-reduce-in-fp32", "0.5.11", False),
    ("--triton-attention-reduce-in-fp32", "0.5.16", False),
    ("--triton-attention-reduce-in-fp32", "0.5.23", False),
    ("--enable-piecewise-cuda-graph", "0.5.12", False),
    ("--enable-piecewise-cuda-graph", "0.5.9", True),
])
def test_knob_acts_by_release(knob: str, version: str, acts: bool) -> None:
    assert remedies.knob_acts(knob, version) is acts


def test_rows_gated_by_release_and_tp_are_not_proposed() -> None:
    ctx = Context("0.5.16", concurrency=16, tp=1, figures=FIGURES)
    fired = ["verify_eager", "other_share", "draft_share", "break_even", "allreduce_bound"]
    ids = {c.remedy.id for c in remedies.candidates(fired, POOR, ctx, tried=set())}
    assert "pcie-ipc" not in ids and "symm-mem" not in ids and "metadata-graph" not in ids
    assert not any(r.knob in remedies.NEVER for r in CATALOG)


def test_candidates_take_each_rules_next_untried_remedy_ranked_by_predicted_saving() -> None:
    ctx = Context("0.5.23", concurrency=16, tp=1, figures=FIGURES)
    first = remedies.candidates(["other_share"], POOR, ctx, tried=set())
    assert [c.remedy.id for c in first] == ["overlap-on"]
    second = remedies.candidates(["other_share"], POOR, ctx, tried={"overlap-on"})
    assert [c.remedy.id for c in second] == ["cpu-affinity"]
    ranked = remedies.candidates(["verify_eager", "other_share"], POOR, ctx, tried=set())
    assert [c.predicted_ms for c in ranked] == sorted((c.predicted_ms for c in ranked), reverse=True)
