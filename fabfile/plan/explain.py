"""``inv explain``: where a speculative cycle's time goes, said in sentences, each from measured figures and naming
the rule that produced it. Pure: documents in (a profile, a bench or a sweep result), findings out.

The rules are a table (``RULES``, printed by ``inv explain --rules``): an id, the threshold in words, and a check
that returns a sentence built only from the figures it read, every figure followed by its source in brackets
([timer] SGLang's device timer, [trace] SGLang's profiler trace, [tool] the tool's own per-request arithmetic,
[meta] SGLang's per-request counters, [derived] TPOT × accept length). A rule whose figures are missing stays
silent: it never guesses.

What a cycle is: one draft (``steps`` draft forwards), one verify pass of ``draft_tokens`` tokens, one draft-extend,
and what lies between (the scheduler, sampling, launch gaps: ``other``). It emits ``accept length`` tokens per
sequence, against one token per baseline decode step; speculation wins when ``accept length > cycle ms / decode ms``
(the break-even).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fabfile.plan.predict import TUNE_MAX_STEPS, Chain, Longer, longer_chain
from fabfile.remote import protocol

# The sources' short names, as the sentences write them.
TAGS = {protocol.SOURCE_TIMER: "timer", protocol.SOURCE_TRACE: "trace", protocol.SOURCE_DERIVED: "derived",
        protocol.SOURCE_TOOL: "tool", protocol.SOURCE_META: "meta"}

# Thresholds (what `inv explain --rules` prints).
DRAFT_SHARE = 0.40
DRAFT_SURPLUS_SHARE = 0.05
DRAFT_SATURATED_SHARE = 0.25
OTHER_SHARE = 0.25
ALLREDUCE_SHARE = 0.40
GEMM_GROWTH = 1.5
SOURCES_DIFFER_PCT = 10.0


PREDICTED = "predicted (plan/predict: a sweep row never deployed)"


def tag(source: str) -> str:
    if source in TAGS:
        return TAGS[source]
    s = source.lower()
    if s.startswith("predicted"):
        return "predicted"
    if s.startswith("derived"):
        return "derived"
    if "meta_info" in s:
        return "meta"
    return source.removeprefix("SGLang ")


def fmt(fig: Mapping[str, Any] | None, unit: str = "ms") -> str:
    """``29.0 ms [timer]``: a figure with its source."""
    if not fig:
        return "-"
    ms = float(fig["ms"])
    digits = 2 if unit != "ms" or ms < 10 else 1
    return f"{ms:.{digits}f}{' ' + unit if unit else ''} [{tag(str(fig.get('source', '?')))}]"


@dataclass(frozen=True)
class Subject:
    """One configuration on one rank, as the rules read it: its cycle anatomy (phases by the strongest source that
    measured each), and the baseline's decode step where one was measured."""

    config: str
    anatomy: Mapping[str, Any]
    baseline: Mapping[str, Any] | None = None  # a baseline's anatomy: ``decode`` (+ ``kernels``)
    baseline_from: str = ""  # where the baseline came from (a sweep row, a bench file)
    rank: int = 0
    difference_pct: Mapping[str, float] = field(default_factory=dict)  # trace vs timer, per phase (a profile)
    cuda_graph: bool | None = None
    version: str = ""  # the SGLang release that measured it ("" unknown)
    host: str = ""  # the host that measured it ("" a document without one)
    # The longest chain of the same draft measured beside it (a sweep's longest row, a tune's longest deploy): its
    # histogram says how far acceptance goes past this chain's last position, where this one's own can only guess.
    longer: Chain | None = None

    @property
    def speculative(self) -> bool:
        return self.config != "baseline" and any(k in self.anatomy for k in ("verify", "cycle", "draft"))

    def fig(self, name: str) -> Mapping[str, Any] | None:
        v = self.anatomy.get(name)
        return v if isinstance(v, Mapping) and v.get("ms") is not None else None

    def kernels(self, phase: str, of_baseline: bool = False) -> Mapping[str, Any] | None:
        src = self.baseline if of_baseline else self.anatomy
        k = ((src or {}).get("kernels") or {}).get(phase)
        return k if isinstance(k, Mapping) else None

    def decode(self) -> Mapping[str, Any] | None:
        """The baseline's decode forward, by the strongest source (the device timer's GPU time first)."""
        v = (self.baseline or {}).get("decode")
        return v if isinstance(v, Mapping) and v.get("ms") else None

    def decode_step(self, like: Mapping[str, Any] | None = None, strict: bool = False) -> Mapping[str, Any] | None:
        """The baseline's decode step to set against ``like``: a GPU figure (timer, trace) against the GPU decode
        forward, a wall-clock one (the tool's cycle, a derived one) against the baseline's TPOT."""
        return step_like(self.baseline, like, strict)

    @property
    def algorithm(self) -> str:
        head = self.config.split("-", 1)[0].upper()
        return {"EAGLE3": "EAGLE-3", "EAGLE": "EAGLE"}.get(head, head or "speculation")


