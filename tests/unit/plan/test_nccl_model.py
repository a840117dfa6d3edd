"""The tool's per-candidate all-reduce model (plan/nccl_model) and how the sweep's skip rule reads it: from a
profile answer's trace figures to the candidates a --predict sweep does not load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fabfile.plan.nccl_model import CandidateModel, allreduce_figures, enabled, message_us
from fabfile.plan.nccl_skip import skips
from fabfile.present.sweep_report import table_rows

PER_TOKEN = 7168 * 2  # hidden × bf16
CTX = {"interconnect": "pcie", "tp": 2, "hidden_size": 7168, "dtype_bytes": 2, "dtype": "bfloat16"}


def _times(tuning: dict[str, str], tokens: int, path: str = "pcie") -> float:
    t = message_us(tokens * PER_TOKEN, 2, path, *enabled(tuning, path))
    assert t is not None
    return t


def test_ll_wins_small_messages_and_simple_large_ones_on_pcie() -> None:
    # decode at one request: latency-bound, LL's; verify of 16 requests × 8 draft tokens: bandwidth-bound, Simple's
    assert _times({"NCCL_PROTO": "LL"}, 1) < _times({"NCCL_PROTO": "Simple"}, 1)
    assert _times({"NCCL_PROTO": "Simple"}, 128) < _times({"NCCL_PROTO": "LL"}, 128)
    # unset: NCCL's own choice per size, never slower than either forced protocol
    for tokens in (1, 16, 128, 4096):
        assert _times({}, tokens) <= min(_times({"NCCL_PROTO": p}, tokens) for p in ("LL", "Simple"))


def test_ll128_is_on_by_default_only_over_nvlink() -> None:
    assert "LL128" not in enabled({}, "pcie")[0] and "LL128" in enabled({}, "nvlink")[0]
    assert enabled({"NCCL_PROTO": "^LL"}, "pcie")[0] == {"Simple"}  # NCCL's own grammar (ncclenv.selection)


def _row(config: str, tok_s: float, steps: int, ar_ms: float, span_ms: float, batch: float) -> dict[str, Any]:
    """A first-candidate row as the sweep fills it from a profile answer (the trace's kernel figures)."""
    phase = "verify" if steps else "decode"
    kernels = {phase: {"span_ms": span_ms, "classes_ms": {"allreduce": ar_ms}, "allreduce_calls": 8.0,
                       "allreduce_mean_us": ar_ms / 8 * 1000, "passes": 12, "batch": batch}}
    trace: dict[str, Any] = {"rank": 0, "kernels": kernels}
    if steps:
        trace["cycle"] = {"ms": span_ms * 2, "source": "SGLang profiler trace", "count": 11}
    answer = {"profile_id": "p1", "ranks": [{"rank": 0, "trace": trace}], "allreduce_context": CTX}
    figs = allreduce_figures(answer, bool(steps), 8 if steps else None, period_ms=span_ms * 1.2)
    return {"config": config, "ok": True, "tok_s": tok_s, "tok_s_ci": 0.02, "steps": steps, "allreduce": figs}


def test_figures_from_the_trace_size_verifys_messages_by_its_batch_and_draft_tokens() -> None:
    r = _row("eagle3-s7-k1-d8@PROTO=Simple", 300.0, 7, 6.0, 10.0, 16.0)
    ar = r["allreduce"]
    assert ar["phase"] == "verify" and ar["ms_per_pass"] == 6.0 and ar["pass_ms"] == 10.0 and ar["period_ms"] == 20.0
    assert ar["tokens"] == 16 * 8 and ar["bytes"] == 128 * PER_TOKEN
    assert "SGLang's profiler trace" in ar["source"]
    base = _row("baseline@PROTO=Simple", 100.0, 0, 2.0, 8.0, 16.0)["allreduce"]
    assert base["phase"] == "decode" and base["tokens"] == 16 and base["period_ms"] == 8.0 * 1.2


def test_the_ratio_model_scales_the_measured_time_by_nccls_shape() -> None:
    m = CandidateModel({"NCCL_PROTO": "Simple"}, {"PROTO=LL": {"NCCL_PROTO": "LL"}}, CTX)
    r = _row("eagle3-s7-k1-d8@PROTO=Simple", 300.0, 7, 6.0, 10.0, 16.0)
    point = m.predict("PROTO=LL", r)
    ratio = _times({"NCCL_PROTO": "LL"}, 128) / _times({"NCCL_PROTO": "Simple"}, 128)
    assert point is not None and abs(point - 6.0 * ratio) < 1e-9 and point > 6.0
    fast = m("PROTO=LL", r)
    assert fast is not None and 6.0 < fast < point  # the optimistic end: still slower than Simple, less so


def test_a_candidate_that_differs_outside_proto_and_algo_is_not_modelled() -> None:
    m = CandidateModel({"NCCL_PROTO": "Simple"}, {"pcie": {"NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": "16"}}, CTX)
    assert m("pcie", _row("baseline@none", 100.0, 0, 2.0, 8.0, 16.0)) is None
    assert "NCCL_MAX_NCHANNELS" in m.why["pcie"]
    unknown_link = CandidateModel({}, {"LL": {"NCCL_PROTO": "LL"}}, {**CTX, "interconnect": "unknown"})
    assert unknown_link("LL", _row("baseline@-", 100.0, 0, 2.0, 8.0, 16.0)) is None


def test_the_sweep_skips_the_candidate_that_cannot_win_and_keeps_the_one_that_can() -> None:
    """The first candidate forces Simple; verify's 128-token messages favour Simple, so forcing LL cannot beat the
    best measured row (skipped, with its figures and their sources), while NCCL's own choice (unset) can (kept)."""
    rows = [_row("baseline@PROTO=Simple", 100.0, 0, 3.0, 8.0, 16.0),
            _row("eagle3-s7-k1-d8@PROTO=Simple", 300.0, 7, 6.0, 10.0, 16.0)]
    m = CandidateModel({"NCCL_PROTO": "Simple"}, {"PROTO=LL": {"NCCL_PROTO": "LL"}, "PROTO=-": {}}, CTX)
    got = skips(rows, ["PROTO=LL", "PROTO=-"], tp=2, model=m)
    assert [s.candidate for s in got] == ["PROTO=LL"] and got[0].modelled
    d = got[0].as_dict()
    assert d["best_config"] == "eagle3-s7-k1-d8@PROTO=Simple"
    assert d["optimistic_tok_s"] < d["best_pessimistic_tok_s"]
    assert d["figures"]["optimistic_tok_s"].startswith("derived") and "model" in d["figures"]["optimistic_tok_s"]
    assert "measured" in d["figures"]["best_pessimistic_tok_s"]
    # without the model (the zero bound) forcing LL could win: loaded
    assert skips(rows, ["PROTO=LL"], tp=2) == []


def test_the_table_names_the_configurations_not_loaded() -> None:
    doc = {"rows": [], "concurrency_levels": [16],
           "nccl_skipped": [{"candidate": "PROTO=LL", "optimistic_tok_s": 250.0, "configs": ["baseline@PROTO=LL"]}]}
    (row,) = table_rows(doc)
    assert row[0] == "baseline@PROTO=LL" and row[1] == "skipped" and "cannot win" in row[-1]


def test_only_nccls_own_all_reduce_time_is_what_a_candidate_moves() -> None:
    k = {"span_ms": 10.0, "classes_ms": {"allreduce": 6.0}, "nccl_ms": 4.0, "batch": 16.0, "passes": 12}
    answer = {"ranks": [{"rank": 0, "trace": {"kernels": {"verify": k}, "cycle": {"ms": 20.0}}}],
              "allreduce_context": CTX}
    figs = allreduce_figures(answer, True, 8)
    assert figs is not None and figs["ms_per_pass"] == 4.0 and figs["allreduce_ms_per_pass"] == 6.0


SIM_SITE = Path(__file__).resolve().parents[2] / "simhost" / "sim" / "site"


def test_the_optimistic_end_is_never_slower_than_the_simulators_nccl_cost() -> None:
    """The skip is sound only if the figure it takes is optimistic: against the simulator's own NCCL cost model
    (other latencies and bandwidths than the tool's), over PCIe and NVLink, TP 2-8, 1 to 4096 tokens and each pair
    of protocol settings, the tool's optimistic all-reduce time is at most what the simulator charges."""
    code = r"""
import json
from sglang._sim import nccl as sim
from fabfile.plan.nccl_model import CandidateModel
settings = [{"NCCL_PROTO": "LL"}, {"NCCL_PROTO": "Simple"}, {}, {"NCCL_PROTO": "LL128"}, {"NCCL_ALGO": "Tree"}]
worst = 0.0
for path in ("pcie", "nvlink"):
    for tp in (2, 4, 8):
        for tokens in (1, 4, 16, 64, 128, 512, 4096):
            nb = tokens * 7168 * 2
            def cost(env):
                algo, proto = sim.choose(nb, tp, {"interconnect": path}, env)
                return sim.allreduce_us(nb, algo, proto, tp, path)
            for first in settings:
                for other in settings:
                    m = CandidateModel(first, {"o": other}, {"interconnect": path, "tp": tp})
                    fast = m("o", {"allreduce": {"bytes": nb, "ms_per_pass": 1.0}})
                    worst = max(worst, fast * cost(first) / cost(other))
print(json.dumps(worst))
"""
    env = {**os.environ, "PYTHONPATH": str(SIM_SITE)}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(res.stdout) <= 1.0, res.stdout
