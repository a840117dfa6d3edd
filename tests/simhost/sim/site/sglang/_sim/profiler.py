"""The SGLang simulator's measurement (TEST EQUIPMENT, not SGLang): the device timer's counters and the profiler.

- Device timer (``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1`` + ``--enable-metrics``, 0.5.11+): every forward's cost
  (the cost model's parts, times ``time_scale``: the wall time the engine sleeps for it) is added to
  ``sglang:forward_execution_seconds_total{category=...}`` per TP rank, in the category the release and CUDA
  graphs give it (read in the wheels): graphs on ``eagle_draft`` / ``target_verify`` / ``eagle_draft_extend`` /
  ``decode``; eagerly the draft's forwards are ``decode``, the verify ``target_verify`` from 0.5.15 and ``extend``
  before, the draft-extend ``extend``; prefill always ``extend``. ``sglang:spec_verify_calls_total`` (0.5.13+, no
  rank label) adds each finished request's ``spec_verify_ct``; ``sglang:cuda_graph_passes_total{mode=...}``
  (0.5.10+) counts decode batches (``decode_cuda_graph``/``decode_none``) and prefills (``prefill_none``).
- Profiler (``/start_profile``, ``/stop_profile``): records ``num_steps`` scheduler steps (a prefill batch or a
  decode/speculative batch each), then writes one Kineto trace per rank,
  ``[prefix-]{profile_id}-TP-{rank}.trace.json.gz``, in the format of real SGLang 0.5.16's trace: the phase spans
  as CPU ``user_annotation`` and GPU ``gpu_user_annotation`` events with the same ``External id``; per layer the
  real kernels' names (``nvjet_sm90_*`` GEMMs, Triton ``_fwd_kernel`` attention, ``FusedAddRMSNormKernel``,
  ``act_and_mul_kernel``, and at TP > 1 two ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` per layer);
  ``VerifyTreeGreedy`` after the verify span; a ``cudaGraphLaunch`` per forward with CUDA graphs, a
  ``cudaLaunchKernel`` per kernel without. The spans last exactly the cost model's parts, so the trace and the
  timer agree. 0.5.12 and older label only ``step[...]`` forwards (no ``draft``/``draft_extend`` spans).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import threading
import time
from typing import Any

from sglang._sim import runtime

# Kernels of one transformer layer: (name, share of the forward's busy time); at TP > 1 the all-reduces join.
_LAYER = [
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
     "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)", 0.04),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", 0.16),
    ("void (anonymous namespace)::fused_rope_kernel<true, 64l, true, __nv_bfloat16, long>", 0.02),
    ("_fwd_kernel", 0.14),
    ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN", 0.10),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
     "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)", 0.04),
    ("nvjet_sm90_tst_16x64_64x16_4x1_v_bz_TNN", 0.22),
    ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, (anonymous namespace)::SiluFunctor>", 0.04),
    ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN", 0.16),
]
_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
_AR_AFTER = (4, 8)  # after o_proj and after down_proj, as a TP model all-reduces twice per layer
_AR_SHARE = 0.08
BUSY_GRAPH = 0.92  # share of a forward's span its kernels cover in a CUDA graph replay
BUSY_EAGER = 0.55  # ... launched one by one (launch gaps)

DRAFT_TOPK = "_draft_topk1_partial_argmax_kernel"
VERIFY_KERNEL = "void VerifyTreeGreedy<int, long>(int*, int*, int*, long*, long*, long*, long*, long*)"


def timer_enabled(sa: Any, ver: tuple[int, ...]) -> bool:
    flag = os.environ.get("SGLANG_ENABLE_METRICS_DEVICE_TIMER", "").strip().lower()
    return bool(getattr(sa, "enable_metrics", False)) and ver >= (0, 5, 11) and flag in ("1", "true", "yes", "on")


def categories(ver: tuple[int, ...], cuda_graph: bool) -> dict[str, str]:
    """The category each part of the cost model is timed as (the wheels' model_runner / graph runners)."""
    if cuda_graph:
        return {"draft": "eagle_draft", "verify": "target_verify", "draft_extend": "eagle_draft_extend",
                "decode": "decode", "prefill": "extend"}
    return {"draft": "decode", "verify": "target_verify" if ver >= (0, 5, 15) else "extend",
            "draft_extend": "extend", "decode": "decode", "prefill": "extend"}


class Measurement:
    """The timer's counters and the profiler's state; fed by the engine thread, read by the HTTP threads."""

    def __init__(self, sa: Any, ver: tuple[int, ...], target_layers: int, scheduler_pids: list[int]):
        self.sa = sa
        self.ver = ver
        self.tp = max(1, int(getattr(sa, "tp_size", 1) or 1))
        self.cuda_graph = not bool(getattr(sa, "disable_cuda_graph", False))
        self.timer = timer_enabled(sa, ver)
        self.cats = categories(ver, self.cuda_graph)
        self.seconds: dict[str, float] = {}
        self.verify_calls = 0.0
        self.passes: dict[str, float] = {}
        self.lock = threading.Lock()
        self.target_layers = max(1, target_layers)
        self.pids = scheduler_pids or [os.getpid()]
        # the profiler
        self.active = False
        self.steps_left: int | None = None
        self.out_dir = ""
        self.profile_id = ""
        self.prefix = ""
        self.steps: list[dict[str, Any]] = []

    # -- the engine's side -----------------------------------------------------------------------------------------
    def _add(self, part: str, ms: float) -> None:
        cat = self.cats[part]
        self.seconds[cat] = self.seconds.get(cat, 0.0) + ms / 1000.0

    def prefill(self, wall_start: float, ms: float, reqs: int, tokens: int) -> None:
        with self.lock:
            self._add("prefill", ms)
            self.passes["prefill_none"] = self.passes.get("prefill_none", 0.0) + 1
        self._step({"kind": "prefill", "t": wall_start, "ms": ms, "bs": reqs, "toks": tokens})

    def decode(self, wall_start: float, ms: float, batch: int, ar: tuple[int, float] = (0, 0.0)) -> None:
        """``ar``: the cost model's (all-reduces, ms each) inside ``ms`` (the trace's all-reduce kernels)."""
        with self.lock:
            self._add("decode", ms)
            self._pass()
        self._step({"kind": "decode", "t": wall_start, "ms": ms, "bs": batch, "ar": ar})

    def cycle(self, wall_start: float, parts: dict[str, float], forwards: int, batch: int,
              ar: dict[str, tuple[int, float]] | None = None) -> None:
        with self.lock:
            self._add("draft", parts["draft"] * forwards)
            self._add("verify", parts["verify"])
            self._add("draft_extend", parts["draft_extend"])
            self._pass()
        self._step({"kind": "cycle", "t": wall_start, "parts": parts, "forwards": forwards, "bs": batch,
                    "ar": ar or {}})

    def finished(self, verify_ct: int) -> None:
        with self.lock:
            self.verify_calls += verify_ct

    def _pass(self) -> None:
        mode = "decode_cuda_graph" if self.cuda_graph else "decode_none"
        self.passes[mode] = self.passes.get(mode, 0.0) + 1

    def _step(self, step: dict[str, Any]) -> None:
        write = False
        with self.lock:
            if not self.active:
                return
            self.steps.append(step)
            if self.steps_left is not None:
                self.steps_left -= 1
                write = self.steps_left <= 0
        if write:
            self.stop()

    # -- /metrics --------------------------------------------------------------------------------------------------
    def metric_lines(self, base_labels: str) -> list[str]:
        """The timer's rows (per rank) and the pass counter, as SGLang's collector writes them."""
        out: list[str] = []
        with self.lock:
            seconds, calls, passes = dict(self.seconds), self.verify_calls, dict(self.passes)
        if self.ver >= (0, 5, 10):
            name = "sglang:cuda_graph_passes_total"
            out += [f"# HELP {name} Total number of forward passes categorized by CUDA graph.",
                    f"# TYPE {name} counter"]
            for rank in range(self.tp):
                for mode, v in sorted(passes.items()):
                    out.append(f'{name}{{{_labels(base_labels, rank)},mode="{mode}"}} {float(v)}')
        if self.timer:
            name = "sglang:forward_execution_seconds_total"
            out += [f"# HELP {name} Total time that GPU is busy executing model forward passes. Refer to "
                    "ForwardMode for category labels.", f"# TYPE {name} counter"]
            for rank in range(self.tp):
                for cat, v in sorted(seconds.items()):
                    out.append(f'{name}{{category="{cat}",{_labels(base_labels, rank)}}} {v}')
        if self.ver >= (0, 5, 13) and getattr(self.sa, "speculative_algorithm", None):
            name = "sglang:spec_verify_calls_total"
            no_rank = ",".join(p for p in base_labels.split(",") if not p.startswith(("tp_rank", "pp_rank")))
            out += [f"# HELP {name} Number of speculative decoding verification calls.", f"# TYPE {name} counter",
                    f"{name}{{{no_rank}}} {float(calls)}"]
        return out

    # -- the profiler ----------------------------------------------------------------------------------------------
    def start(self, body: dict[str, Any]) -> str | None:
        """Start a profile; the RuntimeError message SGLang raises when it cannot (None: started)."""
        with self.lock:
            if self.active:
                return "Profiling is already in progress. Call /stop_profile first."
            self.active = True
            n = body.get("num_steps")
            self.steps_left = int(n) if n else None
            self.out_dir = os.path.expanduser(str(body.get("output_dir") or
                                                  os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")))
            self.profile_id = str(body.get("profile_id") or time.time())
            self.prefix = str(body.get("profile_prefix") or "")
            self.steps = []
        _log(f"Profiling starts. Traces will be saved to: {self.out_dir} (with profile id: {self.profile_id})")
        return None

    def stop(self) -> str | None:
        with self.lock:
            if not self.active:
                return "Profiling is not in progress. Call /start_profile first."
            self.active = False
            steps, self.steps = self.steps, []
        _log("Stop profiling...")
        os.makedirs(self.out_dir, exist_ok=True)
        kill = runtime.load_config().get("trace_kill_rank")  # read now: a test sets it after the deploy
        for rank in range(self.tp):
            name = (f"{self.prefix}-" if self.prefix else "") + f"{self.profile_id}-TP-{rank}.trace.json.gz"
            path = os.path.join(self.out_dir, name)
            tmp = os.path.join(self.out_dir, f".{name}.tmp")
            if kill is not None and int(kill) == rank and rank < len(self.pids):
                # The rank dies half-way through its file (the ranks before it complete): the launcher's watchdog
                # sees it and takes the server down, leaving the half-written .tmp behind.
                with open(tmp, "wb") as f:
                    f.write(gzip.compress(json.dumps(self.trace(rank, steps)).encode())[:64])
                os.kill(self.pids[rank], signal.SIGKILL)
                return None
            with gzip.open(tmp, "wt", encoding="utf-8") as f:
                json.dump(self.trace(rank, steps), f)
            os.replace(tmp, path)
        _log(f"Profiling done. Traces are saved to: {self.out_dir}")
        return None

    def trace(self, rank: int, steps: list[dict[str, Any]]) -> dict[str, Any]:
        w = _Writer(self, rank)
        for s in steps:
            w.step(s)
        return {"schemaVersion": 1, "deviceProperties": [{"id": rank, "name": "NVIDIA H200", "numSms": 132}],
                "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": self.tp,
                                    "nccl_version": "2.28.9"},
                "displayTimeUnit": "ms", "baseTimeNanoseconds": 0, "traceEvents": w.events,
                "traceName": f"{self.profile_id}-TP-{rank}"}


def _labels(base: str, rank: int) -> str:
    return ",".join(f'tp_rank="{rank}"' if p.startswith("tp_rank") else p for p in base.split(","))


def _log(msg: str) -> None:
    runtime.write_all(2, f"[{runtime.now_stamp()}] {msg}\n".encode())


class _Writer:
    """One rank's Kineto events (µs timestamps), step by step."""

    def __init__(self, m: Measurement, rank: int):
        self.m = m
        self.rank = rank
        self.pid = m.pids[rank] if rank < len(m.pids) else m.pids[0]
        self.events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "ts": 0, "pid": self.pid, "tid": 0,
             "args": {"name": "sglang::scheduler"}},
            {"name": "process_name", "ph": "M", "ts": 0, "pid": rank, "tid": 0, "args": {"name": "sglang::scheduler"}},
        ]
        self.ext = 0
        self.corr = 0
        self.labels_all = m.ver >= (0, 5, 16)

    def span(self, name: str, t0: float, dur: float) -> None:
        self.ext += 1
        for cat, pid, tid in (("user_annotation", self.pid, self.pid), ("gpu_user_annotation", self.rank, 7)):
            self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": t0, "dur": dur,
                                "args": {"External id": self.ext}})

    def forward(self, t0: float, dur: float, layers: int, graph: bool, extra: list[tuple[str, float]],
                replay: bool = True, ar: tuple[int, float] = (0, 0.0)) -> None:
        """The kernels of one forward inside [t0, t0+dur] and their launches on the CPU thread (with a CUDA graph:
        one ``cudaGraphLaunch`` when ``replay``; the EAGLE draft graph replays all of a cycle's forwards at once).

        ``ar``: the cost model's all-reduces of this forward (count, ms each, from the NCCL model in ``_sim/nccl.py``
        by message size and path): that many all-reduce kernels lasting exactly that, spread over the layers'
        all-reduce slots, so a trace's all-reduce per call is what the cost model charged. Without it (the cost
        model charges no all-reduce: ``nccl_allreduces_per_forward`` unset) TP > 1 keeps a fixed share."""
        n_ar, ar_us = int(ar[0]), float(ar[1]) * 1000
        fixed = self.m.tp > 1 and not n_ar
        slots = max(1, layers * len(_AR_AFTER))
        kernels: list[tuple[str, float]] = []
        slot = 0
        for _ in range(layers):
            for i, (name, share) in enumerate(_LAYER):
                kernels.append((name, share))
                if i in _AR_AFTER:
                    if fixed:
                        kernels.append((_ALLREDUCE, _AR_SHARE))
                    # slot k of `slots` carries the all-reduces numbered [k*n/slots, (k+1)*n/slots)
                    kernels += [(_ALLREDUCE, -1.0)] * ((slot + 1) * n_ar // slots - slot * n_ar // slots)
                    slot += 1
        kernels += extra
        total = sum(s for _, s in kernels if s > 0)
        comm = min(dur, n_ar * ar_us)
        busy = (dur - comm) * (BUSY_GRAPH if graph else BUSY_EAGER)
        gap = (dur - comm - busy) / (len(kernels) + 1)
        t = t0 + gap
        if graph and replay:
            self._launch("cudaGraphLaunch", t0 + 0.5)
        for name, share in kernels:
            d = comm / n_ar if share < 0 else busy * share / total
            if not graph:
                self._launch("cudaLaunchKernel", t - gap / 2)
            self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": self.rank, "tid": 7, "ts": t,
                                "dur": d, "args": {"device": self.rank, "stream": 7, "correlation": self.corr}})
            t += d + gap

    def _launch(self, name: str, ts: float) -> None:
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": self.pid, "tid": self.pid,
                            "ts": ts, "dur": 2.0, "args": {"correlation": self.corr}})

    def step(self, s: dict[str, Any]) -> None:
        t0 = s["t"] * 1e6
        graph = self.m.cuda_graph
        if s["kind"] == "prefill":
            dur = s["ms"] * 1000
            self.span(f"step[EXTEND bs={s['bs']} toks={s['toks']}]", t0, dur)
            self.forward(t0, dur, self.m.target_layers, False, [])
            return
        if s["kind"] == "decode":
            dur = s["ms"] * 1000
            self.span(f"step[DECODE bs={s['bs']}]", t0, dur)
            self.forward(t0, dur, self.m.target_layers, graph, [], ar=tuple(s.get("ar") or (0, 0.0)))
            return
        parts, bs, n = s["parts"], s["bs"], int(s["forwards"])
        ar = {k: tuple(v) for k, v in (s.get("ar") or {}).items()}
        d_us, v_us, e_us = parts["draft"] * 1000, parts["verify"] * 1000, parts["draft_extend"] * 1000
        t = t0
        if n:
            if self.labels_all:
                self.span("draft", t, d_us * n)
            for i in range(n):
                if self.labels_all or not graph:  # 0.5.12: a draft graph replay carries no label
                    self.span(f"step[DECODE bs={bs}]", t, d_us)
                self.forward(t, d_us, 1, graph, [(DRAFT_TOPK, 0.02)], replay=i == 0, ar=ar.get("draft", (0, 0.0)))
                t += d_us
        self.span(f"step[TARGET_VERIFY bs={bs}]", t, v_us)
        self.forward(t, v_us, self.m.target_layers, graph, [], ar=ar.get("verify", (0, 0.0)))
        t += v_us
        self.events.append({"ph": "X", "cat": "kernel", "name": VERIFY_KERNEL, "pid": self.rank, "tid": 7,
                            "ts": t + 0.5, "dur": 3.0, "args": {"device": self.rank, "stream": 7}})
        if self.labels_all:
            self.span("draft_extend", t + 4.0, e_us - 4.0)
            self.span(f"step[DRAFT_EXTEND_V2 bs={bs}]", t + 4.0, e_us - 4.0)
        elif not graph:  # ModelRunner.forward's label of the eager draft-extend forward
            self.span(f"step[DRAFT_EXTEND bs={bs}]", t + 4.0, e_us - 4.0)
        self.forward(t + 4.0, e_us - 4.0, 1, graph, [], ar=ar.get("draft_extend", (0, 0.0)))