@dataclass(frozen=True)
class Finding:
    rule: str
    sentence: str
    figures: dict[str, float]


@dataclass(frozen=True)
class Rule:
    id: str
    fires_when: str  # the threshold, readable
    says: str  # what the sentence tells the user to look at
    check: Callable[[Subject], Finding | None]


def _gpu(source: str) -> bool:
    return tag(source) in ("timer", "trace")


def step_like(baseline: Mapping[str, Any] | None, like: Mapping[str, Any] | None,
              strict: bool = False) -> Mapping[str, Any] | None:
    """The baseline's decode step measured the way ``like`` was where it can be: GPU time against GPU time, wall
    clock against wall clock (its TPOT), so that a ratio compares the same thing; else, unless ``strict``, whichever
    was measured (the sentence names both sources). A verdict (the break-even) is always ``strict``."""
    found = [v for v in ((baseline or {}).get("decode"), (baseline or {}).get("decode_step"))
             if isinstance(v, Mapping) and v.get("ms")]
    if like is None:
        return found[0] if found else None
    gpu_like = _gpu(str(like.get("source", "")))
    # A verdict never across clocks: the tool's wall-clock cycle over the timer's GPU decode forward counts the
    # scheduler's time on one side only, and on the H200 called a 1.6× win a 45 % loss.
    same = [v for v in found if _gpu(str(v.get("source", ""))) == gpu_like]
    if same:
        return same[0]
    return None if strict or not found else found[0]


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def _break_even(s: Subject) -> Finding | None:
    cycle, accept = s.fig("cycle"), s.fig("accept_length")
    decode = s.decode_step(cycle, strict=True)
    if not s.speculative or not (cycle and decode and accept):
        return None
    be = float(cycle["ms"]) / float(decode["ms"])
    a = float(accept["ms"])
    if a >= be:
        return None
    loss = 1 - a / be
    verify = s.fig("verify")
    tokens = s.anatomy.get("draft_tokens")
    vd = s.decode_step(verify)
    head = (f"verify ({tokens} tokens) costs {float(verify['ms']) / float(vd['ms']):.1f}× a baseline decode step "
            f"({fmt(verify)} vs {fmt(vd)})" if verify and tokens and vd else
            f"one {s.algorithm} cycle costs {be:.1f}× a baseline decode step ({fmt(cycle)} vs {fmt(decode)})")
    return Finding("break_even", f"{head}; at accept length {fmt(accept, '')} {s.algorithm} needs ≥ {be:.2f} "
                                 f"(cycle {fmt(cycle)} ÷ decode step {fmt(decode)}) to win: it loses by "
                                 f"{_pct(loss)}",
                   {"break_even": round(be, 3), "accept_length": a, "loss": round(loss, 4)})


def _draft_share(s: Subject) -> Finding | None:
    draft, cycle = s.fig("draft"), s.fig("cycle")
    if not s.speculative or not (draft and cycle) or float(cycle["ms"]) <= 0:
        return None
    share = float(draft["ms"]) / float(cycle["ms"])
    if share < DRAFT_SHARE:
        return None
    step, steps = s.fig("draft_step"), s.anatomy.get("steps")
    per = f"; {steps} steps, {fmt(step)} per draft forward" if step and steps else ""
    return Finding("draft_share", f"the draft is {_pct(share)} of the cycle ({fmt(draft)} of {fmt(cycle)}{per}): "
                                  "fewer steps or a smaller draft", {"share": round(share, 4)})


