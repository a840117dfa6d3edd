"""The metric parsers of the host-side agent (fabfile/remote/measure/metrics.py) on SGLang's real formats."""

from __future__ import annotations

import pytest

from fabfile.remote.measure import metrics

# 0.5.7 (scheduler_metrics_mixin.py): trailing ", ", accept rate = accept_len / draft_tokens.
V057 = ("[2025-12-01 10:00:00 TP0] Decode batch, #running-req: 1, #token: 512, token usage: 0.01, accept len: 2.85, "
        "accept rate: 0.71, cuda graph: True, gen throughput (token/s): 150.23, #queue-req: 0, ")
# 0.5.11+ / 0.5.23 (metrics_reporter.py): no trailing comma, accept rate = (accept_len-1)/(draft_tokens-1).
V0511 = ("[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 1, #token: 512, token usage: 0.01, accept len: 2.85, "
         "accept rate: 0.62, cuda graph: True, gen throughput (token/s): 150.23, #queue-req: 0")
# 0.5.23 with the optional extras: cap len / block accept len after accept rate, est. TFLOPS at the end.
V0523_EXTRAS = ("[2026-03-01 10:00:00 DP0 TP0 EP0] Decode batch, #running-req: 4, #token: 2048, token usage: 0.03, "
                "accept len: 3.10, accept rate: 0.70, cap len: 4.00, block accept len: 2.90, cuda graph: True, "
                "gen throughput (token/s): 612.50, #queue-req: 2, est. decode TFLOPS/s (per GPU): 1.23")
# Hybrid SWA model: #full token / full token usage / #swa token / swa token usage.
HYBRID_SWA = ("[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 2, #full token: 1024, full token usage: 0.02, "
              "#swa token: 256, swa token usage: 0.05, accept len: 1.90, accept rate: 0.45, cuda graph: False, "
              "gen throughput (token/s): 88.10, #queue-req: 0")
# Hybrid SWA on 0.5.7 (trailing comma) and a mamba model.
HYBRID_SWA_057 = ("[2025-12-01 10:00:00 TP0] Decode batch, #running-req: 1, #full token: 640, full token usage: 0.01, "
                  "#swa token: 128, swa token usage: 0.02, accept len: 2.20, accept rate: 0.55, cuda graph: True, "
                  "gen throughput (token/s): 95.00, #queue-req: 0, ")
MAMBA = ("[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 1, #token: 300, token usage: 0.01, mamba num: 3, "
         "mamba usage: 0.10, accept len: 2.40, accept rate: 0.47, cuda graph: True, gen throughput (token/s): 70.00, "
         "#queue-req: 0")
BASELINE = ("[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 1, #token: 300, token usage: 0.01, "
            "cuda graph: True, gen throughput (token/s): 81.95, #queue-req: 0")
OLD_044 = ("[2025-01-01 10:00:00 TP0] Decode batch. #running-req: 1, #token: 300, token usage: 0.01, accept len: 2.10, "
           "gen throughput (token/s): 90.00, #queue-req: 0, ")


def test_057_line_with_trailing_comma() -> None:
    d = metrics.parse_decode_line(V057)
    assert d is not None
    assert d["accept_len"] == 2.85 and d["accept_rate"] == 0.71 and d["gen_throughput"] == 150.23
    assert d["running_req"] == 1 and d["tokens"] == 512 and d["queue_req"] == 0 and d["cuda_graph"] is True
    assert d["trailing_comma"] is True and d["time"] == "2025-12-01 10:00:00" and d["ranks"] == "TP0"


def test_0511_line_without_trailing_comma() -> None:
    d = metrics.parse_decode_line(V0511)
    assert d is not None
    assert d["accept_len"] == 2.85 and d["accept_rate"] == 0.62 and d["queue_req"] == 0
    assert d["trailing_comma"] is False


def test_0523_extras_do_not_confuse_accept_len() -> None:
    d = metrics.parse_decode_line(V0523_EXTRAS)
    assert d is not None
    assert d["accept_len"] == 3.10 and d["block_accept_len"] == 2.90 and d["cap_len"] == 4.00
    assert d["gen_throughput"] == 612.50 and d["queue_req"] == 2 and d["ranks"] == "DP0 TP0 EP0"


@pytest.mark.parametrize("line", [HYBRID_SWA, HYBRID_SWA_057])
def test_hybrid_swa_lines(line: str) -> None:
    d = metrics.parse_decode_line(line)
    assert d is not None
    assert d["tokens"] in (1024, 640) and d["swa_tokens"] in (256, 128)
    assert 0 < d["token_usage"] < d["swa_token_usage"]
    assert d["accept_len"] in (1.90, 2.20)
    assert d["trailing_comma"] is (line is HYBRID_SWA_057)


