"""``inv tune``'s loop: measure → explain → choose the top finding's next untried remedy → deploy it and check it
engaged → compare against the incumbent re-deployed in the same run (``plan/tune_rule``) → keep or revert, until no
rule fires with an untried remedy, the best predicted saving is below what the measured spread resolves, or the
budget is spent.

The host side is behind ``Trials`` (one deploy + one measurement of a configuration, and the evidence it left), so
the loop is the same over a real host and a simulated one. Whatever ends the loop — a candidate that fails to
start, Ctrl-C, a lost connection — the best configuration so far is what the host runs when it returns, and the
path says so (``restored``). The path is saved after every trial so ``--resume`` continues it.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from fabfile.commands.bench import BenchParams
from fabfile.commands.result import CommandResult
from fabfile.errors import SpecDeployError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.plan import explain as rules
from fabfile.plan import remedies, tune_rule, versioncheck
from fabfile.plan.deploy_plan import Options
from fabfile.plan.predict import TUNE_MAX_STEPS, Chain
from fabfile.plan.remedies import Candidate, Config, Context
from fabfile.plan.sla import Limits, broken
from fabfile.plan.tune_rule import Arm
from fabfile.remote.protocol import AgentEvent

# tok-s: output tok/s at the bench's load, the SLA limits (if given) a guard on every challenger deploy; sla: the
# sweep's limits first (a configuration meeting them on every deploy beats one that misses them), then tok/s.
OBJECTIVES = ("tok-s", "sla")


@dataclass(frozen=True)
class Measurement:
    """One deploy's figures: the objective (tok/s [tool]), the cycle anatomy as ``inv profile`` reports it (phases
    with sources, ``kernels`` when traced), accept length [SGLang], peak GPU memory, the SLA check, and the evidence
    the deploy left (log lines, the server's args, the env the scheduler saw, trace facts such as
    ``verify_graph``)."""

    tok_s: float
    anatomy: Mapping[str, Any]
    accept: float | None = None
    memory_gib: float | None = None  # the most any GPU of the host held after the load [nvidia-smi]
    memory_total_gib: float | None = None  # the smallest GPU's total [nvidia-smi]
    sla_met: bool = True
    sla_broken: tuple[str, ...] = ()  # the limits this deploy broke (plan/sla.broken's words)
    sla: Mapping[str, float | None] = field(default_factory=dict)  # the figures judged: ttft_ms, tpot_ms, tok_s
    log: tuple[str, ...] = ()
    server_args: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    trace: frozenset[str] = frozenset()  # facts the profiler trace showed (``verify_graph``, ``allreduce:<impl>``)
    traced: bool = False  # measured with the profiler's bounded trace (kernel classes in ``anatomy["kernels"]``)

    def ms(self, phase: str) -> float | None:
        v = self.anatomy.get(phase)
        if isinstance(v, Mapping) and v.get("ms") is not None:
            return float(v["ms"])
        return None

    def figures(self) -> dict[str, float]:
        out = {k: float(v) for k in ("cycle", "draft", "draft_step", "verify", "draft_extend", "other")
               if (v := self.ms(k)) is not None}
        accept = self.accept if self.accept is not None else self.ms("accept_length")
        if accept is not None:
            out["accept_length"] = float(accept)
        verify_k = ((self.anatomy.get("kernels") or {}).get("verify") or {})
        for name, key in (("launch_gap", "launch_gap_ms"), ("allreduce", "allreduce_ms")):
            if verify_k.get(key) is not None:
                out[name] = float(verify_k[key])
        if ar := (verify_k.get("classes_ms") or {}).get("allreduce"):
            out.setdefault("allreduce", float(ar))
        for k in ("steps", "topk", "draft_tokens"):
            if self.anatomy.get(k):
                out[k] = float(self.anatomy[k])
        if out.get("cycle") and out.get("accept_length"):
            out[remedies.PER_TOKEN] = out["cycle"] / out["accept_length"]  # [derived]
        return out


class CandidateFailed(SpecDeployError):
    """A configuration that did not come up (its launch failed, or the server died before measuring)."""


def never(version: str) -> bool:
    return False


class Trials(Protocol):
    version: str  # the host's SGLang release once known ("" before the first deploy: TuneParams.version then)
    # Set for the restore after an interrupt: the deploy the interrupt cut short is this run's own and may still run
    # on the host (a deploy outlives its client), so the restore queues behind it where any other deploy refuses.
    queue: bool

    def run(self, cfg: Config, trace: Callable[[str], bool] = never) -> Measurement:
        """Deploy ``cfg`` (replacing what runs) and measure it; CandidateFailed when it does not come up. ``trace``,
        asked with the release the deploy found: whether to measure with the profiler's bounded trace too."""
        ...


