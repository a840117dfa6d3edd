"""The host-side half of ``inv bench``: benchmark the running server from the host itself and read every metric.

Order: find the running deploy (``STATE/current.json``) → snapshot ``/server_info``, ``/metrics`` and the log
offset → run SGLang's own ``python -m sglang.bench_serving --backend sglang --dataset-name random-ids`` when the
host's SGLang ships it with that dataset (0.4.6+), else the tool's stdlib load generator (``loadgen``) → read
``/server_info``, ``/metrics`` and the ``Decode batch`` lines logged during the run → one result, written to
``STATE/bench/<id>.json``.

Accept length, best source first: per-request ``meta_info`` (exactly our requests) → the decode log lines of the
run → ``/metrics`` → bench_serving's ``Accept length`` → ``/server_info`` (cumulative since start, warm-up included).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Callable, TypedDict, cast

from .. import procs, versions
from ..common import AgentError, EventSink, atomic_write, ensure_private_dir, expand, open_private, split_argv
from ..protocol import BenchAnswer, BenchRequest, DeployRecord
from ..serve import records, server
from . import metrics


def http_get(host: str, port: int, path: str, api_key: str | None, timeout: float = 5.0) -> str | None:
    import http.client

    target = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    conn = http.client.HTTPConnection(target, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        resp = conn.getresponse()
        body = resp.read().decode("utf-8", "replace")
        return body if resp.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def server_info(host: str, port: int, version: str, api_key: str | None) -> dict[str, Any]:
    for path in versions.server_info_paths(version):
        body = http_get(host, port, path, api_key)
        if body:
            try:
                doc = json.loads(body)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return {}


def prometheus(host: str, port: int, api_key: str | None) -> dict[str, float] | None:
    body = http_get(host, port, "/metrics", api_key)
    return metrics.spec_from_prometheus(body) if body else None


def has_bench_serving(sglang_root: str | None) -> bool:
    if not sglang_root:
        return False
    return os.path.isfile(os.path.join(sglang_root, "bench_serving.py")) or \
        os.path.isfile(os.path.join(sglang_root, "benchmark", "serving.py"))


# The dataset the tool runs bench_serving with: synthetic token ids of exactly the requested lengths, no download.
# SGLang 0.4.5's bench_serving lacks it (its choices: sharegpt, random, generated-shared-prefix; its "random" samples
# ShareGPT, downloading it); every release from ``versions.BENCH_RANDOM_IDS`` (0.4.5.post1) has it. The host's own
# ``--help`` is asked before each run, so this is no gate.
BENCH_DATASET = "random-ids"


def bench_serving_help(env: dict[str, str] | None = None) -> tuple[list[str] | None, str | None]:
    """The ``--dataset-name`` choices of the host's ``sglang.bench_serving``, as its own ``--help`` lists them
    (the module moved to ``sglang.benchmark.serving`` in 0.5.15 and kept a shim; asking it covers every layout), and
    why it could not say: real 0.5.16 installed for serving dies on ``import datasets`` (docs/real-sglang.md)."""
    try:
        out = subprocess.run([sys.executable, "-m", "sglang.bench_serving", "--help"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"it did not run: {e}"
    m = re.search(r"--dataset-name\s+\{([^}]*)\}", out.stdout)
    if out.returncode != 0 or not m:
        errors = [ln.strip() for ln in (out.stderr or out.stdout).splitlines()
                  if re.match(r"\w*(Error|Exception)\b", ln.strip())]
        return None, errors[-1][:200] if errors else f"its --help exited {out.returncode}"
    return [name.strip() for name in m.group(1).split(",") if name.strip()], None


def _run_bench_serving(req: BenchRequest, host: str, port: int, out_file: str, sink: EventSink,
                       api_key: str | None) -> dict[str, Any]:
    target = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    # Each value in the same word as its flag (all take one value): argparse then reads it as that value whatever it
    # starts with (the inventory's listen address, the state directory in the output file's path).
    argv = [sys.executable, "-m", "sglang.bench_serving", "--backend=sglang", f"--host={target}",
            f"--port={port}", f"--dataset-name={BENCH_DATASET}",
            f"--random-input-len={req['input_len']}", f"--random-output-len={req['output_len']}",
            "--random-range-ratio=1.0", f"--num-prompts={req['num_prompts']}",
            f"--max-concurrency={req['concurrency']}", f"--output-file={out_file}", "--disable-tqdm"]
    env = dict(os.environ)
    if api_key:
        env["OPENAI_API_KEY"] = api_key  # bench_serving's get_auth_headers(): never on its command line
    os.close(open_private(out_file))  # bench_serving appends to it: 0600 from the start
    sink.emit("info", message="running " + " ".join(argv[1:4]) + " ...")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                            start_new_session=True)
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            sink.emit("log", lines=[line.rstrip("\n")], count=1)
            if not sink.stdout_ok:
                proc.terminate()  # the client went away: do not keep loading the server
        rc = proc.wait()
    except BaseException:
        procs.terminate([p for p in [procs.stat(proc.pid)] if p is not None], 5.0)
        raise
    text = "\n".join(lines)
    parsed = metrics.parse_bench_serving(text)
    if rc != 0 or "output_tok_s" not in parsed:
        raise AgentError("bench_failed", f"sglang.bench_serving exited {rc} without a result",
                         "see the excerpt; `--client builtin` uses the tool's own load generator instead",
                         excerpt=lines[-25:])
    if not parsed.get("completed"):
        raise AgentError("bench_failed", f"sglang.bench_serving completed 0 of {req['num_prompts']} requests",
                         "see the excerpt (a 401 means the API key did not reach it); `inv logs` shows the server's "
                         "side", excerpt=lines[-25:])
    parsed["duration_s"] = parsed.get("duration_s") or (time.monotonic() - t0)
    parsed.setdefault("failed", max(0, int(req["num_prompts"]) - int(parsed.get("completed") or 0)))
    return parsed


def api_key_of(pid: int) -> str | None:
    """The running server's API key: from the ``--config`` file its command line names (how specdeploy passes
    it), else ``--api-key`` on the command line itself (None without one)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode("utf-8", "replace") for a in f.read().split(b"\0")]
    except OSError:
        return None
    given = [w.value for w in split_argv(args, values=("--api-key",)) if w.name == "--api-key" and w.value is not None]
    if given:
        return given[-1]  # argparse keeps the last
    if "--config" in args and args.index("--config") + 1 < len(args):
        path = args[args.index("--config") + 1]
        try:
            with open(path if os.path.isabs(path) else f"/proc/{pid}/cwd/{path}", encoding="utf-8") as f:
                text = f.read()
        except OSError:
            return None
        try:
            key = json.loads(text).get("api-key")  # the tool writes JSON (which is YAML)
        except (ValueError, AttributeError):
            m = re.search(r"^api[-_]key:\s*['\"]?([^'\"\n]*)", text, re.M)
            key = m.group(1) if m else None
        return str(key) if key else None
    return None