def accepted_steps(accept_length: float) -> int:
    """The draft steps a pass's acceptance reaches on average: accept length − 1 draft tokens are accepted per pass
    (the other token is verify's own), rounded up, with a 0.05 margin so 1.98 reads as 2, not 2 and a bit."""
    return max(1, math.ceil(accept_length - 1.0 - 0.05))


def _draft_surplus(s: Subject) -> Finding | None:
    """Steps the draft takes past what acceptance reaches. On the H200's 7B-shaped target the draft is 16 % of the
    cycle at steps 7 (far below draft_share's 40 %), yet steps 7 ran 12 % slower than steps 2 at the same accept
    length 2.98: every forward past the second bought nothing (docs/real-sglang.md, 2026-12-03)."""
    step, accept, cycle = s.fig("draft_step"), s.fig("accept_length"), s.fig("cycle")
    steps = int(s.anatomy.get("steps") or 0)
    if not s.speculative or not (step and accept and cycle and steps) or float(cycle["ms"]) <= 0:
        return None
    used = accepted_steps(float(accept["ms"]))
    surplus = steps - used
    cost = surplus * float(step["ms"])
    share = cost / float(cycle["ms"])
    if surplus < 1 or share < DRAFT_SURPLUS_SHARE:
        return None
    forwards = f"draft forward past step {used} costs" if surplus == 1 else \
        f"{surplus} draft forwards past step {used} cost"
    return Finding("draft_surplus", f"{float(accept['ms']) - 1:.2f} of {steps} draft tokens are accepted per pass "
                                    f"(accept length {fmt(accept, '')}): the {forwards} {cost:.2f} ms [derived] "
                                    f"({fmt(step)} each), {_pct(share)} of the "
                                    f"cycle ({fmt(cycle)}), and buy only what the passes reaching past {used} accept: "
                                    f"measure --speculative-num-steps {used} (`inv sweep --steps {used},{steps}`, "
                                    "or `inv tune`)",
                   {"accepted_steps": float(used), "surplus_steps": float(surplus), "cost_ms": round(cost, 4),
                    "share": round(share, 4)})


def chain_of(anatomy: Mapping[str, Any]) -> Chain | None:
    """A measured chain (topk 1, steps + 1 draft tokens) with its accept histogram, as ``predict.Chain``; None for a
    tree (its accepted path is no chain's prefix), or without a histogram."""
    steps, hist = int(anatomy.get("steps") or 0), anatomy.get("accept_histogram")
    topk, tokens = anatomy.get("topk"), anatomy.get("draft_tokens")
    if steps < 1 or not hist or (topk and int(topk) > 1) or (tokens and int(tokens) != steps + 1):
        return None
    verify = anatomy.get("verify")
    return Chain(steps, tuple(int(c) for c in hist),
                 float(verify["ms"]) if isinstance(verify, Mapping) and verify.get("ms") else None)


def longest_chain(anatomies: list[Mapping[str, Any]]) -> Chain | None:
    """The chain with the most steps among measured anatomies (the latest of equals)."""
    chains = [c for a in anatomies if (c := chain_of(a)) is not None]
    return max(reversed(chains), key=lambda c: c.steps, default=None)


def longer_for(s: Subject, draft_step: float | None = None, max_steps: int = TUNE_MAX_STEPS) -> Longer | None:
    """``predict.longer_chain`` on a subject's measured figures: its chain, cycle, accept length, verify, one draft
    forward (the draft step; at steps 1, which runs none, the draft-extend, the nearest draft forward measured), the
    baseline's GPU decode forward where one was measured, and the longer chain measured beside it."""
    chain, cycle, accept, verify = chain_of(s.anatomy), s.fig("cycle"), s.fig("accept_length"), s.fig("verify")
    step = draft_step if draft_step is not None else float((s.fig("draft_step") or s.fig("draft_extend") or
                                                            {"ms": 0})["ms"])
    if chain is None or not (cycle and accept and verify) or step <= 0:
        return None
    decode = s.decode_step(verify, strict=True) if _gpu(str(verify.get("source", ""))) else None
    return longer_chain(steps=chain.steps, accept_len=float(accept["ms"]), cycle_ms=float(cycle["ms"]),
                        hist=chain.hist, draft_ms=step, verify_ms=float(verify["ms"]), max_steps=max_steps,
                        decode_ms=float(decode["ms"]) if decode else None, longer=s.longer)