def engaged(remedy: remedies.Remedy, cfg: Config, m: Measurement) -> tuple[bool, str]:
    """Whether the change shows in what the deploy left, and the evidence in words."""
    kind, _, what = remedy.engaged_by.partition(":")
    if kind == "log":
        pattern = re.compile(what, re.IGNORECASE)
        line = next((ln for ln in m.log if pattern.search(ln)), None)
        return line is not None, (f"log: {line.strip()}" if line else f"no log line matching {what!r}")
    if kind == "server_args":
        names = what.split(",")
        # The flag the configuration sets (the graph batch size under the release's name), and the server's field
        # for it under whichever name this release reports (0.5.16: cuda_graph_max_bs_decode, 0.5.12:
        # cuda_graph_max_bs; the old flag is the new one's alias there, one field).
        what = next((n for n in names if cfg.has(n)), names[0])
        key = next((k for k in (remedies.server_arg(n) for n in names) if k in m.server_args),
                   remedies.server_arg(what))
        want = cfg.flag(what) if cfg.has(what) else None
        got = m.server_args.get(key)
        if not cfg.has(what):  # the change removed the flag: the server reports the default
            ok = got in (False, None)
        elif want is None:
            ok = got is True
        else:
            ok = str(got) == want
        return ok, f"server_args {key}={got!r} [SGLang /get_server_info]"
    if kind == "env":
        ok = m.env.get(what) == dict(cfg.env).get(what)
        return ok, f"scheduler env {what}={m.env.get(what)!r}"
    if kind == "trace":
        return what in m.trace, (f"trace: {what}" if what in m.trace else f"trace lacks {what}")
    return False, f"unknown evidence kind {kind!r}"


@dataclass
class Step:
    iteration: int
    finding: str  # the rule's sentence, figures and sources included
    rule: str
    remedy: str
    change: list[str]
    predicted_ms: float
    evidence: str = ""
    outcome: str = ""  # kept | reverted | not engaged | failed | guard
    why: str = ""
    before: list[float] = field(default_factory=list)
    after: list[float] = field(default_factory=list)
    before_spread: float = 0.0
    after_spread: float = 0.0
    measurements: list[dict[str, Any]] = field(default_factory=list)
    key: str = ""  # what the trial used up (plan/remedies.tried_key): the remedy, or the step count it went to


@dataclass
class TuneState:
    start: Config
    best: Config
    best_objective: list[float] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    loads: int = 0
    stop: str = ""
    stop_reason: str = ""
    restored: str = ""
    incumbent: list[dict[str, Any]] = field(default_factory=list)  # the best's latest deploys, as measured
    # The measurements outside a trial (the first deploy, a traced deploy of a new best), so --json has them all.
    outside_trials: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start.describe(), "best": self.best.describe(), "best_objective": self.best_objective,
                "incumbent": self.incumbent, "outside_trials": self.outside_trials,
                "tried": self.tried, "loads": self.loads, "stop": self.stop, "stop_reason": self.stop_reason,
                "restored": self.restored, "diff": remedies.diff(self.start, self.best),
                "steps": [vars(s) for s in self.steps]}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> TuneState:
        def cfg(d: Mapping[str, Any]) -> Config:
            return Config(flags=tuple(sorted((k, v) for k, v in d["flags"].items())),
                          env=tuple(sorted(d["env"].items())))
        st = TuneState(cfg(doc["start"]), cfg(doc["best"]), list(doc.get("best_objective") or []),
                       list(doc.get("tried") or []), [Step(**s) for s in doc.get("steps") or []],
                       int(doc.get("loads") or 0), str(doc.get("stop") or ""), str(doc.get("stop_reason") or ""),
                       str(doc.get("restored") or ""), list(doc.get("incumbent") or []),
                       list(doc.get("outside_trials") or []))
        return st


@dataclass(frozen=True)
class TuneParams:
    version: str
    concurrency: int
    tp: int = 1
    pairs: int = 3  # deploys per arm (3 against 3: p = 1/20)
    max_loads: int = 40
    max_minutes: float = 60.0
    memory_limit_gib: float | None = None
    state_file: Path | None = None
    objective: str = "tok-s"
    limits: Limits = field(default_factory=Limits)
    trace_steps: int = 12  # scheduler steps a traced measurement records (profile's default; at most 200)


def _record(m: Measurement, arm: str) -> dict[str, Any]:
    hist = m.anatomy.get("accept_histogram")
    return {"arm": arm, "traced": m.traced, "trace_facts": sorted(m.trace), "tok_s": m.tok_s, "accept": m.accept,
            "accept_histogram": list(hist) if hist else None,
            "traced_passes": ((m.anatomy.get("kernels") or {}).get("verify") or {}).get("passes") if m.traced else None,
            "memory_gib": m.memory_gib, "sla_met": m.sla_met,
            "sla_broken": list(m.sla_broken), "sla": dict(m.sla), "figures": m.figures()}


