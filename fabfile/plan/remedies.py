"""``inv tune``'s remedy catalog: for each rule of ``plan/explain``, the ordered changes that exist and act on the
host's SGLang release, each with the saving it predicts from the measured phases and the evidence that says it
engaged. Pure: a configuration and the measured figures in, candidate changes out.

Where names come from: launch flags from the generated per-release flag table (``plan/versioncheck.facts_for``, read
from the wheels); environment variables from ``ENV_RELEASES`` below (the releases that read each, from
``../shared/reference/tune.md`` §1, cited per row). Both go through ``knob_acts`` — the one function that says
whether a knob exists *and acts* on a release; it asks issue 39's ``plan/knob_effects`` (whether a knob that parses
has any effect: read from the wheels) at the one call site marked ``KNOB EFFECTS``.

The predicted savings are the tool's arithmetic on measured phases ([derived]); the fractions each remedy assumes
are stated on its row (``assumes``) so the path table can say what was predicted and why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from fabfile.inventory.launch_flags import FLAG_OF
from fabfile.plan import knob_effects
from fabfile.plan.explain import accepted_steps
from fabfile.plan.predict import TUNE_MAX_STEPS
from fabfile.plan.versioncheck import facts_for
from fabfile.remote import versions

STEPS_FLAG, DRAFT_TOKENS_FLAG = FLAG_OF["speculative.steps"], FLAG_OF["speculative.draft_tokens"]
# The figure a longer chain moves: ms per token served (cycle ÷ accept length [derived]), lower is better.
PER_TOKEN = "ms_per_token"

# Environment variables a remedy may set: (first release that reads it, first release that no longer does or None).
# Sources: ../shared/reference/tune.md (0.5.x wheels read there).
ENV_RELEASES: dict[str, tuple[str, str | None]] = {
    "SGLANG_SET_CPU_AFFINITY": (versions.SET_CPU_AFFINITY_ENV, None),  # §1.4, default off in all 0.5.x
    "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH": (versions.DRAFT_EXTEND_GRAPH_ENV, None),  # §1.5
    "SGLANG_ENABLE_METADATA_GLUE_GRAPH": (versions.METADATA_GLUE_GRAPH_ENV, None),  # §1.2
    "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": (versions.PCIE_IPC_ALLREDUCE_ENV, None),  # §1.8
    "SGLANG_ENABLE_SPEC_V2": (versions.SPEC_V2_ENV, versions.SPEC_V2_ENV_REMOVED),  # §0/§1.1
}

# Knobs the tuner never proposes, whatever a release parses: a search axis on them is wasted.
NEVER: dict[str, str] = {
    "--num-continuous-decode-steps": "defined but read nowhere in any 0.5.x wheel read (sglang#23131; tune.md §0)",
}


def knob_acts(knob: str, version: str) -> bool:
    """Whether ``knob`` (a ``--flag`` or an environment variable) exists on ``version`` and acts there. The single
    gate every catalog row goes through."""
    if knob in NEVER:
        return False
    if knob.startswith("--"):
        facts = facts_for(version)
        if facts is None or knob not in facts[2]:
            return False
    else:
        span = ENV_RELEASES.get(knob)
        if span is None or not versions.at_least(version, span[0]):
            return False
        if span[1] is not None and versions.at_least(version, span[1]):
            return False
    # KNOB EFFECTS (issue 39): a flag that parses but is read nowhere, or a variable SGLang overwrites at launch, has
    # no effect on this release (the table read from the wheels): a search axis on it would be wasted loads.
    return knob_effects.effect(version, knob).acts


def graph_bs_flag(version: str) -> str | None:
    """The CUDA-graph max batch size flag by release: ``--cuda-graph-max-bs-decode`` from 0.5.14 (the old name an
    alias there, gone from 0.5.20), ``--cuda-graph-max-bs`` before (tune.md §1.5): the new name of the alias, as
    the wheels' alias table gives it (``knob_effects.current_name``)."""
    name = knob_effects.current_name(version, "--cuda-graph-max-bs")
    return name if name is not None and knob_acts(name, version) else None