def _draft_saturated(s: Subject) -> Finding | None:
    """A chain whose passes run out of draft tokens before acceptance does: on the H200's 7B-shaped target steps 1
    accepted its one draft token in half the passes and ran 46 % slower than steps 2 (268 against 499 tok/s), and
    no rule said so (break_even is silent where speculation already wins). draft_surplus is its mirror (steps
    acceptance never reaches); both fire only on a histogram with mass at both ends, and the tuner then measures
    each step count once (``plan/remedies.tried_key``)."""
    if not s.speculative:
        return None
    found = longer_for(s)
    if found is None or found.share < DRAFT_SATURATED_SHARE:
        return None
    steps, accept, step = int(s.anatomy["steps"]), s.fig("accept_length"), s.fig("draft_step") or s.fig("draft_extend")
    plural = "s" if steps > 1 else ""
    if found.chain:
        evidence = (f"{_pct(found.share)} of the steps-{found.chain} chain's verify passes accepted more than {steps} "
                    f"draft token{plural} (its accept histogram [meta]), against accept length {fmt(accept, '')} "
                    f"here: a longer chain accepts more; by that histogram")
    else:
        what = "its one draft token" if steps == 1 else f"all {steps} of its draft tokens"
        evidence = (f"{_pct(found.share)} of verify passes accepted {what} "
                    f"(accept length {fmt(accept, '')}, its accept histogram [meta]): a longer chain could accept "
                    f"more; with the last position's acceptance ({_pct(found.rate)}) continued")
    cost = "one draft forward" if step is s.fig("draft_step") else "one draft forward, costed as the draft-extend"
    sentence = (f"{evidence}, steps {found.steps} would accept {found.accept_len:.2f} per pass [derived] at a cycle "
                f"of {found.cycle_ms:.2f} ms [derived] ({cost} {fmt(step)} per step, verify "
                f"+{found.verify_growth_ms:.2f} ms [derived] per token), {_pct(found.gain)} more tokens per ms: "
                f"measure --speculative-num-steps {found.steps} (`inv sweep --steps {steps},{found.steps}`, or "
                "`inv tune`)")
    return Finding("draft_saturated", sentence,
                   {"share": round(found.share, 4), "steps": float(found.steps),
                    "accept_length": round(found.accept_len, 4), "cycle_ms": round(found.cycle_ms, 4),
                    "gain": round(found.gain, 4), "saving_ms": round(found.saving_ms, 4)})


def _other_share(s: Subject) -> Finding | None:
    other, cycle = s.fig("other"), s.fig("cycle")
    if not s.speculative or not (other and cycle) or float(cycle["ms"]) <= 0:
        return None
    share = float(other["ms"]) / float(cycle["ms"])
    if share < OTHER_SHARE:
        return None
    note = f" ({other['note']})" if other.get("note") else ""
    return Finding("other_share", f"{_pct(share)} of the cycle ({fmt(other)} of {fmt(cycle)}) is outside the GPU "
                                  f"phases{note}: the scheduler, CPU-side sampling and launch gaps between the "
                                  "phases; the overlap scheduler and CUDA graphs are what shrink it",
                   {"share": round(share, 4)})


def _allreduce(s: Subject) -> Finding | None:
    k = s.kernels("verify")
    if not s.speculative or not k:
        return None
    total = float(k.get("span_ms") or sum(float(v) for v in (k.get("classes_ms") or {}).values()) or 0)
    ar = float((k.get("classes_ms") or {}).get("allreduce") or 0)
    if total <= 0 or ar / total < ALLREDUCE_SHARE:
        return None
    calls, mean = k.get("allreduce_calls"), k.get("allreduce_mean_us")
    impl = str(k.get("allreduce_impl") or "all-reduce kernels")
    detail = f"{impl}, {float(calls):.0f} calls of {float(mean):.0f} µs per pass [trace]" if calls and mean else impl
    return Finding("allreduce_bound", f"{_pct(ar / total)} of verify is all-reduce ({ar:.2f} of {total:.2f} ms per "
                                      f"pass [trace]; {detail}): communication-bound, tune NCCL for verify's message "
                                      "size", {"share": round(ar / total, 4)})


