"""The measuring core of `inv profile` on SGLang's real formats: the device timer's counters and a profiler trace,
both as real SGLang 0.5.16 wrote them on an H200 (``tests/data/real-0.5.16-h200/``, whose README gives the launch)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fabfile.remote.measure import devicetimer, trace
from fabfile.remote.protocol import SOURCE_TIMER, SOURCE_TRACE

REAL = Path(__file__).resolve().parents[3] / "data" / "real-0.5.16-h200"
METRICS = REAL / "metrics-device-timer.txt"
TRACE = REAL / "eagle3-s3-tp0.trace.json.gz"



# -- the device timer -------------------------------------------------------------------------------------------
def test_the_real_timer_text_gives_ms_per_verify_pass_and_per_draft_forward() -> None:
    after = devicetimer.snapshot(METRICS.read_text())
    assert after["seconds"][0] == pytest.approx({"extend": 29.216012, "decode": 0.440289, "target_verify": 1.005235})
    assert after["verify_calls"] == 194.0
    # The scheduler's decode batches (one per cycle): 202, with the same rank label as the timer.
    assert after["decode_passes"] == {0: 202.0}
    d = devicetimer.delta(devicetimer.snapshot(""), after)
    a = devicetimer.anatomy(d, 0, version="0.5.16", cuda_graph=False, speculative=True, steps=3, draft_tokens=4,
                            concurrency=1, meta_verify_ct=None)
    # At concurrency 1 the divisor is SGLang's own verify count (194), not the decode batches (202): issue 37.
    assert a["verify"] == {"ms": pytest.approx(1005.235 / 194, abs=1e-3), "source": SOURCE_TIMER, "count": 194,
                           "note": devicetimer.VERIFY_CALLS_NOTE}
    # CUDA graphs off: the draft's forwards are `decode` forwards, steps - 1 of them per cycle.
    assert a["draft"]["ms"] == pytest.approx(440.289 / 194, abs=1e-3)
    assert a["draft_step"]["ms"] == pytest.approx(440.289 / 388, abs=1e-3)
    assert "draft_extend" not in a  # eagerly it is timed as `extend`, beside the prefill: not separable


def test_without_the_pass_counter_verify_calls_count_the_passes() -> None:
    """1.005 s over 194 spec_verify_calls_total → 5.2 ms per verify (the figure profiling.md quotes)."""
    d = devicetimer.delta(devicetimer.snapshot(""), devicetimer.snapshot(METRICS.read_text()))
    d["decode_passes"] = {}
    a = devicetimer.anatomy(d, 0, version="0.5.16", cuda_graph=False, speculative=True, steps=3, draft_tokens=4,
                            concurrency=1, meta_verify_ct=None)
    assert a["verify"]["ms"] == pytest.approx(5.18, abs=0.01)
    assert a["verify"]["note"] == devicetimer.VERIFY_CALLS_NOTE


def test_at_concurrency_1_verify_is_divided_by_sglangs_verify_count_not_the_decode_batches() -> None:
    """The real H200 run of issue 37: target_verify 0.5559 s, 1040 decode batches, spec_verify_calls_total +1028:
    0.541 ms per verify pass (SGLang's count), not 0.535 (the batches)."""
    page = ('sglang:forward_execution_seconds_total{category="target_verify",tp_rank="0"} 0.5559\n'
            'sglang:spec_verify_calls_total 1028\n'
            'sglang:cuda_graph_passes_total{mode="decode_cuda_graph",tp_rank="0"} 1040\n')
    d = devicetimer.delta(devicetimer.snapshot(""), devicetimer.snapshot(page))
    one = devicetimer.anatomy(d, 0, version="0.5.16", cuda_graph=True, speculative=True, steps=3, draft_tokens=4,
                              concurrency=1, meta_verify_ct=None)
    assert one["verify"]["ms"] == pytest.approx(0.5408, abs=1e-4) and one["verify"]["count"] == 1028
    # several requests per batch: the per-request count over-counts passes, the batch counter stays the divisor
    four = devicetimer.anatomy(d, 0, version="0.5.16", cuda_graph=True, speculative=True, steps=3, draft_tokens=4,
                               concurrency=4, meta_verify_ct=None)
    assert four["verify"]["count"] == 1040


def test_the_timer_categories_follow_the_release_and_cuda_graphs() -> None:
    assert devicetimer.categories("0.5.16", cuda_graph=True) == {
        "draft": "eagle_draft", "verify": "target_verify", "draft_extend": "eagle_draft_extend", "decode": "decode"}
    assert devicetimer.categories("0.5.16", cuda_graph=False)["verify"] == "target_verify"
    assert devicetimer.categories("0.5.12", cuda_graph=False)["verify"] is None  # eager verify counted as extend


def test_before_the_verify_counter_the_requests_verify_counts_are_the_passes() -> None:
    page = ('sglang:forward_execution_seconds_total{category="target_verify",tp_rank="0"} %s\n'
            'sglang:forward_execution_seconds_total{category="eagle_draft",tp_rank="0"} %s\n')
    d = devicetimer.delta(devicetimer.snapshot(page % (1.0, 0.5)), devicetimer.snapshot(page % (1.5, 0.8)))
    a = devicetimer.anatomy(d, 0, version="0.5.12", cuda_graph=True, speculative=True, steps=3, draft_tokens=4,
                            concurrency=2, meta_verify_ct=200)
    assert a["verify"]["ms"] == pytest.approx(500 / 100)
    assert a["verify"]["note"] == "Σ meta_info.spec_verify_ct ÷ concurrency 2"
    assert a["draft"]["ms"] == pytest.approx(300 / 100)


def test_a_server_without_the_timer_has_no_counters() -> None:
    assert not devicetimer.has_timer(devicetimer.snapshot('sglang:num_running_reqs{tp_rank="0"} 1.0\n'))


# -- the profiler trace -----------------------------------------------------------------------------------------
def test_the_real_trace_gives_each_phase_with_its_kernels() -> None:
    s = trace.summarize(trace.load(str(TRACE)))
    ph = s["phases"]
    assert s["rank"] == 0
    assert {k: ph[k]["passes"] for k in ph} == {"extend": 2, "draft": 11, "verify": 11, "draft_extend": 11,
                                               "between": 11}
    assert ph["draft"]["span_ms"] == pytest.approx(7.31, abs=0.01)
    assert ph["verify"]["span_ms"] == pytest.approx(9.00, abs=0.01)
    assert ph["draft_extend"]["span_ms"] == pytest.approx(3.34, abs=0.01)
    assert s["draft_step_ms"] == pytest.approx(1.81, abs=0.01) and s["draft_steps"] == 22
    v = ph["verify"]["breakdown"]
    # CUDA graphs were off: every kernel launched by itself (42 cuLaunchKernelEx + 41 cudaLaunchKernelExC + 31
    # cudaLaunchKernel per pass), no graph launch; TP 1: no all-reduce.
    assert (v["launch"], v["kernel_launches"], v["graph_launches"]) == ("eager", 114.0, 0.0)
    assert v["allreduce_calls"] == 0 and v["allreduce_mean_us"] is None
    assert v["batch"] == 1.0 and v["nccl_ms"] == 0.0  # one request in flight (SGLang's bs= label)
    assert v["classes_ms"]["gemm"] > 0 and v["classes_ms"]["attention"] > 0 and v["classes_ms"]["norm_activation"] > 0
    # A tiny model eagerly: the GPU waits on launches most of the verify span.
    assert v["classes_ms"]["idle_gap"] > 0.9 * v["span_ms"]
    # VerifyTreeGreedy runs after the verify forward's span, between the phases.
    assert ph["between"]["breakdown"]["classes_ms"]["sampling_verify"] > 0
    assert ph["draft"]["breakdown"]["classes_ms"]["sampling_verify"] > 0  # _draft_topk1_*


def test_the_real_traces_cycle_anatomy_names_its_source() -> None:
    a = trace.anatomy(trace.summarize(trace.load(str(TRACE))), rank=0, steps=3, draft_tokens=4)
    assert a["verify"]["source"] == SOURCE_TRACE
    assert a["cycle"]["ms"] == pytest.approx(23.5, abs=0.1)
    total = a["draft"]["ms"] + a["verify"]["ms"] + a["draft_extend"]["ms"] + a["other"]["ms"]
    assert total == pytest.approx(a["cycle"]["ms"], abs=1e-3)
    assert set(a["kernels"]) == {"verify", "draft", "draft_extend", "between"}


@pytest.mark.parametrize("name,cls", [
    ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN", "gemm"), ("_fwd_kernel", "attention"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", "norm_activation"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allreduce"),
    ("ncclSymkDevKernel_AllReduce_AGxLLMC_R_bf16", "allreduce"), ("cross_device_reduce_1stage<bf16, 2>", "allreduce"),
    ("all_reduce_1shot_push_kernel", "allreduce"), ("multimem_all_reduce_kernel", "allreduce"),
    ("allreduce_fusion_kernel_oneshot_lamport", "allreduce"),
    ("void VerifyTreeGreedy<int, long>(int*)", "sampling_verify"),
    ("_draft_topk1_partial_argmax_kernel", "sampling_verify"), ("TopPRenormProbKernel", "sampling_verify"),
    ("Memcpy DtoD (Device -> Device)", "copy"), ("void at::native::elementwise_kernel<128, 4>", "other"),
    # an MoE layer on SGLang's Triton runner: the expert GEMMs are GEMM (gemm_growth reads them), the router's
    # top-k and the token sort are no sampling
    ("fused_moe_kernel", "gemm"),
    ("void topkGatingSoftmax<__nv_bfloat16, 8, 64, 4, 16>(__nv_bfloat16 const*, bool const*, float*)", "other"),
    ("void moe_align_block_size_small_batch_expert_kernel<int, 256>(int const*, int*)", "other"),
    ("void moe_sum_reduce_kernel<__nv_bfloat16, 8>(__nv_bfloat16 const*)", "other"),
])
def test_kernel_classes_by_name(name: str, cls: str) -> None:
    assert trace.kernel_class(name) == cls


def test_a_trace_over_the_bound_is_refused_not_summarised(tmp_path: Path) -> None:
    path = tmp_path / "x-TP-0.trace.json.gz"
    events = [{"ph": "X", "cat": "kernel", "name": "k" * 200, "ts": i, "dur": 1} for i in range(5000)]
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode(), 1))
    with pytest.raises(trace.TraceTooBig, match="compressed"):
        trace.load(str(path), cap_bytes=path.stat().st_size - 1)
    # Compressed under the bound, but its JSON inflates past cap × JSON_FACTOR: stopped while reading.
    with pytest.raises(trace.TraceTooBig, match="JSON"):
        trace.load(str(path), cap_bytes=path.stat().st_size + 1)
    assert trace.load(str(path), cap_bytes=10 * 1024 * 1024)["traceEvents"]