def test_mamba_and_baseline_and_old_lines() -> None:
    m = metrics.parse_decode_line(MAMBA)
    assert m is not None and m["mamba_num"] == 3 and m["mamba_usage"] == 0.10 and m["accept_len"] == 2.40
    b = metrics.parse_decode_line(BASELINE)
    assert b is not None and "accept_len" not in b and b["gen_throughput"] == 81.95
    o = metrics.parse_decode_line(OLD_044)
    assert o is not None and o["accept_len"] == 2.10 and "accept_rate" not in o
    assert metrics.parse_decode_line("[2026-01-01 10:00:00 TP0] Prefill batch, #new-seq: 1, ") is None


def test_log_prefix_with_milliseconds() -> None:
    d = metrics.parse_decode_line(V0511.replace("10:00:00 TP0]", "10:00:00.123 TP0]"))
    assert d is not None and d["time"] == "2026-01-01 10:00:00.123"


def test_accept_rate_meaning_and_version_independent_acceptance() -> None:
    assert metrics.accept_rate_meaning("0.5.7").startswith("accept_len / draft_tokens")
    assert metrics.accept_rate_meaning("0.5.11").startswith("(accept_len - 1)")
    assert metrics.accept_rate_meaning("0.5.23").startswith("(accept_len - 1)")
    assert metrics.accept_rate_meaning("0.4.10").startswith("not printed")
    assert metrics.accept_rate_meaning("0.5.5").startswith("accept_len / (steps + 1)")
    assert metrics.accept_rate_meaning("0.5.11rc1").startswith("(accept_len - 1)")
    # The same server state (accept len 2.85 of 4 draft tokens) prints 0.71 on 0.5.7 and 0.62 on 0.5.11+.
    assert round(2.85 / 4, 2) == 0.71
    assert metrics.draft_acceptance(2.85, 4) == pytest.approx(0.6167, abs=1e-3)
    assert metrics.draft_acceptance(2.85, 1) is None and metrics.draft_acceptance(None, 4) is None


def test_summarize_decode_lines() -> None:
    s = metrics.summarize_decode_lines(["noise", V057, V0511, BASELINE])
    assert s["lines"] == 3
    assert s["accept_len"] == pytest.approx(2.85) and s["gen_throughput"] == pytest.approx((150.23 * 2 + 81.95) / 3)
    assert metrics.summarize_decode_lines([]) == {"lines": 0}


PROM = """# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="kimi",engine_type="unified",tp_rank="0",pp_rank="0"} 2.75
sglang:spec_accept_length{model_name="kimi",engine_type="unified",tp_rank="1",pp_rank="0"} 9.0
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{model_name="kimi",engine_type="unified",tp_rank="0",pp_rank="0",dp_rank="0"} 0.58
sglang:spec_num_draft_tokens{model_name="kimi",tp_rank="0"} 4.0
sglang:spec_verify_calls_total{model_name="kimi",tp_rank="0"} 1.234e+03
sglang:gen_throughput{model_name="kimi",tp_rank="0"} 95.5
sglang:num_running_reqs{model_name="kimi",tp_rank="0"} 1.0
"""


def test_prometheus_text() -> None:
    parsed = metrics.parse_prometheus(PROM)
    assert len(parsed["sglang:spec_accept_length"]) == 2
    assert parsed["sglang:spec_accept_rate"][0][0]["dp_rank"] == "0"
    spec = metrics.spec_from_prometheus(PROM)
    assert spec["accept_len"] == 2.75  # the tp_rank 0 sample
    assert spec["accept_rate"] == 0.58 and spec["num_draft_tokens"] == 4.0
    assert spec["verify_calls_total"] == 1234.0 and spec["gen_throughput"] == 95.5
    assert metrics.spec_from_prometheus("# nothing\n") == {}


def test_server_info() -> None:
    info = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4, "version": "0.5.23",
            "internal_states": [{"avg_spec_accept_length": 2.61, "last_gen_throughput": 97.0}]}
    s = metrics.spec_from_server_info(info)
    assert s["avg_spec_accept_length"] == 2.61 and s["steps"] == 3 and s["draft_tokens"] == 4
    base = metrics.spec_from_server_info({"speculative_algorithm": None, "internal_states": [{}]})
    assert "avg_spec_accept_length" not in base and base["algorithm"] is None


