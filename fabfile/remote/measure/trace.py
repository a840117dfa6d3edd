"""One rank's SGLang profiler trace (Kineto JSON, ``*.trace.json.gz``) → where each phase's time goes.

The ground truth of the format is a real trace of SGLang 0.5.16 on an H200
(``tests/unit/remote/measure/test_measure.py`` reads it):

- phases are ``gpu_user_annotation`` spans on the GPU timeline (and the same names, with the same ``External id``,
  as CPU ``user_annotation`` spans): ``draft`` (holding ``steps - 1`` ``step[DECODE bs=N]`` forwards),
  ``step[TARGET_VERIFY bs=N]``, ``draft_extend`` (holding ``step[DRAFT_EXTEND_V2 bs=N]``; the draft's prefill of a
  new request is a ``draft_extend`` holding ``step[EXTEND ...]``), ``step[EXTEND bs=N toks=T]`` (the prefill),
  ``step[DECODE bs=N]`` outside any ``draft`` (the baseline's decode); 0.5.12 has only the ``step[...]`` spans.
  A phase is the outermost of these spans (``scheduler.*`` spans around them are not phases).
- kernels (``cat: kernel``) and copies (``gpu_memcpy``/``gpu_memset``) belong to the phase span their start lies in.
- launches are ``cuda_runtime``/``cuda_driver`` events on the CPU thread inside the phase's CPU span: a
  ``cudaGraphLaunch`` is a CUDA graph replay; ``cudaLaunchKernel``/``cudaLaunchKernelExC``/``cuLaunchKernel``/
  ``cuLaunchKernelEx`` are one kernel each (eager).

An all-reduce kernel's name says which implementation ran (NCCL, SGLang's custom all-reduce, torch symmetric
memory, FlashInfer's fusion), never NCCL's algorithm or protocol: since NCCL 2.19 every all-reduce kernel is named
``..._RING_LL`` whatever runs (NVIDIA/nccl #1595). So none is inferred here.

Bounded: a file over ``cap_bytes`` compressed, or whose JSON grows past ``cap_bytes × JSON_FACTOR`` while it is
read, is refused with :class:`TraceTooBig` (nothing partial is summarised).
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
from typing import Any

from ..protocol import KERNEL_CLASSES, SOURCE_TRACE, CycleAnatomy, KernelBreakdown, PhaseFigure

DEFAULT_CAP_BYTES = 256 * 1024 * 1024
JSON_FACTOR = 12  # a Kineto trace compresses about 10:1; the read stops beyond this many times the cap
_CHUNK = 1 << 20


class TraceTooBig(Exception):
    def __init__(self, path: str, size: int, cap: int, what: str) -> None:
        super().__init__(f"{os.path.basename(path)}: {what} {size} bytes is over the bound of {cap} bytes")
        self.path, self.size, self.cap, self.what = path, size, cap, what


class TraceUnreadable(Exception):
    pass


def load(path: str, cap_bytes: int = DEFAULT_CAP_BYTES) -> dict[str, Any]:
    """The trace document, refusing one over the bound (compressed size, then the JSON as it is inflated)."""
    size = os.path.getsize(path)
    if size > cap_bytes:
        raise TraceTooBig(path, size, cap_bytes, "the compressed trace's")
    limit = cap_bytes * JSON_FACTOR
    parts: list[bytes] = []
    total = 0
    try:
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > limit:
                    raise TraceTooBig(path, total, limit, "the trace's JSON (read so far)")
                parts.append(chunk)
        doc = json.loads(b"".join(parts))
    except (OSError, EOFError, ValueError) as e:
        raise TraceUnreadable(f"{os.path.basename(path)} is not a readable trace: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceUnreadable(f"{os.path.basename(path)} has no traceEvents: not a Kineto trace")
    return doc


# -- kernel classes -------------------------------------------------------------------------------------------------
_ALLREDUCE = re.compile(r"ncclDevKernel_|ncclSymkDevKernel_|cross_device_reduce_|all_reduce_\w*shot|"
                        r"multimem_all_reduce_kernel|one_shot_all_reduce_kernel|two_shot_all_reduce_kernel|"
                        r"allreduce_fusion_kernel_")
_NCCL = re.compile(r"ncclDevKernel_|ncclSymkDevKernel_")  # NCCL's own (the rest: SGLang's custom all-reduce, ...)
_SAMPLING = re.compile(r"VerifyTreeGreedy|verify_tree_greedy|TopP|TopK|top_p|top_k|Renorm|renorm|_draft_topk1_|"
                       r"Sampling|sampling", re.I)
_GEMM = re.compile(r"nvjet|cutlass|gemm|cublas|sm90_xmma|Gemm", re.I)
# MoE layers (SGLang's Triton runner, the default for bf16 at TP 1 on Hopper): the expert GEMMs are the Triton kernel
# fused_moe_kernel (the weight traffic that grows with the experts a pass reaches); the router's top-k
# (sgl_kernel's topkGatingSoftmax), the token sort (moe_align_block_size) and the weighted sum (moe_sum_reduce) are
# bookkeeping, not sampling: named before the sampling pattern, whose "TopK" would otherwise take the router.
_MOE_GEMM = re.compile(r"fused_moe_kernel")
_MOE_ROUTING = re.compile(r"topkGating|moeSoftmax|moeTopK|moe_align_block_size|moe_sum_reduce", re.I)
_ATTENTION = re.compile(r"_fwd_kernel|flash|flashinfer::.*(Prefill|Decode|Attention)|attention|mla_|fmha", re.I)
_NORM_ACT = re.compile(r"RMSNorm|LayerNorm|rms_norm|layer_norm|act_and_mul|silu|gelu|swiglu|Activation", re.I)


def kernel_class(name: str, cat: str = "kernel") -> str:
    """A kernel's class (one of ``protocol.KERNEL_CLASSES``) from its name; copies by their event category."""
    if cat in ("gpu_memcpy", "gpu_memset") or name.startswith(("Memcpy", "Memset")):
        return "copy"
    if _ALLREDUCE.search(name):
        return "allreduce"
    if _MOE_GEMM.search(name):
        return "gemm"
    if _MOE_ROUTING.search(name):
        return "other"
    if _SAMPLING.search(name):
        return "sampling_verify"
    if _NORM_ACT.search(name):
        return "norm_activation"
    if _GEMM.search(name):
        return "gemm"
    if _ATTENTION.search(name):
        return "attention"
    return "other"