def _arm(ms: list[Measurement], mechanism: str, engaged_flags: list[bool] | None = None) -> Arm:
    def mech(m: Measurement) -> float | None:
        return m.figures().get(mechanism)
    mechs = [v for m in ms if (v := mech(m)) is not None]
    return Arm(tuple(m.tok_s for m in ms), tuple(mechs) if len(mechs) == len(ms) else (),
               tuple(m.accept for m in ms if m.accept is not None),
               tuple(m.memory_gib for m in ms if m.memory_gib is not None), tuple(m.sla_met for m in ms),
               tuple(engaged_flags or ()), tuple(b for m in ms for b in m.sla_broken))


def _resolvable(incumbent: list[Measurement], mechanism: str, pairs: int) -> float:
    """The smallest effect the incumbent's measured deploys resolve, end to end or on the mechanism figure (the
    smaller: a change may be kept on either). 0 before two deploys have been measured."""
    if len(incumbent) < 2:
        return 0.0
    mech = [v for m in incumbent if (v := m.figures().get(mechanism)) is not None]
    e2e = tune_rule.resolvable([m.tok_s for m in incumbent], pairs)
    return min(e2e, tune_rule.resolvable(mech, pairs)) if len(mech) >= 2 else e2e


def _with_kernels(head: Measurement, traced: Measurement | None) -> Measurement:
    """The latest measurement of the best, with the kernel classes of a traced deploy of the same configuration in
    this run where it has none of its own (the trace rules judge those; the timer's phases stay the latest)."""
    if head.traced or traced is None or not traced.anatomy.get("kernels"):
        return head
    return replace(head, anatomy={**head.anatomy, "kernels": traced.anatomy["kernels"]}, trace=traced.trace)


# Without a stated limit, a challenger may use GPU memory up to this share of the smallest GPU's total: above it the
# next longer prompt or larger batch runs the server out of memory (SGLang sizes its KV pool by
# --mem-fraction-static, so a change that grows the CUDA graphs' or the draft's memory shows here).
MEMORY_SHARE_LIMIT = 0.97


def _memory_limit(params: TuneParams, ms: list[Measurement]) -> float | None:
    if params.memory_limit_gib is not None:
        return params.memory_limit_gib
    totals = [m.memory_total_gib for m in ms if m.memory_total_gib]
    return MEMORY_SHARE_LIMIT * min(totals) if totals else None


def _timed(m: Measurement) -> bool:
    """Whether the measurement has the device timer's GPU phases (a speculative cycle's verify, a decode step)."""
    return m.ms("verify") is not None or m.ms("decode") is not None


def _records(state: TuneState) -> list[dict[str, Any]]:
    """Every measurement of this tune's path, saved ones included (a resumed tune reads the path's)."""
    return [*state.outside_trials, *(m for st in state.steps for m in st.measurements)]


def measured_steps(state: TuneState) -> set[str]:
    """The tried key of every step count a deploy of this tune measured (``plan/remedies.tried_key``)."""
    return {remedies.steps_key(int(f["steps"])) for r in _records(state) if (f := r.get("figures") or {}).get("steps")}


def longest_chain(state: TuneState) -> Chain | None:
    """The longest chain this tune measured, with its accept histogram and verify pass: how far acceptance goes
    past a shorter chain's last position (``plan/explain.draft_saturated`` reads it before its own tail model)."""
    def anatomy(r: Mapping[str, Any]) -> dict[str, Any]:
        f = r.get("figures") or {}
        return {"steps": f.get("steps"), "topk": f.get("topk"), "draft_tokens": f.get("draft_tokens"),
                "accept_histogram": r.get("accept_histogram"),
                "verify": {"ms": f["verify"]} if f.get("verify") else None}
    return rules.longest_chain([anatomy(r) for r in _records(state)])


def _findings(cfg: Config, m: Measurement, longer: Chain | None = None) -> list[rules.Finding]:
    return rules.explain(rules.Subject(config="eagle3-tune", anatomy=m.anatomy,
                                       cuda_graph=not cfg.has("--disable-cuda-graph"), longer=longer))


