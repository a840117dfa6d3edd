"""One figure, one name (issue 36, point 10): for one server the accept length read 2.67 (deploy gate), 2.45
(bench), 2.33 (status) and tok/s 98.4 (bench) against 92.9 (status), all labelled alike. Each figure says its
window and sample size, and different quantities have different names."""

from __future__ import annotations

import io

from rich.console import Console

from fabfile.present import bench_report
from fabfile.remote.measure import bench, metrics


def _bench_doc() -> dict[str, object]:
    meta = {"requests": 16, "accept_len": 2.45}
    decode = {"lines": 5, "accept_len": 2.33}
    sources = {"meta_info": 2.45, "decode_log": 2.33, "prometheus": 2.33, "bench_serving": None, "server_info": 2.55}
    return {"host": "sim1", "config_name": "eagle3-s3-k1-d4", "sglang_version": "0.5.23", "client": "loadgen",
            "params": {"concurrency": 4, "input_len": 64, "output_len": 64, "num_prompts": 16}, "completed": 16,
            "output_tok_s": 98.4, "duration_s": 10.4, "accept_len": 2.45, "accept_len_source": "meta_info",
            "accept_len_sources": sources,
            "accept_len_windows": {k: w for k, w in bench.accept_len_windows(meta, decode).items()
                                   if sources.get(k) is not None},
            "accept_rate": 0.48, "accept_rate_meaning": "x", "draft_acceptance": 0.48, "cycle_ms": 20.0}


def test_bench_names_each_accept_length_with_its_window_and_its_tok_s_as_the_clients() -> None:
    buf = io.StringIO()
    bench_report.print_result(_bench_doc(), Console(file=buf, width=300, color_system=None))
    text = buf.getvalue()
    assert "accept length 2.45 over 16 requests (Σ completion_tokens / Σ spec_verify_ct) from meta_info" in text, text
    assert "decode_log 2.33 over the mean of 5 Decode batch lines" in text, text
    assert "prometheus 2.33 over gauge: SGLang's last Decode window" in text, text
    assert "server_info 2.55 over every request since the server started" in text, text
    # the client's tok/s says it is the client's, over which requests, and that status's is another quantity
    assert "98.4 tok/s over 16 requests in 10.40 s (measured by the client;" in text, text
    assert "gen tok/s" in text


def test_a_decode_lines_window_is_the_launchs_decode_log_interval() -> None:
    """status and watch name the window of "the last Decode line" figures: --decode-log-interval forwards."""
    assert metrics.decode_log_interval({"launch": {"argv": ["python", "--decode-log-interval", "5"]}}) == 5
    assert metrics.decode_log_interval({"launch": {"argv": ["python", "--decode-log-interval=8"]}}) == 8
    assert metrics.decode_log_interval({"launch": {"argv": ["python"]}}) == metrics.DECODE_LOG_INTERVAL == 40
    assert metrics.decode_log_interval(None) == 40