# -- phases ---------------------------------------------------------------------------------------------------------
_GRAPH_LAUNCH = ("cudaGraphLaunch", "cuGraphLaunch")
_KERNEL_LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                  "cudaLaunchCooperativeKernel")


def _label_kind(name: str) -> str | None:
    if name == "draft":
        return "draft"
    if name == "draft_extend":
        return "draft_extend"
    if name.startswith("step[TARGET_VERIFY"):
        return "verify"
    if name.startswith("step[DRAFT_EXTEND"):
        return "draft_extend"
    if name.startswith("step[DECODE"):
        return "decode"
    if name.startswith("step[EXTEND"):
        return "extend"
    return None


def _outermost(spans: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], list[str]]]:
    """(phase, span, inner labels) for every outermost phase span, in time order."""
    ordered = sorted((s for s in spans if _label_kind(s["name"])), key=lambda s: (s["ts"], -s["dur"]))
    out: list[tuple[str, dict[str, Any], list[str]]] = []
    end = -1.0
    for s in ordered:
        # Inside the current phase when it ends within it (1 µs of slack: back-to-back spans round apart).
        if out and s["ts"] < end and s["ts"] + s["dur"] <= end + 1.0:
            out[-1][2].append(s["name"])
            continue
        out.append((str(_label_kind(s["name"])), s, []))
        end = s["ts"] + s["dur"]
    fixed = []
    for kind, span, inner in out:
        # A draft_extend that holds a prefill's step[EXTEND] is the draft's prefill of a new request.
        if kind == "draft_extend" and any(n.startswith("step[EXTEND") for n in inner):
            kind = "extend"
        fixed.append((kind, span, inner))
    return fixed