def died_meanwhile(rec: DeployRecord, grace: float = 5.0) -> bool:
    """Whether the recorded server is gone, given a few seconds to finish dying.

    When every request failed, the likeliest reason is that the server died: SGLang's launcher notices a dead
    scheduler and exits a moment later, so a check made at once can still see it alive and blame the requests.
    """
    deadline = time.monotonic() + grace
    while procs.alive(int(rec["pid"]), rec.get("start_ticks")):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _died_during(rec: DeployRecord, req: BenchRequest, done: object) -> AgentError:
    return AgentError("bench_failed", f"the server (pid {rec['pid']}) died during the benchmark, after {done} of "
                      f"{req['num_prompts']} requests; no figures were kept",
                      "see `inv logs` for why it died, deploy again, then benchmark")


def running_record(state_dir: str) -> DeployRecord:
    rec = records.current(state_dir)
    if not rec or not rec.get("pid") or not procs.alive(int(rec["pid"]), rec.get("start_ticks")):
        raise AgentError("not_running", "no server deployed by specdeploy is running on this host",
                         "deploy one first (`inv deploy`), then benchmark it")
    return rec


def _pick_client(req: BenchRequest, version: str, sink: EventSink) -> str:
    """``sglang`` (SGLang's own bench_serving) or ``builtin`` (the agent's load generator); ``auto`` prefers
    bench_serving where it can run this benchmark, a named client that cannot is an error."""
    from ..facts import sglang_info

    sg = sglang_info()
    client = req.get("client") or "auto"
    if client == "auto":
        # An adaptive length needs each request as it completes, and the accepted-drafts histogram needs each
        # request's meta_info and stream: only the tool's own load generator sees those.
        adaptive_or_hist = req.get("target_ci") is not None or req.get("need_histogram")
        client = "sglang" if has_bench_serving(sg.get("root")) and not adaptive_or_hist else "builtin"
        if client == "sglang":
            datasets, problem = bench_serving_help()
            if problem:
                client = "builtin"
                sink.emit("info", message=f"SGLang {version}'s bench_serving cannot start here ({problem}): "
                                          "using the built-in client")
            elif datasets is None or BENCH_DATASET not in datasets:
                client = "builtin"
                sink.emit("info", message=f"SGLang {version}'s bench_serving offers no {BENCH_DATASET} dataset "
                                          f"({', '.join(datasets or ['none listed'])}): using the built-in client")
    elif client == "sglang" and not has_bench_serving(sg.get("root")):
        raise AgentError("bench_failed", f"SGLang {version} on this host has no sglang.bench_serving",
                         "use `--client builtin` (or auto)")
    elif client == "sglang":
        datasets, problem = bench_serving_help()
        if problem:
            raise AgentError("bench_failed", f"SGLang {version}'s sglang.bench_serving cannot start on this host: "
                             f"{problem}", "install what it names into the server's Python, or use "
                             "`--client builtin` (or auto)")
        if datasets is None or BENCH_DATASET not in datasets:
            offered = ", ".join(datasets) if datasets else "(its --help lists none)"
            raise AgentError("bench_failed", f"SGLang {version}'s sglang.bench_serving has no {BENCH_DATASET} "
                             f"dataset (it offers {offered}); the others need a download or other lengths",
                             "use `--client builtin` (or auto), which needs no dataset")
    return client