def _gemm_growth(s: Subject) -> Finding | None:
    kv, kd = s.kernels("verify"), s.kernels("decode", of_baseline=True)
    tokens = s.anatomy.get("draft_tokens")
    if not s.speculative or not (kv and kd and tokens):
        return None
    gv = float((kv.get("classes_ms") or {}).get("gemm") or 0)
    gd = float((kd.get("classes_ms") or {}).get("gemm") or 0)
    if gd <= 0 or gv / gd < GEMM_GROWTH:
        return None
    growth = gv / gd
    return Finding("gemm_growth", f"verify GEMM time grew {growth:.1f}× over decode for {tokens}× the tokens "
                                  f"({gv:.2f} vs {gd:.2f} ms per pass [trace]): compute is not the bottleneck "
                                  f"({tokens} tokens are far from compute-bound); what grows is the memory read per "
                                  "pass (more MoE experts, or a GEMM kernel chosen for the shape)",
                   {"growth": round(growth, 3)})


def _verify_eager(s: Subject) -> Finding | None:
    k = s.kernels("verify")
    if not s.speculative or not k or k.get("launch") != "eager":
        return None
    kd = s.kernels("decode", of_baseline=True)
    graph_decode = bool(kd and kd.get("launch") == "cuda graph")
    launches, gap = float(k.get("kernel_launches") or 0), float(k.get("launch_gap_ms") or 0)
    also = " while decode replays a CUDA graph" if graph_decode else ""
    # The deploy turned CUDA graphs off altogether (the real H200 run: --disable-cuda-graph, 466 launches per pass):
    # the batch-size flag would change nothing there, so the advice names the flag that did it.
    todo = ("CUDA graphs are off for this deploy (--disable-cuda-graph): launch without it" if s.cuda_graph is False
            else f"raise {_graph_bs_spelling(s.version)} or use a backend whose verify graph this version supports")
    return Finding("verify_eager", f"verify ran eagerly ({launches:.0f} kernel launches, {gap:.1f} ms of launch gaps "
                                   f"per pass [trace]){also}: {todo}",
                   {"kernel_launches": launches, "launch_gap_ms": gap})


def _graph_bs_spelling(version: str) -> str:
    """The CUDA graph batch-size flag as ``version`` spells it (``--cuda-graph-max-bs-decode`` from 0.5.14, where
    the old name became its alias; 0.5.20 has only the new one); the old name where the release is unknown."""
    from fabfile.plan.knob_effects import current_name

    return (current_name(version, "--cuda-graph-max-bs") if version else None) or "--cuda-graph-max-bs"


def _sources_differ(s: Subject) -> Finding | None:
    worst = max(s.difference_pct.items(), key=lambda kv: abs(kv[1]), default=None)
    if worst is None or abs(worst[1]) <= SOURCES_DIFFER_PCT:
        return None
    phase, pct = worst
    return Finding("sources_differ", f"the trace and the timer disagree on {phase.replace('_', '-')} by "
                                     f"{abs(pct):.0f} % (trace {'above' if pct > 0 else 'below'} timer): the "
                                     "profiler's own overhead, or other traffic in the window; the timer's figure "
                                     "is the one without the profiler", {"difference_pct": pct})


def _derived_only(s: Subject) -> Finding | None:
    if not s.speculative:
        return None
    measured = [k for k in ("draft", "verify", "draft_extend") if s.fig(k)]
    cycle = s.fig("cycle")
    if measured or not cycle:
        return None
    return Finding("derived_only", f"only the cycle is known ({fmt(cycle)}), not its phases: deploy with --measure "
                                   "(SGLang's device timer) or run `inv profile --trace` to see where it goes",
                   {"cycle_ms": float(cycle["ms"])})