def tune(trials: Trials, state: TuneState, params: TuneParams,
         progress: Callable[[str], None] = lambda s: None, clock: Callable[[], float] = time.monotonic) -> TuneState:
    """Run the loop to its stop; the host runs ``state.best`` when this returns or raises."""
    started = clock()
    deployed: list[Config] = []
    trial_seconds = 0.0
    traced_of: dict[Config, Measurement] = {}  # the latest traced deploy of each configuration in this run

    def wants_trace(cfg: Config) -> Callable[[str], bool]:
        def want(version: str) -> bool:
            ctx = Context(version or params.version, params.concurrency, params.tp)
            return bool(remedies.needs_trace(cfg, ctx, set(state.tried)))
        return want

    def run(cfg: Config, what: str, trace: Callable[[str], bool] = never) -> Measurement:
        progress(f"iteration {len(state.steps) + 1}: deploy {state.loads + 1} ({what}); "
                 f"{params.max_loads - state.loads} loads, "
                 f"{max(0.0, params.max_minutes - (clock() - started) / 60):.1f} min left")
        state.loads += 1
        deployed.append(cfg)
        m = trials.run(cfg, trace)
        if m.traced:
            progress(f"  measured with a {params.trace_steps}-step trace: a rule that reads kernel classes "
                     "may fire")
            traced_of[cfg] = m
        return m

    try:
        incumbent_ms: list[Measurement] = []
        while True:
            if not incumbent_ms:
                incumbent_ms = [run(state.best, "incumbent", wants_trace(state.best))]
                state.outside_trials.append({**_record(incumbent_ms[0], "A"), "what": "first deploy"})
            elif (not incumbent_ms[-1].traced and state.best not in traced_of
                  and wants_trace(state.best)(trials.version)):
                # A new best, and a remedy only a trace can call for is still untried: one traced deploy of it
                # (kept apart from the spread: the profiler's cost is not deploy-to-deploy noise).
                m = run(state.best, "incumbent, traced", lambda v: True)
                state.outside_trials.append({**_record(m, "A"), "what": "traced deploy of the new best"})
            state.incumbent = [_record(m, "A") for m in incumbent_ms]
            head = _with_kernels(incumbent_ms[-1], traced_of.get(state.best))
            findings = _findings(state.best, head, longest_chain(state))
            found = {f.rule: f for f in findings}
            ctx = Context(trials.version or params.version, params.concurrency, params.tp, head.figures(),
                          {f.rule: f.figures for f in findings})
            # A step count measured in this tune is one no steps remedy goes to again (plan/remedies.tried_key).
            cands = remedies.candidates([f.rule for f in findings], state.best, ctx,
                                        set(state.tried) | measured_steps(state))
            best: Candidate | None = cands[0] if cands else None
            frac = None if best is None else remedies.predicted_fraction(best, ctx)
            resolv = _resolvable(incumbent_ms, best.remedy.mechanism if best else "", params.pairs)
            per_trial = trial_seconds or 0.0
            stop = tune_rule.stop_reason(best_predicted=frac, resolvable_fraction=resolv,
                                         loads_left=params.max_loads - state.loads, loads_per_trial=2 * params.pairs,
                                         seconds_left=params.max_minutes * 60 - (clock() - started),
                                         seconds_per_trial=per_trial)
            if best is None and not _timed(head):
                # No phase to read is not "nothing to fix": say what is missing and how to get it.
                state.stop, state.stop_reason = "unmeasured", (
                    "the deploy reported no per-phase device timer (SGLang's `--enable-metrics` with "
                    f"{versioncheck.DEVICE_TIMER_ENV}=1; releases that have it: "
                    f"{versioncheck.device_timer_releases()}), so no rule had a phase to read; remove `measure: "
                    "false` from the inventory, or deploy a release that has it")
                break
            if stop is not None or best is None:
                state.stop, state.stop_reason = (stop.reason, stop.sentence) if stop else ("nothing-left", "")
                break
            t0 = clock()
            step = Step(len(state.steps) + 1, found[best.remedy.rule].sentence, best.remedy.rule, best.remedy.id,
                        remedies.diff(state.best, best.config), round(best.predicted_ms, 4), key=best.key)
            state.tried.append(best.key)
            state.steps.append(step)
            a_ms: list[Measurement] = []
            b_ms: list[Measurement] = []
            flags: list[bool] = []
            # Both arms traced where the remedy's rule reads kernel classes (its mechanism figure and the evidence
            # it engaged are the trace's); otherwise neither pays the profiler's cost.
            arm_trace: Callable[[str], bool] = ((lambda v: True) if best.remedy.rule in remedies.TRACE_RULES
                                                else never)
            for arm in tune_rule.schedule(params.pairs):
                if arm == "A":
                    m = run(state.best, "incumbent", arm_trace)
                    a_ms.append(m)
                    step.measurements.append(_record(m, "A"))
                    continue
                try:
                    m = run(best.config, f"candidate {best.remedy.id}", arm_trace)
                except CandidateFailed as e:
                    step.outcome, step.why = "failed", f"the candidate did not come up: {e}"
                    break
                ok, step.evidence = engaged(best.remedy, best.config, m)
                flags.append(ok)
                b_ms.append(m)
                step.measurements.append(_record(m, "B"))
                if not ok:
                    step.outcome, step.why = "not engaged", f"the change did not engage ({step.evidence}): not scored"
                    break
                if not m.sla_met:
                    # decide() keeps no change one of whose deploys missed the SLA: the rest of the trial's loads
                    # could not save it.
                    step.outcome, step.why = "guard", (f"a challenger deploy missed the SLA "
                                                       f"({', '.join(m.sla_broken) or 'a limit'}): not kept")
                    break
            if not step.outcome:
                inc, ch = _arm(a_ms, best.remedy.mechanism), _arm(b_ms, best.remedy.mechanism, flags)
                v = tune_rule.decide(inc, ch, moves_accept=best.remedy.moves_accept,
                                     memory_limit_gib=_memory_limit(params, a_ms + b_ms),
                                     sla_first=params.objective == "sla")
                step.outcome, step.why = v.outcome, v.why
                step.before, step.after = list(inc.objective), list(ch.objective)
                step.before_spread, step.after_spread = tune_rule.spread(inc.objective), tune_rule.spread(ch.objective)
                if v.kept:
                    state.best = best.config
                    incumbent_ms = b_ms
                else:
                    incumbent_ms = a_ms
                state.best_objective = [m.tok_s for m in incumbent_ms]
            else:
                step.before = [m.tok_s for m in a_ms]
                if a_ms:
                    incumbent_ms = a_ms
            trial_seconds = clock() - t0
            _save(state, params)
    except (KeyboardInterrupt, Exception) as e:
        # Whatever it is (a library's own exception from a link that died under a Ctrl-C included), the host gets
        # the best configuration back before it goes up; the restore opens a connection of its own.
        state.stop = "interrupted"
        state.stop_reason = "Ctrl-C" if isinstance(e, KeyboardInterrupt) else (str(e) or type(e).__name__)
        if state.steps and not state.steps[-1].outcome:
            # The trial it cut short decided nothing: --resume tries that remedy again.
            state.steps[-1].outcome, state.steps[-1].why = "interrupted", state.stop_reason
            state.tried.remove(state.steps[-1].key or state.steps[-1].remedy)
        trials.queue = True
        _restore(trials, state, params, progress)
        raise
    if not deployed or deployed[-1] != state.best:
        _restore(trials, state, params, progress)
    _save(state, params)
    return state


