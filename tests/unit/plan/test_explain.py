"""``inv explain``: each rule fires on the figures it names and stays silent otherwise; every
figure in a sentence carries its source; the subjects of saved profile, bench and sweep documents."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fabfile.commands.explain import explained, for_bench, load_document
from fabfile.errors import FlagError
from fabfile.plan import explain
from fabfile.plan.explain import RULES, Subject
from fabfile.remote.protocol import SOURCE_DERIVED, SOURCE_META, SOURCE_TIMER, SOURCE_TOOL, SOURCE_TRACE
from tests.support.invoke_cli import run_inv


def fig(ms: float, source: str = SOURCE_TIMER, count: int = 100) -> dict[str, Any]:
    return {"ms": ms, "source": source, "count": count}


def kernels(span: float, launch: str = "cuda graph", **classes: float) -> dict[str, Any]:
    return {"classes_ms": dict(classes), "passes": 10, "span_ms": span, "allreduce_calls": 122.0,
            "allreduce_mean_us": 145.0, "launch": launch, "kernel_launches": 212.0 if launch == "eager" else 0.0,
            "graph_launches": 1.0 if launch != "eager" else 0.0, "launch_gap_ms": 9.8 if launch == "eager" else 0.1}


# The seeds' case: verify 29 ms against a 12.1 ms decode step, accept length 2.37 (EAGLE-3 2 steps, 60.5 vs 82.2).
SEED = {"config": "eagle3-s2-k1-d3", "steps": 2, "draft_tokens": 4, "draft": fig(4.0), "draft_step": fig(2.0),
        "verify": fig(29.0), "draft_extend": fig(1.5), "other": fig(2.8), "cycle": fig(37.3, SOURCE_TOOL),
        "accept_length": fig(2.37, SOURCE_META)}
BASE = {"config": "baseline", "decode": fig(12.1, "derived: TPOT"),
        "kernels": {"decode": kernels(11.0, gemm=2.0, attention=1.0)}}


def subject(anatomy: dict[str, Any] | None = None, baseline: dict[str, Any] | None = BASE, **kw: Any) -> Subject:
    return Subject(config=str((anatomy or SEED).get("config")), anatomy=anatomy or SEED, baseline=baseline, **kw)


def rules_fired(s: Subject) -> set[str]:
    return {f.rule for f in explain.explain(s)}


# Per rule: an anatomy that fires it and one that does not (the other rules' figures kept quiet).
QUIET = {**SEED, "draft": fig(4.0), "other": fig(2.8), "cycle": fig(37.3, SOURCE_TOOL),
         "accept_length": fig(3.5, SOURCE_META)}
CASES: dict[str, tuple[Subject, Subject]] = {
    "break_even": (subject(), subject({**SEED, "accept_length": fig(3.2, SOURCE_META)})),
    "draft_share": (subject({**QUIET, "draft": fig(17.0), "cycle": fig(37.3, SOURCE_TOOL)}), subject(QUIET)),
    "other_share": (subject({**QUIET, "other": fig(10.0)}), subject(QUIET)),
    # The H200 7B-shaped figures: steps 7 and steps 3 at accept length 2.98 (2 draft tokens accepted per pass).
    "draft_surplus": (subject({**QUIET, "steps": 7, "draft_tokens": 8, "draft_step": fig(0.175),
                               "cycle": fig(6.54, SOURCE_TOOL), "accept_length": fig(2.98, SOURCE_META)}),
                      subject({**QUIET, "steps": 3, "draft_tokens": 4, "draft_step": fig(0.175),
                               "cycle": fig(5.85, SOURCE_TOOL), "accept_length": fig(2.98, SOURCE_META)})),
    # The H200 7B-shaped steps 1 (its own histogram: half the passes accepted the one draft token) against steps 3
    # at the same draft (no pass accepted a third token).
    "draft_saturated": (subject({**{k: v for k, v in QUIET.items() if k not in ("draft", "draft_step")},
                                 "steps": 1, "draft_tokens": 2, "accept_histogram": [676, 684],
                                 "draft_extend": fig(0.205), "verify": fig(5.15), "other": fig(0.14),
                                 "cycle": fig(5.50, SOURCE_TOOL), "accept_length": fig(1.506, SOURCE_META)}),
                        subject({**QUIET, "steps": 3, "draft_tokens": 4, "accept_histogram": [3, 4, 680],
                                 "draft_step": fig(0.175), "verify": fig(5.19), "cycle": fig(5.85, SOURCE_TOOL),
                                 "accept_length": fig(2.98, SOURCE_META)})),
    "allreduce_bound": (subject({**QUIET, "kernels": {"verify": kernels(29.0, allreduce=17.7, gemm=6.0)}}),
                        subject({**QUIET, "kernels": {"verify": kernels(29.0, allreduce=5.0, gemm=6.0)}})),
    "gemm_growth": (subject({**QUIET, "kernels": {"verify": kernels(29.0, gemm=6.0)}}),
                    subject({**QUIET, "kernels": {"verify": kernels(29.0, gemm=2.4)}})),
    "verify_eager": (subject({**QUIET, "kernels": {"verify": kernels(29.0, "eager", gemm=2.0)}}),
                     subject({**QUIET, "kernels": {"verify": kernels(29.0, "cuda graph", gemm=2.0)}})),
    "sources_differ": (subject(QUIET, difference_pct={"verify": 14.0, "draft": 2.0}),
                       subject(QUIET, difference_pct={"verify": -6.0})),
    "derived_only": (subject({"config": "eagle3-s3-k1-d4", "cycle": fig(9.0, SOURCE_DERIVED),
                              "accept_length": fig(3.5, SOURCE_META)}), subject(QUIET)),
}


def test_every_rule_has_a_case() -> None:
    assert {r.id for r in RULES} == set(CASES)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_the_rule_fires_on_its_figures(rule: str) -> None:
    fires, _ = CASES[rule]
    assert rule in rules_fired(fires)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_the_rule_stays_silent_without_them(rule: str) -> None:
    _, quiet = CASES[rule]
    assert rule not in rules_fired(quiet)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_every_figure_in_a_sentence_names_its_source(rule: str) -> None:
    """A number in ms or µs is followed (within its clause) by [timer], [trace], [tool], [meta] or [derived]."""
    fires, _ = CASES[rule]
    (finding,) = [f for f in explain.explain(fires) if f.rule == rule]
    for clause in re.split(r"[;:(]", finding.sentence):
        if re.search(r"\d(\.\d+)? (ms|µs)", clause):
            assert re.search(r"\[(timer|trace|tool|meta|derived)\]", clause), (rule, clause)


def test_the_break_even_sentence_is_the_seeds_case() -> None:
    (f,) = [f for f in explain.explain(subject()) if f.rule == "break_even"]
    assert f.sentence.startswith("verify (4 tokens) costs 2.4× a baseline decode step (29.0 ms [timer] vs "
                                 "12.1 ms [derived])")
    assert "at accept length 2.37 [meta] EAGLE-3 needs ≥ 3.08" in f.sentence and "it loses by 23 %" in f.sentence
    assert f.figures["break_even"] == pytest.approx(37.3 / 12.1, abs=1e-3)


def test_the_allreduce_sentence_counts_the_calls() -> None:
    s = CASES["allreduce_bound"][0]
    (f,) = [f for f in explain.explain(s) if f.rule == "allreduce_bound"]
    assert f.sentence.startswith("61 % of verify is all-reduce") and "122 calls of 145 µs per pass" in f.sentence
    assert "communication-bound, tune NCCL for verify's message size" in f.sentence


def test_eager_verify_against_a_graphed_decode() -> None:
    s = CASES["verify_eager"][0]
    (f,) = [f for f in explain.explain(s) if f.rule == "verify_eager"]
    assert "212 kernel launches, 9.8 ms of launch gaps" in f.sentence and "while decode replays a CUDA graph" in \
        f.sentence
    alone = subject(s.anatomy, baseline=None)
    (g,) = [f for f in explain.explain(alone) if f.rule == "verify_eager"]
    assert "while decode" not in g.sentence  # no baseline trace: the clause is not claimed


def test_no_baseline_no_break_even() -> None:
    assert "break_even" not in rules_fired(subject(baseline=None))


def test_a_baseline_subject_gets_no_speculative_rule() -> None:
    assert rules_fired(Subject(config="baseline", anatomy=BASE)) == set()


# -- documents ------------------------------------------------------------------------------------------------------

def _sweep_doc() -> dict[str, Any]:
    timer = {**SEED, "rank": 0}
    return {"sweep_id": "s1", "host": "h", "rows": [
        {"config": "baseline", "steps": 0, "ok": True, "tok_s": 82.2, "decode_ms_per_token": 12.1, "requests": 16,
         "measured": True},
        {"config": "eagle3-s2-k1-d3", "steps": 2, "topk": 1, "draft_tokens": 3, "ok": True, "tok_s": 60.5,
         "accept_len": 2.37, "accept_len_source": "meta_info", "cycle_ms": 37.3, "cycle_ms_source": "tool",
         "phases": {"ranks": [timer], "cuda_graph": False, "missing": None}, "measured": True},
        {"config": "eagle3-s3-k1-d4", "steps": 3, "ok": False, "phase": "deploy", "measured": True},
    ]}


def test_a_sweep_is_explained_against_its_own_baseline() -> None:
    pairs = explained(_sweep_doc())
    assert [s.config for s, _ in pairs] == ["eagle3-s2-k1-d3"]
    s, found = pairs[0]
    assert s.decode() == {"ms": 12.1, "count": 16, "source": "derived: TPOT"}
    assert "break_even" in {f.rule for f in found}


def test_a_sweep_without_measured_phases_says_so() -> None:
    doc = _sweep_doc()
    del doc["rows"][1]["phases"]
    doc["rows"][1]["cycle_ms_source"] = "derived"
    (s, found), = explained(doc)
    assert s.anatomy["cycle"]["source"] == SOURCE_DERIVED
    assert "derived_only" in {f.rule for f in found}


def test_a_profile_merges_timer_and_trace_per_rank() -> None:
    timer = {"rank": 0, "verify": fig(5.2), "draft": fig(1.4), "cycle": fig(8.0, SOURCE_TOOL)}
    traced = {"rank": 0, "verify": fig(9.0, SOURCE_TRACE), "kernels": {"verify": kernels(9.0, "eager", gemm=1.0)}}
    doc = {"profile_id": "p1", "config_name": "eagle3-s3-k1-d4", "speculative": {"algorithm": "EAGLE3"},
           "ranks": [{"rank": 0, "timer": timer, "trace": traced, "difference_pct": {"verify": 73.1}}]}
    (s, found), = explained(doc)
    assert s.anatomy["verify"]["source"] == SOURCE_TIMER  # the timer's figure wins; kernels come from the trace
    assert s.anatomy["kernels"]["verify"]["launch"] == "eager"
    assert {"verify_eager", "sources_differ"} <= {f.rule for f in found}


def test_bench_explain_finds_the_newest_saved_baseline(tmp_path: Path) -> None:
    runs = tmp_path / "runs" / "h"
    runs.mkdir(parents=True)
    for i, ms in ((1, 20.0), (2, 12.1)):
        (runs / f"b{i}.json").write_text(json.dumps({"bench_id": f"b{i}", "config_name": "baseline",
                                                     "sglang_version": "0.5.16", "started_at": f"2026-12-0{i}",
                                                     "decode_ms_per_token": ms, "completed": 16}))
    result = {"bench_id": "b3", "host": "h", "config_name": "eagle3-s2-k1-d3", "sglang_version": "0.5.16",
              "speculative": {"algorithm": "EAGLE3", "steps": 2, "draft_tokens": 3}, "cycle_ms": 37.3,
              "cycle_ms_source": "tool", "accept_len": 2.37, "accept_len_source": "meta_info", "completed": 16,
              "phases": {"ranks": [{**SEED, "rank": 0}]}}
    (s, found), = for_bench(result, tmp_path / "runs")
    assert s.decode() is not None and s.decode()["ms"] == 12.1 and "b2.json" in s.baseline_from  # type: ignore[index]
    assert "break_even" in {f.rule for f in found}


def test_from_a_file_that_is_not_a_result_is_exit_2(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    with pytest.raises(FlagError) as e:
        load_document(str(p))
    assert "--from" in e.value.message and "not a profile, bench or sweep result" in e.value.message
    r = run_inv("explain", "--from", str(p))
    assert r.returncode == 2 and "not a profile, bench or sweep result" in r.stderr


def test_from_a_saved_bench_or_profile_json_reads_its_hosts_part(tmp_path: Path) -> None:
    """`inv bench --json > b.json` and `inv profile --json > p.json` are {"ok", "hosts": [...]} for one host too:
    `--from` read neither (the profile's was refused as "not a profile, bench or sweep result")."""
    from fabfile.results.hosts import hosts_document

    result = {"bench_id": "b3", "host": "h", "config_name": "eagle3-s2-k1-d3", "completed": 16}
    profile = {"profile_id": "p1", "ranks": [{**SEED, "rank": 0}], "config_name": "eagle3-s2-k1-d3"}
    docs = {"bench": hosts_document([{"ok": True, **result}]),
            "profile": hosts_document([{"host": "h", "ok": True, "data": profile, "error": None}])}
    for kind, doc in docs.items():
        p = tmp_path / f"{kind}.json"
        p.write_text(json.dumps(doc))
        got = load_document(str(p))
        assert explain.kind_of(got) == kind and got == (profile if kind == "profile" else {"ok": True, **result})
    two = tmp_path / "two.json"
    two.write_text(json.dumps(hosts_document([{"ok": True, **result}, {"ok": True, **result, "host": "g"}])))
    r = run_inv("explain", "--from", str(two))
    assert r.returncode == 2 and "holds 2 hosts' results; it explains one at a time" in r.stderr, r.stderr


def test_cli_explains_a_saved_sweep_and_prints_the_rules(tmp_path: Path) -> None:
    p = tmp_path / "sweep.json"
    p.write_text(json.dumps(_sweep_doc()))
    r = run_inv("explain", "--from", str(p))
    assert r.returncode == 0, r.stderr
    assert "break_even: verify (4 tokens) costs 2.4× a baseline decode step" in r.stdout
    r = run_inv("explain", "--rules")
    assert r.returncode == 0 and all(rule.id in r.stdout for rule in RULES)


# -- the sweep's measured phases (point 4) ----------------------------------------------------------------------------

def test_sweep_prints_measured_phases_and_the_break_even_from_the_cycle() -> None:
    from fabfile.present.sweep_report import phase_lines

    (line,) = phase_lines(_sweep_doc())
    assert line.startswith("eagle3-s2-k1-d3: draft/step 2.00 ms [timer] · verify 29.0 ms [timer] · draft-extend "
                           "1.50 ms [timer]; cycle 37.3 ms [tool]")
    assert "break-even accept length 3.08 (cycle ÷ baseline decode 12.1 ms [derived])" in line


def test_sweep_without_phases_keeps_the_derived_cycle_labelled() -> None:
    from fabfile.present.sweep_report import phase_lines

    doc = _sweep_doc()
    del doc["rows"][1]["phases"]
    doc["rows"][1]["cycle_ms_source"] = "derived"
    (line,) = phase_lines(doc)
    assert "no measured phase; cycle 37.3 ms [derived]" in line


def test_sweep_png_gains_a_stacked_bar_per_configuration(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fabfile.commands.sweep_files import save_plot as plot
    from fabfile.present.plot import phase_bars

    fig, ax = plt.subplots()
    phase_bars(ax, _sweep_doc())
    heights = [[round(p.get_height(), 6) for p in c.patches] for c in ax.containers]
    assert heights == [[4.0], [29.0], [1.5], [2.8]]  # draft / verify / draft-extend / other, one configuration
    assert [ln.get_ydata()[0] for ln in ax.get_lines()] == [12.1]  # the baseline's decode step
    plt.close(fig)
    doc = {**_sweep_doc(), "concurrency_levels": [1], "winner": "baseline", "params": {"concurrency": 1}}
    assert plot(doc, tmp_path / "s.png")
    without = {**doc, "rows": [{k: v for k, v in r.items() if k != "phases"} for r in doc["rows"]]}
    assert plot(without, tmp_path / "plain.png")
    from PIL import Image

    assert Image.open(tmp_path / "s.png").width > Image.open(tmp_path / "plain.png").width


def test_the_break_even_never_sets_a_wall_clock_cycle_against_a_gpu_decode_step() -> None:
    """Seen on real SGLang 0.5.16 on the H200: the tool's cycle (4.41 ms, wall clock) over the device timer's decode
    forward (0.61 ms, GPU) made EAGLE-3 'lose by 45 %' while it served 1032 against the baseline's 640 tok/s. The
    verdict takes a decode step of the cycle's own clock (the baseline's TPOT), or says nothing."""
    h200 = {"config": "eagle3-s3-k1-d4", "steps": 3, "draft_tokens": 4, "verify": fig(0.58), "draft": fig(0.21),
            "draft_extend": fig(0.12), "cycle": fig(4.41, SOURCE_TOOL), "accept_length": fig(4.0, SOURCE_META)}
    gpu_only = {"config": "baseline", "decode": fig(0.61)}
    assert "break_even" not in rules_fired(subject(h200, baseline=gpu_only))
    with_tpot = {**gpu_only, "decode_step": fig(1.56, "derived: TPOT")}
    assert "break_even" not in rules_fired(subject(h200, baseline=with_tpot))  # 4.41 / 1.56 = 2.8 < 4.0: it wins
    slow = {**h200, "cycle": fig(7.0, SOURCE_TOOL)}  # 7.0 / 1.56 = 4.5 > 4.0: it loses, by the wall clock
    (f,) = [f for f in explain.explain(subject(slow, baseline=with_tpot)) if f.rule == "break_even"]
    assert f.figures["break_even"] == pytest.approx(7.0 / 1.56, abs=1e-3) and "1.56 ms [derived]" in f.sentence


def test_a_baseline_bench_reads_its_wall_clock_decode_step_from_tpot() -> None:
    doc = {"bench_id": "b1", "config_name": "baseline", "completed": 16, "speculative": {"algorithm": None},
           "decode_ms_per_token": None, "tpot_ms": {"median": 1.56, "mean": 1.6}}
    a = explain.bench_anatomy(doc)
    assert a["decode_step"]["ms"] == pytest.approx(1.56)


REAL = Path(__file__).resolve().parents[2] / "data" / "real-0.5.16-h200"


def test_draft_surplus_fires_where_the_real_grid_says_steps_were_wasted() -> None:
    """Real SGLang 0.5.16 on an H200, 7B-shaped target, draft wrong every 3rd slot (accept length 2.98 from steps
    2 on), the whole grid measured: steps 5 and 7 ran 7 % and 12 % slower than steps 2 at the same accept length;
    draft_share (40 %) never fired there. draft_surplus fires at 5 and 7 and is silent at 1, 2 and 3."""
    doc = json.loads((REAL / "7b-p3-grid-sweep.json").read_text())
    fired = {s.config: {f.rule for f in found} for s, found in explained(doc)}
    tok_s = {r["config"]: r["tok_s"] for r in doc["rows"]}
    assert "draft_surplus" in fired["eagle3-s7-k1-d8"] and "draft_surplus" in fired["eagle3-s5-k1-d6"]
    assert not any("draft_surplus" in fired[c] for c in ("eagle3-s1-k1-d2", "eagle3-s2-k1-d3", "eagle3-s3-k1-d4"))
    assert tok_s["eagle3-s2-k1-d3"] > tok_s["eagle3-s5-k1-d6"] > tok_s["eagle3-s7-k1-d8"]
    assert not any("draft_share" in rules for rules in fired.values())
    (sentence,) = [f.sentence for s, found in explained(doc) if s.config == "eagle3-s7-k1-d8" for f in found
                   if f.rule == "draft_surplus"]
    assert "--speculative-num-steps 2" in sentence and "[timer]" in sentence


@pytest.mark.parametrize("version, flag", [("0.5.12", "--cuda-graph-max-bs "), ("0.5.16", "--cuda-graph-max-bs-decode"),
                                           ("0.5.23", "--cuda-graph-max-bs-decode")])
def test_verify_eager_names_the_graph_flag_as_the_measuring_release_spells_it(version: str, flag: str) -> None:
    """0.5.20 has no --cuda-graph-max-bs at all: advice in the old name would be refused by the server it is for."""
    eager, _ = CASES["verify_eager"]
    from dataclasses import replace

    (finding,) = [f for f in explain.explain(replace(eager, version=version)) if f.rule == "verify_eager"]
    assert f"raise {flag}" in finding.sentence + " ", finding.sentence


def test_a_documents_subjects_know_the_release_that_measured_them() -> None:
    doc = json.loads((REAL / "7b-p3-grid-sweep.json").read_text())
    assert {s.version for s in explain.subjects(doc)} == {r["sglang_version"] for r in doc["rows"]} == {"0.5.16"}


def test_verify_eager_fires_on_the_real_eager_verify_and_names_the_flag_that_caused_it() -> None:
    """Real SGLang 0.5.16, one H200, 7B shape, CUDA graphs off (`inv profile --trace`, 2026-12-04): verify launched
    466 kernels per pass with 28 ms of gaps. The advice names --disable-cuda-graph, not the batch-size flag (which
    changes nothing while graphs are off); the baseline is the eager decode step of 2026-12-03 (15.9 ms [timer])."""
    doc = json.loads((REAL / "7b-p3-s3-eager-profile-trace.json").read_text())["hosts"][0]["data"]
    base = json.loads((REAL / "7b-p3-baseline-eager-profile.json").read_text())["hosts"][0]["data"]
    (s,) = explain.subjects(doc, base)
    found = {f.rule: f for f in explain.explain(s)}
    assert "verify_eager" in found and found["verify_eager"].figures["kernel_launches"] == 466
    assert "--disable-cuda-graph" in found["verify_eager"].sentence, found["verify_eager"].sentence
    assert "--cuda-graph-max-bs" not in found["verify_eager"].sentence
    assert "break_even" not in found  # 2.98 tokens per 44 ms cycle against one per 15.9 ms decode step: it wins


def _moe(name: str) -> dict[str, Any]:
    return json.loads((REAL / f"moe-p3-{name}-profile.json").read_text())["hosts"][0]["data"]


def test_break_even_fires_on_the_real_moe_steps_7_that_lost_to_its_baseline() -> None:
    """Real SGLang 0.5.16, one H200, Qwen3-MoE shape (64 experts, top-8, each slot its own experts), 2026-12-04:
    steps 7 served 427 tok/s against the baseline's 522 (−18 % [tool's bench]), steps 3 610 (+17 %). The baseline's
    profile gives its wall-clock decode step (TPOT) beside the timer's forward; without it break_even was silent."""
    base = _moe("base")
    (s7,) = explain.subjects(_moe("s7"), base)
    (s3,) = explain.subjects(_moe("s3"), base)
    found = {f.rule: f for f in explain.explain(s7)}
    assert "break_even" in found, sorted(found)
    assert 0.15 < found["break_even"].figures["loss"] < 0.30  # predicted 23 %; the bench measured 18 %
    assert "break_even" not in {f.rule for f in explain.explain(s3)}
    assert _moe("s7")["bench"]["output_tok_s"] < base["bench"]["output_tok_s"] < _moe("s3")["bench"]["output_tok_s"]


def test_gemm_growth_fires_on_the_real_moe_verify_that_reads_more_experts() -> None:
    """The traced profiles of the same run: verify's GEMM time 2.7× decode's for 4 tokens (32 of 64 experts per
    layer against 8), 4.6× for 8 tokens (all 64) [trace]."""
    base = _moe("base-trace")
    growth = {}
    for name in ("s3-trace", "s7-trace"):
        (s,) = explain.subjects(_moe(name), base)
        (f,) = [f for f in explain.explain(s) if f.rule == "gemm_growth"]
        growth[name] = f.sentence
    assert "2.7×" in growth["s3-trace"] and "4.6×" in growth["s7-trace"], growth


def test_draft_saturated_fires_where_the_real_grid_says_a_longer_chain_wins() -> None:
    """The same real grid: steps 1 accepted its one draft token in half the passes and ran 46 % slower than steps 2
    (268 against 499 tok/s); no rule said so (break_even is silent where speculation already wins). Judged as the
    sweep (each row beside the longest chain it measured, steps 7, whose passes show how far acceptance goes)
    draft_saturated fires at steps 1 and names steps 2, and is silent from steps 2 on, where acceptance stops at
    2.98 < steps + 1: no pass of the steps-7 chain accepted a third draft token."""
    doc = json.loads((REAL / "7b-p3-grid-sweep.json").read_text())
    found = {s.config: {f.rule: f for f in fs} for s, fs in explained(doc)}
    f = found["eagle3-s1-k1-d2"]["draft_saturated"]
    assert f.figures["steps"] == 2 and f.figures["gain"] > 0.3, f.figures
    assert "--speculative-num-steps 2" in f.sentence and "steps-7 chain" in f.sentence
    assert not any("draft_saturated" in found[c] for c in found if c != "eagle3-s1-k1-d2"), found
    tok_s = {r["config"]: r["tok_s"] for r in doc["rows"]}
    assert tok_s["eagle3-s2-k1-d3"] > 1.5 * tok_s["eagle3-s1-k1-d2"]


def test_draft_saturated_alone_reads_its_own_histogram_and_says_so() -> None:
    """Without a longer chain beside it a row has only its own passes: the steps-1 row's last position accepted
    half the time, continued geometrically (the tail model stated in plan/predict.longer_chain), still pays for one
    more step; its sentence names that model, not a measured longer chain. A steps-3 row whose passes never
    accepted a third token is silent alone too."""
    from dataclasses import replace

    doc = json.loads((REAL / "7b-p3-grid-sweep.json").read_text())
    alone = {s.config: replace(s, longer=None) for s in explain.subjects(doc)}
    (f,) = [f for f in explain.explain(alone["eagle3-s1-k1-d2"]) if f.rule == "draft_saturated"]
    assert "last position's acceptance (50 %)" in f.sentence and "draft-extend 0.20 ms [timer]" in f.sentence
    assert f.figures["steps"] >= 2 and f.figures["share"] == pytest.approx(684 / 1360, abs=1e-3)
    assert "draft_saturated" not in rules_fired(alone["eagle3-s3-k1-d4"])


def test_draft_saturated_is_silent_for_a_tree_draft() -> None:
    fires, _ = CASES["draft_saturated"]
    from dataclasses import replace

    tree = replace(fires, anatomy={**fires.anatomy, "topk": 4})
    assert "draft_saturated" not in rules_fired(tree)