RULES: tuple[Rule, ...] = (
    Rule("break_even", "accept length < cycle ms ÷ the baseline's decode ms (a baseline was measured)",
         "how far speculation is from winning, and what a verify pass costs against a decode step", _break_even),
    Rule("draft_share", f"draft ≥ {DRAFT_SHARE:.0%} of the cycle", "fewer steps or a smaller draft", _draft_share),
    Rule("draft_surplus", f"the draft forwards past the accepted steps (⌈accept length − 1⌉) cost ≥ "
                          f"{DRAFT_SURPLUS_SHARE:.0%} of the cycle", "steps acceptance never reaches", _draft_surplus),
    Rule("draft_saturated", f"≥ {DRAFT_SATURATED_SHARE:.0%} of verify passes accept every draft token (or, in a "
                            "longer chain measured beside it, more than this chain has), and a longer chain, by "
                            "that histogram and the measured phases (plan/predict.longer_chain), serves more tokens "
                            "per ms", "steps the draft runs out of before acceptance does", _draft_saturated),
    Rule("other_share", f"time outside the measured phases ≥ {OTHER_SHARE:.0%} of the cycle",
         "scheduler and launch overhead between the phases", _other_share),
    Rule("allreduce_bound", f"all-reduce ≥ {ALLREDUCE_SHARE:.0%} of verify's GPU span (trace)",
         "communication-bound: NCCL tuning for verify's message size", _allreduce),
    Rule("gemm_growth", f"verify's GEMM time ≥ {GEMM_GROWTH:g}× the baseline decode's (traces of both)",
         "memory traffic (weights, MoE experts), not compute", _gemm_growth),
    Rule("verify_eager", "verify's kernels launched one by one, no CUDA graph (trace)",
         "launch overhead: CUDA graphs for verify", _verify_eager),
    Rule("sources_differ", f"trace and timer differ by > {SOURCES_DIFFER_PCT:g} % on a phase (a profile with both)",
         "which figure to trust", _sources_differ),
    Rule("derived_only", "a speculative cycle with no measured phase",
         "how to measure the phases", _derived_only),
)


def explain(s: Subject) -> list[Finding]:
    if s.anatomy.get("predicted"):
        return []  # a prediction is no measurement to find anything in: its verdict says so and what would measure it
    return [f for f in (r.check(s) for r in RULES) if f is not None]


_VERDICT_PHASES = (("verify", "verify"), ("draft", "the draft"), ("draft_extend", "draft-extend"),
                   ("other", "time outside the measured phases"))


def verdict(s: Subject) -> str:
    """The one sentence ``inv explain`` ends a subject with, whether or not a rule fired: the phase that dominates
    the cycle, its share, its ratio to a baseline decode step, and the next measurement that would tell more."""
    if s.anatomy.get("predicted"):
        steps = s.anatomy.get("steps")
        how = f"`inv deploy --steps {steps}` then `inv profile`" if steps else "deploying it and `inv profile`"
        return (f"verdict: predicted, not measured (never deployed): cycle {fmt(s.fig('cycle'))}; {how} would "
                "measure where its time goes")
    cycle = s.fig("cycle")
    phases = [(label, fig) for key, label in _VERDICT_PHASES if (fig := s.fig(key)) is not None]
    if not s.speculative:
        decode = s.fig("decode") or s.decode()
        return (f"verdict: a decode step takes {fmt(decode)}; profile a speculative deploy to set a cycle against it"
                if decode else "verdict: nothing measured to conclude from; `inv profile` measures the phases")
    if not cycle or not phases or float(cycle["ms"]) <= 0:
        return ("verdict: only the cycle is known, not where it goes; deploy with --measure (SGLang's device timer) "
                "or run `inv profile --trace` to measure the phases")
    label, top = max(phases, key=lambda p: float(p[1]["ms"]))
    share = float(top["ms"]) / float(cycle["ms"])
    decode = s.decode_step(top)
    ratio = f", {float(top['ms']) / float(decode['ms']):.2f}× a decode step ({fmt(decode)})" if decode else ""
    if not decode:
        nxt = ("bench a baseline (`inv sweep --steps 0,…`, or `inv explain --baseline FILE`) to set it against a "
               "decode step")
    elif not s.kernels("verify"):
        nxt = "`inv profile --trace` breaks it down by kernel"
    else:
        nxt = "the findings above say what to change"
    return f"verdict: {label} dominates, {_pct(share)} of the cycle ({fmt(top)} of {fmt(cycle)}){ratio}; {nxt}"