def _intervals_union(iv: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """Per phase: passes, mean GPU span, kernel classes, all-reduces, launches, gaps; the cycle period."""
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
              and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
    gpu_spans = [e for e in events if e.get("cat") == "gpu_user_annotation"]
    cpu_spans = {e.get("args", {}).get("External id"): e for e in events if e.get("cat") == "user_annotation"}
    kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                     key=lambda e: e["ts"])
    launches = sorted((e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")), key=lambda e: e["ts"])
    launch_ts = [float(e["ts"]) for e in launches]
    steps = sorted((float(x["ts"]), float(x["dur"])) for x in gpu_spans if x["name"].startswith("step[DECODE"))
    phases = _outermost(gpu_spans)
    acc: dict[str, dict[str, Any]] = {}
    k_i = 0
    verify_starts: list[float] = []
    attributed: set[int] = set()
    draft_steps: list[float] = []
    for kind, span, inner in phases:
        a = acc.setdefault(kind, _new_acc())
        s0, s1 = float(span["ts"]), float(span["ts"]) + float(span["dur"])
        bs = _batch(str(span["name"]), inner)
        if bs is not None:
            a["bs_sum"] += bs
            a["bs_n"] += 1
        if kind == "verify":
            verify_starts.append(s0)
        a["passes"] += 1
        a["span_us"] += s1 - s0
        if kind == "draft":  # the draft's own forwards: the step[DECODE] spans inside it
            for t, d in steps[bisect.bisect_left(steps, (s0, -1.0)):]:
                if t > s1:
                    break
                if t + d <= s1:
                    draft_steps.append(d)
        while k_i < len(kernels) and kernels[k_i]["ts"] < s0:
            k_i += 1
        j = k_i
        inside: list[tuple[float, float]] = []
        while j < len(kernels) and kernels[j]["ts"] <= s1:
            attributed.add(j)
            dur = _add_kernel(a, kernels[j])
            inside.append((float(kernels[j]["ts"]), min(s1, float(kernels[j]["ts"]) + dur)))
            j += 1
        a["idle_us"] += max(0.0, (s1 - s0) - _intervals_union(inside))
        if inside:
            first, last = min(x for x, _ in inside), max(e for _, e in inside)
            a["gap_us"] += max(0.0, (last - first) - _intervals_union(inside))
        cpu = cpu_spans.get(span.get("args", {}).get("External id"))
        if cpu is not None:
            _count_launches(a, cpu, launches, launch_ts)
    if phases and verify_starts:
        between = _between(phases, kernels, attributed, len(verify_starts))
        if between["kernels"]:
            acc["between"] = between
    out: dict[str, Any] = {"phases": {}, "rank": _rank(doc)}
    if draft_steps:
        out["draft_step_ms"] = sum(draft_steps) / len(draft_steps) / 1000
        out["draft_steps"] = len(draft_steps)
    for kind, a in acc.items():
        out["phases"][kind] = {"passes": a["passes"], "span_ms": a["span_us"] / a["passes"] / 1000,
                               "breakdown": _breakdown(a)}
    if len(verify_starts) >= 2:
        periods = sorted(b - a for a, b in zip(verify_starts, verify_starts[1:]))
        # The median period between verify passes: one cycle (a pause between requests is no cycle).
        out["cycle_ms"] = periods[len(periods) // 2] / 1000
        out["cycles"] = len(periods)
    return out


def _add_kernel(a: dict[str, Any], k: dict[str, Any]) -> float:
    cls = kernel_class(str(k.get("name", "")), str(k.get("cat")))
    dur = float(k["dur"])
    a["classes"][cls] += dur
    a["kernels"] += 1
    if cls == "allreduce":
        a["ar_calls"] += 1
        a["ar_us"] += dur
        if _NCCL.search(str(k.get("name", ""))):
            a["nccl_us"] += dur
    return dur


def _count_launches(a: dict[str, Any], cpu: dict[str, Any], launches: list[dict[str, Any]],
                    launch_ts: list[float]) -> None:
    """The launches on the phase's CPU thread within its CPU span (half-open: a launch at the span's very end
    belongs to the next phase)."""
    a["cpu_seen"] += 1
    c0, c1 = float(cpu["ts"]), float(cpu["ts"]) + float(cpu["dur"])
    for i in range(bisect.bisect_left(launch_ts, c0), bisect.bisect_left(launch_ts, c1)):
        ev = launches[i]
        if ev.get("tid") != cpu.get("tid"):
            continue
        name = str(ev.get("name", ""))
        if name in _GRAPH_LAUNCH:
            a["graph_launches"] += 1
        elif name in _KERNEL_LAUNCH:
            a["kernel_launches"] += 1


def _between(phases: list[tuple[str, dict[str, Any], list[str]]], kernels: list[dict[str, Any]],
             attributed: set[int], cycles: int) -> dict[str, Any]:
    """Kernels between the phases of a cycle (SGLang runs VerifyTreeGreedy after the verify forward's span), per
    cycle."""
    first = float(phases[0][1]["ts"])
    last = max(float(sp["ts"]) + float(sp["dur"]) for _, sp, _ in phases)
    b = _new_acc()
    b["passes"] = cycles
    for j, k in enumerate(kernels):
        if j not in attributed and first <= k["ts"] <= last:
            _add_kernel(b, k)
    return b


def _new_acc() -> dict[str, Any]:
    return {"passes": 0, "span_us": 0.0, "classes": dict.fromkeys(KERNEL_CLASSES, 0.0), "idle_us": 0.0,
            "gap_us": 0.0, "ar_calls": 0, "ar_us": 0.0, "kernel_launches": 0, "graph_launches": 0, "cpu_seen": 0,
            "kernels": 0, "bs_sum": 0, "bs_n": 0, "nccl_us": 0.0}


_BS = re.compile(r"\bbs=(\d+)")


def _batch(name: str, inner: list[str]) -> int | None:
    """The requests in one pass, from SGLang's own label (``step[TARGET_VERIFY bs=16]``; a ``draft`` span's from
    its first ``step[...]`` inside): what sizes the pass's all-reduce messages."""
    for n in (name, *inner):
        m = _BS.search(n)
        if m:
            return int(m.group(1))
    return None


def _breakdown(a: dict[str, Any]) -> KernelBreakdown:
    n = max(1, int(a["passes"]))
    classes = {k: round(v / n / 1000, 4) for k, v in a["classes"].items()}
    classes["idle_gap"] = round(a["idle_us"] / n / 1000, 4)
    if not a["cpu_seen"]:
        launch = "unknown"
    elif a["graph_launches"] and a["kernel_launches"] < a["kernels"] / 2:
        launch = "cuda graph"
    elif a["kernel_launches"]:
        launch = "eager"
    else:
        launch = "unknown"
    return {"classes_ms": classes, "passes": int(a["passes"]), "span_ms": round(a["span_us"] / n / 1000, 4),
            "allreduce_calls": round(a["ar_calls"] / n, 2),
            "allreduce_mean_us": round(a["ar_us"] / a["ar_calls"], 2) if a["ar_calls"] else None,
            "batch": round(a["bs_sum"] / a["bs_n"], 2) if a.get("bs_n") else None,
            "nccl_ms": round(a.get("nccl_us", 0.0) / n / 1000, 4),
            "launch": launch, "kernel_launches": round(a["kernel_launches"] / n, 2),
            "graph_launches": round(a["graph_launches"] / n, 2), "launch_gap_ms": round(a["gap_us"] / n / 1000, 4)}


def _rank(doc: dict[str, Any]) -> int | None:
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    return None


def _fig(ms: float, count: int) -> PhaseFigure:
    return {"ms": round(ms, 4), "source": SOURCE_TRACE, "count": int(count)}


def anatomy(summary: dict[str, Any], *, rank: int, steps: int | None, draft_tokens: int | None,
            config: str = "") -> CycleAnatomy:
    """The cycle anatomy the trace shows (GPU span per phase; ``other`` = cycle period − Σ phases)."""
    ph = dict(summary["phases"])
    out: CycleAnatomy = {"rank": rank, "config": config}
    if steps:
        out["steps"] = int(steps)
    if draft_tokens:
        out["draft_tokens"] = int(draft_tokens)
    speculative = "verify" in ph
    if not speculative:
        if "decode" in ph:
            out["decode"] = _fig(ph["decode"]["span_ms"], ph["decode"]["passes"])
            out["kernels"] = {"decode": ph["decode"]["breakdown"]}
        return out
    if "draft" not in ph and "decode" in ph:
        # 0.5.12: no draft span; the draft's eager forwards are the step[DECODE] spans of a speculative trace.
        d = ph.pop("decode")
        per_cycle = d["span_ms"] * d["passes"] / max(1, ph["verify"]["passes"])
        ph = {**ph, "draft": {**d, "span_ms": per_cycle, "passes": ph["verify"]["passes"]}}
        summary = {**summary, "draft_step_ms": d["span_ms"], "draft_steps": d["passes"]}
    for kind in ("draft", "verify", "draft_extend"):
        if kind in ph:
            out[kind] = _fig(ph[kind]["span_ms"], ph[kind]["passes"])
    forwards = max(0, int(steps or 0) - 1)
    if summary.get("draft_step_ms"):  # the step[DECODE] spans inside the draft (0.5.16+)
        out["draft_step"] = _fig(summary["draft_step_ms"], int(summary.get("draft_steps") or 0))
    elif "draft" in ph and forwards:
        out["draft_step"] = _fig(ph["draft"]["span_ms"] / forwards, ph["draft"]["passes"] * forwards)
    if summary.get("cycle_ms"):
        out["cycle"] = _fig(summary["cycle_ms"], int(summary.get("cycles") or 0))
        phases_ms = sum(ph[k]["span_ms"] for k in ("draft", "verify", "draft_extend") if k in ph)
        out["other"] = _fig(max(0.0, summary["cycle_ms"] - phases_ms), int(summary.get("cycles") or 0))
    out["kernels"] = {k: ph[k]["breakdown"] for k in ("verify", "draft", "draft_extend", "decode", "between")
                      if k in ph}
    return out
