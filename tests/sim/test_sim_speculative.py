"""The simulator's speculative decoding as SGLang serves it: each verify pass's tokens streamed together, and requests
in flight decoded as one batch whose cost grows with its size."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest

from tests.support.sim import Sim, http, sim, sim_module  # noqa: F401  (the fixture)


def _stream(sim: Sim, max_new: int) -> list[dict[str, Any]]:  # noqa: F811
    code, body = http(sim.url("/generate"), {"input_ids": list(range(20)), "stream": True,
                                              "sampling_params": {"max_new_tokens": max_new}}, timeout=60)
    assert code == 200
    events = [ln[6:] for ln in body.decode().splitlines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


@pytest.mark.parametrize(("version", "hist_keys"), [("0.5.7", set()),
                                                     ("0.5.16", {"spec_accept_histogram",
                                                                 "spec_correct_drafts_histogram"}),
                                                     ("0.5.23", {"spec_correct_drafts_histogram"})])
def test_each_verify_pass_streams_its_tokens_together(sim: Sim, version: str, hist_keys: set[str]) -> None:  # noqa: F811
    sim.install(version, time_scale=0.05, accept_prob=[0.9, 0.7, 0.5])
    launcher = sim.launch(spec=True, tp=1)
    sim.wait_log("fired up", proc=launcher)
    chunks = _stream(sim, 60)
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    sizes = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    final = chunks[-1]["meta_info"]
    # The prefill brings the first token alone; then one chunk per verify pass, the last with the final meta_info.
    assert sizes[0] == 1 and all(1 <= n <= 4 for n in sizes[1:]) and counts[-1] == 60
    assert len(sizes) - 1 == final["spec_verify_ct"]
    assert all("spec_verify_ct" not in c["meta_info"] for c in chunks[:-1])
    assert final["spec_accept_length"] == pytest.approx(60 / final["spec_verify_ct"])
    assert hist_keys <= set(final) and not ({"spec_accept_histogram", "spec_correct_drafts_histogram"} - hist_keys) \
        & set(final)
    if hist_keys:
        hist = final[sorted(hist_keys)[0]]
        assert sum(hist) == final["spec_verify_ct"]
        # The histogram is what the chunks show, but for the last pass, which max_new_tokens may have cut.
        seen = [0] * len(hist)
        for n in sizes[1:-1]:
            seen[n - 1] += 1
        assert all(seen[j] <= hist[j] for j in range(len(hist))) and sum(hist) - sum(seen) == 1


def test_requests_in_flight_are_decoded_as_one_batch(sim: Sim) -> None:  # noqa: F811
    # Each request decodes for about a second (80 steps of 10 ms), and the eight are sent at once (a barrier): they
    # overlap however slowly a loaded machine starts the threads. At a fifth of that (time_scale 0.2) a request was
    # sometimes done before the eighth thread had sent its own.
    sim.install("0.5.16", time_scale=1.0, decode_ms=10.0, decode_ms_per_seq=1.0)
    launcher = sim.launch("--decode-log-interval", "5", tp=1)
    sim.wait_log("fired up", proc=launcher)
    done: list[int] = []
    together = threading.Barrier(8)

    def one() -> None:
        together.wait()
        code, body = http(sim.url("/generate"), {"input_ids": list(range(8)),
                                                  "sampling_params": {"max_new_tokens": 80}}, timeout=120)
        done.append(json.loads(body)["meta_info"]["completion_tokens"] if code == 200 else -1)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert done == [80] * 8
    running = [int(m) for m in re.findall(r"Decode batch, #running-req: (\d+)", sim.text())]
    assert running and max(running) == 8
    # New requests that arrive together are admitted as one prefill batch too.
    prefill = [ln for ln in sim.text().splitlines() if "Prefill batch" in ln]
    assert any(re.search(r"#new-seq: [2-8],", ln) for ln in prefill)