def rules_table() -> list[dict[str, str]]:
    return [{"id": r.id, "fires_when": r.fires_when, "says": r.says} for r in RULES]


# -- subjects from the saved documents -------------------------------------------------------------------------------

def _merged(timer: Mapping[str, Any] | None, traced: Mapping[str, Any] | None) -> dict[str, Any]:
    """One anatomy from both sources: the timer's figure where it has one (exact GPU time, no profiler overhead),
    the trace's otherwise; kernels come only from the trace."""
    out: dict[str, Any] = dict(traced or {})
    for k, v in (timer or {}).items():
        if k != "kernels" and v is not None:
            out[k] = v
    return out


def derived_anatomy(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A bench result's (or sweep row's) own figures as an anatomy: the cycle (tool or derived) and accept length
    for a speculative run, TPOT as the decode step for the baseline."""
    spec = doc.get("speculative") or {}
    out: dict[str, Any] = {"config": doc.get("config_name") or doc.get("config") or ""}
    steps = spec.get("steps") or doc.get("steps")
    tokens = spec.get("draft_tokens") or doc.get("draft_tokens")
    topk = spec.get("topk") or doc.get("topk")
    if steps:
        out["steps"] = int(steps)
    if tokens:
        out["draft_tokens"] = int(tokens)
    if topk and steps:
        out["topk"] = int(topk)
    if steps and doc.get("accept_histogram"):
        out["accept_histogram"] = [int(c) for c in doc["accept_histogram"]]
    n = int(doc.get("completed") or doc.get("requests") or 0)
    if doc.get("cycle_ms"):
        out["cycle"] = {"ms": float(doc["cycle_ms"]), "count": n,
                        "source": protocol.SOURCE_TOOL if doc.get("cycle_ms_source") == "tool" else
                        protocol.SOURCE_DERIVED}
    if doc.get("accept_len"):
        src = doc.get("accept_len_source") or "meta_info"
        out["accept_length"] = {"ms": float(doc["accept_len"]), "count": n,
                                "source": protocol.SOURCE_META if src == "meta_info" else f"SGLang {src}"}
    decode = doc.get("decode_ms_per_token")
    tpot = doc.get("tpot_ms")
    if not decode and not steps and isinstance(tpot, Mapping) and tpot.get("median"):
        decode = tpot["median"]  # a baseline's wall-clock decode step, when the result predates the field
    if decode:
        # the baseline's TPOT: its wall-clock decode step (``decode`` until a measured forward replaces it)
        out["decode"] = out["decode_step"] = {"ms": float(decode), "count": n, "source": "derived: TPOT"}
    return out


def bench_anatomy(doc: Mapping[str, Any], rank: int = 0) -> dict[str, Any]:
    """A bench result's anatomy: its measured phases (``phases``, the device timer) over its own figures."""
    base = derived_anatomy(doc)
    ranks = (doc.get("phases") or {}).get("ranks") or []
    timer = next((r for r in ranks if r.get("rank") == rank), ranks[0] if ranks else None)
    return _merged(base, None) if timer is None else {**base, **{k: v for k, v in timer.items() if v is not None}}


def kind_of(doc: Mapping[str, Any]) -> str:
    if "rows" in doc and "sweep_id" in doc:
        return "sweep"
    if "profile_id" in doc and "ranks" in doc:
        return "profile"
    if "bench_id" in doc:
        return "bench"
    return "unknown"


