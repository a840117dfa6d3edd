"""The task collection: `inv deploy --host gpu1 --steps 3`, `inv check-env`, `inv rollback-patches`, ...

Each task reads its flags (each value by its spec, fabfile/cli/flagspec.py, which also gives the task's help), builds
the command's options, calls the command and returns its result; the one wrapper (fabfile/cli/run.py) prints it and
exits with its code. Every flag is a flag, never a positional, so `inv deploy --help` cannot run a deploy. A new flag
is a parameter here and its row in flagspec.FLAGS (tests/unit/cli/test_flagspec.py fails until both are there).
Each task imports what it needs inside itself, so `inv --list` imports none of it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from invoke.collection import Collection
from invoke.parser.argument import Argument
from invoke.tasks import Task as _Task
from invoke.tasks import task as _task

from fabfile import flags  # the one parser of flag values (imports only fabfile.errors: `inv --list` stays fast)
from fabfile.cli import options
from fabfile.cli.flagspec import helps, read, read_each
from fabfile.cli.run import cli

if TYPE_CHECKING:  # annotations only: `inv --list` imports none of the library
    from fabfile.commands.result import CommandResult


class Task(_Task[Any]):
    """Invoke's task, parsed as often as asked: Invoke's own pops each help text as it builds a flag, so a second
    parse in one process (the in-process test runner, --complete's second parser) had flags without help."""

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        texts = dict(self.help)
        try:
            return super().get_arguments(ignore_unknown_help)
        finally:
            self.help = texts


# No automatic one-letter flags: Invoke derives them from each task's parameter names, so `-i` meant --timeout for
# deploy and --inventory for status, and `--no-canary` got the "short" flag `--`. Long flags only, the same everywhere.
task = functools.partial(_task, auto_shortflags=False, klass=Task)


def command(name: str) -> Callable[[Callable[..., Any]], Task]:
    """`inv NAME`: the function as a task whose flags' help comes from their specs, run through the one wrapper."""
    def make(fn: Callable[..., Any]) -> Task:
        made: Task = task(name=name, help=helps(name))(cli(fn))
        return made

    return make


@command("deploy")
def deploy(c: Any, host: Any = None, steps: Any = None, topk: Any = None, draft_tokens: Any = None,
           patch_mode: Any = None, timeout: Any = None, dry_run: bool = False, json: bool = False,
           inventory: Any = None, no_verify: bool = False, strategy: Any = None, batch: Any = None,
           no_canary: bool = False, rollback_on_failure: bool = False, accept_gate: Any = None,
           lock_wait: Any = None, measure: bool = False, no_measure: bool = False,
           previous: bool = False, id_: Any = None, yes: bool = False, strict: bool = False,
           sglang_version: Any = None) -> CommandResult:
    """Deploy SGLang (EAGLE-3 unless --steps 0) to host(s) or a multi-node cluster: patch, stop stale, start, wait
    ready, verify env. Several hosts: rolling (canary, batches) or parallel, with a final who-runs-what table."""
    from fabfile.errors import Collector

    found = Collector()  # every bad flag and inventory field of the run, said at once (exit 2), then nothing runs
    inv = found.check(options.inventory, inventory, found.check(read, "deploy", "lock_wait", lock_wait))
    wanted = found.check(read, "deploy", "id_", id_)
    found.check(flags.excludes, "--previous", previous, "goes back one recorded deploy; --id ID names one",
                ("--id", id_))
    recorded = "--previous" if previous else "--id"
    found.check(flags.excludes, recorded, previous or id_ is not None, "starts a recorded deploy as it ran",
                ("--steps", steps), ("--topk", topk), ("--draft-tokens", draft_tokens), ("--patch-mode", patch_mode),
                ("--timeout", timeout), ("--no-verify", no_verify), ("--accept-gate", accept_gate),
                ("--strategy", strategy), ("--batch", batch), ("--no-canary", no_canary),
                ("--rollback-on-failure", rollback_on_failure), ("--measure", measure),
                ("--no-measure", no_measure), ("--strict", strict))
    found.check(flags.only_with, previous or id_ is not None, "only with --previous or --id (it answers their "
                "question about a deploy that was cancelled or failed)", ("--yes", yes))
    found.check(flags.only_with, dry_run, "only with --dry-run (a deploy judges the knobs on the host's own "
                "release)", ("--sglang-version", sglang_version))
    release = found.check(read, "deploy", "sglang_version", sglang_version)
    if previous or id_ is not None:
        from fabfile.commands.recorded import start_recorded

        found.done()
        return start_recorded(inv, inv.select(host), deploy_id=wanted, dry_run=dry_run, yes=yes, as_json=json)
    opts = found.check(options.deploy, "deploy", steps, topk, draft_tokens, patch_mode, timeout,
                       verify=not no_verify, accept_gate=accept_gate)
    found.check(read, "deploy", "strategy", strategy)
    found.check(flags.only_with, strategy != "parallel",
                "only with --strategy rolling (parallel deploys every host at once)", ("--batch", batch))
    found.check(flags.only_with, strategy != "parallel", "only with --strategy rolling", ("--no-canary", no_canary))
    batch_size = found.check(read, "deploy", "batch", batch if batch is not None else "25%")
    found.check(flags.excludes, "--measure", measure, "give one of --measure and --no-measure (or neither: the "
                "inventory's `measure`)", ("--no-measure", no_measure))
    found.done()
    from fabfile.commands.dispatch import deploy_command, deploy_targets

    hosts, cluster = deploy_targets(inv, host, rollout_flags=strategy is not None or batch is not None or no_canary)
    from dataclasses import replace

    opts = replace(options.measuring(opts, measure, no_measure), strict_knobs=strict)
    if dry_run:
        from fabfile.commands.render_plan import render_hosts

        return render_hosts(hosts, opts, sglang_version=release, strict=strict)
    return deploy_command(inv, hosts, cluster, opts, strategy=strategy, batch=batch_size,
                          canary=not no_canary, rollback_on_failure=rollback_on_failure, as_json=json)


@command("deploys")
def deploys(c: Any, host: Any = None, json: bool = False, inventory: Any = None,
            host_timeout: Any = None) -> CommandResult:
    """List the recorded deploys of host(s), newest first: id, configuration, when, by whom, how it ended (ready,
    failed, cancelled, replaced); `inv deploy --id ID` starts one again."""
    from fabfile.commands.recorded import list_deploys

    bound = read("deploys", "host_timeout", host_timeout)
    inv = options.inventory(inventory)
    return list_deploys(inv, inv.select(host), host_timeout=bound)


@command("render")
def render(c: Any, host: Any = None, steps: Any = None, topk: Any = None, draft_tokens: Any = None,
           patch_mode: Any = None, timeout: Any = None, json: bool = False, inventory: Any = None,
           measure: bool = False, no_measure: bool = False, sglang_version: Any = None,
           strict: bool = False) -> CommandResult:
    """Print what a deploy would do (the plan and every rendered file) without touching any host."""
    from fabfile.commands.render_plan import render_hosts
    from fabfile.errors import Collector

    found = Collector()  # every bad flag and inventory field at once
    inv = found.check(options.inventory, inventory)
    opts = found.check(options.deploy, "render", steps, topk, draft_tokens, patch_mode, timeout)
    release = found.check(read, "render", "sglang_version", sglang_version)
    found.done()
    return render_hosts(inv.select(host), options.measuring(opts, measure, no_measure),
                        sglang_version=release, strict=strict)


@command("stop")
def stop(c: Any, host: Any = None, dry_run: bool = False, json: bool = False, inventory: Any = None,
         host_timeout: Any = None, router: Any = None, lock_wait: Any = None) -> CommandResult:
    """Stop the SGLang server(s) on host(s), all at once: TERM, grace, KILL; confirms every process is gone.
    With --router NAME, stop that router instead."""
    from fabfile.commands.operations import stop_hosts
    from fabfile.errors import FlagError

    bound, wait = read_each("stop", host_timeout=host_timeout, lock_wait=lock_wait)
    inv = options.inventory(inventory, wait)
    if router is not None:
        from fabfile.commands.router import pick, stop_router

        if host is not None or dry_run:
            raise FlagError("--router: stops the router on the host the inventory names; leave out --host and "
                            "--dry-run")
        return stop_router(inv, pick(inv, router))
    return stop_hosts(inv, inv.select(host), dry_run=dry_run, host_timeout=bound)


@command("status")
def status(c: Any, host: Any = None, json: bool = False, inventory: Any = None, host_timeout: Any = None,
           verbose: bool = False) -> CommandResult:
    """Show what runs on host(s): config, pid, uptime, health, accept length, and routers running there."""
    from fabfile.commands.operations import status_hosts

    bound = read("status", "host_timeout", host_timeout)
    inv = options.inventory(inventory)
    return status_hosts(inv, inv.select(host), host_timeout=bound, verbose=verbose)


@command("logs")
def logs(c: Any, host: Any = None, follow: bool = False, lines: Any = None, timeout: Any = None,
         inventory: Any = None, host_timeout: Any = None) -> CommandResult:
    """Print the server log of host(s) (the current deploy's log file); several hosts: lines prefixed by host."""
    from fabfile.commands.operations import show_logs

    first, follow_s, bound = read_each("logs", lines=lines, timeout=timeout, host_timeout=host_timeout)
    inv = options.inventory(inventory)
    return show_logs(inv, inv.select(host), lines=first or 50, follow=follow, follow_s=follow_s or 3600.0,
                     host_timeout=bound)


@command("watch")
def watch(c: Any, host: Any = None, interval: Any = None, once: bool = False, json: bool = False,
          min_accept: Any = None, min_tok_s: Any = None, for_: Any = None, duration: Any = None,
          inventory: Any = None) -> CommandResult:
    """Live view of each server: tok/s, accept length, running/queued requests, health; thresholds print an alarm
    line and exit 1 (for cron and CI). A server not running or not healthy is an alarm too."""
    from fabfile.commands.watch import WatchOptions
    from fabfile.commands.watch import watch as run_watch
    from fabfile.errors import FlagError

    wait_for, every, accept, tok_s, bound = read_each("watch", for_=for_, interval=interval, min_accept=min_accept,
                                                      min_tok_s=min_tok_s, duration=duration)
    if once and (wait_for or duration is not None):
        raise FlagError("--once: takes one sample; leave out --for and --duration")
    opts = WatchOptions(interval=every or 2.0, once=once, min_accept=accept, min_tok_s=tok_s, for_s=wait_for or 0.0,
                        duration=bound, as_json=json)
    inv = options.inventory(inventory)
    return run_watch(inv, inv.select(host), opts)


@command("check-env")
def check_env(c: Any, host: Any = None, json: bool = False, inventory: Any = None, host_timeout: Any = None,
              verbose: bool = False) -> CommandResult:
    """Prove, per scheduler rank, that every expected NCCL variable reached the worker (exit 1 if not)."""
    from fabfile.commands.operations import check_env_hosts

    bound = read("check-env", "host_timeout", host_timeout)
    inv = options.inventory(inventory)
    return check_env_hosts(inv, inv.select(host), host_timeout=bound, verbose=verbose)


@command("rollback-patches")
def rollback_patches(c: Any, host: Any = None, dry_run: bool = False, json: bool = False,
                     inventory: Any = None, lock_wait: Any = None) -> CommandResult:
    """Restore SGLang's files the NCCL patches changed (files only; an earlier configuration: deploy --previous).

    Every patched file comes back byte for byte and the plugin/sitecustomize installs are removed. No server is
    started or stopped and no earlier configuration comes back: `inv deploy --previous` starts the deploy before
    the latest one again."""
    from fabfile.commands.operations import rollback_hosts

    inv = options.inventory(inventory, read("rollback-patches", "lock_wait", lock_wait))
    return rollback_hosts(inv, inv.select(host), dry_run=dry_run)


@command("cancel")
def cancel(c: Any, host: Any = None, json: bool = False, inventory: Any = None, timeout: Any = None) -> CommandResult:
    """Cancel the deploy in progress on host(s) (one whose client went away, say): it stops at its next step or
    during its wait for ready, tears its new server down and lets go of the host."""
    from fabfile.commands.operations import cancel_hosts

    wait = read("cancel", "timeout", timeout)
    inv = options.inventory(inventory)
    return cancel_hosts(inv, inv.select(host), wait_s=wait)


@command("gpus")
def gpus(c: Any, host: Any = None, json: bool = False, inventory: Any = None,
         host_timeout: Any = None) -> CommandResult:
    """Show GPUs and the processes holding them on host(s)."""
    from fabfile.commands.operations import gpus_hosts

    bound = read("gpus", "host_timeout", host_timeout)
    inv = options.inventory(inventory)
    return gpus_hosts(inv, inv.select(host), host_timeout=bound)


@command("bench")
def bench(c: Any, host: Any = None, concurrency: Any = None, input_len: Any = None, output_len: Any = None,
          num_prompts: Any = None, client: Any = None, timeout: Any = None, out: Any = None, json: bool = False,
          inventory: Any = None, explain: bool = False, baseline: Any = None) -> CommandResult:
    """Benchmark the running server from the host itself: tok/s, TTFT, TPOT/ITL, accept length and rate."""
    from fabfile.errors import Collector

    found = Collector()  # every bad flag at once (exit 2), before the inventory is read
    out = found.check(read, "bench", "out", out)
    params = found.check(options.bench, "bench", concurrency, input_len, output_len, num_prompts, client, timeout)
    baseline = found.check(options.explain_baseline, explain, baseline)
    found.done()
    inv = options.inventory(inventory)
    from fabfile.commands.measuring import bench_command

    return bench_command(inv, inv.select(host), params, out or "runs", explain=explain, baseline=baseline,
                         as_json=json)


@command("profile")
def profile(c: Any, host: Any = None, concurrency: Any = None, input_len: Any = None, output_len: Any = None,
            num_prompts: Any = None, trace: bool = False, trace_steps: Any = None, out: Any = None,
            timeout: Any = None, json: bool = False, inventory: Any = None, verbose: bool = False) -> CommandResult:
    """Where one speculative cycle's time goes on the running server: draft, verify, draft-extend, other, by
    SGLang's device timer (and --trace: its profiler), under the bench's load; each figure names its source."""
    from fabfile.commands.profile import DEFAULT_TRACE_STEPS, ProfileParams
    from fabfile.errors import Collector

    found = Collector()  # every bad flag at once (exit 2), before the inventory is read
    out = found.check(read, "profile", "out", out)
    load = found.check(options.bench, "profile", concurrency, input_len, output_len, num_prompts, None, timeout)
    steps = found.check(read, "profile", "trace_steps", trace_steps)
    found.check(flags.only_with, trace, "only with --trace", ("--trace-steps", trace_steps), ("--out", out))
    found.done()
    params = ProfileParams(load=load, trace=trace, trace_steps=steps or DEFAULT_TRACE_STEPS, out=out)
    inv = options.inventory(inventory)
    from fabfile.commands.measuring import profile_command

    return profile_command(inv, inv.select(host), params, "runs", verbose=verbose, as_json=json)


@command("sweep")
def sweep(c: Any, host: Any = None, steps: Any = None, topk: Any = None, draft_tokens: Any = None,
          measure: bool = False, no_measure: bool = False, explain: bool = False,
          keep: Any = None, concurrency: Any = None, input_len: Any = None, output_len: Any = None,
          num_prompts: Any = None, target_ci: Any = None, min_requests: Any = None, max_requests: Any = None,
          predict: bool = False, client: Any = None, patch_mode: Any = None, timeout: Any = None,
          out: Any = None, json: bool = False, inventory: Any = None, max_ttft_ms: Any = None,
          max_tpot_ms: Any = None, min_tok_s: Any = None, nccl: Any = None, nccl_env: Any = None,
          adaptive: bool = False, resume: Any = None) -> CommandResult:
    """Deploy and benchmark each configuration (baseline included), print the table, keep the winner running."""
    from dataclasses import replace

    from fabfile.errors import Collector, FlagError

    # Every bad flag of the sweep at once, one line each (exit 2), before the inventory is read or a host touched.
    found = Collector()
    limits = found.check(options.sla_limits, "sweep", max_ttft_ms, max_tpot_ms, min_tok_s)
    out = found.check(read, "sweep", "out", out)
    step_list = found.check(read, "sweep", "steps", steps)
    if steps is None or step_list == []:
        found.found.append(FlagError("--steps: give the steps to try, e.g. --steps 0,1,2,3,4"))
    levels = found.check(read, "sweep", "concurrency", concurrency) or [1]
    params = found.check(options.bench, "sweep", None, input_len, output_len, num_prompts, client, None)
    length = found.check(options.sweep_length, num_prompts, target_ci, min_requests, max_requests)
    topks = found.check(read, "sweep", "topk", topk)
    draft_list = found.check(read, "sweep", "draft_tokens", draft_tokens)
    deploy_opts = found.check(options.deploy, "sweep", None, None, None, patch_mode, timeout)
    folder = found.check(read, "sweep", "resume", resume)
    from fabfile.plan.sweep_plan import refusals

    found.found += refusals(predict=predict, adaptive=adaptive, client=params.client if params else None,
                            adaptive_length=bool(length and length.get("target_ci") is not None))
    found.done()
    params = replace(params, concurrency=levels[0], **length, need_histogram=predict)
    # A sweep measures: the device timer is on where the version has it, unless --no-measure or `measure: false`.
    base = replace(options.measuring(deploy_opts, measure, no_measure), measuring=True)
    from fabfile.commands.sweep import sweep_command

    return sweep_command(options.inventory(inventory), host, base, params, steps=step_list, topks=topks,
                         draft_tokens=draft_list, nccl=None if nccl is None else str(nccl),
                         nccl_env=None if nccl_env is None else str(nccl_env), adaptive=adaptive, keep=keep,
                         runs_dir=out or "runs", levels=levels, predict=predict, limits=limits, resume=folder,
                         explain=explain)


@command("analyze")
def analyze(c: Any, sweep: Any = None, baseline_ms: Any = None, verify_ms: Any = None, draft_ms: Any = None,
            steps: Any = None, accept_len: Any = None, json: bool = False) -> CommandResult:
    """Break-even: the accept length each configuration needs to beat the baseline, against what it got."""
    from fabfile.commands.analyze import analyze_file, analyze_numbers
    from fabfile.errors import FlagError

    numbers = {"--baseline-ms": baseline_ms, "--verify-ms": verify_ms, "--draft-ms": draft_ms, "--steps": steps,
               "--accept-len": accept_len}
    flags.excludes("--sweep", sweep is not None, "reads the numbers from the file", *numbers.items())
    if sweep is not None:
        return analyze_file(sweep)
    missing = [k for k in ("--baseline-ms", "--verify-ms") if numbers[k] is None]
    if missing:
        raise FlagError(f"{' and '.join(missing)}: required without --sweep "
                        "(e.g. inv analyze --baseline-ms 12.2 --verify-ms 29 --steps 2 --accept-len 1.75)")
    base_ms, verify, draft, n, accept = read_each("analyze", baseline_ms=baseline_ms, verify_ms=verify_ms,
                                                  draft_ms=draft_ms, steps=steps, accept_len=accept_len)
    return analyze_numbers(baseline_ms=base_ms, verify_ms=verify, draft_ms=draft or 0.0, steps=n, accept_len=accept)


@command("explain")
def explain(c: Any, from_: Any = None, baseline: Any = None, rules: bool = False, json: bool = False,
            host: Any = None, trace: bool = False, num_prompts: Any = None, concurrency: Any = None,
            inventory: Any = None, fresh: bool = False, max_age: Any = None) -> CommandResult:
    """Where a speculative cycle's time goes, in sentences: each from measured figures (every one with its source)
    and named by the rule that produced it."""
    from fabfile.commands import measuring

    if rules:
        return measuring.explain_rules()
    src, base, age = read_each("explain", from_=from_, baseline=baseline, max_age=max_age)
    flags.only_with(src is None, "only without --from (it measures the running server)", ("--host", host),
                    ("--trace", trace), ("--num-prompts", num_prompts), ("--concurrency", concurrency),
                    ("--inventory", inventory), ("--fresh", fresh), ("--max-age", max_age))
    flags.excludes("--fresh", fresh, "measures again whatever the age of the last profile", ("--max-age", age))
    if src is not None:
        return measuring.explain_file(src, base)
    from fabfile.commands.explain import load_document
    from fabfile.commands.profile import REUSE_MAX_AGE_S, ProfileParams

    params = ProfileParams(load=options.bench("explain", concurrency, num_prompts=num_prompts), trace=trace)
    if base is not None:
        load_document(base, "--baseline")  # bad input is refused before any host is reached
    inv = options.inventory(inventory)
    return measuring.explain_command(inv, inv.select(host), params, base, "runs",
                                     max_age_s=None if fresh else age or REUSE_MAX_AGE_S, as_json=json)


@command("deploy-router")
def deploy_router(c: Any, router: Any = None, timeout: Any = None, host_timeout: Any = None, json: bool = False,
                  inventory: Any = None) -> CommandResult:
    """Start SGLang's router in front of the healthy replicas of a group, on the host the inventory names."""
    from fabfile.commands.router import deploy_router_command, pick

    ready, bound = read_each("deploy-router", timeout=timeout, host_timeout=host_timeout)
    inv = options.inventory(inventory)
    return deploy_router_command(inv, pick(inv, router), ready_s=ready or 60.0, host_timeout=bound)


@command("trust-host")
def trust_host(c: Any, host: Any = None, fingerprint: Any = None, inventory: Any = None) -> CommandResult:
    """First contact: show a host's key fingerprint and add it to known_hosts only when you confirm it."""
    import sys

    from fabfile.commands.trust import trust_host as trust_one

    def ask(new: int) -> bool:
        if not sys.stdin.isatty():
            return False
        question = "Did you verify this fingerprint out of band? Type yes to trust it: " if new == 1 else \
            f"Did you verify these {new} fingerprints out of band? Type yes to trust them all: "
        return input(question).strip().lower() == "yes"

    return trust_one(options.inventory(inventory), host, fingerprint, ask)


@command("adopt")
def adopt(c: Any, host: Any = None, command: Any = None, name: Any = None, write: Any = None, json: bool = False,
          inventory: Any = None, sglang_version: Any = None) -> CommandResult:
    """Bring a hand-started server under the tool: its inventory entry, rendering the same command."""
    from fabfile.commands.adopt import AdoptOptions, adopt_command

    write_to, release = read_each("adopt", write=write, sglang_version=sglang_version)
    opts = AdoptOptions(host=host, command=None if command is None else str(command), name=name, write=write_to,
                        sglang_version=release)
    return adopt_command(opts, lambda: options.inventory(inventory))


@command("diff")
def diff(c: Any, host: Any = None, old: Any = None, new: Any = None, steps: Any = None, json: bool = False,
         inventory: Any = None) -> CommandResult:
    """What changed between two deploys (argv, env, SGLang version, patch mode, patched files, check-env), between
    a deploy and what render would run now, or between two hosts' running configurations (--host A,B)."""
    from fabfile.commands.diff import DiffOptions, diff_command

    opts = DiffOptions(host=host, old=None if old is None else str(old), new=None if new is None else str(new),
                       steps=read("diff", "steps", steps))  # before any host is asked
    return diff_command(options.inventory(inventory), opts)


@command("tune")
def tune(c: Any, host: Any = None, objective: Any = "tok-s", concurrency: Any = None, input_len: Any = None,
         output_len: Any = None, num_prompts: Any = None, max_loads: Any = None, max_minutes: Any = None,
         resume: bool = False, write: Any = None, json: bool = False, inventory: Any = None, max_ttft_ms: Any = None,
         max_tpot_ms: Any = None, min_tok_s: Any = None, trace_steps: Any = None) -> CommandResult:
    """Measure, explain, change the one thing a rule names, keep it only when it wins beyond the spread between
    deploys (A B B A), until nothing is left to fix; the host runs the best configuration when it ends."""
    from fabfile.commands.profile import DEFAULT_TRACE_STEPS
    from fabfile.commands.tune import check_params, tune_command
    from fabfile.errors import Collector

    found = Collector()  # every bad flag of the run at once (exit 2), then nothing runs
    loads = found.check(read, "tune", "max_loads", max_loads)
    minutes = found.check(read, "tune", "max_minutes", max_minutes)
    good_objective = found.check(read, "tune", "objective", objective)
    limits = found.check(options.sla_limits, "tune", max_ttft_ms, max_tpot_ms, min_tok_s)
    steps = found.check(read, "tune", "trace_steps", trace_steps)
    load = found.check(options.bench, "tune", concurrency, input_len, output_len, num_prompts)
    write_to = found.check(read, "tune", "write", write)
    inv = found.check(options.inventory, inventory)
    from fabfile.inventory.hosts import one_host

    # A group: the first of its hosts is tuned, the others are told what they would get (never deployed).
    group = found.check(inv.select, host) if inv is not None else None
    h = (group[0] if len(group) > 1 else found.check(one_host, inv, host, "tune")) if group else None
    # The objective's own parser has said what is wrong with it already; judged here only for --objective sla.
    found.check(check_params, str(good_objective or "tok-s"),
                40 if loads is None else loads, 60.0 if minutes is None else minutes, 3, limits,
                load.concurrency if load is not None else 1, h.speculative.steps if h is not None else 0)
    found.done()
    assert h is not None and group is not None and load is not None  # found.done() raised otherwise
    return tune_command(inv, h, load, max_loads=40 if loads is None else loads,
                        max_minutes=60.0 if minutes is None else minutes, resume=resume, write=write_to,
                        objective=str(objective), limits=limits, trace_steps=steps or DEFAULT_TRACE_STEPS,
                        others=group[1:], as_json=json)


ns = Collection(deploy, render, stop, status, logs, watch, check_env, rollback_patches, gpus, bench, sweep, analyze,
                deploy_router, trust_host, adopt, diff, cancel, profile, tune, deploys)
ns.add_task(explain)