@dataclass(frozen=True)
class Config:
    """What a deploy launches with, as far as the tuner changes it: flags (``None`` = a bare switch) and env."""

    flags: tuple[tuple[str, str | None], ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def flag(self, name: str) -> str | None:
        return next((v for k, v in self.flags if k == name), None)

    def has(self, name: str) -> bool:
        return any(k == name for k, _ in self.flags)

    def set_flag(self, name: str, value: str | None) -> Config:
        return replace(self, flags=tuple(sorted({**dict(self.flags), name: value}.items())))

    def drop_flag(self, name: str) -> Config:
        return replace(self, flags=tuple((k, v) for k, v in self.flags if k != name))

    def set_env(self, name: str, value: str) -> Config:
        return replace(self, env=tuple(sorted({**dict(self.env), name: value}.items())))

    def describe(self) -> dict[str, object]:
        return {"flags": {k: v for k, v in self.flags}, "env": dict(self.env)}


def diff(before: Config, after: Config) -> list[str]:
    """The change between two configurations, one line each (``+--flag=v``, ``---flag``, ``+ENV=v``)."""
    out: list[str] = []
    bf, af, be, ae = dict(before.flags), dict(after.flags), dict(before.env), dict(after.env)
    for k in sorted(set(bf) | set(af)):
        if k not in af:
            out.append(f"-{k}")
        elif k not in bf or bf[k] != af[k]:
            out.append(f"+{k}" + ("" if af[k] is None else f"={af[k]}"))
    for k in sorted(set(be) | set(ae)):
        if k not in ae:
            out.append(f"-{k}")
        elif be.get(k) != ae[k]:
            out.append(f"+{k}={ae[k]}")
    return out


@dataclass(frozen=True)
class Context:
    """What a remedy reads besides the configuration: the release, the load, TP, the measured figures (ms per cycle:
    ``cycle``, ``draft``, ``draft_step``, ``verify``, ``draft_extend``, ``other``, ``launch_gap``, ``allreduce``;
    ``steps``, ``accept_length``, ``ms_per_token``), and the figures of each rule that fired (``findings``: a
    remedy that acts on what its rule computed, such as the step count ``draft_saturated`` predicts best)."""

    version: str
    concurrency: int
    tp: int = 1
    figures: Mapping[str, float] = field(default_factory=dict)
    findings: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def ms(self, name: str) -> float:
        return float(self.figures.get(name) or 0.0)


@dataclass(frozen=True)
class Remedy:
    id: str
    rule: str  # the plan/explain rule it answers
    knob: str  # the flag or variable it sets (gated through knob_acts)
    what: str
    mechanism: str  # the figure its rule predicts moves (a phase of Context.figures)
    # the evidence kind: "log:<regex>" (searched in each line of the server's log, case-insensitive; each matches a
    # line real SGLang prints: tests/wheels/test_remedy_evidence.py), "server_args:<flag>[,<flag>...]" (the running
    # server's own /server_info: the field of the first of the flags the configuration sets, under whichever of
    # their names the release reports), "trace:verify_graph", "env:<name>"
    engaged_by: str
    moves_accept: bool  # whether accept length may legitimately change
    assumes: str  # the predicted saving's assumption, in words
    saving: Callable[[Context], float]  # predicted ms per cycle saved [derived]
    apply: Callable[[Config, Context], Config | None]  # None: not applicable to this configuration
    min_tp: int = 1
    source: str = ""

    def knob_name(self, ctx: Context) -> str:
        return graph_bs_flag(ctx.version) or self.knob if self.knob == "--cuda-graph-max-bs" else self.knob

    def candidate(self, cfg: Config, ctx: Context) -> Config | None:
        if ctx.tp < self.min_tp or not knob_acts(self.knob_name(ctx), ctx.version):
            return None
        out = self.apply(cfg, ctx)
        return out if out is not None and out != cfg else None


def _graph_on(cfg: Config, ctx: Context) -> Config | None:
    return cfg.drop_flag("--disable-cuda-graph") if cfg.has("--disable-cuda-graph") else None


def _graph_bs(cfg: Config, ctx: Context) -> Config | None:
    name = graph_bs_flag(ctx.version)
    if name is None or cfg.has("--disable-cuda-graph"):
        return None
    current = cfg.flag(name) or cfg.flag("--cuda-graph-max-bs")
    if current is not None and int(current) >= ctx.concurrency:
        return None
    return cfg.drop_flag("--cuda-graph-max-bs").set_flag(name, str(max(ctx.concurrency, 8)))


def _overlap_on(cfg: Config, ctx: Context) -> Config | None:
    return cfg.drop_flag("--disable-overlap-schedule") if cfg.has("--disable-overlap-schedule") else None


def _flag_to(name: str, value: str | None) -> Callable[[Config, Context], Config | None]:
    def apply(cfg: Config, ctx: Context) -> Config | None:
        return None if cfg.has(name) and cfg.flag(name) == value else cfg.set_flag(name, value)
    return apply


def _env_to(name: str, value: str) -> Callable[[Config, Context], Config | None]:
    def apply(cfg: Config, ctx: Context) -> Config | None:
        return None if dict(cfg.env).get(name) == value else cfg.set_env(name, value)
    return apply


def _fewer_steps(cfg: Config, ctx: Context) -> Config | None:
    steps = int(cfg.flag(STEPS_FLAG) or ctx.figures.get("steps") or 0)
    if steps <= 1:
        return None
    out = cfg.set_flag(STEPS_FLAG, str(steps - 1))
    tokens = cfg.flag(DRAFT_TOKENS_FLAG)
    return out.set_flag(DRAFT_TOKENS_FLAG, str(steps)) if tokens is not None else out


def _to_accepted_steps(cfg: Config, ctx: Context) -> Config | None:
    """Steps cut to what acceptance reaches (plan/explain's draft_surplus), draft tokens with them (chain: steps+1)."""
    steps = int(cfg.flag(STEPS_FLAG) or ctx.figures.get("steps") or 0)
    accept = ctx.figures.get("accept_length")
    if not accept or steps <= 1:
        return None
    used = accepted_steps(float(accept))
    if used >= steps:
        return None
    out = cfg.set_flag(STEPS_FLAG, str(used))
    tokens = cfg.flag(DRAFT_TOKENS_FLAG)
    return out.set_flag(DRAFT_TOKENS_FLAG, str(used + 1)) if tokens is not None else out


def _more_steps(cfg: Config, ctx: Context) -> Config | None:
    """Steps raised to the count plan/explain's draft_saturated predicts best (its tail model, plan/predict
    .longer_chain), draft tokens with them where set (a chain: steps + 1)."""
    found = ctx.findings.get("draft_saturated") or {}
    target = int(found.get("steps") or 0)
    if target <= int(cfg.flag(STEPS_FLAG) or ctx.figures.get("steps") or 0) or target > TUNE_MAX_STEPS:
        return None
    out = cfg.set_flag(STEPS_FLAG, str(target))
    return out.set_flag(DRAFT_TOKENS_FLAG, str(target + 1)) if cfg.flag(DRAFT_TOKENS_FLAG) is not None else out


def _more_steps_saving(ctx: Context) -> float:
    return float((ctx.findings.get("draft_saturated") or {}).get("saving_ms") or 0.0)


def _surplus_saving(ctx: Context) -> float:
    steps, accept = ctx.figures.get("steps") or 0, ctx.figures.get("accept_length")
    if not steps or not accept:
        return 0.0
    return max(0, int(steps) - accepted_steps(float(accept))) * ctx.ms("draft_step")


def _per_step(ctx: Context) -> float:
    steps = ctx.figures.get("steps") or 0
    return ctx.ms("draft") / float(steps) if steps else 0.0


CATALOG: tuple[Remedy, ...] = (
    Remedy("graph-on", "verify_eager", "--disable-cuda-graph", "turn CUDA graphs back on",
           "launch_gap", "trace:verify_graph", False, "80 % of verify's launch gaps go",
           lambda c: 0.8 * c.ms("launch_gap"), _graph_on, source="tune.md §1.5"),
    Remedy("graph-bs", "verify_eager", "--cuda-graph-max-bs", "capture graphs up to the load's batch size",
           "launch_gap", "server_args:--cuda-graph-max-bs-decode,--cuda-graph-max-bs", False,
           "80 % of verify's launch gaps go (bs > max bs ran eager)",
           lambda c: 0.8 * c.ms("launch_gap"), _graph_bs, source="tune.md §1.5, cuda_graph_runner.py:765"),
    Remedy("overlap-on", "other_share", "--disable-overlap-schedule", "turn the overlap scheduler back on",
           "other", "server_args:--disable-overlap-schedule", False,
           "overlap hides host time up to the GPU time of a cycle",
           lambda c: min(c.ms("other"), c.ms("cycle") - c.ms("other")) * 0.5, _overlap_on, source="tune.md §1.1"),
    Remedy("cpu-affinity", "other_share", "SGLANG_SET_CPU_AFFINITY", "bind the scheduler to its GPU's cores",
           "other", "env:SGLANG_SET_CPU_AFFINITY", False, "10 % of host time (placement)",
           lambda c: 0.1 * c.ms("other"), _env_to("SGLANG_SET_CPU_AFFINITY", "1"), source="tune.md §1.4"),
    Remedy("recv-interval", "other_share", "--scheduler-recv-interval", "poll for requests every 4th step",
           "other", "server_args:--scheduler-recv-interval", False,
           "the TP broadcast of received requests on 3 of 4 steps (TP ≥ 2); TTFT rises (SLA-gated)",
           lambda c: 0.05 * c.ms("other") * (c.tp - 1), _flag_to("--scheduler-recv-interval", "4"),
           min_tp=2, source="tune.md §1.3"),
    Remedy("metadata-graph", "other_share", "SGLANG_ENABLE_METADATA_GLUE_GRAPH",
           "capture attention-metadata preparation in a graph", "other", "env:SGLANG_ENABLE_METADATA_GLUE_GRAPH",
           False, "20 % of host time (metadata dispatch)", lambda c: 0.2 * c.ms("other"),
           _env_to("SGLANG_ENABLE_METADATA_GLUE_GRAPH", "1"), source="tune.md §1.2"),
    Remedy("fewer-steps", "draft_share", STEPS_FLAG, "one draft step fewer",
           "draft", "server_args:--speculative-num-steps", True, "one draft forward's time, less lost acceptance",
           _per_step, _fewer_steps, source="tune.md §1.9, plan/predict"),
    Remedy("accepted-steps", "draft_surplus", STEPS_FLAG, "steps cut to what acceptance reaches",
           "draft", "server_args:--speculative-num-steps", True,
           "the surplus draft forwards' time; the passes that reached past them lose those tokens",
           _surplus_saving, _to_accepted_steps, source="plan/explain draft_surplus, docs/real-sglang.md"),
    # The mirror of accepted-steps: a chain whose passes accept every draft token. Its mechanism is ms per token
    # (cycle ÷ accept length): a longer chain's cycle grows, what falls is the time per token it serves.
    Remedy("more-steps", "draft_saturated", STEPS_FLAG, "steps raised to what the accept histogram predicts best",
           PER_TOKEN, "server_args:--speculative-num-steps", True,
           "the passes that accepted every draft token go on at their last position's acceptance (or as a longer "
           "chain measured in this run went on); each step one more draft forward and verify's growth per token",
           _more_steps_saving, _more_steps, source="plan/explain draft_saturated, plan/predict.longer_chain, "
                                                   "docs/real-sglang.md"),
    Remedy("adaptive", "break_even", "--speculative-adaptive", "let SGLang choose steps per batch size",
           "cycle", "server_args:--speculative-adaptive", True, "one draft forward per cycle at high load",
           _per_step, _flag_to("--speculative-adaptive", None), source="tune.md §1.7"),
    Remedy("symm-mem", "allreduce_bound", "--enable-symm-mem", "NCCL symmetric-memory all-reduce",
           "allreduce", "server_args:--enable-symm-mem", False, "30 % of verify's all-reduce",
           lambda c: 0.3 * c.ms("allreduce"), _flag_to("--enable-symm-mem", None), min_tp=2,
           source="tune.md §1.8"),
    Remedy("pcie-ipc", "allreduce_bound", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "FlashInfer PCIe-IPC all-reduce",
           "allreduce", "log:PCIe-IPC all-reduce enabled", False, "90 % of verify's all-reduce (PCIe, no NVLink)",
           lambda c: 0.9 * c.ms("allreduce"), _env_to("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "1"), min_tp=2,
           source="tune.md §1.8, pcie_ipc_ar.py"),
)


# The rules of plan/explain that read the profiler trace's kernel classes (launch mode, all-reduce share, GEMM
# time): they cannot fire on the device timer's phases alone. gemm_growth has no remedy in the catalog (its cause is
# the model's memory traffic), so it never asks for a trace here.
TRACE_RULES = frozenset({"verify_eager", "allreduce_bound", "gemm_growth"})


def needs_trace(cfg: Config, ctx: Context, tried: set[str]) -> list[str]:
    """The untried remedies applicable to ``cfg`` whose rule only a trace can fire: measure with a (bounded) trace
    when this is not empty, so the rule gets its chance; else the device timer alone, without the profiler's cost."""
    return [r.id for r in CATALOG if r.rule in TRACE_RULES and r.id not in tried and r.candidate(cfg, ctx) is not None]


def steps_key(steps: int | str) -> str:
    """The tried key of a step count: one a tune has measured (any deploy, either arm) or a steps remedy has tried."""
    return f"steps={steps}"


def tried_key(remedy: Remedy, cfg: Config) -> str:
    """What a remedy's trial uses up: its own id, or for a remedy that changes the step count the step count it
    goes to. The steps remedies (fewer-steps, accepted-steps, more-steps) answer opposite rules (draft_share and
    draft_surplus: too many steps; draft_saturated: too few), which can both fire on one histogram with mass at both
    ends, and each predicts from a model the next deploy can prove wrong: keyed by the step count, and with every
    step count the tune measured counted as tried, a step count is deployed once in a tune, so the path can never
    go back to one it left (the H200's steps 7 → 2 by accepted-steps, then 2 → 7 by more-steps) however the rules
    read the next measurement."""
    return steps_key(cfg.flag(STEPS_FLAG) or "") if remedy.knob == STEPS_FLAG else remedy.id


@dataclass(frozen=True)
class Candidate:
    remedy: Remedy
    config: Config
    predicted_ms: float  # per cycle [derived]

    @property
    def key(self) -> str:
        return tried_key(self.remedy, self.config)


def candidates(rules_fired: list[str], cfg: Config, ctx: Context, tried: set[str]) -> list[Candidate]:
    """Each firing rule's next untried applicable remedy, in the order the rules fired (the top finding first);
    within a rule, catalog order. Ranked by predicted saving, largest first, ties by firing order."""
    out: list[Candidate] = []
    for rule in rules_fired:
        for r in CATALOG:
            if r.rule != rule or (r.knob != STEPS_FLAG and r.id in tried):
                continue
            nxt = r.candidate(cfg, ctx)
            if nxt is not None and tried_key(r, nxt) not in tried:
                out.append(Candidate(r, nxt, max(0.0, r.saving(ctx))))
                break
    return sorted(out, key=lambda c: -c.predicted_ms)


def predicted_fraction(c: Candidate, ctx: Context) -> float:
    """The candidate's predicted saving as a fraction of the figure it moves, for the stop rule: of the cycle, or
    of its mechanism phase where larger (a saving in one phase is a larger share of it). A saving per token's
    (more-steps) is ms per cycle at the measured accept length, so its share of the cycle is its share of the ms
    per token."""
    cycle = ctx.ms("cycle") or 1.0
    if c.remedy.mechanism in ("cycle", PER_TOKEN):
        return c.predicted_ms / cycle
    return max(c.predicted_ms / cycle, c.predicted_ms / (ctx.ms(c.remedy.mechanism) or cycle))


def server_arg(flag: str) -> str:
    """The name a launch flag's value has in the server's own args (SGLang's ServerArgs field, which its
    /server_info reports): the flag without its dashes, ``_`` for ``-``."""
    return flag.lstrip("-").replace("-", "_")


# The server args the catalog's ``server_args:`` evidence reads, asked of the running server by each measurement
# (every name of each: the release answers the ones it has).
SERVER_ARGS: tuple[str, ...] = tuple(sorted({server_arg(f) for r in CATALOG if r.engaged_by.startswith("server_args:")
                                             for f in r.engaged_by.partition(":")[2].split(",")}))


def by_id(remedy_id: str) -> Remedy:
    return next(r for r in CATALOG if r.id == remedy_id)