def _measure(req: BenchRequest, rec: DeployRecord, client: str, target: tuple[str, int], api_key: str | None,
             bench_dir: str, sink: EventSink) -> tuple[dict[str, Any], str]:
    """Run the benchmark with the chosen client: (its figures, the client's name)."""
    host, port = target
    if client == "sglang":
        measured = _run_bench_serving(req, host, port, os.path.join(bench_dir, f"{req['bench_id']}.sglang.jsonl"),
                                      sink, api_key)
        return measured, "sglang.bench_serving"
    from . import loadgen

    progress = progress_events(sink)

    ci = req.get("target_ci")
    measured = loadgen.run(host, port, concurrency=int(req["concurrency"]), input_len=int(req["input_len"]),
                           output_len=int(req["output_len"]), num_prompts=int(req["num_prompts"]),
                           warmup=int(req.get("warmup", 1)), api_key=api_key, on_progress=progress,
                           timeout=float(req.get("request_timeout", 600)),
                           target_ci=float(ci) if ci is not None else None,
                           min_requests=int(req.get("min_requests") or 8))
    if not measured["completed"]:
        raise AgentError("bench_failed", f"every benchmark request failed: {measured['errors'][:1]}",
                         "check `inv status` and `inv logs`", errors=measured["errors"])
    return measured, "loadgen"


class Seen(TypedDict):
    """The speculative figures' other sources beside the client's own: the log's Decode lines, ``/server_info``,
    ``/metrics``, the requests' meta_info, and each source's accept length."""

    decode: metrics.DecodeSummary
    spec_info: metrics.ServerSpec
    prom: dict[str, float] | None
    meta: metrics.SpecMeta
    sources: dict[str, float | None]


