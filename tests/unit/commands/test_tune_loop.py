"""``inv tune``'s loop over a seeded cost model of a host (each remedy a cost knob there, one of them with no
effect, and a deploy-to-deploy spread on host time): it keeps what wins beyond the spread, reverts the no-op and what
did not engage, and whatever ends it — a failed candidate, Ctrl-C, the budget — the host runs the best
configuration when it returns."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from fabfile.commands.tune import CandidateFailed, Measurement, TuneParams, TuneState, check_params, never, tune
from fabfile.errors import FlagError
from fabfile.plan.remedies import Config
from fabfile.plan.sla import Limits, broken
from fabfile.remote.protocol import SOURCE_META, SOURCE_TIMER, SOURCE_TRACE

POOR = Config(flags=(("--disable-cuda-graph", None), ("--disable-overlap-schedule", None),
                     ("--speculative-num-steps", "3")))
CONCURRENCY = 8


@dataclass
class CostModel:
    """What a deploy of a configuration measures: GPU phases from the device timer, host time ``other`` with a
    seeded per-deploy factor in [1 − noise, 1 + noise]. Graphs off cost launch gaps in verify; overlap off doubles host
    time; CPU affinity changes nothing (the zero-effect knob)."""

    seed: int
    noise: float = 0.10
    drop_env: bool = False  # the scheduler does not see the env (the change does not engage)
    fail: str = ""  # a flag whose presence makes the launch fail
    interrupt_at: int = 0  # raise KeyboardInterrupt on this deploy
    ran: list[Config] = field(default_factory=list)
    traced: list[bool] = field(default_factory=list)  # whether each deploy was measured with the trace
    version: str = "0.5.16"
    queue: bool = False

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def run(self, cfg: Config, trace: Callable[[str], bool] = never) -> Measurement:
        self.ran.append(cfg)
        self.traced.append(trace(self.version))
        if self.interrupt_at and len(self.ran) == self.interrupt_at:
            raise KeyboardInterrupt
        if self.fail and (cfg.has(self.fail) or self.fail in dict(cfg.env)):
            raise CandidateFailed("the server exited during start-up")
        graph = not cfg.has("--disable-cuda-graph")
        steps = int(cfg.flag("--speculative-num-steps") or 3)
        draft, verify, extend = 0.3 * steps, 0.5, 0.2
        gap = 0.0 if graph else 2.5
        other = (3.0 if cfg.has("--disable-overlap-schedule") else 1.5) * self.rng.uniform(1 - self.noise,
                                                                                           1 + self.noise)
        cycle = draft + verify + gap + extend + other
        accept = 2.5
        anatomy = {"cycle": {"ms": cycle, "source": SOURCE_TIMER}, "draft": {"ms": draft, "source": SOURCE_TIMER},
                   "verify": {"ms": verify + gap, "source": SOURCE_TIMER},
                   "draft_extend": {"ms": extend, "source": SOURCE_TIMER},
                   "other": {"ms": other, "source": SOURCE_TIMER}, "steps": steps}
        if self.traced[-1]:  # kernel classes only from the profiler's trace
            anatomy["kernels"] = {"verify": {"launch": "cuda graph" if graph else "eager", "kernel_launches": 300,
                                             "launch_gap_ms": gap, "source": SOURCE_TRACE}}
        env = {} if self.drop_env else dict(cfg.env)
        args = {k.lstrip("-").replace("-", "_"): (True if v is None else v) for k, v in cfg.flags}
        return Measurement(tok_s=CONCURRENCY * accept * 1000 / cycle, anatomy=anatomy, accept=accept,
                           memory_gib=60.0, log=("Capture cuda graph end.",) if graph else (), server_args=args,
                           env=env, traced=self.traced[-1],
                           trace=frozenset({"verify_graph" if graph else "verify_eager"}) if self.traced[-1]
                           else frozenset())


def _params(**kw: object) -> TuneParams:
    base: dict[str, object] = dict(version="0.5.16", concurrency=CONCURRENCY, pairs=3, max_loads=60)
    base.update(kw)
    return TuneParams(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(6))
def test_keeps_real_gains_reverts_the_no_op_and_ends_on_the_best(seed: int) -> None:
    host = CostModel(seed)
    st = tune(host, TuneState(POOR, POOR), _params())
    outcomes = {s.remedy: s.outcome for s in st.steps}
    assert outcomes["graph-on"] == "kept" and outcomes["overlap-on"] == "kept"
    assert outcomes["cpu-affinity"] == "reverted"  # zero effect in the model, 20 % spread between deploys
    assert not st.best.has("--disable-cuda-graph") and not st.best.has("--disable-overlap-schedule")
    assert "SGLANG_SET_CPU_AFFINITY" not in dict(st.best.env)
    assert host.ran[-1] == st.best
    assert st.stop in ("nothing-left", "below-resolution")


def test_the_trace_is_taken_only_while_a_rule_that_reads_kernel_classes_has_an_untried_remedy() -> None:
    host = CostModel(0)
    st = tune(host, TuneState(POOR, POOR), _params())
    # Graphs off: verify_eager (trace-only) has graph-on to try: the first deploy is traced, and fires it.
    assert host.traced[0] and st.steps[0].remedy == "graph-on" and st.steps[0].rule == "verify_eager"
    assert all(m["traced"] for m in st.steps[0].measurements)  # its mechanism (launch gaps) and evidence: the trace's
    assert "trace: verify_graph" in st.steps[0].evidence
    overlap = next(s for s in st.steps if s.remedy == "overlap-on")
    assert not any(m["traced"] for m in overlap.measurements)  # host time: the device timer says it alone
    # Graphs on, graph batch size up to the load, TP 1: no remedy a trace could call for: nothing is traced.
    good = Config(flags=(("--cuda-graph-max-bs-decode", "8"), ("--disable-overlap-schedule", None)))
    host = CostModel(1)
    tune(host, TuneState(good, good), _params())
    assert len(host.traced) > 1 and not any(host.traced)


def test_a_change_that_did_not_engage_is_reverted_unscored() -> None:
    host = CostModel(1, drop_env=True)
    st = tune(host, TuneState(POOR, POOR), _params())
    step = next(s for s in st.steps if s.remedy == "cpu-affinity")
    assert step.outcome == "not engaged" and not step.after
    assert "SGLANG_SET_CPU_AFFINITY" not in dict(st.best.env) and host.ran[-1] == st.best


def test_a_failed_candidate_is_reported_and_the_best_is_deployed_again() -> None:
    host = CostModel(2, fail="SGLANG_SET_CPU_AFFINITY")
    st = tune(host, TuneState(POOR, POOR), _params())
    step = next(s for s in st.steps if s.remedy == "cpu-affinity")
    assert step.outcome == "failed" and "did not come up" in step.why
    assert host.ran[-1] == st.best and not st.best.has("--disable-cuda-graph")


def _interrupted(host: CostModel, raised: type[BaseException], state_file: Path) -> TuneState:
    """Tune until ``raised`` comes out of the host; the path it saved."""
    with pytest.raises(raised):
        tune(host, TuneState(POOR, POOR), _params(state_file=state_file))
    return TuneState.from_json(__import__("json").loads(state_file.read_text()))


def test_ctrl_c_deploys_the_best_so_far_again_and_the_path_resumes(tmp_path: Path) -> None:
    host = CostModel(3, interrupt_at=12)  # inside the second trial
    saved = _interrupted(host, KeyboardInterrupt, tmp_path / "tune.json")
    assert saved.stop == "interrupted" and "deployed again" in saved.restored
    assert host.ran[-1] == saved.best and not saved.best.has("--disable-cuda-graph")
    resumed = tune(CostModel(4), saved, _params())
    assert resumed.tried[0] == "graph-on" and resumed.tried.count("graph-on") == 1
    assert not resumed.best.has("--disable-overlap-schedule")


class ProxyDied(Exception):
    """What a library raises when the link dies under a Ctrl-C (paramiko's ProxyCommandFailure is no OSError and no
    error of the tool's)."""


@dataclass
class LinkDiesOnce(CostModel):
    die_at: int = 0

    def run(self, cfg: Config, trace: Callable[[str], bool] = never) -> Measurement:
        if len(self.ran) + 1 == self.die_at:
            self.ran.append(cfg)
            raise ProxyDied("ProxyCommand exited with status 130")
        return super().run(cfg, trace)


def test_a_foreign_exception_mid_trial_still_deploys_the_best_again(tmp_path: Path) -> None:
    host = LinkDiesOnce(3, die_at=12)  # inside the second trial
    saved = _interrupted(host, ProxyDied, tmp_path / "tune.json")
    assert saved.stop == "interrupted" and "status 130" in saved.stop_reason
    assert "deployed again" in saved.restored and host.ran[-1] == saved.best


@dataclass
class SlaModel(CostModel):
    """TTFT [tool: bench timings] per configuration: overlap on queues new requests behind a longer cycle (900 ms
    against 300 ms); without CPU affinity the scheduler's first token waits on a busy core (600 ms)."""

    limits: Limits = field(default_factory=Limits)

    def run(self, cfg: Config, trace: Callable[[str], bool] = never) -> Measurement:
        m = super().run(cfg, trace)
        ttft = 900.0 if not cfg.has("--disable-overlap-schedule") else 300.0
        if "SGLANG_SET_CPU_AFFINITY" not in dict(cfg.env):
            ttft = max(ttft, 600.0)
        missed = tuple(broken({"ttft_ms": ttft}, self.limits))
        return replace(m, sla_met=not missed, sla_broken=missed, sla={"ttft_ms": ttft})


def test_the_sla_guards_every_change_a_faster_one_that_breaks_it_is_not_kept() -> None:
    limits = Limits(max_ttft_ms=800.0)
    host = SlaModel(0, limits=limits)
    st = tune(host, TuneState(POOR, POOR), _params(limits=limits))
    step = next(s for s in st.steps if s.remedy == "overlap-on")
    assert step.outcome == "guard" and "missed the SLA (TTFT 900.0)" in step.why, step.why
    assert [m["arm"] for m in step.measurements] == ["A", "B"]  # no later load could get it kept
    assert st.best.has("--disable-overlap-schedule") and host.ran[-1] == st.best


def test_the_sla_objective_keeps_what_meets_the_limits_the_start_missed() -> None:
    limits = Limits(max_ttft_ms=500.0)
    start = POOR.drop_flag("--disable-cuda-graph")  # graphs on: host time is the finding
    by_sla = tune(SlaModel(1, limits=limits), TuneState(start, start), _params(limits=limits, objective="sla"))
    step = next(s for s in by_sla.steps if s.remedy == "cpu-affinity")
    assert step.outcome == "kept" and "meets the SLA" in step.why, step.why
    assert dict(by_sla.best.env).get("SGLANG_SET_CPU_AFFINITY") == "1"
    # tok/s the objective, the same limits a guard: the no-op on tok/s is not kept.
    by_tok = tune(SlaModel(1, limits=limits), TuneState(start, start), _params(limits=limits))
    assert next(s for s in by_tok.steps if s.remedy == "cpu-affinity").outcome == "reverted"


def test_the_sla_objective_without_a_limit_is_refused_naming_the_flags() -> None:
    with pytest.raises(FlagError, match=r"--objective sla.*--max-ttft-ms"):
        check_params("sla", 20, 10.0, 3, Limits())
    check_params("sla", 20, 10.0, 3, Limits(max_tpot_ms=40.0))


def test_stops_at_the_load_budget_and_says_so() -> None:
    host = CostModel(5)
    st = tune(host, TuneState(POOR, POOR), _params(max_loads=8))
    assert st.stop == "budget" and "load budget" in st.stop_reason
    assert len(st.steps) == 1 and st.loads <= 8 + 1  # + the closing re-deploy of the best


@pytest.mark.parametrize("args, field_name", [(("tok/s", 20, 10.0, 3), "--objective"),
                                              (("tok-s", 0, 10.0, 3), "--max-loads"),
                                              (("tok-s", 20, 0.0, 3), "--max-minutes")])
def test_bad_input_is_refused_naming_the_field(args: tuple[str, int, float, int], field_name: str) -> None:
    with pytest.raises(FlagError, match=field_name):
        check_params(*args)


def test_the_path_table_diff_and_plot_say_what_happened(tmp_path: Path) -> None:
    from fabfile.present import tune_report

    doc = tune(CostModel(0), TuneState(POOR, POOR), _params()).to_json()
    text = tune_report.render(doc)
    assert "-- disable-cuda-graph" not in text and "-disable-cuda-graph" in text  # the change, as a diff line
    assert "kept: end to end" in text and "reverted: no win beyond the spread" in text
    assert "[timer]" in text and "spread" in text and "stopped: nothing-left" in text
    diff = tune_report.inventory_diff(doc)
    assert set(diff["remove_sglang_args"]) == {"--disable-cuda-graph", "--disable-overlap-schedule"}
    assert diff["env"] == {}
    fig = tune_report.tune_figure(doc)
    if fig is not None:
        fig.savefig(tmp_path / "tune.png")
        assert (tmp_path / "tune.png").stat().st_size > 0


def test_a_group_member_is_told_its_changes_against_its_running_launch() -> None:
    from fabfile.commands.tune import running_config, tuner_keys
    from fabfile.plan.remedies import diff
    from fabfile.present import tune_report

    best = POOR.drop_flag("--disable-cuda-graph")
    state = TuneState(POOR, best)
    launch = {"argv": ["python", "-m", "sglang.launch_server", "--model-path", "/m", "--port=8000",
                       "--speculative-num-steps", "3", "--disable-cuda-graph", "--cuda-graph-max-bs=4"],
              "env": {"SGLANG_SET_CPU_AFFINITY": "1", "PATH": "/usr/bin"}}
    running = running_config(launch, *tuner_keys(state))
    assert dict(running.flags) == {"--speculative-num-steps": "3", "--disable-cuda-graph": None,
                                   "--cuda-graph-max-bs": "4"}  # not the model, the port
    changes = diff(running, best)
    assert "---disable-cuda-graph" in changes and "-SGLANG_SET_CPU_AFFINITY" in changes
    doc = {**tune(CostModel(0), state, _params()).to_json(),
           "others": [{"host": "gpu2", "deployed": False, "source": "running deploy d1 [host's deploy record]",
                       "changes": changes}, {"host": "gpu3", "deployed": False, "error": "cannot connect"}]}
    text = tune_report.render(doc)
    assert "gpu2 (not tuned, not deployed) would get: " in text and "---disable-cuda-graph" in text
    assert "gpu3 (not tuned, not deployed): could not read what it runs: cannot connect" in text


@dataclass
class Untimed(CostModel):
    """A host whose deploys report no device timer: tok/s and accept length only (``measure: false``, a release
    before 0.5.11)."""

    def run(self, cfg: Config, trace: Callable[[str], bool] = never) -> Measurement:
        m = super().run(cfg, trace)
        return replace(m, anatomy={"cycle": m.anatomy["cycle"], "steps": m.anatomy["steps"]})


def test_no_device_timer_is_said_not_called_nothing_to_fix() -> None:
    st = tune(Untimed(seed=1), TuneState(POOR, POOR), _params())
    assert st.stop == "unmeasured" and "no per-phase device timer" in st.stop_reason, st.stop_reason
    assert not st.steps and st.loads == 1 and st.best == POOR


@dataclass
class GraphsFillTheGpu(CostModel):
    """CUDA graphs win by far but their memory takes the GPU to 138 of 141 GiB [nvidia-smi]."""

    def run(self, cfg: Config, trace: Callable[[str], bool] = never) -> Measurement:
        m = super().run(cfg, trace)
        used = 60.0 if cfg.has("--disable-cuda-graph") else 138.0
        return replace(m, memory_gib=used, memory_total_gib=141.0)


def test_a_change_that_fills_the_gpu_is_not_kept_without_a_stated_limit() -> None:
    st = tune(GraphsFillTheGpu(seed=3), TuneState(POOR, POOR), _params())
    graph = next(s for s in st.steps if s.remedy == "graph-on")
    assert graph.outcome == "guard" and "GPU memory 138.0 GiB" in graph.why, graph.why
    assert st.best.has("--disable-cuda-graph")


@pytest.mark.parametrize("limits, concurrency, words", [
    (Limits(max_tpot_ms=0.01), 8, "--max-tpot-ms 0.01: no server can meet it"),
    (Limits(min_tok_s=1e6), 8, "--min-tok-s 1e+06: no server can meet it at --concurrency 8"),
])
def test_an_sla_nothing_can_meet_is_refused_up_front(limits: Limits, concurrency: int, words: str) -> None:
    with pytest.raises(FlagError, match=re.escape(words)):
        check_params("tok-s", 20, 10.0, 3, limits, concurrency, 3)


def test_the_sla_bound_takes_every_limit_a_fast_server_could_meet() -> None:
    """The bound is a floor, not a guess: the real H200's own figures (TPOT 1.6 ms, 1032 tok/s at concurrency 1,
    docs/real-sglang.md) and limits ten times tighter are all taken."""
    limits = Limits(max_tpot_ms=0.16, min_tok_s=10_320.0, max_ttft_ms=0.1)
    assert check_params("tok-s", 20, 10.0, 3, limits, 1, 3) is None  # no refusal


def test_every_bad_budget_and_limit_is_said_at_once() -> None:
    with pytest.raises(FlagError) as e:
        check_params("sla", 0, 0.0, 3, Limits(max_tpot_ms=0.001), 1, 1)
    said = [x.message for x in e.value.each]
    assert len(said) == 3 and [w for w in ("--max-loads", "--max-minutes", "--max-tpot-ms")
                               if any(s.startswith(w) for s in said)] == ["--max-loads", "--max-minutes",
                                                                         "--max-tpot-ms"], said


@dataclass
class PartialDraft(CostModel):
    """The H200's 7B-shaped target with the kit's partial draft (docs/real-sglang.md, issue 37): GPU-bound (verify
    5.13 ms + 0.01 per token, one draft forward 0.175 ms, the draft-extend 0.2), a draft wrong every third slot, so
    steps 1 accepts its one token in half the passes (accept length 1.5) and every chain from steps 2 accepts two
    (2.98): steps 2 serves nearly twice the tokens per ms of steps 1, and more steps only cost forwards."""

    start_steps: int = 1

    def run(self, cfg: Config, trace: Callable[[str], bool] = never) -> Measurement:
        self.ran.append(cfg)
        self.traced.append(trace(self.version))
        steps = int(cfg.flag("--speculative-num-steps") or self.start_steps)
        draft, verify, extend = 0.175 * (steps - 1), 5.13 + 0.01 * (steps + 1), 0.2
        other = 0.1 * self.rng.uniform(1 - self.noise, 1 + self.noise)
        cycle = draft + verify + extend + other
        hist = [50, 50] if steps == 1 else [1, 1, 98]
        accept = 1.0 + sum(j * c for j, c in enumerate(hist)) / sum(hist)
        anatomy: dict[str, object] = {
            "cycle": {"ms": cycle, "source": SOURCE_TIMER}, "verify": {"ms": verify, "source": SOURCE_TIMER},
            "draft_extend": {"ms": extend, "source": SOURCE_TIMER}, "other": {"ms": other, "source": SOURCE_TIMER},
            "accept_length": {"ms": accept, "source": SOURCE_META}, "steps": steps, "draft_tokens": steps + 1,
            "accept_histogram": hist}
        if steps > 1:  # steps 1 runs no draft forward (its draft token comes out of the draft-extend)
            anatomy.update(draft={"ms": draft, "source": SOURCE_TIMER},
                           draft_step={"ms": 0.175, "source": SOURCE_TIMER})
        args = {k.lstrip("-").replace("-", "_"): (True if v is None else v) for k, v in cfg.flags}
        return Measurement(tok_s=accept * 1000 / cycle, anatomy=anatomy, accept=accept, memory_gib=60.0,
                           server_args=args)


@pytest.mark.parametrize("seed", range(4))
def test_from_steps_1_a_saturated_chain_is_lengthened_and_the_win_kept(seed: int) -> None:
    """From steps 1 nothing but draft_saturated fires (speculation already wins, so break_even is silent): more-steps
    goes to the step count its tail model predicts best, and the real ~90 % win of steps 2 is kept. At steps 2 the
    chain's own histogram (98 % of passes accept both tokens) predicts a longer one wins; that trial is measured and
    reverted, and then the longer chain measured in this tune says no pass went past two: nothing is left. Each step
    count is deployed in one trial only, and the host ends on steps 2."""
    start = Config()  # the steps are the host's speculative settings, not its SGLang args
    host = PartialDraft(seed, noise=0.05)
    st = tune(host, TuneState(start, start), _params(concurrency=1))
    first = st.steps[0]
    assert first.rule == "draft_saturated" and first.remedy == "more-steps", first
    assert first.change == ["+--speculative-num-steps=2"] and first.outcome == "kept", (first.change, first.why)
    assert first.evidence == "server_args speculative_num_steps='2' [SGLang /get_server_info]"
    assert st.best.flag("--speculative-num-steps") == "2" and host.ran[-1] == st.best
    targets = [s.change for s in st.steps]
    assert len(targets) == len({tuple(t) for t in targets}), targets  # no step count tried twice
    assert all(s.outcome == "reverted" for s in st.steps[1:]), [(s.change, s.outcome, s.why) for s in st.steps]
    assert st.stop == "nothing-left", st.stop_reason


def test_from_steps_7_the_cut_to_2_is_not_undone_by_the_longer_chain_rule() -> None:
    """The real H200 path (docs/real-sglang.md, inv tune from steps 7): accepted-steps cuts 7 to 2 and it is kept;
    at steps 2 the chain's own passes all accept both tokens, but the steps-7 deploys of this tune showed no pass
    accepting a third, so draft_saturated stays silent: no ping-pong back to 7, and nothing is left."""
    start = Config(flags=(("--speculative-num-steps", "7"),))
    host = PartialDraft(0, noise=0.05, start_steps=7)
    host_run = host.run

    def run(cfg: Config, trace: Callable[[str], bool] = never) -> Measurement:
        m = host_run(cfg, trace)
        steps = int(cfg.flag("--speculative-num-steps") or 7)
        return replace(m, anatomy={**m.anatomy, "accept_histogram": [1, 1, 98] + [0] * (steps - 2)})

    host.run = run  # type: ignore[method-assign]
    st = tune(host, TuneState(start, start), _params(concurrency=1))
    assert [(s.remedy, s.outcome) for s in st.steps] == [("accepted-steps", "kept")], \
        [(s.remedy, s.change, s.outcome) for s in st.steps]
    assert st.best.flag("--speculative-num-steps") == "2" and st.stop == "nothing-left"


def test_a_tuned_steps_change_reaches_the_launch_once_through_the_hosts_speculative_settings(tmp_path: Path) -> None:
    """more-steps' candidate deploys with --speculative-num-steps once, written by render from the host's
    speculative settings (an extra one appended after them worked only because argparse keeps the last); a chain
    written with draft tokens in the inventory gets steps + 1 with its new steps, not the old count."""
    from fabfile.commands.tune import with_config
    from fabfile.inventory import hosts as inventory
    from fabfile.plan.deploy_plan import Options, build

    p = tmp_path / "inventory.yaml"
    p.write_text("defaults: {python: /opt/venv/bin/python3, model: /models/m, draft_model: /models/d, "
                 "log_dir: /var/log/sg, speculative: {steps: 1, topk: 1, draft_tokens: 2}}\n"
                 "hosts:\n  g1: {default: true, sglang_args: [--disable-overlap-schedule]}\n")
    host = inventory.load(p).hosts["g1"]
    cfg = Config(flags=(("--disable-overlap-schedule", None), ("--speculative-num-steps", "2")))
    argv = build(with_config(host, cfg), Options()).launch_argv
    assert [a for a in argv if a.startswith("--speculative-num-steps")] == ["--speculative-num-steps=2"], argv
    assert [a for a in argv if a.startswith("--speculative-num-draft-tokens")] == \
        ["--speculative-num-draft-tokens=3"], argv
    assert argv.count("--disable-overlap-schedule") == 1


def test_the_inventory_diff_writes_a_steps_change_as_the_speculative_field() -> None:
    from fabfile.present import tune_report

    doc = {"start": Config().describe(),
           "best": Config(flags=(("--speculative-num-steps", "2"), ("--enable-symm-mem", None))).describe()}
    diff = tune_report.inventory_diff(doc)
    assert diff["speculative"] == {"steps": 2} and diff["sglang_args"] == {"--enable-symm-mem": None}


def test_graph_bs_is_engaged_by_the_servers_own_graph_batch_size() -> None:
    """The server's own /get_server_info, under the name the release has: 0.5.16 cuda_graph_max_bs_decode (the
    old flag its alias), 0.5.12 cuda_graph_max_bs; a capture log line alone no longer engages it."""
    from fabfile.commands.tune import engaged
    from fabfile.plan import remedies

    remedy = remedies.by_id("graph-bs")
    new, old = Config(flags=(("--cuda-graph-max-bs-decode", "8"),)), Config(flags=(("--cuda-graph-max-bs", "8"),))
    ok, evidence = engaged(remedy, new, Measurement(tok_s=1.0, anatomy={},
                                                    server_args={"cuda_graph_max_bs_decode": 8}))
    assert ok and evidence == "server_args cuda_graph_max_bs_decode=8 [SGLang /get_server_info]"
    assert engaged(remedy, old, Measurement(tok_s=1.0, anatomy={}, server_args={"cuda_graph_max_bs": 8}))[0]
    assert not engaged(remedy, new, Measurement(tok_s=1.0, anatomy={}, server_args={"cuda_graph_max_bs_decode": 4}))[0]
    assert not engaged(remedy, new, Measurement(tok_s=1.0, anatomy={}, log=("Capture cuda graph end.",)))[0]