def baseline_of(doc: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The baseline's anatomy in a document: a sweep's baseline row, a bench or profile of the baseline."""
    if not doc:
        return None
    kind = kind_of(doc)
    if kind == "sweep":
        row = next((r for r in doc.get("rows") or [] if r.get("steps") == 0 and r.get("ok")), None)
        return row_anatomy(row) if row else None
    if kind == "bench" and (doc.get("config_name") == "baseline" or doc.get("decode_ms_per_token")):
        return bench_anatomy(doc)
    if kind == "profile" and not (doc.get("speculative") or {}).get("algorithm"):
        rank = (doc.get("ranks") or [{}])[0]
        measured = _merged(rank.get("timer"), rank.get("trace")) or doc.get("derived")
        # The profile's own bench gives the wall-clock decode step (its TPOT) beside the timer's GPU forward: the
        # break-even sets the tool's wall-clock cycle against it (never across clocks), and without it a real
        # MoE steps-7 deploy 18 % slower than its baseline was judged by no rule at all.
        step = derived_anatomy(doc.get("bench") or {}).get("decode_step")
        wall = {"decode_step": step} if step else {}
        return {**wall, **measured} if measured else (wall or None)
    return None


def row_anatomy(row: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep row's anatomy: the first level's measured phases (``phases``) over the row's own figures."""
    base = derived_anatomy(row)
    base["config"] = row.get("config") or ""
    if row.get("measured") is False:
        # never deployed: its cycle and accept length are the sweep's prediction, not a measurement ([meta] and
        # [derived] read as measured ones)
        return {k: ({**v, "source": PREDICTED} if isinstance(v, Mapping) and "source" in v else v)
                for k, v in base.items()} | {"predicted": True}
    ph = row.get("phases") or {}
    ranks = ph.get("ranks") or []
    return {**base, **{k: v for k, v in (ranks[0] if ranks else {}).items() if v is not None}}


def subjects(doc: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
             baseline_from: str = "") -> list[Subject]:
    """:func:`document_subjects`, each knowing the SGLang release that measured it (a sentence then names a flag as
    that release spells it)."""
    version, host = str(doc.get("sglang_version") or ""), str(doc.get("host") or "")
    return [replace(s, version=s.version or version, host=s.host or host)
            for s in document_subjects(doc, baseline, baseline_from)]


def document_subjects(doc: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
                      baseline_from: str = "") -> list[Subject]:
    """What ``inv explain`` judges in a saved document: every configuration of a sweep (against its own baseline),
    every rank of a profile, the one server of a bench. ``baseline`` (another document) supplies the decode step
    where the document has none of its own."""
    kind = kind_of(doc)
    own = baseline_of(doc)
    base = own if own is not None and kind == "sweep" else baseline_of(baseline)
    where = "this sweep's baseline row" if own is not None and kind == "sweep" else baseline_from
    if kind == "sweep":
        rows = [(r, row_anatomy(r)) for r in doc.get("rows") or [] if r.get("ok") and r.get("steps")]
        longest = longest_chain([a for _, a in rows if not a.get("predicted")])
        return [Subject(config=str(r.get("config")), anatomy=a, baseline=base, baseline_from=where,
                        version=str(r.get("sglang_version") or ""), longer=longest)
                for r, a in rows]
    if kind == "profile":
        config = str(doc.get("config_name") or "")
        out = []
        # The chain's shape and its accept histogram (the profile's own bench) beside the phases, for the rules
        # that read how far acceptance goes.
        spec, hist = doc.get("speculative") or {}, (doc.get("bench") or {}).get("accept_histogram")
        own = {k: int(spec[k]) for k in ("steps", "draft_tokens", "topk") if spec.get(k) and spec.get("steps")}
        if hist and own:
            own["accept_histogram"] = [int(c) for c in hist]
        for r in doc.get("ranks") or []:
            a = {**own, **(_merged(r.get("timer"), r.get("trace")) or dict(doc.get("derived") or {}))}
            a.setdefault("config", config)
            out.append(Subject(config=config, anatomy=a, baseline=base, baseline_from=where,
                               rank=int(r.get("rank") or 0), difference_pct=r.get("difference_pct") or {},
                               cuda_graph=doc.get("cuda_graph")))
        if not out and doc.get("derived"):
            out.append(Subject(config=config, anatomy=doc["derived"], baseline=base, baseline_from=where))
        return out
    if kind == "bench":
        return [Subject(config=str(doc.get("config_name") or ""), anatomy=bench_anatomy(doc), baseline=base,
                        baseline_from=where)]
    return []
