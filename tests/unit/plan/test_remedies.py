"""``inv tune``'s remedy catalog: every row proposes its change on a configuration it applies to, each knob's name
and presence follow the release (the generated flag table, the env-variable table), and a knob that acts on no
release is never proposed."""

from __future__ import annotations

import pytest

from fabfile.plan import remedies
from fabfile.plan.remedies import CATALOG, Config, Context

FIGURES = {"cycle": 5.0, "draft": 2.0, "verify": 1.0, "other": 2.0, "launch_gap": 0.5, "allreduce": 0.4,
           "steps": 3, "draft_step": 0.6, "accept_length": 2.0}
POOR = Config(flags=(("--disable-cuda-graph", None), ("--disable-overlap-schedule", None),
                     ("--speculative-num-steps", "3")))
GRAPH_LOW = Config(flags=(("--cuda-graph-max-bs-decode", "4"), ("--speculative-num-steps", "3")))


# What draft_saturated found on the steps-3 figures above: steps 5 predicted best (plan/predict.longer_chain).
SATURATED = {"draft_saturated": {"steps": 5.0, "saving_ms": 0.4, "share": 0.6}}


@pytest.mark.parametrize("remedy", CATALOG, ids=lambda r: r.id)
def test_every_row_proposes_a_change_with_a_positive_predicted_saving(remedy: remedies.Remedy) -> None:
    ctx = Context("0.5.23", concurrency=16, tp=2, figures=FIGURES, findings=SATURATED)
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


def test_steps_are_cut_to_what_acceptance_reaches() -> None:
    """The H200's 7B-shaped run: steps 7 at accept length 2.98 (2 draft tokens accepted per pass): the remedy goes
    straight to steps 2, draft tokens 3, and predicts the five surplus draft forwards' time as the saving."""
    ctx = Context("0.5.16", concurrency=1, tp=1, figures={"cycle": 6.54, "draft": 1.05, "draft_step": 0.175,
                                                          "steps": 7, "accept_length": 2.98})
    start = Config(flags=(("--speculative-num-steps", "7"), ("--speculative-num-draft-tokens", "8")))
    remedy = remedies.by_id("accepted-steps")
    cfg = remedy.candidate(start, ctx)
    assert cfg is not None and cfg.flag("--speculative-num-steps") == "2"
    assert cfg.flag("--speculative-num-draft-tokens") == "3"
    assert remedy.saving(ctx) == pytest.approx(5 * 0.175)
    assert [c.remedy.id for c in remedies.candidates(["draft_surplus"], start, ctx, tried=set())] == \
        ["accepted-steps"]


def test_more_steps_goes_to_the_step_count_its_rule_predicts_best_draft_tokens_with_it() -> None:
    """The H200's 7B-shaped steps 1 (accept length 1.51, half the passes accepted the one draft token): the remedy
    sets the step count draft_saturated's tail model found best, and the draft tokens of a chain with it where the
    configuration sets them; its saving is the rule's; without the rule's figures, or past the tuner's widest, it
    proposes nothing."""
    ctx = Context("0.5.16", concurrency=1, figures={"cycle": 5.50, "verify": 5.15, "draft_extend": 0.2, "steps": 1,
                                                    "accept_length": 1.506},
                  findings={"draft_saturated": {"steps": 2.0, "saving_ms": 2.05}})
    remedy = remedies.by_id("more-steps")
    start = Config(flags=(("--speculative-num-steps", "1"), ("--speculative-num-draft-tokens", "2")))
    cfg = remedy.candidate(start, ctx)
    assert cfg is not None and cfg.flag("--speculative-num-steps") == "2"
    assert cfg.flag("--speculative-num-draft-tokens") == "3"
    assert remedy.saving(ctx) == pytest.approx(2.05)
    bare = remedy.candidate(Config(), ctx)  # steps from the host's speculative settings (the measured figure)
    assert bare is not None and dict(bare.flags) == {"--speculative-num-steps": "2"}
    assert remedy.candidate(start, Context("0.5.16", 1, figures=ctx.figures)) is None
    wide = Context("0.5.16", 1, figures=ctx.figures,
                   findings={"draft_saturated": {"steps": remedies.TUNE_MAX_STEPS + 1.0, "saving_ms": 1.0}})
    assert remedy.candidate(start, wide) is None


def test_the_steps_remedies_use_up_a_step_count_not_their_name() -> None:
    """accepted-steps cut steps 7 to 2; more-steps from 2 cannot go back to 7 (a step count tried or measured is
    used up), and another step count is still open to it: the path never revisits one it left."""
    ctx = Context("0.5.16", concurrency=1, figures={"cycle": 5.7, "verify": 5.2, "draft_step": 0.175, "steps": 2,
                                                    "accept_length": 2.98},
                  findings={"draft_saturated": {"steps": 7.0, "saving_ms": 1.0}})
    at2 = Config(flags=(("--speculative-num-steps", "2"),))
    assert remedies.candidates(["draft_saturated"], at2, ctx, tried={"accepted-steps", remedies.steps_key(7)}) == []
    [c] = remedies.candidates(["draft_saturated"], at2, ctx, tried={remedies.steps_key(3)})
    assert c.remedy.id == "more-steps" and c.key == remedies.steps_key(7)
    assert remedies.tried_key(remedies.by_id("overlap-on"), at2) == "overlap-on"


def test_a_saving_per_token_is_a_share_of_the_cycle_for_the_stop_rule() -> None:
    """more-steps' saving is ms per cycle at the measured accept length: its share of the cycle is its share of the
    ms per token, never divided by the ms per token itself (which would multiply it by the accept length)."""
    ctx = Context("0.5.16", 1, figures={"cycle": 5.0, "accept_length": 2.5, "ms_per_token": 2.0},
                  findings={"draft_saturated": {"steps": 3.0, "saving_ms": 0.5}})
    [c] = remedies.candidates(["draft_saturated"], Config(flags=(("--speculative-num-steps", "2"),)), ctx, set())
    assert remedies.predicted_fraction(c, ctx) == pytest.approx(0.1)


def test_the_graph_batch_size_is_read_back_from_the_servers_own_args_under_either_name() -> None:
    assert {"cuda_graph_max_bs", "cuda_graph_max_bs_decode"} <= set(remedies.SERVER_ARGS)