# -- the agent's profiles directory -----------------------------------------------------------------------------
def test_a_rank_trace_over_the_bound_stops_the_profile_with_one_sentence(tmp_path: Path) -> None:
    from fabfile.remote.common import AgentError
    from fabfile.remote.measure import profilestore

    (tmp_path / "specdeploy-1.5-TP-0.trace.json.gz").write_bytes(b"x" * 2000)
    with pytest.raises(AgentError) as e:
        profilestore.ready_traces(str(tmp_path), cap=1000)
    assert e.value.kind == "trace_too_big"
    assert "2000 bytes, over the bound of 1000 bytes" in str(e.value)


def test_the_oldest_profiles_go_first_when_over_the_bound(tmp_path: Path) -> None:
    import os

    from fabfile.remote.measure import profilestore

    for i, name in enumerate(("p1", "p2", "p3")):
        d = tmp_path / name
        d.mkdir()
        (d / "x-TP-0.trace.json.gz").write_bytes(b"x" * 1000)
        os.utime(d, (1000 + i, 1000 + i))
    loose = tmp_path / "1.5-TP-0.trace.json.gz"  # a /start_profile without output_dir, written the earliest
    loose.write_bytes(b"x" * 1000)
    os.utime(loose, (999, 999))
    assert profilestore.prune(str(tmp_path), keep_bytes=2000) == ["1.5-TP-0.trace.json.gz", "p1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p2", "p3"]