def _other_sources(measured: dict[str, Any], log_path: str, offset: int, target: tuple[str, int], version: str,
                   api_key: str | None, info_before: metrics.ServerSpec, has_metrics: bool = True) -> Seen:
    """Every other source of the speculative figures: the server's log since the start, its server info, its
    Prometheus metrics, the requests' meta_info (popped from ``measured``)."""
    host, port = target
    lines: list[str] = []
    if log_path:
        follower = server.LogFollower(log_path, offset)
        lines = follower.read_lines()
    decode = metrics.summarize_decode_lines(lines)
    spec_info = metrics.spec_from_server_info(server_info(host, port, version, api_key)) or info_before
    prom = prometheus(host, port, api_key) if has_metrics else None
    meta: metrics.SpecMeta = measured.pop("meta", None) or metrics.SpecMeta()
    sources: dict[str, float | None] = {
        "meta_info": meta.get("accept_len"),
        "decode_log": decode.get("accept_len"),
        "prometheus": (prom or {}).get("accept_len"),
        "bench_serving": measured.get("accept_len"),
        "server_info": spec_info.get("avg_spec_accept_length"),
    }
    return {"decode": decode, "spec_info": spec_info, "prom": prom, "meta": meta, "sources": sources}


def progress_events(sink: EventSink) -> Callable[[int, int, float], bool]:
    """The load generator's progress callback: a ``progress`` event at most every 0.5 s (and at the end); False once
    the client's stdout is gone, so the load stops with it (bench and profile alike)."""
    last = [0.0]

    def progress(done: int, total: int, elapsed: float) -> bool:
        if done == total or time.monotonic() - last[0] > 0.5:
            last[0] = time.monotonic()
            sink.emit("progress", done=done, total=total, elapsed=round(elapsed, 2))
        return sink.stdout_ok

    return progress


def is_speculative(spec_info: metrics.ServerSpec, sources: dict[str, float | None]) -> bool:
    """Whether the benchmarked server speculates: its own speculative settings, else an accept length from any
    source. A speculative server's accept length is at least 1 (every verify emits a token); SGLang's metrics report
    0.0 for a server that does not speculate (its collector logs the gauge whatever runs: seen on 0.5.16 on the
    H200, where a baseline bench once reported accept length 0 and no decode step), which is no evidence of it."""
    return bool(spec_info.get("algorithm")) or any(v is not None and v >= 1.0 for v in sources.values())


def accept_len_windows(meta: metrics.SpecMeta, decode: metrics.DecodeSummary) -> dict[str, str]:
    """Each accept-length source's window and sample size, as a person reads it beside the figure."""
    return {
        "meta_info": f"{meta.get('requests')} requests (Σ completion_tokens / Σ spec_verify_ct)",
        "decode_log": f"the mean of {decode.get('lines')} Decode batch lines",
        "prometheus": "gauge: SGLang's last Decode window",
        "bench_serving": "bench_serving's requests",
        "server_info": "every request since the server started",
    }


