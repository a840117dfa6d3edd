"""SGLang's own per-phase GPU timer, read as counter deltas between two ``/metrics`` pages.

With ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1`` and ``--enable-metrics`` (``versions.DEVICE_TIMER``), CUDA events
around each forward feed ``sglang:forward_execution_seconds_total{category=..., tp_rank=...}``. Which category
holds which phase depends on the release and on whether the phase ran in a CUDA graph (read in the wheels):

- eagerly, ``model_runner.py`` times every forward as ``decode``, ``extend`` or ``idle``; from
  ``versions.EAGER_VERIFY_CATEGORY`` (0.5.15) an eager verify is ``target_verify``, before it hides in ``extend``
  beside the prefill and the draft-extend. The draft's forwards are ``decode`` forwards (``steps - 1`` per cycle).
- in CUDA graphs, the decode graph runner names the forward mode (``decode``, ``target_verify``), the EAGLE draft
  graph runner times all of a cycle's steps as one ``eagle_draft`` and the draft-extend graph ``eagle_draft_extend``.

Passes: ``sglang:cuda_graph_passes_total{mode=decode_*}`` counts the scheduler's decode batches (one per
speculative cycle, whatever the batch size), the strongest count; ``sglang:spec_verify_calls_total``
(``versions.SPEC_VERIFY_CALLS``, no rank label) counts verify calls per *request*, so divided by the batch it is
the pass count; before both, Σ ``meta_info.spec_verify_ct`` of the requests sent. Deltas are taken over the
profile's own load, so other clients' traffic in the window counts too (said in the report).
"""

from __future__ import annotations

from typing import TypedDict

from .. import versions
from ..protocol import SOURCE_OTHER, SOURCE_TIMER, CycleAnatomy, PhaseFigure
from . import metrics

TIMER_METRIC = "sglang:forward_execution_seconds_total"
VERIFY_CALLS_METRIC = "sglang:spec_verify_calls_total"
PASSES_METRIC = "sglang:cuda_graph_passes_total"


class Snapshot(TypedDict):
    """The counters of one ``/metrics`` page: seconds per rank and category, and the pass counts."""

    seconds: dict[int, dict[str, float]]
    verify_calls: float | None
    decode_passes: dict[int, float]  # per rank: Σ cuda_graph_passes_total{mode=decode_*}
    graph_passes: dict[int, float]  # per rank: those that ran in a CUDA graph (mode=decode_cuda_graph)


def _rank(labels: dict[str, str]) -> int:
    try:
        return int(labels.get("tp_rank", "0"))
    except ValueError:
        return 0


def snapshot(text: str) -> Snapshot:
    """One ``/metrics`` page → its timer counters (empty ``seconds`` when the server has no timer)."""
    parsed = metrics.parse_prometheus(text)
    seconds: dict[int, dict[str, float]] = {}
    for labels, value in parsed.get(TIMER_METRIC, []):
        cat = labels.get("category")
        if cat:
            per = seconds.setdefault(_rank(labels), {})
            per[cat] = per.get(cat, 0.0) + value
    calls = [v for _, v in parsed.get(VERIFY_CALLS_METRIC, [])]
    passes: dict[int, float] = {}
    graph: dict[int, float] = {}
    for labels, value in parsed.get(PASSES_METRIC, []):
        mode = labels.get("mode", "")
        if mode.startswith("decode_"):
            r = _rank(labels)
            passes[r] = passes.get(r, 0.0) + value
            if mode == "decode_cuda_graph":
                graph[r] = graph.get(r, 0.0) + value
    return {"seconds": seconds, "verify_calls": sum(calls) if calls else None, "decode_passes": passes,
            "graph_passes": graph}


def has_timer(snap: Snapshot) -> bool:
    return bool(snap["seconds"])