def test_the_profiles_directory_is_never_a_symlink(tmp_path: Path) -> None:
    from fabfile.remote.common import AgentError
    from fabfile.remote.measure import profilestore

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "profiles").symlink_to(tmp_path)
    with pytest.raises(AgentError) as e:
        profilestore.profiles_dir(str(state))
    assert e.value.kind == "unsafe_path"


def test_a_trace_still_being_written_is_read_once_it_is_whole(tmp_path: Path) -> None:
    from fabfile.remote.common import AgentError
    from fabfile.remote.measure import profile

    path = tmp_path / "specdeploy-1.5-TP-0.trace.json.gz"
    whole = gzip.compress(json.dumps({"traceEvents": []}).encode())
    path.write_bytes(whole[: len(whole) // 2])  # what a reader sees while SGLang writes
    waits: list[float] = []

    def sglang_finishes_writing(seconds: float) -> None:
        waits.append(seconds)
        path.write_bytes(whole)

    assert profile.read_trace(str(path), 1 << 20, wait=sglang_finishes_writing)["phases"] == {}
    assert waits == [1.0]  # read once more, a second later
    path.write_bytes(b"not gzip")
    del waits[:]
    with pytest.raises(AgentError, match="not a readable trace"):
        profile.read_trace(str(path), 1 << 20, attempts=2, wait=waits.append)
    assert waits == [1.0]  # the last attempt's failure is final: no wait after it
    del waits[:]
    with pytest.raises(AgentError, match="not a readable trace"):
        profile.read_trace(str(path), 1 << 20, wait=waits.append)
    assert waits == [1.0, 1.0]  # four attempts allowed, but the file did not grow during the second wait


def test_a_pass_tells_nccls_all_reduce_from_sglangs_custom_one_and_its_batch() -> None:
    """NCCL settings move only NCCL's own kernels (the sweep's NCCL skip scales those); SGLang's custom all-reduce
    counts as all-reduce but not as NCCL's. The batch comes from the pass's own label."""
    def ev(cat: str, name: str, ts: float, dur: float) -> dict[str, object]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": {}}

    doc = {"traceEvents": [ev("gpu_user_annotation", "step[DECODE bs=16]", 0.0, 100.0),
                           ev("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                              10.0, 20.0),
                           ev("kernel", "cross_device_reduce_1stage<__nv_bfloat16, 2>", 40.0, 10.0),
                           ev("kernel", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 60.0, 30.0)]}
    b = trace.summarize(doc)["phases"]["decode"]["breakdown"]
    assert b["batch"] == 16.0 and b["allreduce_calls"] == 2.0
    assert b["classes_ms"]["allreduce"] == pytest.approx(0.03) and b["nccl_ms"] == pytest.approx(0.02)
