"""The NCCL-candidate skip rule of a --predict sweep, and the simulator's trace telling its NCCL cost model
(the sweep that uses the rule: tests/fleet/test_nccl_skip.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fabfile.plan.nccl_skip import skips

SIM_SITE = Path(__file__).resolve().parents[2] / "simhost" / "sim" / "site"


def _row(name: str, tok_s: float, ar_ms: float, pass_ms: float) -> dict[str, object]:
    return {"config": name, "ok": True, "tok_s": tok_s, "tok_s_ci": 0.02,
            "allreduce": {"ms_per_pass": ar_ms, "pass_ms": pass_ms}}


def test_tp1_skips_every_other_candidate_with_the_reason() -> None:
    got = skips([_row("baseline@pcie", 50.0, 0.0, 20.0)], ["none"], tp=1)
    assert [s.candidate for s in got] == ["none"] and "TP 1" in got[0].reason


def test_zero_allreduce_bound_keeps_a_candidate_that_could_win() -> None:
    # 10 % of each pass is all-reduce: with none of it the candidate could be faster, so it is loaded
    assert skips([_row("baseline@pcie", 50.0, 2.0, 20.0), _row("s7@pcie", 90.0, 3.0, 30.0)], ["none"], tp=2) == []


def test_a_modelled_candidate_that_cannot_beat_the_best_row_is_skipped_with_its_figures() -> None:
    rows = [_row("baseline@none", 50.0, 2.0, 20.0), _row("s7@none", 90.0, 3.0, 30.0)]
    # the model says LL-only doubles every all-reduce: never faster than the measured rows
    got = skips(rows, ["pcie"], tp=2, model=lambda c, r: 2.0 * float(r["allreduce"]["ms_per_pass"]))  # type: ignore[index]
    assert [s.candidate for s in got] == ["pcie"]
    assert got[0].optimistic_tok_s is not None and got[0].optimistic_tok_s < got[0].best_pessimistic_tok_s  # type: ignore[operator]
    assert "SGLang profiler trace" in got[0].source and "tok/s" in got[0].reason
    # without a model only the zero bound applies: kept
    assert skips(rows, ["pcie"], tp=2, model=lambda c, r: None) == []


def test_simulator_trace_allreduce_kernels_last_what_its_nccl_model_charges(tmp_path: Path) -> None:
    code = r"""
import json, sys, types
from sglang._sim import nccl
from sglang._sim.profiler import Measurement
from fabfile.remote.measure import trace as tr
sa = types.SimpleNamespace(tp_size=2, disable_cuda_graph=False, enable_metrics=False)
m = Measurement(sa, (0, 5, 16), 2, [1, 2])
out = {}
for proto in ("LL", "Simple"):
    n, nbytes = 8, 7168 * 64 * 2
    ms = nccl.allreduce_us(nbytes, "Ring", proto, 2, "pcie") / 1000
    tr_doc = m.trace(0, [{"kind": "decode", "t": 1.0, "ms": 5.0, "bs": 64, "ar": (n, ms)}])
    ks = [e for e in tr_doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel")]
    b = tr.summarize(tr_doc)["phases"]["decode"]["breakdown"]
    out[proto] = [len(ks), sum(e["dur"] for e in ks) / len(ks) / 1000, ms, b["batch"], b["classes_ms"]["allreduce"]]
print(json.dumps(out))
"""
    env = {**os.environ, "PYTHONPATH": str(SIM_SITE)}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    got = json.loads(res.stdout)
    for n, traced, model, batch, per_pass in got.values():
        assert n == 8 and abs(traced - model) < 1e-6
        # the tool's reading of the same trace: the pass's batch from SGLang's bs= label (what sizes the messages)
        # and its all-reduce ms per pass, what the NCCL skip rule is fed
        assert batch == 64 and abs(per_pass - n * model) < 1e-3
    assert got["LL"][2] != got["Simple"][2]  # the model's figure moves with the protocol, and the trace with it
