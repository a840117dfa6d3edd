"""The host-side half of ``inv profile``: where one speculative cycle's time goes, measured by SGLang itself.

Order: the running deploy (``STATE/current.json``) → one warm-up request (outside the window) → ``/metrics`` →
with ``trace``, ``POST /start_profile`` into a fresh directory of the tool's (``STATE/profiles/<id>/``) → the
bench's own load generator (``loadgen.run``, bounded) → ``/metrics`` again → with ``trace``, the per-rank files
``*-TP-<rank>*.trace.json.gz`` (SGLang stops after ``num_steps`` by itself; when the load ended first,
``/stop_profile`` makes it write them) → per rank: the device timer's deltas (``devicetimer``) and the trace's
phases and kernels (``trace``), each figure with its source.

A profile started here is stopped on every way out: an error, the client gone (stdout broken: the load stops and
the ``finally`` runs), the agent's deadline (SIGALRM), SIGTERM or SIGINT (turned into an exception for the
duration of the profile, so the same ``finally`` runs). SGLang's profiler is one per server: a second
``/start_profile`` while one runs is answered with an error, reported as ``profile_running``.

The profiles directory: created 0700 by the deploying user under the state dir (never SGLang's default ``/tmp``,
never a symlink), and bounded: before each run the oldest profiles go until the rest weigh under ``keep_bytes``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from .. import procs, versions
from ..common import AgentError, EventSink, ensure_private_dir, expand
from ..evidence import interconnect, ncclused
from ..protocol import (
    MAX_TRACE_STEPS,
    SOURCE_DERIVED,
    SOURCE_META,
    SOURCE_TOOL,
    CycleAnatomy,
    DeployRecord,
    PhaseFigure,
    ProfileRank,
    ProfileRequest,
    ProfileResult,
)
from ..serve import ranks, server
from . import bench, devicetimer, loadgen, metrics, trace
from .profilestore import profiles_dir, prune, ready_traces

DEFAULT_KEEP_BYTES = 1024 * 1024 * 1024
DEFAULT_TRACE_CAP = trace.DEFAULT_CAP_BYTES
TRACE_WAIT_S = 60.0  # how long SGLang may take to write the traces after it stopped (a big trace takes seconds)
TIMER_HOWTO = ("deploy with measurement on (`measure: true` in the inventory, or `inv deploy --measure`): "
               "`--enable-metrics` and SGLANG_ENABLE_METRICS_DEVICE_TIMER=1")


class _Interrupted(Exception):
    pass


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM/SIGINT raise for the duration, so a profile's ``finally`` runs (restored afterwards)."""

    def handler(signum: int, frame: Any) -> None:
        raise _Interrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _post(host: str, port: int, path: str, body: dict[str, Any] | None, api_key: str | None,
          timeout: float = 30.0) -> tuple[int, str]:
    target = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    conn = http.client.HTTPConnection(target, port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        conn.request("POST", path, body=json.dumps(body).encode() if body is not None else b"", headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read(2000).decode("utf-8", "replace").strip()
    except (OSError, http.client.HTTPException) as e:
        return 0, f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def profile_body(version: str, output_dir: str, num_steps: int, prefix: str) -> dict[str, Any]:
    """``/start_profile``'s body: ``ProfileReqInput`` (0.5.12) and ``ProfileReq`` (0.5.16+) take the same keys for
    this (read in the wheels' io_struct.py). Stack and shapes off: they make the trace many times bigger."""
    del version  # the same fields on every release that has the profiler endpoint
    return {"output_dir": output_dir, "num_steps": int(num_steps), "activities": ["CPU", "GPU"],
            "with_stack": False, "record_shapes": False, "profile_prefix": prefix}


def _wait_traces(ctx: _Run, sink: EventSink) -> dict[int, str]:
    """Wait for every rank's file; ask SGLang to stop (and write) when the load ended before ``num_steps`` (the
    load is over, so no further step would come: a short look for files it is already writing, then the stop).
    The server's life is looked at on every round: a rank that dies while the files are written leaves some of
    them complete and the rest never coming, and what it left measures nothing."""
    assert ctx.out_dir is not None
    out_dir, want, cap = ctx.out_dir, ctx.tp, ctx.cap
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        _alive_while_writing(ctx)
        got = ready_traces(out_dir, cap)
        if len(got) >= want:
            return got
        time.sleep(0.2)
    _post(*ctx.target, "/stop_profile", None, ctx.api_key)  # "not in progress" when it just stopped itself: fine
    ctx.stopped[0] = True
    deadline = time.monotonic() + TRACE_WAIT_S
    while time.monotonic() < deadline:
        _alive_while_writing(ctx)
        got = ready_traces(out_dir, cap)
        if len(got) >= want:
            return got
        sink.emit("progress", phase="trace", ranks=len(got), of=want)
        if not sink.stdout_ok:
            break
        time.sleep(0.3)
    _alive_while_writing(ctx)
    got = ready_traces(out_dir, cap)
    if not got:
        raise AgentError("profile_failed", f"SGLang wrote no trace into {out_dir} within {TRACE_WAIT_S:.0f} s of "
                         "the profile's end", "see `inv logs` for the profiler's lines")
    return got


# -- the figures -----------------------------------------------------------------------------------------------------
def _fig(ms: float, source: str, count: int, note: str | None = None) -> PhaseFigure:
    out: PhaseFigure = {"ms": round(ms, 4), "source": source, "count": int(count)}
    if note:
        out["note"] = note
    return out


def _derived(measured: dict[str, Any], speculative: bool, accept: float | None, steps: int | None,
             draft_tokens: int | None, config: str) -> CycleAnatomy | None:
    tpot = (measured.get("tpot_ms") or {}).get("mean")
    if tpot is None:
        return None
    n = int(measured.get("completed") or 0)
    out: CycleAnatomy = {"rank": 0, "config": config}
    if not speculative:
        out["decode"] = _fig(float(tpot), "derived: TPOT", n)
        return out
    if accept:
        out["cycle"] = _fig(float(tpot) * accept, SOURCE_DERIVED, n)
        out["accept_length"] = _fig(accept, SOURCE_META, n)
    if steps:
        out["steps"] = steps
    if draft_tokens:
        out["draft_tokens"] = draft_tokens
    return out


def _difference(timer: CycleAnatomy | None, traced: CycleAnatomy | None) -> dict[str, float]:
    if not timer or not traced:
        return {}
    out: dict[str, float] = {}
    for k in ("draft_step", "draft", "verify", "draft_extend", "decode"):
        a, b = timer.get(k), traced.get(k)
        if isinstance(a, dict) and isinstance(b, dict) and a.get("ms"):
            out[k] = round((float(b["ms"]) - float(a["ms"])) / float(a["ms"]) * 100, 1)
    return out


def _start_failed(code: int, text: str, log_path: str, offset: int) -> AgentError:
    """SGLang answers a refused ``/start_profile`` with a bare HTTP 500 (the RuntimeError goes to its log): the
    log says whether another profile runs."""
    if code == 0:
        return AgentError("profile_failed", f"/start_profile did not answer: {text}", "check `inv status`")
    said = ""
    if log_path:
        lines = server.LogFollower(log_path, offset).read_lines()
        said = next((ln for ln in reversed(lines) if "Profiling" in ln and "progress" in ln), "") or \
            next((ln for ln in reversed(lines) if "RuntimeError" in ln), "")
    if "already in progress" in said:
        return AgentError("profile_running", "a profile is already running on this server (SGLang: \"Profiling is "
                          "already in progress\"); nothing was started")
    why = f": {said.strip()[-200:]}" if said else ""
    return AgentError("profile_failed", f"SGLang refused /start_profile (HTTP {code}{why})",
                      "see `inv logs` for the server's side")


class _Run:
    """One profile's fixed facts and the state its ``finally`` needs (whether a profile was started, stopped)."""

    def __init__(self, req: ProfileRequest, rec: DeployRecord, version: str, target: tuple[str, int],
                 api_key: str | None, log_path: str, offset: int, tp: int) -> None:
        self.req, self.rec, self.version, self.target, self.api_key = req, rec, version, target, api_key
        self.log_path, self.offset, self.tp = log_path, offset, tp
        self.cap = int(req.get("trace_cap_bytes") or DEFAULT_TRACE_CAP)
        self.out_dir: str | None = None
        self.started = False
        self.stopped = [False]
        # The ranks as the profile found them: which one died is named against this (the launcher may take the
        # others down a moment later).
        self.ranks = ranks.snapshot(int(rec["pid"]))
        self.dead = False

    def death(self) -> str | None:
        """None while the server and every rank run; else which rank died and where the host says so."""
        said = ranks.death(int(self.rec["pid"]), self.rec.get("start_ticks"), self.ranks, self.log_path,
                           self.offset)
        self.dead = said is not None
        if said is not None and not procs.alive(int(self.rec["pid"]), self.rec.get("start_ticks")):
            self.stopped[0] = True  # nothing left to ask /stop_profile of
        return said


_DIED_HINT = "see `inv logs` for why it died, deploy again, then profile"


def _alive_while_writing(ctx: _Run) -> None:
    said = ctx.death()
    if said is not None:
        raise AgentError("profile_failed", f"the server died while SGLang wrote its traces: {said}; no figures "
                         "or traces were kept", _DIED_HINT)


def _start(ctx: _Run) -> None:
    req = ctx.req
    base = profiles_dir(expand(req["state_dir"]))
    prune(base, int(req.get("keep_bytes") or DEFAULT_KEEP_BYTES))
    ctx.out_dir = os.path.join(base, req["profile_id"])
    ensure_private_dir(ctx.out_dir, "profile directory")
    n_steps = max(1, min(int(req["trace_steps"]), MAX_TRACE_STEPS))
    code, text = _post(*ctx.target, "/start_profile", profile_body(ctx.version, ctx.out_dir, n_steps, "specdeploy"),
                       ctx.api_key)
    if code != 200:
        time.sleep(0.2)  # the server logs its refusal a moment after it answers
        raise _start_failed(code, text, ctx.log_path, ctx.offset)
    ctx.started = True


def _load_and_trace(ctx: _Run, sink: EventSink) -> tuple[dict[str, Any], devicetimer.Snapshot, dict[int, str]]:
    """The load (and with ``trace`` the profile around it); the profiler is stopped on every way out."""
    req, rec = ctx.req, ctx.rec
    progress = bench.progress_events(sink)

    sink.emit("step", name="profile", status="start")
    files: dict[int, str] = {}
    try:
        with _signals_raise():
            if req.get("trace"):
                _start(ctx)
            measured = loadgen.run(*ctx.target, concurrency=int(req["concurrency"]), input_len=int(req["input_len"]),
                                   output_len=int(req["output_len"]), num_prompts=int(req["num_prompts"]), warmup=0,
                                   api_key=ctx.api_key, on_progress=progress,
                                   timeout=float(req.get("request_timeout", 600)))
            # The bench's rule: figures from a run the server did not live through measure its death (a few
            # seconds for the launcher to finish dying when requests failed, so the death is seen, not blamed on
            # the requests). One rank gone is the server's death too, whether or not the launcher noticed.
            bench.died_meanwhile(rec, grace=5.0 if measured.get("failed") or not measured["completed"] else 0.0)
            said = ctx.death()
            if said is not None:
                raise AgentError("bench_failed", f"the server died during the profile, after "
                                 f"{measured.get('completed', 0)} of {req['num_prompts']} requests: {said}; no "
                                 "figures were kept", _DIED_HINT)
            after = devicetimer.snapshot(bench.http_get(*ctx.target, "/metrics", ctx.api_key) or "")
            if not measured["completed"]:
                raise AgentError("bench_failed", f"every profile request failed: {measured['errors'][:1]}",
                                 "check `inv status` and `inv logs`")
            if measured.get("interrupted"):
                raise AgentError("profile_failed", "the client went away during the profile; nothing was kept",
                                 "run `inv profile` again")
            if ctx.started and ctx.out_dir:
                files = _wait_traces(ctx, sink)
    except _Interrupted as e:
        raise AgentError("profile_failed", f"the profile was interrupted on the host ({e}); the server's profiler "
                         "was stopped", "run `inv profile` again") from None
    finally:
        if ctx.started and not ctx.stopped[0]:
            # a server with a dead rank may never answer: a short try, as its profiler dies with it
            _post(*ctx.target, "/stop_profile", None, ctx.api_key, timeout=5.0 if ctx.dead else 30.0)
    return measured, after, files


def read_trace(path: str, cap: int, attempts: int = 4,
               wait: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """One rank's summary. A gzip SGLang is still writing (its size held still a moment, then grew) reads as
    truncated: read again, a second later, while the file still changes. ``wait`` is that second's sleep (a test
    finishes the file there instead of racing a writer thread)."""
    attempt = 0
    while True:
        size = os.path.getsize(path)
        try:
            return trace.summarize(trace.load(path, cap))
        except trace.TraceTooBig as e:
            raise AgentError("trace_too_big", f"{e}: it was not summarised (it is left in {os.path.dirname(path)})",
                             "profile fewer steps (--trace-steps) or a smaller load") from None
        except trace.TraceUnreadable as e:
            attempt += 1
            gave_up = attempt >= attempts  # known before waiting: the last attempt's failure waits for nothing
            if not gave_up:
                wait(1.0)
                gave_up = attempt > 1 and os.path.getsize(path) == size  # it did not grow while we waited
            if gave_up:
                raise AgentError("profile_failed", str(e), "see `inv logs` for the profiler's lines") from None


def _ranks(ctx: _Run, d: devicetimer.Snapshot, files: dict[int, str], shape: dict[str, Any],
           measured: dict[str, Any], meta: metrics.SpecMeta, cycle: PhaseFigure | None,
           accept: PhaseFigure | None) -> list[ProfileRank]:
    """Per rank: the timer's anatomy, the trace's, and their difference."""
    ranks: list[ProfileRank] = []
    for rank in sorted(set(d["seconds"]) | set(files) or {0}):
        timer_a: CycleAnatomy | None = None
        if rank in d["seconds"]:
            timer_a = devicetimer.complete(devicetimer.anatomy(
                d, rank, version=shape["version"], cuda_graph=shape["cuda_graph"], speculative=shape["speculative"],
                steps=shape["steps"], draft_tokens=shape["draft_tokens"],
                concurrency=min(int(ctx.req["concurrency"]), int(ctx.req["num_prompts"])),
                meta_verify_ct=meta.get("verify_ct"), config=shape["config"], tokens=measured.get("output_tokens")),
                cycle, accept)
        traced: CycleAnatomy | None = None
        size = None
        if rank in files:
            size = os.path.getsize(files[rank])
            traced = trace.anatomy(read_trace(files[rank], ctx.cap), rank=rank, steps=shape["steps"],
                                   draft_tokens=shape["draft_tokens"], config=shape["config"])
            if accept is not None and shape["speculative"]:
                traced["accept_length"] = accept
        ranks.append({"rank": rank, "timer": timer_a, "trace": traced, "difference_pct": _difference(timer_a, traced),
                      "trace_file": files.get(rank), "trace_bytes": size})
    return ranks


def allreduce_context(info: dict[str, Any], tp: int) -> dict[str, Any]:
    """What sizes and carries this server's all-reduces: the message bytes per token (the model's hidden size ×
    the activation dtype's bytes, as check-env sizes them: ``ncclused.model_shape``) and the GPUs' link."""
    dtype = str(info.get("dtype") or "auto")
    shape = ncclused.model_shape([f"--dtype={dtype}"], ncclused.read_model_config(str(info.get("model_path") or "")))
    link = interconnect.gpu_facts()
    return {"hidden_size": shape["hidden_size"], "dtype": shape["dtype"], "dtype_bytes": shape["dtype_bytes"],
            "why": shape["why"], "interconnect": link["interconnect"], "interconnect_source": link["source"],
            "tp": tp, "source": "the model's config.json, the server's dtype (/get_server_info), nvidia-smi"}


def run(req: ProfileRequest, sink: EventSink) -> ProfileResult:
    t_start = time.monotonic()
    state_dir = expand(req["state_dir"])
    rec = bench.running_record(state_dir)
    version = str(rec.get("sglang_version") or versions.NEWEST_SUPPORTED)
    target = str(rec.get("listen") or "127.0.0.1"), int(rec["port"])
    api_key = bench.api_key_of(int(rec["pid"]))
    info = bench.server_info(*target, version, api_key)
    spec = metrics.spec_from_server_info(info)
    speculative = bool(spec.get("algorithm"))
    steps = spec.get("steps") or None
    draft_tokens = spec.get("draft_tokens") or None
    tp = int(info.get("tp_size") or 1)
    config = str(rec.get("config_name") or "")
    input_len, output_len = int(req["input_len"]), int(req["output_len"])
    timeout = float(req.get("request_timeout", 600))
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}", str(req["profile_id"])):
        raise AgentError("bad_request", f"profile id {req['profile_id']!r} is not a plain name")
    if rec.get("measure") is False and not req.get("trace"):
        # Said before the load (it was said after it, some 20 s on): the deploy record knows the timer is off, so
        # this profile can only derive its cycle from the bench's figures.
        sink.emit("info", message=("this server was deployed without SGLang's device timer (its deploy record, "
                                   f"{rec.get('deploy_id')}): the profile can only derive the cycle from TPOT × "
                                   f"accept length; {TIMER_HOWTO}"))
    # The bench's own warm-up, outside the window: its compile and first-batch costs are not a cycle's.
    loadgen.run(*target, concurrency=1, input_len=input_len, output_len=output_len, num_prompts=0, warmup=1,
                api_key=api_key, timeout=timeout)
    log_path = str(rec.get("log_path") or "")
    offset = os.path.getsize(log_path) if log_path and os.path.exists(log_path) else 0
    before = devicetimer.snapshot(bench.http_get(*target, "/metrics", api_key) or "")
    ctx = _Run(req, rec, version, target, api_key, log_path, offset, tp)
    try:
        measured, after, files = _load_and_trace(ctx, sink)
    except BaseException as e:
        # Nothing half-done: a failed profile's directory goes (SGLang has written into it by the time its
        # /stop_profile answered), except a trace over the bound, which the error says is left for a look.
        if ctx.out_dir and getattr(e, "kind", None) != "trace_too_big":
            shutil.rmtree(ctx.out_dir, ignore_errors=True)
        raise
    out_dir = ctx.out_dir
    decode_log: metrics.DecodeSummary = \
        metrics.summarize_decode_lines(server.LogFollower(log_path, offset).read_lines()) if log_path else {}
    d = devicetimer.delta(before, after)
    timer_on = devicetimer.has_timer(after)
    cuda_graph = devicetimer.cuda_graph(d, decode_log)
    meta: metrics.SpecMeta = measured.pop("meta", None) or metrics.SpecMeta()
    accept_len = meta.get("accept_len") if speculative else None
    accept = _fig(float(accept_len), SOURCE_META, int(meta.get("verify_ct") or 0)) if accept_len else None
    cyc = (measured.get("cycle_ms") or {}).get("mean")
    cycle = _fig(float(cyc), SOURCE_TOOL, int(meta.get("verify_ct") or 0)) if cyc and speculative else None
    shape = {"version": version, "cuda_graph": bool(cuda_graph), "speculative": speculative, "steps": steps,
             "draft_tokens": draft_tokens, "config": config}
    ranks = _ranks(ctx, d, files, shape, measured, meta, cycle, accept) if timer_on or files else []
    missing = None
    if not timer_on:
        missing = (f"SGLang {version} has no device timer (it came in {versions.DEVICE_TIMER})"
                   if not versions.at_least(version, versions.DEVICE_TIMER) else
                   f"the server runs without the device timer: {TIMER_HOWTO}")
    bench_figs = {k: measured.get(k) for k in ("completed", "failed", "duration_s", "output_tok_s", "tpot_ms",
                                               "ttft_ms", "cycle_ms", "output_tokens", "accept_histogram",
                                               "accept_histogram_source")}
    out: ProfileResult = {
        "profile_id": req["profile_id"], "deploy_id": rec.get("deploy_id"), "config_name": config or None,
        "sglang_version": version,
        "speculative": {k: spec.get(k) for k in ("algorithm", "steps", "topk", "draft_tokens")},
        "cuda_graph": cuda_graph, "timer": timer_on, "timer_missing": missing, "ranks": ranks,
        "derived": None if timer_on else _derived(measured, speculative, accept_len, steps, draft_tokens, config),
        "bench": bench_figs, "wall_s": round(time.monotonic() - t_start, 3), "trace_dir": out_dir}
    if files:
        out["allreduce_context"] = allreduce_context(info, tp)
    if req.get("server_args"):
        # Read before the load: what the server says it runs with (the tuner's evidence that a flag engaged).
        out["server_args"] = {k: info[k] for k in req["server_args"] if k in info}
    return out