def _result(req: BenchRequest, rec: DeployRecord, version: str, measured: dict[str, Any], client_name: str,
            started_at: str, seen: Seen) -> dict[str, Any]:
    """The benchmark's result document: the client's figures and the speculative ones from every source."""
    decode, spec_info, prom, meta, sources = seen["decode"], seen["spec_info"], seen["prom"], seen["meta"], \
        seen["sources"]
    speculative = is_speculative(spec_info, sources)
    accept_len = next((v for v in sources.values() if v is not None), None) if speculative else None
    draft_tokens = spec_info.get("draft_tokens")
    reported_rate = decode.get("accept_rate")
    if reported_rate is None and prom:
        reported_rate = prom.get("accept_rate")
    tpot = (measured.get("tpot_ms") or {}).get("mean")
    cycle = (measured.get("cycle_ms") or {}).get("mean")
    if speculative and cycle is None and tpot is not None and accept_len:
        cycle = tpot * accept_len
    hist = measured.pop("accept_histogram", None) if speculative else None
    return {
        "bench_id": req["bench_id"], "started_at": started_at, "client": client_name,
        "params": {**{k: req[k] for k in ("concurrency", "input_len", "output_len", "num_prompts")},
                   "target_ci": req.get("target_ci"), "min_requests": req.get("min_requests")},
        "deploy_id": rec.get("deploy_id"), "config_name": rec.get("config_name"), "plan_hash": rec.get("plan_hash"),
        "sglang_version": version,
        "speculative": {k: spec_info.get(k) for k in ("algorithm", "steps", "topk", "draft_tokens")},
        **{k: v for k, v in measured.items() if k not in ("accept_len",)},
        "accept_len": accept_len,
        "accept_len_sources": sources if speculative else {},
        "accept_len_source": next((k for k, v in sources.items() if v is not None), None) if speculative else None,
        # What each source's figure is over: different windows give different accept lengths for one server.
        "accept_len_windows": {k: w for k, w in accept_len_windows(meta, decode).items()
                               if sources.get(k) is not None} if speculative else {},
        "accept_rate": reported_rate if speculative else None,
        "accept_rate_meaning": metrics.accept_rate_meaning(version) if speculative else None,
        "draft_acceptance": (meta.get("draft_acceptance") if meta.get("draft_acceptance") is not None
                             else metrics.draft_acceptance(accept_len, draft_tokens)) if speculative else None,
        "decode_ms_per_token": tpot if not speculative else None,
        "cycle_ms": cycle if speculative else None,
        # the tool's (E2E − TTFT) / spec_verify_ct per request, or TPOT × accept length
        "cycle_ms_source": ("tool" if (measured.get("cycle_ms") or {}).get("mean") is not None else "derived")
        if speculative and cycle is not None else None,
        "accept_histogram": hist,
        "accept_histogram_source": measured.pop("accept_histogram_source", None) if hist else None,
        "decode_log": {k: v for k, v in decode.items() if k != "last"},
        "prometheus": prom,
        "server_info": spec_info,
    }


def _no_deploy_in_progress(state_dir: str) -> None:
    """Refuse while a deploy holds the host: the server it finds would be one being replaced (the old one
    stopping, the new one loading), and its figures (2.1 tok/s over 121 s) would be nobody's."""
    from ..serve.lock import DeployLock, describe

    holder = DeployLock(state_dir).live_holder()
    if holder is not None:
        raise AgentError("lock_held", f"a deploy {describe(holder)} is in progress on this host; a benchmark now "
                         "would measure a server that is being replaced, so none was started",
                         "wait for the deploy to end (`inv status` follows it), then benchmark again")
PHASES_HOWTO = ("deploy with measurement on (`inv deploy --measure` or `measure: true` in the inventory): "
                "--enable-metrics and SGLANG_ENABLE_METRICS_DEVICE_TIMER=1")


def phases(before: str | None, after: str | None, result: dict[str, Any], measured: dict[str, Any],
           seen: Seen, version: str, concurrency: int) -> dict[str, Any]:
    """Where the benchmark's cycles went, per rank, from SGLang's device timer (the counters' deltas over the run,
    warm-up included, as ``devicetimer`` reads them), with the run's cycle and accept length; ``missing`` says why
    there are none (the server runs without the timer, or its version has none)."""
    from ..protocol import SOURCE_DERIVED, SOURCE_META, SOURCE_TOOL, PhaseFigure
    from . import devicetimer

    snap = devicetimer.snapshot(after or "")
    if not devicetimer.has_timer(snap):
        why = (f"SGLang {version} has no per-phase device timer (it came in {versions.DEVICE_TIMER})"
               if not versions.at_least(version, versions.DEVICE_TIMER) else
               f"the server runs without the device timer: {PHASES_HOWTO}")
        return {"ranks": [], "cuda_graph": None, "missing": why}
    d = devicetimer.delta(devicetimer.snapshot(before or ""), snap)
    spec = result.get("speculative") or {}
    speculative = bool(spec.get("algorithm"))
    meta = seen.get("meta") or {}
    n = int(meta.get("verify_ct") or result.get("completed") or 0)
    accept_len, accept_src = result.get("accept_len"), result.get("accept_len_source")
    accept: PhaseFigure | None = None
    if speculative and accept_len:
        accept = {"ms": float(accept_len), "count": n,
                  "source": SOURCE_META if accept_src == "meta_info" else f"SGLang {accept_src}"}
    tool_cycle = (measured.get("cycle_ms") or {}).get("mean")
    cycle: PhaseFigure | None = None
    if speculative and result.get("cycle_ms"):
        cycle = {"ms": float(result["cycle_ms"]), "source": SOURCE_TOOL if tool_cycle else SOURCE_DERIVED,
                 "count": n}
    graph = devicetimer.cuda_graph(d, seen.get("decode") or {})
    ranks = [devicetimer.complete(devicetimer.anatomy(
        d, rank, version=version, cuda_graph=bool(graph), speculative=speculative,
        steps=int(spec["steps"]) if spec.get("steps") else None,
        draft_tokens=int(spec["draft_tokens"]) if spec.get("draft_tokens") else None, concurrency=concurrency,
        meta_verify_ct=meta.get("verify_ct"), config=str(result.get("config_name") or ""),
        tokens=measured.get("output_tokens")), cycle, accept)
        for rank in sorted(d["seconds"])]
    return {"ranks": ranks, "cuda_graph": graph, "missing": None}


