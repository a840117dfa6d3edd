"""Simulated ``python -m sglang.bench_serving`` (TEST EQUIPMENT, not SGLang).

Only what specdeploy uses: ``--backend sglang --dataset-name random-ids`` against ``/generate`` (streamed), with
``--max-concurrency``, ``--num-prompts``, ``--random-input-len/--random-output-len``, ``--output-file`` (one JSON line)
and SGLang's printed result block (``"{:<40} {:<10.2f}"`` lines, ``Accept length:`` from ``/server_info``).
Unknown flags are ignored. ``--dataset-name`` has the release's choices as far as specdeploy cares: ``random-ids``
from 0.4.6 (0.4.5 offers sharegpt, random, generated-shared-prefix); every dataset but ``random-ids`` needs a download
(ShareGPT) or a tokenizer here, so the simulator fails them as an offline host would.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import threading
import time
from typing import Any

from sglang._sim import runtime

# Real 0.5.16's bench_serving.py imports sglang.benchmark.serving, which imports `datasets` at module level: a
# serving-only install cannot run it (seen on an H200, docs/real-sglang.md). The knob makes the import fail the same
# way, with Python's own message.
_MISSING = runtime.load_config().get("bench_serving_missing_module")
if _MISSING:
    raise ModuleNotFoundError(f"No module named {_MISSING!r}", name=str(_MISSING))


def _auth_headers() -> dict[str, str]:
    """SGLang's get_auth_headers(): the key comes from the environment, never from the command line."""
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        return {"Authorization": f"Bearer {key}"}
    key = os.environ.get("API_KEY")
    return {"Authorization": key} if key else {}


def _one(host: str, port: int, ids: list[int], out_len: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"input_ids": ids, "stream": True,
                       "sampling_params": {"max_new_tokens": out_len, "ignore_eos": True, "temperature": 0}})
    t0 = time.perf_counter()
    conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json", **_auth_headers()})
    resp = conn.getresponse()
    times: list[float] = []
    n = 0
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        meta = json.loads(line[5:]).get("meta_info") or {}
        if int(meta.get("completion_tokens") or 0) > n:
            n = int(meta["completion_tokens"])
            times.append(time.perf_counter())
    conn.close()
    return {"start": t0, "times": times, "n": n, "ok": bool(times)}


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _dataset_choices() -> list[str]:
    from sglang._sim import runtime

    v = runtime.version()
    names = ["sharegpt", "random"]
    if v >= (0, 4, 5, 1):
        names.append("random-ids")
    names.append("generated-shared-prefix")
    if v >= (0, 4, 7):
        names.append("mmmu")
    return names


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="sglang")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--dataset-name", type=str, default="sharegpt", choices=_dataset_choices())
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=1024)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--output-file", default=None)
    p.add_argument("--warmup-requests", type=int, default=1)
    p.add_argument("--disable-tqdm", action="store_true")
    args, _ = p.parse_known_args()
    if args.dataset_name != "random-ids":
        raise SystemExit(f"simulated bench_serving: --dataset-name {args.dataset_name} needs a download or a "
                         "tokenizer, which this host does not have")
    rng = random.Random(1)
    prompts = [[rng.randrange(100, 30000) for _ in range(args.random_input_len)] for _ in range(args.num_prompts)]
    for _ in range(args.warmup_requests):
        _one(args.host, args.port, prompts[0], 16)
    print("Starting main benchmark run...", flush=True)
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    queue = list(prompts)

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                ids = queue.pop()
            r = _one(args.host, args.port, ids, args.random_output_len)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.max_concurrency or args.num_prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dur = time.perf_counter() - t0
    ok = [r for r in results if r["ok"]]
    out_tokens = sum(r["n"] for r in ok)
    ttft = [(r["times"][0] - r["start"]) * 1000 for r in ok]
    e2e = [(r["times"][-1] - r["start"]) * 1000 for r in ok]
    tpot = [(r["times"][-1] - r["times"][0]) * 1000 / (r["n"] - 1) for r in ok if r["n"] > 1]
    itl = [(b - a) * 1000 for r in ok for a, b in zip(r["times"], r["times"][1:], strict=False)]
    accept = None
    try:
        conn = http.client.HTTPConnection(args.host, args.port, timeout=10)
        conn.request("GET", "/server_info")
        info = json.loads(conn.getresponse().read())
        accept = (info.get("internal_states") or [{}])[0].get("avg_spec_accept_length")
    except (OSError, ValueError):
        pass

    def row(k: str, v: float) -> None:
        print("{:<40} {:<10.2f}".format(k + ":", v))

    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print("{:<40} {:<10}".format("Backend:", args.backend))
    print("{:<40} {:<10}".format("Successful requests:", len(ok)))
    row("Benchmark duration (s)", dur)
    print("{:<40} {:<10}".format("Total input tokens:", args.random_input_len * len(ok)))
    print("{:<40} {:<10}".format("Total generated tokens:", out_tokens))
    row("Request throughput (req/s)", len(ok) / dur)
    row("Input token throughput (tok/s)", args.random_input_len * len(ok) / dur)
    row("Output token throughput (tok/s)", out_tokens / dur)
    row("Total token throughput (tok/s)", (args.random_input_len * len(ok) + out_tokens) / dur)
    row("Concurrency", sum(e2e) / 1000 / dur)
    if accept is not None:
        row("Accept length", accept)
    for title, name, xs, extra in (("End-to-End Latency", "E2E Latency", e2e, ()), ("Time to First Token", "TTFT",
                                   ttft, ()), ("Time per Output Token (excl. 1st token)", "TPOT", tpot, ()),
                                   ("Inter-Token Latency", "ITL", itl, ("P95",))):
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        row(f"Mean {name} (ms)", statistics.mean(xs) if xs else 0.0)
        row(f"Median {name} (ms)", _pct(xs, 50))
        for e in extra:
            row(f"{e} {name} (ms)", _pct(xs, 95))
        row(f"P99 {name} (ms)", _pct(xs, 99))
        if name == "ITL":
            row(f"Max {name} (ms)", max(xs) if xs else 0.0)
    print("=" * 50)
    if args.output_file:
        with open(args.output_file, "a") as f:
            f.write(json.dumps({"output_throughput": out_tokens / dur, "accept_length": accept,
                                "median_tpot_ms": _pct(tpot, 50), "completed": len(ok)}) + "\n")


if __name__ == "__main__":
    main()