def test_meta_info_both_versions() -> None:
    v057 = [{"completion_tokens": 100, "spec_verify_ct": 40, "spec_accept_token_num": 60,
             "spec_draft_token_num": 120},
            {"completion_tokens": 50, "spec_verify_ct": 20, "spec_accept_token_num": 30, "spec_draft_token_num": 60}]
    s = metrics.spec_from_meta(v057)
    assert s["accept_len"] == 2.5 and s["verify_ct"] == 60 and s["draft_acceptance"] == 0.5
    v0523 = [{"completion_tokens": 90, "spec_verify_ct": 30, "spec_num_correct_drafts": 60,
              "spec_num_proposed_drafts": 90}]
    s = metrics.spec_from_meta(v0523)
    assert s["accept_len"] == 3.0 and s["draft_acceptance"] == pytest.approx(2 / 3)
    assert metrics.spec_from_meta([{"completion_tokens": 10}]) == {"requests": 0}


BENCH_OUT = """
============ Serving Benchmark Result ============
Backend:                                 sglang
Traffic request rate:                    inf
Max request concurrency:                 1
Successful requests:                     64
Benchmark duration (s):                  345.67
Total input tokens:                      65536
Total generated tokens:                  32768
Total generated tokens (retokenized):    32700
Request throughput (req/s):              0.19
Input token throughput (tok/s):          189.59
Output token throughput (tok/s):         94.80
Peak output token throughput (tok/s):    120.00
Total token throughput (tok/s):          284.39
Concurrency:                             1.00
Accept length:                           2.31
----------------End-to-End Latency----------------
Mean E2E Latency (ms):                   5401.10
Median E2E Latency (ms):                 5399.00
P99 E2E Latency (ms):                    5600.20
---------------Time to First Token----------------
Mean TTFT (ms):                          120.50
Median TTFT (ms):                        118.00
P99 TTFT (ms):                           180.90
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          10.33
Median TPOT (ms):                        10.30
P99 TPOT (ms):                           11.20
---------------Inter-Token Latency----------------
Mean ITL (ms):                           23.80
Median ITL (ms):                         23.50
P95 ITL (ms):                            25.00
P99 ITL (ms):                            29.10
Max ITL (ms):                            40.00
==================================================
"""


def test_bench_serving_output() -> None:
    r = metrics.parse_bench_serving(BENCH_OUT)
    assert r["completed"] == 64 and r["output_tokens"] == 32768 and r["duration_s"] == 345.67
    assert r["output_tok_s"] == 94.80 and r["accept_len"] == 2.31 and r["concurrency"] == 1.0
    assert r["ttft_ms"] == {"mean": 120.5, "median": 118.0, "p99": 180.9}
    assert r["tpot_ms"]["median"] == 10.30 and r["itl_ms"]["p95"] == 25.0 and r["itl_ms"]["max"] == 40.0
    assert r["e2e_ms"]["p99"] == 5600.2


def test_percentiles() -> None:
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 99) == pytest.approx(4.96)
    d = metrics.distribution([10.0, 20.0, 30.0])
    assert d["mean"] == 20.0 and d["median"] == 20.0 and d["max"] == 30.0 and "p99" in d


def test_the_clients_cycle_time_is_each_requests_decode_time_over_its_verify_passes() -> None:
    """The per-request cycle the built-in client reports, on fixed figures: (E2E − TTFT) ÷ spec_verify_ct, the
    first token being the prefill's. The fleet tests can bound the measured figure from one side only (a loaded
    machine lengthens it), so the formula is pinned here."""
    from fabfile.remote.measure.loadgen import RequestResult, summarize

    def request(ttft: float, e2e: float, tokens: int, verify_ct: int) -> RequestResult:
        r = RequestResult()
        r.ttft, r.e2e, r.output_tokens = ttft, e2e, tokens
        r.chunk_times, r.chunk_tokens = [ttft, e2e], [1, tokens - 1]
        r.meta = {"completion_tokens": tokens, "spec_verify_ct": verify_ct}
        return r

    # 0.1 s to the first token, then 11 verify passes in 0.22 s: 20 ms a cycle; and 10 passes in 0.3 s: 30 ms
    out = summarize([request(0.1, 0.32, 32, 11), request(0.05, 0.35, 31, 10)], 0.0, 0.35)
    assert out["cycle_ms"]["mean"] == pytest.approx(25.0)
    assert out["cycle_ms"]["max"] == pytest.approx(30.0)
    # TPOT divides the same time by the tokens after the first, not by the passes
    assert out["tpot_ms"]["mean"] == pytest.approx((220 / 31 + 300 / 30) / 2)
    # a request with no verify pass (a baseline server) gives no cycle
    assert summarize([request(0.1, 0.32, 32, 0)], 0.0, 0.35)["cycle_ms"] == {}