def run(req: BenchRequest, sink: EventSink) -> BenchAnswer:
    state_dir = expand(req["state_dir"])
    _no_deploy_in_progress(state_dir)
    rec = running_record(state_dir)
    has_metrics = metrics.served(rec)  # /metrics only of a server started with --enable-metrics (else a 404 line)
    version = str(rec.get("sglang_version") or versions.NEWEST_SUPPORTED)
    target = str(rec.get("listen") or "127.0.0.1"), int(rec["port"])
    # The key is read from the running server's own command line, never sent: a request travels in the agent's
    # argv, which any user on the host can read with ps.
    api_key = api_key_of(int(rec["pid"]))
    client = _pick_client(req, version, sink)
    info_before = metrics.spec_from_server_info(server_info(*target, version, api_key))
    log_path = str(rec.get("log_path") or "")
    offset = os.path.getsize(log_path) if log_path and os.path.exists(log_path) else 0
    bench_dir = os.path.join(state_dir, "bench")
    ensure_private_dir(bench_dir)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    # the device timer's counters before the load
    metrics_before = http_get(*target, "/metrics", api_key) if has_metrics else None
    sink.emit("step", name="bench", status="start")
    t0 = time.monotonic()
    try:
        measured, client_name = _measure(req, rec, client, target, api_key, bench_dir, sink)
    except AgentError as e:
        # Either client failing outright is most often the server dying under it: say that, not "requests failed".
        if e.kind == "bench_failed" and died_meanwhile(rec):
            raise _died_during(rec, req, 0) from None
        raise
    # Figures from a run the server did not live through measure its death, not its speed. Failed requests make a
    # death likely, so then the server gets a moment to finish dying before it is called alive.
    if died_meanwhile(rec, grace=5.0 if measured.get("failed") else 0.0):
        raise _died_during(rec, req, measured.get("completed", "?"))
    sink.emit("step", name="bench", status="ok", elapsed=round(time.monotonic() - t0, 3),
              detail=f"{measured.get('output_tok_s', 0):.1f} tok/s")
    metrics_after = http_get(*target, "/metrics", api_key) if has_metrics else None
    seen = _other_sources(measured, log_path, offset, target, version, api_key, info_before, has_metrics)
    result = _result(req, rec, version, measured, client_name, started_at, seen)
    result["phases"] = phases(metrics_before, metrics_after, result, measured, seen, version,
                              min(int(req["concurrency"]), int(req["num_prompts"])))
    path = os.path.join(bench_dir, f"{req['bench_id']}.json")
    atomic_write(path, json.dumps(result, indent=2, sort_keys=True, default=str).encode(), 0o600)
    result["host_path"] = path
    return cast(BenchAnswer, result)  # ``_result``'s document with the load generator's figures spread in
