"""The tool's own serving benchmark client: a stdlib load generator that runs ON the GPU host.

Used when the host's SGLang has no ``sglang.bench_serving`` (or when asked for). It sends ``num_prompts`` streamed
``POST /generate`` requests of ``input_len`` random token ids and exactly ``output_len`` new tokens
(``ignore_eos``), ``concurrency`` at a time, after ``warmup`` requests that are not counted, and measures what
bench_serving measures: TTFT (first streamed chunk), ITL (gaps between chunks), TPOT ((e2e - TTFT)/(tokens - 1)),
E2E latency, output tok/s over the measured window. Each request's final ``meta_info`` is kept, so the accept
length comes from the server's own counters (Σ completion_tokens / Σ spec_verify_ct), and so are the tokens each
streamed chunk brought (one verify pass each), the source of the accepted-drafts histogram where the version's
``meta_info`` has none.

The window: from the start until the first moment fewer than ``concurrency`` requests are in flight (the queue
ran dry), counting the tokens streamed within it, so the figure is the server's throughput at that load, not
diluted by the last requests draining. Adaptive length (``target_ci``): requests keep being issued until the
95 % confidence interval of the throughput is within ±``target_ci`` (relative) with at least ``min_requests``
done, or ``num_prompts`` were issued.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from typing import Any, Callable

from . import metrics


class RequestResult:
    __slots__ = ("chunk_times", "chunk_tokens", "e2e", "error", "meta", "output_tokens", "start", "ttft")

    def __init__(self) -> None:
        self.start = 0.0
        self.ttft: float | None = None
        self.e2e = 0.0
        self.output_tokens = 0
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] = []
        self.meta: dict[str, Any] = {}
        self.error: str | None = None


def one_request(host: str, port: int, payload: bytes, api_key: str | None, timeout: float) -> RequestResult:
    r = RequestResult()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    r.start = time.perf_counter()
    try:
        conn.request("POST", "/generate", body=payload, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            r.error = f"HTTP {resp.status}: {resp.read(300).decode('utf-8', 'replace').strip()}"
            return r
        tokens = 0
        while True:
            raw = resp.readline()
            if not raw:
                break
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            now = time.perf_counter()
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if isinstance(chunk, dict) and chunk.get("error"):
                r.error = str(chunk["error"])[:300]
                break
            meta = (chunk.get("meta_info") or {}) if isinstance(chunk, dict) else {}
            n = int(meta.get("completion_tokens") or tokens)
            if n > tokens:
                if r.ttft is None:
                    r.ttft = now - r.start
                r.chunk_times.append(now)
                r.chunk_tokens.append(n - tokens)
                tokens = n
            if meta:
                r.meta = meta
        r.output_tokens = tokens
        r.e2e = time.perf_counter() - r.start
        if tokens == 0 and r.error is None:
            r.error = "the server streamed no tokens"
    except (OSError, http.client.HTTPException) as e:
        r.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return r


def _payload(rng: random.Random, input_len: int, output_len: int) -> bytes:
    ids = [rng.randrange(100, 30000) for _ in range(input_len)]
    return json.dumps({"input_ids": ids, "stream": True,
                       "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0,
                                           "ignore_eos": True}}).encode()


def run(host: str, port: int, *, concurrency: int, input_len: int, output_len: int, num_prompts: int,
        warmup: int = 1, seed: int = 1, api_key: str | None = None, timeout: float = 600.0,
        on_progress: Callable[[int, int, float], bool] | None = None, target_ci: float | None = None,
        min_requests: int = 8) -> dict[str, Any]:
    """Run the benchmark; ``on_progress(done, total, elapsed)`` returning False stops it early (client gone).
    With ``target_ci`` the run stops issuing requests once the throughput's 95 % interval is that narrow
    (``num_prompts`` is then the most it sends)."""
    target = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    rng = random.Random(seed)
    for _ in range(warmup):
        w = one_request(target, port, _payload(rng, input_len, min(output_len, 16)), api_key, timeout)
        if w.error:
            from ..common import AgentError

            raise AgentError("bench_failed", f"the warm-up request to http://{target}:{port}/generate failed: "
                             f"{w.error}", "check `inv status` and `inv logs`: is the server up and healthy?")
    results: list[RequestResult] = []
    lock = threading.Lock()
    stop = threading.Event()
    enough = threading.Event()
    issued = [0]
    window_end = [0.0]
    # At least two rounds of the load: with C in flight, fewer than 2·C requests never measure the steady state.
    floor = max(2, min(max(min_requests, 2 * concurrency), num_prompts))
    t0 = time.perf_counter()

    def worker() -> None:
        while not stop.is_set():
            with lock:
                if issued[0] >= num_prompts or enough.is_set():
                    if not window_end[0]:
                        window_end[0] = time.perf_counter()
                    return
                issued[0] += 1
                payload = _payload(rng, input_len, output_len)
            res = one_request(target, port, payload, api_key, timeout)
            with lock:
                results.append(res)
                done = len(results)
                if target_ci is not None and done >= floor:
                    ok = [r for r in results if r.error is None and r.output_tokens]
                    ci = metrics.throughput_ci([float(r.output_tokens) for r in ok], [r.e2e for r in ok])
                    if ci is not None and ci <= target_ci:
                        enough.set()
            if on_progress is not None and not on_progress(done, num_prompts, time.perf_counter() - t0):
                stop.set()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(concurrency, num_prompts)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = summarize(results, t0, time.perf_counter(), interrupted=stop.is_set(),
                    window_end=window_end[0] or None)
    out["adaptive"] = {"target_ci": target_ci, "min_requests": floor, "max_requests": num_prompts,
                       "stopped": "confidence" if enough.is_set() else "max_requests"} if target_ci is not None \
        else None
    return out


def summarize(results: list[RequestResult], t0: float, t1: float, interrupted: bool = False,
              window_end: float | None = None) -> dict[str, Any]:
    ok = [r for r in results if r.error is None]
    errors = [r.error for r in results if r.error is not None]
    duration = max(t1 - t0, 1e-9)
    out_tokens = sum(r.output_tokens for r in ok)
    end = window_end if window_end is not None and window_end > t0 else t1
    window = max(end - t0, 1e-9)
    window_tokens = sum(r.chunk_tokens[i] for r in ok for i in range(len(r.chunk_tokens)) if r.chunk_times[i] <= end)
    ttft = [r.ttft * 1000 for r in ok if r.ttft is not None]
    tpot = [(r.e2e - r.ttft) * 1000 / (r.output_tokens - 1) for r in ok if r.ttft is not None and r.output_tokens > 1]
    itl: list[float] = []
    for r in ok:
        t = r.chunk_times
        itl += [(t[i + 1] - t[i]) * 1000 for i in range(len(t) - 1)]
    spec = metrics.spec_from_meta(r.meta for r in ok)
    cycle: list[float] = []
    hist: list[int] = []
    sources = set()
    for r in ok:
        vct = int(r.meta.get("spec_verify_ct") or 0)
        if r.ttft is not None and vct > 0:
            # The first chunk is the prefill's token; the request's vct verify passes fill the rest.
            cycle.append((r.e2e - r.ttft) * 1000 / vct)
        h = metrics.histogram_from_meta(r.meta)
        if h is not None:
            sources.add("meta_info")
        elif vct:
            h = metrics.histogram_from_stream(r.chunk_tokens, vct)
            if h is not None:
                sources.add("stream")
        if h is not None:
            hist = metrics.add_histograms(hist, h)
    tok_s = window_tokens / window if window_tokens else out_tokens / duration
    # The interval of that figure: the requests that ran at full load (those that finished while the queue ran
    # dry ran with fewer in flight, faster, and would widen it with a difference the window does not measure).
    in_window = [r for r in ok if r.output_tokens and r.start + r.e2e <= end + 1e-6]
    if len(in_window) < 2:
        in_window = [r for r in ok if r.output_tokens]
    return {
        "completed": len(ok), "failed": len(errors), "errors": errors[:5], "interrupted": interrupted,
        "duration_s": duration, "window_s": window, "output_tokens": out_tokens, "output_tok_s": tok_s,
        "tok_s_ci": metrics.throughput_ci([float(r.output_tokens) for r in in_window],
                                          [r.e2e for r in in_window]),
        "request_throughput": len(ok) / duration,
        "ttft_ms": metrics.distribution(ttft), "tpot_ms": metrics.distribution(tpot),
        "itl_ms": metrics.distribution(itl), "e2e_ms": metrics.distribution([r.e2e * 1000 for r in ok]),
        "meta": spec, "cycle_ms": metrics.distribution(cycle) if cycle else {},
        "accept_histogram": hist or None,
        "accept_histogram_source": ("meta_info" if "meta_info" in sources else "stream") if hist else None,
        "accept_histogram_requests": sum(1 for r in ok if metrics.histogram_from_meta(r.meta) is not None or
                                         metrics.histogram_from_stream(r.chunk_tokens,
                                                                       r.meta.get("spec_verify_ct")) is not None),
    }