def _restore(trials: Trials, state: TuneState, params: TuneParams, progress: Callable[[str], None]) -> None:
    """Deploy the best configuration so far again; said in the path either way."""
    progress("deploying the best configuration so far again")
    try:
        state.loads += 1
        trials.run(state.best)  # untraced: the restore only has to serve
        state.restored = "the best configuration so far was deployed again"
    except Exception as e:  # said in the path, and the user told what to run: never a second traceback
        state.restored = f"re-deploying the best configuration failed: {e}; run `inv deploy` on the host"
    _save(state, params)


def _save(state: TuneState, params: TuneParams) -> None:
    if params.state_file is None:
        return
    tmp = params.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=1))
    tmp.replace(params.state_file)


def check_params(objective: str, max_loads: int | None, max_minutes: float | None, pairs: int,
                 limits: Limits | None = None, concurrency: int = 1, max_steps: int = 0) -> None:
    """Bad input refused before anything is touched, every refusal at once (a sentence each naming its flag; the CLI
    exits 2). A budget already refused by its flag's own parser comes as None and is not judged again; an SLA no
    configuration of at most ``max_steps`` draft steps could meet at ``concurrency`` is refused
    (``plan/sla.unmeetable``: a stated floor, never a guess)."""
    from fabfile.errors import Collector, FlagError
    from fabfile.plan.sla import unmeetable

    found = Collector()

    def refuse(message: str) -> None:
        raise FlagError(message)

    if objective not in OBJECTIVES:
        found.check(refuse, f"--objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if objective == "sla" and not (limits and limits.any):
        found.check(refuse, "--objective sla: give the limits to meet (--max-ttft-ms, --max-tpot-ms, --min-tok-s), "
                            "as `inv sweep` takes them")
    if max_loads is not None and max_loads < 2 * pairs + 1:
        found.check(refuse, f"--max-loads {max_loads} cannot fit one trial ({2 * pairs + 1} loads: the incumbent "
                            f"and {pairs} deploys of each arm)")
    if max_minutes is not None and max_minutes <= 0:
        found.check(refuse, f"--max-minutes {max_minutes:g} leaves no time to tune")
    for sentence in unmeetable(limits or Limits(), concurrency, max(max_steps, TUNE_MAX_STEPS)):
        found.check(refuse, sentence)
    found.done()


def host_config(host: Host) -> Config:
    """The tuner's view of the inventory's configuration: its SGLang args as flags, its env."""
    from fabfile.remote.common import split_argv

    flags: dict[str, str | None] = {}
    for f in split_argv(list(host.sglang_args)):
        if f.name:
            flags[f.name] = f.value
    return Config(flags=tuple(sorted(flags.items())), env=tuple(sorted(host.env.items())))


def with_config(host: Host, cfg: Config) -> Host:
    """The host as it deploys ``cfg``: the speculative flags a remedy set (steps, topk, draft tokens) go onto the
    host's speculative settings, which render writes once (``plan/deploy_plan.launch_argv``), never appended after
    them as a second value argparse happens to let win; the rest are its SGLang args."""
    from fabfile.inventory.launch_flags import row_of

    spec: dict[str, int] = {}
    args: list[str] = []
    for k, v in cfg.flags:
        row = row_of(k)
        if row is not None and row.field.startswith("speculative.") and row.whole and v is not None:
            spec[row.field.partition(".")[2]] = int(v)
        else:
            args.append(k if v is None else f"{k}={v}")
    s = host.speculative
    steps, topk = spec.get("steps", s.steps), spec.get("topk", s.topk)
    draft = spec.get("draft_tokens", s.draft_tokens)
    if (steps, topk) != (s.steps, s.topk) and "draft_tokens" not in spec and topk == 1:
        # An inventory draft_tokens holds only for the steps it was written for (plan/deploy_plan._speculative):
        # a chain's is steps + 1 again, which render derives from none.
        draft = None
    return replace(host, sglang_args=tuple(args), env=dict(cfg.env),
                   speculative=replace(s, steps=steps, topk=topk, draft_tokens=draft))


@dataclass
class HostTrials:
    """A real host: ``inv deploy`` of the configuration, then ``inv profile``'s bounded load on it (the device
    timer), the server log's tail, and the scheduler's own environment (check-env's evidence)."""

    inv: Inventory
    host: Host
    opts: Options
    load: BenchParams
    limits: Limits = field(default_factory=Limits)
    trace_steps: int = 12
    log_lines: int = 400
    version: str = ""
    queue: bool = False

    def run(self, cfg: Config, trace: Callable[[str], bool] = never) -> Measurement:
        from fabfile.commands.deploy import deploy_host
        from fabfile.commands.profile import ProfileParams, new_profile_id, profile_request
        from fabfile.present.progress import Reporter
        from fabfile.transport.session import HostSession

        target = with_config(self.host, cfg)
        if self.queue:
            t = target.timeouts  # bounded by the host's own ready bound: the cut-short deploy ends within it
            target = replace(target, timeouts=replace(t, lock_wait=max(t.lock_wait, t.ready)))
        res = deploy_host(self.inv, target, self.opts, Reporter(self.host.name, enabled=False))
        if not res.ok:
            raise CandidateFailed(res.error.message if res.error else "the deploy failed", host=self.host.name)
        self.version = res.sglang_version or self.version
        pp = ProfileParams(load=self.load, trace=trace(self.version), trace_steps=self.trace_steps,
                           server_args=remedies.SERVER_ARGS)
        log: list[str] = []
        with HostSession.open(self.inv, target) as s:
            doc = s.profile(profile_request(pp, new_profile_id()), timeout=pp.bound())
            s.logs(lines=self.log_lines, follow=False, follow_s=0.0, timeout=30.0,
                   on_event=lambda ev: log.append(str(ev.get("line") or "")))
            gpus = s.gpus().get("gpus") or []
            env_seen: dict[str, str] = {}
            if cfg.env:
                evidence = s.check_env(dict(cfg.env))["evidence"]
                for sched in (evidence or {}).get("schedulers") or []:
                    env_seen.update({k: str(v) for k, v in (sched.get("environ") or {}).items()})
        subjects = rules.subjects(doc)
        anatomy = dict(subjects[0].anatomy) if subjects else {}
        kernels = (anatomy.get("kernels") or {}) if pp.trace else {}
        bench: Mapping[str, Any] = doc.get("bench") or {}
        accept_fig = anatomy.get("accept_length")
        accept = accept_fig.get("ms") if isinstance(accept_fig, Mapping) else None
        # The server's own word on its args (its /server_info), never the configuration the tune asked for.
        args = dict(doc.get("server_args") or {})
        if bench.get("accept_histogram"):
            anatomy["accept_histogram"] = list(bench["accept_histogram"])
        sla = sla_figures(bench)
        missed = tuple(broken(dict(sla), self.limits)) if self.limits.any else ()
        used = [g["used_mib"] / 1024 for g in gpus[:self.host.gpus] if g.get("used_mib") is not None]
        total = [g["total_mib"] / 1024 for g in gpus[:self.host.gpus] if g.get("total_mib")]
        return Measurement(tok_s=float(bench.get("output_tok_s") or 0.0), anatomy=anatomy,
                           accept=float(accept) if accept else None, memory_gib=max(used) if used else None,
                           memory_total_gib=min(total) if total else None, sla_met=not missed, sla_broken=missed,
                           sla=sla,
                           log=tuple(log), server_args=args, env=env_seen, trace=trace_facts(kernels),
                           traced=bool(kernels))


def trace_facts(kernels: Mapping[str, Any]) -> frozenset[str]:
    """What the profiler trace showed, as the catalog's ``trace:`` evidence names it: how verify's kernels were
    launched (``verify_graph``: a CUDA graph replay; ``verify_eager``: one by one) and, where it ran, the all-reduce
    implementation (``allreduce:<impl>``). Nothing without a trace: the server's own claim is not trace evidence."""
    verify: Mapping[str, Any] = kernels.get("verify") or {}
    out = set()
    if verify.get("launch") == "cuda graph":
        out.add("verify_graph")
    elif verify.get("launch") == "eager":
        out.add("verify_eager")
    if verify.get("allreduce_impl"):
        out.add(f"allreduce:{verify['allreduce_impl']}")
    return frozenset(out)


def sla_figures(bench: Mapping[str, Any]) -> dict[str, float | None]:
    """The figures the SLA is judged on, as the sweep judges them: median TTFT and TPOT over the load's requests
    [tool: bench timings], output tok/s [tool]."""
    def median(key: str) -> float | None:
        v = (bench.get(key) or {}).get("median")
        return None if v is None else float(v)
    tok_s = bench.get("output_tok_s")
    return {"ttft_ms": median("ttft_ms"), "tpot_ms": median("tpot_ms"),
            "tok_s": None if tok_s is None else float(tok_s)}


def sla_summary(state: TuneState, limits: Limits) -> dict[str, Any] | None:
    """Whether the final configuration met the limits on its latest measured deploys (None without limits)."""
    if not limits.any:
        return None
    ms = state.incumbent
    return {**limits.as_dict(), "describe": limits.describe(),
            "best_met": bool(ms) and all(m.get("sla_met", True) for m in ms),
            "best_broken": sorted({b for m in ms for b in m.get("sla_broken") or []})}


def tuner_keys(state: TuneState) -> tuple[set[str], set[str]]:
    """The flags and variables the tuner's view of a configuration covers: the start's, the best's and every
    catalog knob (a host's other launch arguments — model, port, TP — are its own, not the tune's)."""
    from fabfile.inventory.launch_flags import FLAG_OF, LAUNCH_FLAGS

    flags = set(dict(state.start.flags)) | set(dict(state.best.flags))
    env = set(dict(state.start.env)) | set(dict(state.best.env))
    for r in remedies.CATALOG:
        (flags if r.knob.startswith("--") else env).add(r.knob)
    flags |= {"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"}  # the graph batch size under either name
    # Rendered from the host's speculative settings, not its sglang_args: compared only where the tune set them.
    speculative = {row.flag for row in LAUNCH_FLAGS if row.field.startswith("speculative.")} - {
        FLAG_OF["speculative.algorithm"]}
    flags -= speculative - (
        set(dict(state.start.flags)) | set(dict(state.best.flags)))
    return flags, env


def running_config(launch: Mapping[str, Any], flag_keys: set[str], env_keys: set[str]) -> Config:
    """A running deploy's launch (its record's argv and env) as the tuner sees a configuration."""
    from fabfile.remote.common import split_argv

    flags = {f.name: f.value for f in split_argv([str(a) for a in launch.get("argv") or []])
             if f.name in flag_keys}
    env = {k: str(v) for k, v in (launch.get("env") or {}).items() if k in env_keys}
    return Config(flags=tuple(sorted(flags.items())), env=tuple(sorted(env.items())))


def others_would_get(inv: Inventory, others: list[Host], state: TuneState) -> list[dict[str, Any]]:
    """For each host of the group that was not tuned: what it runs now (its running deploy's launch, else its
    inventory configuration) against the final configuration, as an inventory diff. Read with `status`; nothing
    is deployed on them."""
    from fabfile.commands.fanout import for_each_host
    from fabfile.present.tune_report import inventory_diff
    from fabfile.transport.session import HostSession

    flag_keys, env_keys = tuner_keys(state)

    def work(s: HostSession) -> dict[str, Any]:
        st = s.status(timeout=60.0)
        rec = st.get("record")
        if rec and st.get("running"):
            cfg = running_config(rec.get("launch") or {}, flag_keys, env_keys)
            source = f"running deploy {rec.get('deploy_id')} [host's deploy record]"
        else:
            cfg = host_config(s.host)
            source = "the inventory (no server running) [inventory]"
        return {"source": source, "running": cfg.describe(), "changes": remedies.diff(cfg, state.best),
                "inventory_diff": inventory_diff({"start": cfg.describe(), "best": state.best.describe()})}

    out: list[dict[str, Any]] = []
    for o in for_each_host(inv, others, work, host_timeout=90.0):
        out.append({"host": o.host.name, "deployed": False,
                    **(o.answer if o.ok else {"error": o.error.message if o.error else "no answer"})})
    return out


@contextmanager
def hold_host(inv: Inventory, host: Host, tune_id: str, minutes: float,
              progress: Callable[[str], None] = lambda s: None) -> Iterator[None]:
    """One tune per host for the whole tune: the ``tune_lease`` verb holds the host (its call lasts as long as the
    tune; every deploy or stop but this tune's own is refused meanwhile, naming it), and is released on every exit
    path, a Ctrl-C's included. A host another deploy or tune holds refuses the lease: nothing is touched."""
    import threading

    from fabfile.transport.session import HostSession

    held, done = threading.Event(), threading.Event()
    failed: list[BaseException] = []
    sessions: list[HostSession] = []

    def on_event(ev: AgentEvent) -> None:
        if ev.get("event") == "held":
            held.set()

    def hold() -> None:
        try:
            s = HostSession.open(inv, host)
            sessions.append(s)
            # Bounded on the host too: the tune's budget, its closing re-deploy and an hour of slack.
            s.tune_lease(tune_id, timeout=minutes * 60 + 3600, on_event=on_event)
        except BaseException as e:  # said by the main thread (a refusal), or the end of a released hold
            failed.append(e)
        finally:
            done.set()

    t = threading.Thread(target=hold, name="tune-lease", daemon=True)
    t.start()
    try:
        while not held.wait(0.1):
            if done.is_set():
                raise failed[0] if failed else CandidateFailed("the tune's lease ended before it was held",
                                                               host=host.name)
        progress(f"holding {host.name} for this tune ({tune_id}): other deploys and tunes are refused until it ends")
        yield
    finally:
        if held.is_set():
            try:
                with HostSession.open(inv, host) as s:
                    s.tune_lease(tune_id, release=True)
            except Exception as e:  # the holder still ends with its channel (closed below) or its deadline
                progress(f"letting go of {host.name} said: {e}")
            t.join(timeout=10.0)  # the released holder answers and its call returns
        for s in sessions:
            s.transport.abort()
        t.join(timeout=5.0)


def run_tune(inv: Inventory, host: Host, load: BenchParams, *, max_loads: int, max_minutes: float,
             state_file: Path, resume: bool, write: Path | None, progress: Callable[[str], None],
             objective: str = "tok-s", limits: Limits | None = None, trace_steps: int = 12,
             others: list[Host] | None = None) -> dict[str, Any]:
    """``inv tune``: the loop on one host from the inventory's configuration (or the saved path with ``resume``);
    the path document (``--json`` prints it), the inventory diff written to ``write``. ``others``: the rest of a
    group, told what they would get, never deployed."""
    from fabfile.present.tune_report import inventory_diff

    if resume:
        if not state_file.exists():
            from fabfile.errors import FlagError

            raise FlagError(f"--resume: no saved path at {state_file}; run `inv tune` without --resume first")
        state = TuneState.from_json(json.loads(state_file.read_text()))
    else:
        start = host_config(host)
        state = TuneState(start, start)
    limits = limits or Limits()
    tune_id = f"tune-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
    # Tune's deploys are measured deploys, as a sweep's are: the device timer on wherever the release has it
    # (a plain deploy leaves it off on 0.5.16, and then no rule has a phase to read).
    trials = HostTrials(inv, host, Options(measuring=True, tune_id=tune_id), load, limits, trace_steps)
    params = TuneParams(version="", concurrency=load.concurrency, tp=host.tp, max_loads=max_loads,
                        max_minutes=max_minutes, state_file=state_file, objective=objective, limits=limits,
                        trace_steps=trace_steps)
    with hold_host(inv, host, tune_id, max_minutes, progress):
        done = tune(trials, state, params, progress)
    doc = done.to_json()
    doc["objective"] = objective
    if (sla := sla_summary(done, limits)) is not None:
        doc["sla"] = sla
    doc["host"] = host.name
    doc["state_file"] = str(state_file.resolve())
    from fabfile.present.tune_report import tune_figure

    fig = tune_figure(doc)
    if fig is not None:
        fig.savefig(state_file.with_suffix(".png"))
        doc["plot"] = str(state_file.with_suffix(".png"))
    if others:
        doc["others"] = others_would_get(inv, others, done)
    if write is not None:
        diffs = {host.name: inventory_diff(doc),
                 **{o["host"]: o["inventory_diff"] for o in doc.get("others") or [] if "inventory_diff" in o}}
        write.write_text(json.dumps(diffs, indent=1) + "\n")
        doc["written"] = str(write)
    return doc


def tune_command(inv: Inventory, host: Host, load: BenchParams, *, max_loads: int, max_minutes: float,
                 resume: bool, write: str | None, objective: str, limits: Limits | None, trace_steps: int,
                 others: list[Host], as_json: bool) -> CommandResult:
    """``inv tune`` as its task hands it over: the saved path ``--resume`` continues (``runs/tune-<host>.json``, its
    tune.png beside it), the progress lines (none with ``--json``), the diff's file (a folder: the diff goes inside
    it), and the path document for the command line."""
    from fabfile.present.output import out as console
    from fabfile.present.tune_report import render

    if write and Path(write).is_dir():
        write = str(Path(write) / "tune-inventory-diff.json")
    state_file = Path("runs") / f"tune-{host.name}.json"
    state_file.parent.mkdir(parents=True, exist_ok=True)
    say: Callable[[str], None] = (lambda line: None) if as_json else (lambda line: console.print(line, markup=False))
    doc = run_tune(inv, host, load, max_loads=max_loads, max_minutes=max_minutes, state_file=state_file,
                   resume=resume, write=Path(write) if write else None, progress=say, objective=objective,
                   limits=limits, trace_steps=trace_steps, others=others)
    return CommandResult(doc, lambda: console.print(render(doc), markup=False), 0)