def delta(before: Snapshot, after: Snapshot) -> Snapshot:
    """after − before, per rank and category (a counter that went down means the server restarted: 0 kept)."""
    seconds: dict[int, dict[str, float]] = {}
    for rank, cats in after["seconds"].items():
        prev = before["seconds"].get(rank, {})
        seconds[rank] = {c: max(0.0, v - prev.get(c, 0.0)) for c, v in cats.items()}
    calls = None
    if after["verify_calls"] is not None:
        calls = max(0.0, after["verify_calls"] - (before["verify_calls"] or 0.0))

    def sub(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
        return {r: max(0.0, v - b.get(r, 0.0)) for r, v in a.items()}

    return {"seconds": seconds, "verify_calls": calls,
            "decode_passes": sub(after["decode_passes"], before["decode_passes"]),
            "graph_passes": sub(after["graph_passes"], before["graph_passes"])}


def categories(version: str, cuda_graph: bool) -> dict[str, str | None]:
    """Which timer category holds each phase on this release (None: mixed into another, not separable).

    ``draft`` is every draft forward of one cycle in ``eagle_draft`` (graphs) or one ``decode`` forward each
    (eager, ``draft_step``).
    """
    eager_verify = versions.at_least(version, versions.EAGER_VERIFY_CATEGORY)
    if cuda_graph:
        return {"draft": "eagle_draft", "verify": "target_verify", "draft_extend": "eagle_draft_extend",
                "decode": "decode"}
    return {"draft_step": "decode", "verify": "target_verify" if eager_verify else None, "draft_extend": None,
            "decode": "decode"}


def draft_forwards(steps: int | None) -> int:
    """The draft forwards of one cycle: ``steps - 1`` (eagle_worker_v2.py ``draft_forward``: "we get 1 token from
    draft prefill and (#spec steps - 1) tokens here"; the first draft token comes out of the draft-extend)."""
    return max(0, int(steps or 0) - 1)


def _fig(ms: float, count: int, note: str | None = None) -> PhaseFigure:
    out: PhaseFigure = {"ms": round(ms, 4), "source": SOURCE_TIMER, "count": int(count)}
    if note:
        out["note"] = note
    return out


def passes_of(d: Snapshot, rank: int, *, concurrency: int, meta_verify_ct: int | None) -> tuple[float, str | None]:
    """How many cycles (verify passes) ran on ``rank`` in the window, and how that was counted (None: by SGLang's
    own pass counter)."""
    if d["decode_passes"].get(rank):
        return d["decode_passes"][rank], None
    batch = max(1, concurrency)
    if d["verify_calls"]:
        return d["verify_calls"] / batch, f"spec_verify_calls_total ÷ concurrency {batch}"
    if meta_verify_ct:
        return meta_verify_ct / batch, f"Σ meta_info.spec_verify_ct ÷ concurrency {batch}"
    return 0.0, None


VERIFY_CALLS_NOTE = "spec_verify_calls_total: SGLang's own verify count, one request per pass at concurrency 1"


def verify_passes_of(d: Snapshot, rank: int, *, concurrency: int,
                     meta_verify_ct: int | None) -> tuple[float, str | None]:
    """How many verify passes (cycles) the speculative phases' seconds are divided by. At concurrency 1 every pass
    verifies one request, so SGLang's own ``spec_verify_calls_total`` delta is the count exactly; the decode batch
    counter runs ahead of it (a real 0.5.16 H200 run: 1040 decode batches for 1028 verify calls, verify ms 1.6 %
    low), so it serves only when batches hold several requests."""
    if concurrency <= 1 and d["verify_calls"]:
        return d["verify_calls"], VERIFY_CALLS_NOTE
    return passes_of(d, rank, concurrency=concurrency, meta_verify_ct=meta_verify_ct)


def anatomy(d: Snapshot, rank: int, *, version: str, cuda_graph: bool, speculative: bool, steps: int | None,
            draft_tokens: int | None, concurrency: int, meta_verify_ct: int | None, config: str = "",
            tokens: int | None = None) -> CycleAnatomy:
    """One rank's cycle anatomy from a delta: ms per verify pass, per draft forward (and per cycle), per draft-extend;
    for the baseline, ms per decode forward. Only the phases the release's categories separate are filled in."""
    cats = d["seconds"].get(rank, {})
    out: CycleAnatomy = {"rank": rank, "config": config}
    if steps:
        out["steps"] = int(steps)
    if draft_tokens:
        out["draft_tokens"] = int(draft_tokens)
    passes, note = passes_of(d, rank, concurrency=concurrency, meta_verify_ct=meta_verify_ct)
    if not speculative:
        if passes and cats.get("decode"):
            out["decode"] = _fig(cats["decode"] * 1000 / passes, round(passes), note)
        elif tokens and cats.get("decode"):
            n = tokens / max(1, concurrency)
            out["decode"] = _fig(cats["decode"] * 1000 / n, round(n),
                                 f"decode passes = tokens ÷ concurrency {max(1, concurrency)}")
        return out
    passes, note = verify_passes_of(d, rank, concurrency=concurrency, meta_verify_ct=meta_verify_ct)
    if not passes:
        return out
    where = categories(version, cuda_graph)
    n = round(passes)
    verify_cat = where.get("verify")
    if verify_cat and cats.get(verify_cat):
        out["verify"] = _fig(cats[verify_cat] * 1000 / passes, n, note)
    forwards = draft_forwards(steps)
    draft_cat = where.get("draft") or where.get("draft_step")
    if draft_cat and cats.get(draft_cat):
        total = cats[draft_cat] * 1000 / passes
        out["draft"] = _fig(total, n, note)
        if forwards:
            out["draft_step"] = _fig(total / forwards, round(passes * forwards), note)
    de = where.get("draft_extend")
    if de and cats.get(de):
        out["draft_extend"] = _fig(cats[de] * 1000 / passes, n, note)
    return out


def complete(a: CycleAnatomy, cycle: PhaseFigure | None, accept: PhaseFigure | None) -> CycleAnatomy:
    """Add the cycle (measured by the tool, or derived), the accept length and ``other`` = cycle − Σ measured phases
    to a timer anatomy (``profile`` and ``bench`` alike)."""
    if accept is not None:
        a["accept_length"] = accept
    if cycle is None or "verify" not in a:
        return a
    a["cycle"] = cycle
    parts = [k for k in ("draft", "verify", "draft_extend") if k in a]
    spent = sum(a[k]["ms"] for k in parts)
    note = None if "draft_extend" in a else "includes the draft-extend (the timer does not separate it here)"
    # The tool's cycle minus the timer's phases: derived, not a figure the timer measured.
    other: PhaseFigure = {"ms": round(max(0.0, cycle["ms"] - spent), 4), "source": SOURCE_OTHER,
                          "count": int(cycle["count"])}
    if note:
        other["note"] = note
    a["other"] = other
    return a


def cuda_graph(d: Snapshot, decode: metrics.DecodeSummary) -> bool | None:
    """Whether the decode batches ran in CUDA graphs: SGLang's pass counter, else the ``cuda graph:`` field of
    its ``Decode batch`` lines in the window (None: neither said)."""
    if d["decode_passes"]:
        return any(d["graph_passes"].get(r, 0) > 0 for r in d["decode_passes"])
    last = decode.get("last") or {}
    if "cuda_graph" in last:
        return bool(last["cuda_graph"])
    return None


def describe(snap: Snapshot) -> dict[str, list[str]]:
    """The categories seen per rank (for the report: which phases this server's timer separates)."""
    return {str(r): sorted(c) for r, c in snap["seconds"].items()}
