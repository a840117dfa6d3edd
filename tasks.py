"""specdeploy command line: `inv deploy --host gpu1 --steps 3`, `inv check-env`, `inv rollback-patches`, ...

This file is only the CLI: flags (their values read by the one parser, fabfile/flags.py, within the ranges below),
and errors mapped to exit codes (0 ok, 1 failed, 2 bad input with nothing touched). Every flag is a flag, never a
positional, so `inv deploy --help` cannot run a deploy. The work lives in the fabfile/ library.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from invoke.collection import Collection
from invoke.exceptions import Exit
from invoke.tasks import task as _task

from fabfile import flags  # the one parser of flag values (imports only fabfile.errors: `inv --list` stays fast)

F = TypeVar("F", bound=Callable[..., Any])

# No automatic one-letter flags: Invoke derives them from each task's parameter names, so `-i` meant --timeout for
# deploy and --inventory for status, and `--no-canary` got the "short" flag `--`. Long flags only, the same everywhere.
task = functools.partial(_task, auto_shortflags=False)

INVENTORY_HELP = "inventory file (default: $SPECDEPLOY_INVENTORY or ./inventory.yaml)"
HOST_HELP = "host, group, comma list of them, or all (every host; default: the inventory's default host)"
JSON_HELP = "print one JSON document on stdout instead of tables"
HOST_TIMEOUT_HELP = ("wall-clock bound in seconds on each host's part (default: timeouts.host, 60): a host past it "
                     "is reported as timed out while the others' results print")


def cli(fn: F) -> F:
    """Map the tool's errors to exit codes and sentences; never show a traceback for a failure we understand."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # Invoke turns Python's bytecode cache off once it has parsed its flags (its --write-pyc, off by default, keeps
        # a tasks folder free of .pyc files), so every run compiled each fabfile module it imported again: ~50 ms of
        # a 0.3 s `inv status`. fabfile is a package like any other: Python's own rule again, so -B and
        # PYTHONDONTWRITEBYTECODE still turn the cache off.
        sys.dont_write_bytecode = bool(sys.flags.dont_write_bytecode)
        # At exit Python's last garbage collection walks every object the run made (paramiko, Jinja, rich, the
        # results): 40-60 ms of a 0.3 s `inv status`, measured. Freezing them at exit (atexit runs before that
        # collection) skips the walk; nothing here relies on a finalizer at exit (sessions and files are closed
        # by the commands themselves).
        atexit.register(gc.freeze)
        from fabfile.errors import SpecDeployError
        from fabfile.present.output import print_error

        try:
            return fn(*args, **kwargs)
        except SpecDeployError as e:
            print_error(e)
            raise Exit(code=e.exit_code) from None
        except BrokenPipeError:
            from fabfile.present.output import pipe_closed

            pipe_closed()
        except KeyboardInterrupt as e:
            from fabfile.errors import Interrupted

            if isinstance(e, Interrupted):
                raise Exit(e.sentence(), code=130) from None
            # Read-only commands (logs --follow, watch, status...) just stop: no word about deploys.
            raise Exit(INTERRUPTED.get(fn.__name__, ""), code=130) from None

    return wrapper  # type: ignore[return-value]


# What Ctrl-C leaves behind, for the commands that change hosts (a deploy says it itself: fabfile.errors.Interrupted).
_ON_HOSTS = ("interrupted: what was started on the host goes on there without this terminal (or tears itself down); "
             "`inv status` shows what runs, `inv cancel` stops a deploy in progress")
INTERRUPTED = {"deploy": _ON_HOSTS, "sweep": _ON_HOSTS + "; the sweep's finished rows are in its --out folder",
               "deploy_router": _ON_HOSTS, "stop": "interrupted: `inv status` shows what still runs",
               "rollback_patches": "interrupted: `inv rollback-patches --dry-run` shows what is left to restore",
               "cancel": "interrupted: `inv status` shows whether the deploy let go of the host"}

# The ranges of the numeric flags (fabfile/flags.py reads every one). Each maximum is far above any real use, so only
# a typo (or a fuzzer) meets it; without one, a huge wait never ends and a huge count never finishes.
MAX_STEPS = 64              # EAGLE draft steps: SGLang's own EAGLE tests run 5; an accept length is at most steps + 1
MAX_TOPK = 64               # draft branches per step (the tree's size grows with its square)
MAX_DRAFT_TOKENS = 4096     # tokens per verify pass (topk + (steps - 1)·topk² bounds it further, with the plan)
MAX_ACCEPT = 64.0           # an accept length (--accept-gate, --min-accept, --accept-len): at most MAX_STEPS + 1
MAX_CONCURRENCY = 4096      # requests in flight from one benchmark client (a server's batch is far smaller)
MAX_TOKENS = 1048576        # prompt / output length: 1M tokens, beyond every model's context
MAX_REQUESTS = 1000000      # requests in one benchmark (hours at any speed)
MAX_LINES = 1000000         # log lines printed first (more is a file copy: use scp)
MAX_MS = 60000.0            # a time per token or per pass: a minute is no GPU server
MAX_TOK_S = 1e7             # a throughput alarm: no server generates ten million tok/s
MAX_INTERVAL_S = 3600.0     # between two watch samples: an hour apart is no live view
WEEK_S = 7 * 86400.0        # `logs --follow --timeout`: past a week, use a log shipper
MONTH_S = 31 * 86400.0      # `watch --duration`: a month of samples (cron restarts it anyway)


def _with_lock_wait(inv: Any, value: Any) -> Any:
    """``--lock-wait SECONDS`` (0 = fail at once when another deploy holds the host) over every host's
    ``timeouts.lock_wait``."""
    from dataclasses import replace

    from fabfile import flags

    x = flags.seconds("--lock-wait", value, zero=True)
    if x is None:
        return inv
    return replace(inv, hosts={n: replace(h, timeouts=replace(h.timeouts, lock_wait=x)) for n, h in inv.hosts.items()})


def _inventory(path: str | None) -> Any:
    from fabfile.inventory import hosts as inventory

    chosen = path or os.environ.get("SPECDEPLOY_INVENTORY")
    if chosen is None and not os.path.exists("inventory.yaml"):
        from fabfile.errors import InventoryError

        raise InventoryError(f"no inventory: no --inventory, $SPECDEPLOY_INVENTORY is not set, and {os.getcwd()} "
                             "has no inventory.yaml", "pass --inventory PATH, export SPECDEPLOY_INVENTORY=PATH, or "
                             "run in the folder that holds inventory.yaml")
    return inventory.load(chosen or "inventory.yaml", cache=True)


def _options(steps: Any, topk: Any, draft_tokens: Any, patch_mode: Any, timeout: Any, verify: bool = True,
             accept_gate: Any = None) -> Any:
    from fabfile import flags
    from fabfile.plan.deploy_plan import Options
    from fabfile.remote.patch.modes import PATCH_MODES

    return Options(steps=flags.whole("--steps", steps, minimum=0, maximum=MAX_STEPS),
                   topk=flags.whole("--topk", topk, minimum=1, maximum=MAX_TOPK),
                   draft_tokens=flags.whole("--draft-tokens", draft_tokens, minimum=1, maximum=MAX_DRAFT_TOKENS),
                   patch_mode=flags.choice("--patch-mode", patch_mode, PATCH_MODES, what="mode"),
                   timeout=flags.seconds("--timeout", timeout), verify=verify,
                   accept_gate=flags.number("--accept-gate", accept_gate, minimum=0.0, maximum=MAX_ACCEPT,
                                            open_maximum=True, what="an accept length (e.g. 1.1, or 0 for no gate)"))


DEPLOY_HELP = {
    "host": HOST_HELP,
    "steps": "speculative steps (0 = baseline without speculation; default from the inventory)",
    "topk": "EAGLE top-k (default from the inventory, 1)",
    "draft_tokens": "draft tokens per verify (default steps+1 when topk is 1, SGLang's rule)",
    "patch_mode": "how NCCL settings reach the workers: auto|env|engine|scheduler|plugin|sitecustomize",
    "timeout": "hard bound in seconds on waiting for the server to become ready",
    "dry_run": "print the plan (command, env, files, steps) and touch no host",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
    "no_verify": "skip the check-env step (not recommended: it is the proof the tuning reached the workers)",
    "strategy": "several hosts: rolling (default: a canary host first, then batches) or parallel (all at once)",
    "batch": "rolling: hosts per batch after the canary, a number (2) or a share (25%, the default)",
    "no_canary": "rolling: do not deploy one host alone first",
    "accept_gate": "EAGLE accept length at or below which the deploy fails, measured after ready by a short burst "
                   "(default: the inventory's accept_gate, 1.1; 0 turns the gate off)",
    "rollback_on_failure": "when a batch fails, put every host this run changed back to the deploy it ran before "
                           "(default: hosts already deployed stay on the new version)",
    "lock_wait": "when another deploy holds a host, wait for it up to this many seconds, showing its step "
                 "(default: timeouts.lock_wait, 600; 0 = fail at once)",
    "previous": "start again the deploy recorded before the latest one on each host (after `inv cancel` or a "
                "failed deploy: the one that ran before), from its own launch script; no other flag",
    "measure": "turn SGLang's per-phase GPU timer on (--enable-metrics + SGLANG_ENABLE_METRICS_DEVICE_TIMER=1, "
               "SGLang 0.5.11+): bench, sweep and explain then show measured phases (default: the inventory's "
               "`measure`; unset, on only for a sweep's deploys)",
    "no_measure": "turn the device timer off, whatever the inventory says",
}
LOCK_WAIT_HELP = DEPLOY_HELP["lock_wait"]


@task(help=DEPLOY_HELP)
@cli
def deploy(c: Any, host: Any = None, steps: Any = None, topk: Any = None, draft_tokens: Any = None,
           patch_mode: Any = None, timeout: Any = None, dry_run: bool = False, json: bool = False,
           inventory: Any = None, no_verify: bool = False, strategy: Any = None, batch: Any = None,
           no_canary: bool = False, rollback_on_failure: bool = False, accept_gate: Any = None,
           lock_wait: Any = None, measure: bool = False, no_measure: bool = False,
           previous: bool = False) -> None:
    """Deploy SGLang (EAGLE-3 unless --steps 0) to host(s) or a multi-node cluster: patch, stop stale, start, wait
    ready, verify env. Several hosts: rolling (canary, batches) or parallel, with a final who-runs-what table."""
    from fabfile.commands.rollout import STRATEGIES, parse_batch
    from fabfile.errors import FlagError

    inv = _with_lock_wait(_inventory(inventory), lock_wait)
    if previous:
        given = [f for f, v in (("--steps", steps), ("--topk", topk), ("--draft-tokens", draft_tokens),
                                ("--patch-mode", patch_mode), ("--dry-run", dry_run or None), ("--strategy", strategy),
                                ("--batch", batch), ("--measure", measure or None),
                                ("--no-measure", no_measure or None)) if v is not None]
        if given:
            raise FlagError(f"--previous: starts a recorded deploy as it ran; drop {', '.join(given)}")
        from fabfile.commands.dispatch import deploy_previous

        raise_for(deploy_previous(inv, inv.select(host), as_json=json))
        return
    opts = _options(steps, topk, draft_tokens, patch_mode, timeout, verify=not no_verify, accept_gate=accept_gate)
    flags.choice("--strategy", strategy, STRATEGIES, what="strategy")
    if batch is not None and strategy == "parallel":
        raise FlagError("--batch: only with --strategy rolling (parallel deploys every host at once)")
    if no_canary and strategy == "parallel":
        raise FlagError("--no-canary: only with --strategy rolling")
    batch_size = parse_batch(batch if batch is not None else "25%")
    cluster = inv.cluster_named(host)
    if cluster is not None and (strategy is not None or batch is not None or no_canary):
        raise FlagError("--strategy/--batch/--no-canary: a cluster's nodes always start together (one model "
                        "across nodes); leave these flags out")
    hosts = inv.cluster_nodes(cluster.name) if cluster is not None else inv.select(host)
    if cluster is None:
        for h in hosts:
            for c_name, c_def in inv.clusters.items():
                if h.name in c_def.hosts:
                    raise FlagError(f"--host: {h.name} is node {c_def.hosts.index(h.name)} of cluster {c_name}; a "
                                    "deploy of it alone would stop its rank and leave the cluster broken",
                                    f"deploy the whole cluster with --host {c_name}, or take {h.name} out of "
                                    "`clusters:` to run it on its own")
    opts = _measuring(opts, measure, no_measure)
    if dry_run:
        _render(inv, hosts, opts, json)
        return
    from fabfile.commands.dispatch import deploy_command

    raise_for(deploy_command(inv, hosts, cluster, opts, strategy=strategy, batch=batch_size,
                             canary=not no_canary, rollback_on_failure=rollback_on_failure, as_json=json))


def _render(inv: Any, hosts: list[Any], opts: Any, as_json: bool) -> None:
    from fabfile.commands.render_plan import plan_document
    from fabfile.present.output import show
    from fabfile.present.plan_report import describe

    docs = [plan_document(h, opts) for h in hosts]
    def for_people() -> None:
        for d in docs:
            describe(d)

    show(docs[0] if len(docs) == 1 else {"hosts": docs}, for_people, as_json=as_json)


@task(help={k: DEPLOY_HELP[k] for k in ("host", "steps", "topk", "draft_tokens", "patch_mode", "timeout", "json",
                                        "inventory", "measure", "no_measure")})
@cli
def render(c: Any, host: Any = None, steps: Any = None, topk: Any = None, draft_tokens: Any = None,
           patch_mode: Any = None, timeout: Any = None, json: bool = False, inventory: Any = None,
           measure: bool = False, no_measure: bool = False) -> None:
    """Print what a deploy would do (the plan and every rendered file) without touching any host."""
    inv = _inventory(inventory)
    _render(inv, inv.select(host), _measuring(_options(steps, topk, draft_tokens, patch_mode, timeout), measure,
                                              no_measure), json)


@task(help={"host": HOST_HELP, "dry_run": "list what would be stopped, stop nothing", "json": JSON_HELP,
            "inventory": INVENTORY_HELP, "host_timeout": HOST_TIMEOUT_HELP, "lock_wait": LOCK_WAIT_HELP,
            "router": "stop this router of the inventory's `routers:` instead of servers (on the host it runs on)"})
@cli
def stop(c: Any, host: Any = None, dry_run: bool = False, json: bool = False, inventory: Any = None,
         host_timeout: Any = None, router: Any = None, lock_wait: Any = None) -> None:
    """Stop the SGLang server(s) on host(s), all at once: TERM, grace, KILL; confirms every process is gone.
    With --router NAME, stop that router instead."""
    from fabfile.commands.operations import stop_hosts
    from fabfile.errors import FlagError

    inv = _with_lock_wait(_inventory(inventory), lock_wait)
    bound = flags.seconds("--host-timeout", host_timeout)
    if router is not None:
        from fabfile.commands.router import pick, stop_router

        if host is not None or dry_run:
            raise FlagError("--router: stops the router on the host the inventory names; leave out --host and "
                            "--dry-run")
        raise_for(stop_router(inv, pick(inv, router), as_json=json))
        return
    raise_for(stop_hosts(inv, inv.select(host), dry_run=dry_run, as_json=json, host_timeout=bound))


@task(help={"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP, "host_timeout": HOST_TIMEOUT_HELP})
@cli
def status(c: Any, host: Any = None, json: bool = False, inventory: Any = None, host_timeout: Any = None) -> None:
    """Show what runs on host(s): config, pid, uptime, health, accept length, and routers running there."""
    from fabfile.commands.operations import status_hosts

    inv = _inventory(inventory)
    raise_for(status_hosts(inv, inv.select(host), as_json=json,
                           host_timeout=flags.seconds("--host-timeout", host_timeout)))


@task(help={"host": HOST_HELP, "follow": "keep printing new lines (Ctrl-C to stop)",
            "lines": "how many lines of the end to show first (default 50)",
            "timeout": "with --follow, stop after this many seconds (default 3600)", "inventory": INVENTORY_HELP,
            "host_timeout": HOST_TIMEOUT_HELP})
@cli
def logs(c: Any, host: Any = None, follow: bool = False, lines: Any = None, timeout: Any = None,
         inventory: Any = None, host_timeout: Any = None) -> None:
    """Print the server log of host(s) (the current deploy's log file); several hosts: lines prefixed by host."""
    from fabfile.commands.operations import show_logs

    inv = _inventory(inventory)
    raise_for(show_logs(inv, inv.select(host), lines=flags.whole("--lines", lines, minimum=1, maximum=MAX_LINES) or 50,
                        follow=follow, follow_s=flags.seconds("--timeout", timeout, maximum=WEEK_S) or 3600.0,
                        host_timeout=flags.seconds("--host-timeout", host_timeout)))


@task(help={"host": HOST_HELP, "interval": "seconds between samples (default 2)",
            "once": "one sample, then exit (thresholds judged on it)", "json": "one JSON line per sample",
            "min_accept": "alarm when a server's accept length stays below this",
            "min_tok_s": "alarm when a server's generation throughput (tok/s) stays below this",
            "for_": "how long (seconds) a figure must stay below its threshold before the alarm (default 0)",
            "duration": "stop after this many seconds (exit 0 unless an alarm fired; default: until Ctrl-C)",
            "inventory": INVENTORY_HELP})
@cli
def watch(c: Any, host: Any = None, interval: Any = None, once: bool = False, json: bool = False,
          min_accept: Any = None, min_tok_s: Any = None, for_: Any = None, duration: Any = None,
          inventory: Any = None) -> None:
    """Live view of each server: tok/s, accept length, running/queued requests, health; thresholds print an alarm
    line and exit 1 (for cron and CI). A server not running or not healthy is an alarm too."""
    from fabfile.commands.watch import WatchOptions
    from fabfile.commands.watch import watch as run_watch
    from fabfile.errors import FlagError

    wait_for = flags.seconds("--for", for_, zero=True)
    if once and (wait_for or duration is not None):
        raise FlagError("--once: takes one sample; leave out --for and --duration")
    opts = WatchOptions(interval=flags.seconds("--interval", interval, maximum=MAX_INTERVAL_S) or 2.0, once=once,
                        min_accept=flags.number("--min-accept", min_accept, minimum=0.0, open_minimum=True,
                                                maximum=MAX_ACCEPT + 1, what="an accept length"),
                        min_tok_s=flags.number("--min-tok-s", min_tok_s, minimum=0.0, open_minimum=True,
                                               maximum=MAX_TOK_S, unit="tok/s", what="a throughput in tok/s"),
                        for_s=wait_for or 0.0, duration=flags.seconds("--duration", duration, maximum=MONTH_S),
                        as_json=json)
    inv = _inventory(inventory)
    code = run_watch(inv, inv.select(host), opts)
    if code:
        raise Exit(code=code)


@task(name="check-env", help={"host": HOST_HELP + "; a cluster name covers the ranks on every node",
                              "json": JSON_HELP, "inventory": INVENTORY_HELP, "host_timeout": HOST_TIMEOUT_HELP,
                              "verbose": "one row per rank and variable with expected, observed and evidence "
                                         "(default: a compact ranks × variables matrix)"})
@cli
def check_env(c: Any, host: Any = None, json: bool = False, inventory: Any = None, host_timeout: Any = None,
              verbose: bool = False) -> None:
    """Prove, per scheduler rank, that every expected NCCL variable reached the worker (exit 1 if not)."""
    from fabfile.commands.operations import check_env_hosts

    inv = _inventory(inventory)
    raise_for(check_env_hosts(inv, inv.select(host), as_json=json,
                              host_timeout=flags.seconds("--host-timeout", host_timeout), verbose=verbose))


@task(name="rollback-patches", help={"host": HOST_HELP, "dry_run": "say what would be restored, change nothing",
                                     "json": JSON_HELP, "inventory": INVENTORY_HELP, "lock_wait": LOCK_WAIT_HELP})
@cli
def rollback_patches(c: Any, host: Any = None, dry_run: bool = False, json: bool = False,
                     inventory: Any = None, lock_wait: Any = None) -> None:
    """Restore SGLang's files the NCCL patches changed (files only; an earlier configuration: deploy --previous).

    Every patched file comes back byte for byte and the plugin/sitecustomize installs are removed. No server is
    started or stopped and no earlier configuration comes back: `inv deploy --previous` starts the deploy before
    the latest one again."""
    from fabfile.commands.operations import rollback_hosts

    inv = _with_lock_wait(_inventory(inventory), lock_wait)
    raise_for(rollback_hosts(inv, inv.select(host), dry_run=dry_run, as_json=json))


@task(help={"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP,
            "timeout": "seconds to wait for the cancelled deploy to let go of the host (default: 3 x "
                       "timeouts.stop_grace + 30)"})
@cli
def cancel(c: Any, host: Any = None, json: bool = False, inventory: Any = None, timeout: Any = None) -> None:
    """Cancel the deploy in progress on host(s) (one whose client went away, say): it stops at its next step or
    during its wait for ready, tears its new server down and lets go of the host."""
    from fabfile.commands.operations import cancel_hosts

    inv = _inventory(inventory)
    raise_for(cancel_hosts(inv, inv.select(host), as_json=json, wait_s=flags.seconds("--timeout", timeout)))


@task(help={"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP, "host_timeout": HOST_TIMEOUT_HELP})
@cli
def gpus(c: Any, host: Any = None, json: bool = False, inventory: Any = None, host_timeout: Any = None) -> None:
    """Show GPUs and the processes holding them on host(s)."""
    from fabfile.commands.operations import gpus_hosts

    inv = _inventory(inventory)
    raise_for(gpus_hosts(inv, inv.select(host), as_json=json,
                         host_timeout=flags.seconds("--host-timeout", host_timeout)))


BENCH_HELP = {
    "host": HOST_HELP + "; several hosts are benchmarked at once, each from itself",
    "concurrency": "requests in flight at once (default 1: the single-stream speed speculation is for)",
    "input_len": "prompt length in tokens, random ids (default 256)",
    "output_len": "new tokens per request, EOS ignored (default 128)",
    "num_prompts": "requests to measure, after one warm-up request (default 16)",
    "client": "auto (sglang.bench_serving when the host's SGLang has it, else builtin) | sglang | builtin",
    "timeout": "bound in seconds on the whole benchmark (default: from its size)",
    "out": "local directory for results: OUT/<host>/<id>.json (default ./runs)",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
    "explain": "say where the cycle's time goes, in sentences from the measured figures (`inv explain --rules`)",
    "baseline": "with --explain: a saved bench of the baseline to compare with (default: the newest in --out)",
}


def _bench_params(concurrency: Any, input_len: Any, output_len: Any, num_prompts: Any, client: Any,
                  timeout: Any) -> Any:
    from fabfile import flags
    from fabfile.commands.bench import CLIENTS, BenchParams

    flags.choice("--client", client, CLIENTS, what="client")
    d = BenchParams()
    return BenchParams(
        concurrency=flags.whole("--concurrency", concurrency, minimum=1, maximum=MAX_CONCURRENCY) or d.concurrency,
        input_len=flags.whole("--input-len", input_len, minimum=1, maximum=MAX_TOKENS) or d.input_len,
        output_len=flags.whole("--output-len", output_len, minimum=2, maximum=MAX_TOKENS) or d.output_len,
        num_prompts=flags.whole("--num-prompts", num_prompts, minimum=1, maximum=MAX_REQUESTS) or d.num_prompts,
        client=client or d.client, timeout=flags.seconds("--timeout", timeout))


def _one_host(inv: Any, host: Any, command: str) -> Any:
    from fabfile.errors import FlagError

    hosts = inv.select(host)
    if len(hosts) != 1:
        raise FlagError(f"--host: {command} works on one host at a time, got {len(hosts)} "
                        f"({', '.join(h.name for h in hosts)})")
    return hosts[0]


@task(help=BENCH_HELP)
@cli
def bench(c: Any, host: Any = None, concurrency: Any = None, input_len: Any = None, output_len: Any = None,
          num_prompts: Any = None, client: Any = None, timeout: Any = None, out: Any = None, json: bool = False,
          inventory: Any = None, explain: bool = False, baseline: Any = None) -> None:
    """Benchmark the running server from the host itself: tok/s, TTFT, TPOT/ITL, accept length and rate."""
    out = flags.path("--out", out)
    params = _bench_params(concurrency, input_len, output_len, num_prompts, client, timeout)
    inv = _inventory(inventory)
    baseline = _explain_baseline(explain, baseline)
    hosts = inv.select(host)
    if len(hosts) > 1:
        from fabfile.commands.bench import bench_hosts
        from fabfile.errors import FlagError

        if explain:
            raise FlagError("--explain: explains one host's benchmark at a time; name one --host")
        raise_for(bench_hosts(inv, hosts, params, out or "runs", as_json=json))
        return
    h = hosts[0]
    from fabfile.commands.bench import bench_host
    from fabfile.errors import SpecDeployError
    from fabfile.present.bench_report import print_result
    from fabfile.present.output import out as console
    from fabfile.present.output import show
    from fabfile.present.progress import BenchProgress

    progress = BenchProgress(h.name, enabled=not json)
    try:
        result = bench_host(inv, h, params, out or "runs", on_event=progress.event)
    except SpecDeployError as e:
        # For people the error is printed by `cli` (a sentence on stderr); --json still gets its one document.
        show({"host": h.name, "ok": False, "error": e.as_dict()}, lambda: None, as_json=json)
        raise
    finally:
        progress.close()
    if not explain:
        show(result, lambda: print_result(result, console), as_json=json)
        return
    from fabfile.commands.explain import for_bench
    from fabfile.present.explain_report import document, print_explained

    pairs = for_bench(result, out or "runs", baseline)
    result["explain"] = document(pairs)

    def for_people() -> None:
        print_result(result, console)
        print_explained(pairs, console)

    show(result, for_people, as_json=json)


PROFILE_HELP = {
    **{k: BENCH_HELP[k] for k in ("concurrency", "input_len", "output_len", "timeout", "json", "inventory")},
    "host": "the host to profile (one host; default: the inventory's default host)",
    "num_prompts": "requests of the load the phases are measured under (default 16)",
    "trace": "also record SGLang's profiler trace (bounded: --trace-steps) and break each phase down by kernel",
    "trace_steps": "scheduler steps the profiler records with --trace (default 12, at most 200)",
    "out": "with --trace: fetch each rank's trace into DIR as <host>-<deploy id>-TP<rank>.trace.json.gz "
           "(opens in Perfetto)",
}


@task(help=PROFILE_HELP)
@cli
def profile(c: Any, host: Any = None, concurrency: Any = None, input_len: Any = None, output_len: Any = None,
            num_prompts: Any = None, trace: bool = False, trace_steps: Any = None, out: Any = None,
            timeout: Any = None, json: bool = False, inventory: Any = None) -> None:
    """Where one speculative cycle's time goes on the running server: draft, verify, draft-extend, other, by
    SGLang's device timer (and --trace: its profiler), under the bench's load; each figure names its source."""
    from fabfile.commands.profile import DEFAULT_TRACE_STEPS, ProfileParams
    from fabfile.errors import FlagError
    from fabfile.remote.protocol import MAX_TRACE_STEPS

    out = flags.path("--out", out)
    load = _bench_params(concurrency, input_len, output_len, num_prompts, None, timeout)
    # Each profiled step grows every rank's trace: bounded by what the agent accepts.
    steps = flags.whole("--trace-steps", trace_steps, minimum=1, maximum=MAX_TRACE_STEPS)
    if (steps is not None or out is not None) and not trace:
        raise FlagError(f"{'--trace-steps' if steps is not None else '--out'}: only with --trace")
    params = ProfileParams(load=load, trace=trace, trace_steps=steps or DEFAULT_TRACE_STEPS, out=out)
    inv = _inventory(inventory)
    h = _one_host(inv, host, "profile")
    from fabfile.commands.profile import profile_host
    from fabfile.present.output import out as console
    from fabfile.present.output import print_error, show
    from fabfile.present.profile_report import print_result
    from fabfile.present.progress import BenchProgress

    progress = BenchProgress(h.name, enabled=not json, prefix="profile ")
    try:
        result = profile_host(inv, h, params, on_event=progress.event)
    finally:
        progress.close()
    error = result.outcomes[0].error
    if error is not None:
        show(result, lambda: print_error(error), as_json=json)
    else:
        show(result, lambda: print_result(result, console), as_json=json)
    raise_for(result.exit_code)


SWEEP_HELP = {
    "host": "the host to sweep (one host; default: the inventory's default host)",
    "steps": "comma list of speculative steps to try, e.g. 0,1,2,3,4 (0 = baseline; the baseline is always run)",
    "topk": "comma list of EAGLE top-k values (default: the inventory's)",
    "draft_tokens": "comma list of draft token counts for topk > 1 (topk 1 always uses steps+1, SGLang's rule)",
    "keep": "leave this configuration running afterwards (a config name from the table, e.g. baseline or "
            "eagle3-s2-k1-d3; default: the winner)",
    "input_len": BENCH_HELP["input_len"],
    "output_len": BENCH_HELP["output_len"],
    "concurrency": "comma list of load levels, e.g. 1,8,32: each deployed configuration is benchmarked at each "
                   "(one model load serves them all); the table, report and plot give the winner per level, and "
                   "the first level's winner is left running (default 1)",
    "num_prompts": "a fixed number of requests per configuration and level (default: adaptive, see --target-ci)",
    "target_ci": "adaptive length: each benchmark stops once its tok/s is known within ±PCT % (95 % interval; "
                 "default 2)",
    "min_requests": "adaptive length: at least this many requests (default 8)",
    "max_requests": "adaptive length: at most this many requests (default 256)",
    "predict": "measure the baseline and the smallest and largest chain step counts, predict the other topk-1 "
               "configurations from the accepted-drafts histogram and the cycle fit, deploy only the predicted "
               "winner to confirm it (topk > 1 and other draft-token counts are measured)",
    "nccl": "NCCL candidates crossed with every configuration (each its own server start): built-in presets "
            "(pcie, none = no NCCL tuning variables) or host (the inventory's own), e.g. pcie,none",
    "nccl_env": "NCCL values to try, laid over each --nccl candidate: 'NCCL_PROTO=LL|Simple|-' (- = unset; "
                "several variables separated by spaces are crossed); checked with NCCL's own parsing rules",
    "resume": "OUT/<host>/sweep-<id>: continue that interrupted or failed sweep (run with the same flags and "
              "inventory): what it measured on the same deploy plans is kept, the rest is measured",
    "adaptive": "add SGLang's own --speculative-adaptive (it moves the step count itself, starting from the "
                "largest --steps; releases 0.5.11 and later) as a configuration, with the step count it settled on",
    "max_ttft_ms": "service limit: the winner (per concurrency level) is the fastest configuration whose median "
                   "time to first token is at most this many ms; the table says which limit the others broke; exit 1 "
                   "when none meets the limits",
    "max_tpot_ms": "service limit: median time per output token at most this many ms (see --max-ttft-ms)",
    "min_tok_s": "service limit: output tok/s at least this (see --max-ttft-ms)",
    "client": BENCH_HELP["client"],
    "measure": "turn SGLang's device timer on (default: on where the version has it, for a sweep measures)",
    "no_measure": "deploy every configuration without the device timer (the derived cycle only)",
    "explain": BENCH_HELP["explain"],
    "patch_mode": DEPLOY_HELP["patch_mode"],
    "timeout": "bound in seconds on each deploy's wait for readiness",
    "out": "local directory: OUT/<host>/sweep-<id>/ gets sweep.json, report.md, sweep.png (default ./runs)",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
}


@task(help=SWEEP_HELP)
@cli
def sweep(c: Any, host: Any = None, steps: Any = None, topk: Any = None, draft_tokens: Any = None,
          measure: bool = False, no_measure: bool = False, explain: bool = False,
          keep: Any = None, concurrency: Any = None, input_len: Any = None, output_len: Any = None,
          num_prompts: Any = None, target_ci: Any = None, min_requests: Any = None, max_requests: Any = None,
          predict: bool = False, client: Any = None, patch_mode: Any = None, timeout: Any = None,
          out: Any = None, json: bool = False, inventory: Any = None, max_ttft_ms: Any = None,
          max_tpot_ms: Any = None, min_tok_s: Any = None, nccl: Any = None, nccl_env: Any = None,
          adaptive: bool = False, resume: Any = None) -> None:
    """Deploy and benchmark each configuration (baseline included), print the table, keep the winner running."""
    from dataclasses import replace

    from fabfile.errors import FlagError
    from fabfile.plan.sla import Limits

    def limit(flag: str, value: Any, maximum: float, unit: str, what: str) -> float | None:
        return flags.number(flag, value, minimum=0.0, open_minimum=True, maximum=maximum, unit=unit, what=what)

    limits = Limits(max_ttft_ms=limit("--max-ttft-ms", max_ttft_ms, MAX_MS, "ms", "a number of milliseconds"),
                    max_tpot_ms=limit("--max-tpot-ms", max_tpot_ms, MAX_MS, "ms", "a number of milliseconds"),
                    min_tok_s=limit("--min-tok-s", min_tok_s, MAX_TOK_S, "tok/s", "a number of tokens per second"))

    out = flags.path("--out", out)
    step_list = flags.int_list("--steps", steps, minimum=0, maximum=MAX_STEPS, max_items=MAX_STEPS + 1)
    if not step_list:
        raise FlagError("--steps: give the steps to try, e.g. --steps 0,1,2,3,4")
    # Each level is a benchmark of every configuration: 16 of them is already hours.
    levels = flags.int_list("--concurrency", concurrency, minimum=1, maximum=MAX_CONCURRENCY, max_items=16) or [1]
    params = _bench_params(levels[0], input_len, output_len, num_prompts, client, None)
    params = replace(params, **_adaptive(num_prompts, target_ci, min_requests, max_requests), need_histogram=predict)
    if predict and params.client == "sglang":
        raise FlagError("--client: --predict needs each request's meta_info and stream, which sglang.bench_serving "
                        "does not keep; use --client builtin or auto")
    if params.target_ci is not None and params.client == "sglang":
        raise FlagError("--client: an adaptive length needs the builtin client; give --num-prompts for "
                        "sglang.bench_serving")
    # A sweep measures: the device timer is on where the version has it, unless --no-measure or `measure: false`.
    base = replace(_measuring(_options(None, None, None, patch_mode, timeout), measure, no_measure), measuring=True)
    inv = _inventory(inventory)
    h = _one_host(inv, host, "sweep")
    from fabfile.commands.sweep import run_sweep
    from fabfile.plan.sweep_nccl import candidates
    from fabfile.plan.sweep_plan import configs

    cands = candidates(None if nccl is None else str(nccl), None if nccl_env is None else str(nccl_env),
                       inv.nccl_presets)
    if predict and adaptive:
        raise FlagError("--adaptive: SGLang's adaptive mode moves its own step count, which --predict cannot model; "
                        "leave one of them out")
    cfgs = configs(h, base, step_list, flags.int_list("--topk", topk, minimum=1, maximum=MAX_TOPK, max_items=MAX_TOPK),
                   flags.int_list("--draft-tokens", draft_tokens, minimum=2, maximum=MAX_DRAFT_TOKENS, max_items=64),
                   cands, adaptive)
    if keep is not None and keep not in {x.name for x in cfgs}:
        raise FlagError(f"--keep: {flags.quote(keep, as_repr=True)} is not one of this sweep's configurations: "
                        f"{', '.join(x.name for x in cfgs)}")
    raise_for(run_sweep(inv, h, cfgs, params, keep=keep, runs_dir=out or "runs", as_json=json, levels=levels,
                        predict=predict, limits=limits, resume=_resume_path(resume), explain=explain))


def _resume_path(value: Any) -> Any:
    from pathlib import Path

    path = flags.path("--resume", value)
    return None if path is None else Path(path).expanduser()


def _adaptive(num_prompts: Any, target_ci: Any, min_requests: Any, max_requests: Any) -> dict[str, Any]:
    """Sweep length: a fixed --num-prompts, or adaptive (default) to ±--target-ci % between the request bounds."""
    from fabfile.errors import FlagError

    adaptive_flags = [f for f, v in (("--target-ci", target_ci), ("--min-requests", min_requests),
                                     ("--max-requests", max_requests)) if v is not None]
    if num_prompts is not None:
        if adaptive_flags:
            raise FlagError(f"{adaptive_flags[0]}: an adaptive length and a fixed --num-prompts exclude each other")
        return {"target_ci": None}
    # ±50 % or more is no measurement at all.
    pct = flags.number("--target-ci", target_ci, minimum=0.0, open_minimum=True, maximum=50.0, open_maximum=True,
                       unit="%", what="a percentage, e.g. 2")
    lo = flags.whole("--min-requests", min_requests, minimum=2, maximum=MAX_REQUESTS) or 8
    hi = flags.whole("--max-requests", max_requests, minimum=2, maximum=MAX_REQUESTS) or 256
    if hi < lo:
        raise FlagError(f"--max-requests: {hi} is below --min-requests {lo}")
    return {"target_ci": (2.0 if pct is None else pct) / 100.0, "min_requests": lo, "num_prompts": hi}


ANALYZE_HELP = {
    "sweep": "a sweep result file (OUT/<host>/sweep-<id>/sweep.json): break-even for each configuration",
    "baseline_ms": "baseline decode time per token, ms (e.g. 12.2)",
    "verify_ms": "one verify pass, ms (e.g. 29 or 18.7); include the draft here if --draft-ms is not given",
    "draft_ms": "draft cost per step, ms (default 0)",
    "steps": "speculative steps (bounds the accept length at steps+1 and multiplies --draft-ms)",
    "accept_len": "the accept length measured (optional: without it, only the break-even is printed)",
    "json": JSON_HELP,
}


@task(help=ANALYZE_HELP)
@cli
def analyze(c: Any, sweep: Any = None, baseline_ms: Any = None, verify_ms: Any = None, draft_ms: Any = None,
            steps: Any = None, accept_len: Any = None, json: bool = False) -> None:
    """Break-even: the accept length each configuration needs to beat the baseline, against what it got."""
    from fabfile.commands.analyze import analyze_file, analyze_numbers
    from fabfile.errors import FlagError

    numbers = {"--baseline-ms": baseline_ms, "--verify-ms": verify_ms, "--draft-ms": draft_ms, "--steps": steps,
               "--accept-len": accept_len}
    given = [k for k, v in numbers.items() if v is not None]
    if sweep is not None:
        if given:
            raise FlagError(f"--sweep: reads the numbers from the file; drop {', '.join(given)}")
        analyze_file(sweep, as_json=json)
        return
    missing = [k for k in ("--baseline-ms", "--verify-ms") if numbers[k] is None]
    if missing:
        raise FlagError(f"{' and '.join(missing)}: required without --sweep "
                        "(e.g. inv analyze --baseline-ms 12.2 --verify-ms 29 --steps 2 --accept-len 1.75)")
    def ms(flag: str, value: Any, zero: bool = False) -> float:
        return flags.number(flag, value, minimum=0.0, open_minimum=not zero, maximum=MAX_MS, unit="ms",
                            what="a number of milliseconds") or 0.0

    analyze_numbers(baseline_ms=ms("--baseline-ms", baseline_ms), verify_ms=ms("--verify-ms", verify_ms),
                    draft_ms=ms("--draft-ms", draft_ms, zero=True),
                    steps=flags.whole("--steps", steps, minimum=1, maximum=MAX_STEPS),
                    accept_len=flags.number("--accept-len", accept_len, minimum=0.0, open_minimum=True,
                                            maximum=MAX_ACCEPT + 1, what="an accept length"), as_json=json)


EXPLAIN_HELP = {
    "from_": "a saved sweep.json, bench result (RUNS/<host>/<id>.json) or profile JSON to explain (default: profile "
            "the running server(s) now, as `inv profile` does)",
    "baseline": "a saved bench (or profile) of the baseline: the decode step the break-even needs (default: the "
                "newest saved baseline bench of the host in ./runs)",
    "rules": "print the rule table (id, threshold, what it points at) and stop",
    "host": "without --from: the host(s) to profile and explain (default: the inventory's default host)",
    "trace": "without --from: also take SGLang's profiler trace (kernels, all-reduces, CUDA graphs)",
    "num_prompts": "without --from: requests of the profile's load (default 16)",
    "concurrency": "without --from: requests in flight (default 1)",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
}


@task(help=EXPLAIN_HELP)
@cli
def explain(c: Any, from_: Any = None, baseline: Any = None, rules: bool = False, json: bool = False,
            host: Any = None, trace: bool = False, num_prompts: Any = None, concurrency: Any = None,
            inventory: Any = None) -> None:
    """Where a speculative cycle's time goes, in sentences: each from measured figures (every one with its source)
    and named by the rule that produced it."""
    from fabfile.errors import FlagError
    from fabfile.present.explain_report import document, print_explained, print_rules
    from fabfile.present.output import out as console
    from fabfile.present.output import show

    if rules:
        from fabfile.plan.explain import rules_table

        show({"rules": rules_table()}, lambda: print_rules(console), as_json=json)
        return
    src, base = flags.path("--from", from_), flags.path("--baseline", baseline)
    live = [f for f, v in (("--host", host), ("--trace", trace), ("--num-prompts", num_prompts),
                           ("--concurrency", concurrency), ("--inventory", inventory)) if v]
    if src is not None and live:
        raise FlagError(f"{live[0]}: only without --from (it measures the running server)")
    from fabfile.commands.explain import explained, load_document

    if src is None:
        from fabfile.commands.explain import explain_running
        from fabfile.commands.profile import ProfileParams
        from fabfile.present.progress import BenchProgress

        params = ProfileParams(load=_bench_params(concurrency, None, None, num_prompts, None, None), trace=trace)
        if base is not None:
            load_document(base, "--baseline")  # bad input is refused before any host is reached
        inv = _inventory(inventory)
        hosts = inv.select(host)
        progress = BenchProgress(",".join(h.name for h in hosts), enabled=not json, prefix="profile ")
        try:
            pairs, docs, code = explain_running(inv, hosts, params, base, "runs", on_event=progress.event)
        finally:
            progress.close()

        def for_people() -> None:
            for d in docs:
                if not d["ok"]:
                    console.print(f"{d['host']}: the profile failed: {(d['error'] or {}).get('message')}",
                                  markup=False)
            print_explained(pairs, console)

        show({**document(pairs), "hosts": docs}, for_people, as_json=json)
        raise_for(code)
        return

    doc = load_document(src)
    pairs = explained(doc, load_document(base, "--baseline") if base else None,
                      f"from {base}" if base else "")
    show(document(pairs), lambda: print_explained(pairs, console), as_json=json)


@task(name="deploy-router", help={
    "router": "which router of the inventory's `routers:` (default: the only one)",
    "timeout": "seconds the router has to answer /health (default 60)",
    "host_timeout": HOST_TIMEOUT_HELP + "; applies to judging the replicas",
    "json": JSON_HELP, "inventory": INVENTORY_HELP})
@cli
def deploy_router(c: Any, router: Any = None, timeout: Any = None, host_timeout: Any = None, json: bool = False,
                  inventory: Any = None) -> None:
    """Start SGLang's router in front of the healthy replicas of a group, on the host the inventory names."""
    from fabfile.commands.router import deploy_router as start_router
    from fabfile.commands.router import pick
    from fabfile.present.output import show
    from fabfile.present.router_report import print_router

    inv = _inventory(inventory)
    r = start_router(inv, pick(inv, router), ready_s=flags.seconds("--timeout", timeout) or 60.0,
                     host_timeout=flags.seconds("--host-timeout", host_timeout))
    show(r, lambda: print_router(r), as_json=json)
    if r.error is not None:
        raise Exit(code=r.error.exit_code)


TRUST_HELP = {
    "host": "the host whose key to fetch and trust (one host)",
    "fingerprint": "the SHA256:... fingerprint you verified out of band; written only if the host offers exactly it",
    "inventory": INVENTORY_HELP,
}


@task(name="trust-host", help=TRUST_HELP)
@cli
def trust_host(c: Any, host: Any = None, fingerprint: Any = None, inventory: Any = None) -> None:
    """First contact: show a host's key fingerprint and add it to known_hosts only when you confirm it."""
    from fabfile.errors import FlagError, HostKeyError
    from fabfile.present.output import out
    from fabfile.transport.trust import already_known, fetch_key, known_hosts_file, trust

    inv = _inventory(inventory)
    hosts = inv.select(host)
    if len(hosts) != 1:
        raise FlagError("--host: trust-host takes one host at a time")
    h = hosts[0]
    if h.connection == "local":
        raise FlagError(f"--host: {h.name} is a local host; there is no SSH key to trust")
    offered = fetch_key(inv, h)
    path = known_hosts_file(inv, h)
    out.print(f"{h.name} ({offered.entry_name}) offers a {offered.key.get_name()} key: {offered.fingerprint}")
    state = already_known(path, offered)
    if state is True:
        out.print(f"already trusted in {path}")
        return
    if state is False:
        raise HostKeyError(f"{path} already holds a DIFFERENT key for {offered.entry_name}; not touching it",
                           f"if the host was reinstalled, verify the new key, then `ssh-keygen -R {offered.entry_name} "
                           f"-f {path}` and run trust-host again", host=h.name)
    confirmed = False
    if fingerprint is None and sys.stdin.isatty():
        answer = input("Did you verify this fingerprint out of band? Type yes to trust it: ")
        confirmed = answer.strip().lower() == "yes"
    trust(path, offered, fingerprint, confirmed)
    out.print(f"trusted: added to {path}")


ADOPT_HELP = {
    "host": "read the SGLang server running on this inventory host (from /proc) and record it as adopted there, "
            "so the next deploy replaces exactly it",
    "command": "a pasted launch line instead (env assignments, nohup, redirections, `&`, even the ssh line)",
    "name": "the host name for the entry (default: --host, else gpu1)",
    "write": "write a new inventory file with the entry (refuses an existing file) instead of printing it",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
}


@task(help=ADOPT_HELP)
@cli
def adopt(c: Any, host: Any = None, command: Any = None, name: Any = None, write: Any = None, json: bool = False,
          inventory: Any = None) -> None:
    """Bring a hand-started server under the tool: its inventory entry, rendering the same command."""
    from pathlib import Path

    from fabfile.commands import adopt as adoption
    from fabfile.errors import FlagError

    if command is None and host is None:
        raise FlagError("--host or --command: say which server to adopt (a running one, or its launch line)")
    write = flags.path("--write", write)
    if write is not None and Path(write).exists():
        raise FlagError(f"--write: {write} already exists; adopt writes a new file (print the entry without "
                        "--write and paste it into your inventory)")
    entry_name = name or host or "gpu1"
    settings: dict[str, str] = {}
    if command is not None:
        entry = adoption.host_entry(adoption.parse_command(str(command)))
        source = "a pasted launch line"
    else:
        inv = _inventory(inventory)
        h = _one_host(inv, host, "adopt")
        entry, source, _ = adoption.from_host(inv, h)
        settings = adoption.connection_settings(inv)
    adoption.validate_entry(entry_name, entry)
    from fabfile.present.output import show

    text = adoption.entry_yaml(entry_name, entry, source, settings)
    if write is not None:
        fd = os.open(write, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def for_people() -> None:
        if write is not None:
            print(f"wrote {write}: `inv render --inventory {write} --host {entry_name}` shows the command")
        else:
            print(text, end="")

    show({"host": entry_name, "entry": entry, "source": source}, for_people, as_json=json)


DIFF_HELP = {
    "host": "the host whose deploys to compare (one host)",
    "old": "the first side: a deploy id, HOST:ID, current or previous (default: previous; current with --new now)",
    "new": "the second side: a deploy id, HOST:ID, current, previous, or now = what render would run now "
         "(default: current)",
    "steps": "with --new now: the steps to render (default: the old deploy's)",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
}


@task(help=DIFF_HELP)
@cli
def diff(c: Any, host: Any = None, old: Any = None, new: Any = None, steps: Any = None, json: bool = False,
         inventory: Any = None) -> None:
    """What changed between two deploys (argv, env, SGLang version, patch mode, patched files, check-env), or
    between a deploy and what render would run now."""
    from fabfile.commands import diff as differ
    from fabfile.errors import FlagError

    step_flag = flags.whole("--steps", steps, minimum=0, maximum=MAX_STEPS)  # checked before any host is asked
    inv = _inventory(inventory)
    hb, rb = differ.parse_ref("--new", str(new if new is not None else "current"))
    # Against what render would run now, the side to compare is what runs now (it compared the previous deploy and
    # said "no difference" while the running configuration differed).
    ha, ra = differ.parse_ref("--old", str(old if old is not None else "current" if rb == differ.NOW else "previous"))
    named = {x for x in (ha, hb, host) if x}
    if len(named) > 1:
        raise FlagError(f"--old/--new: records from different hosts ({', '.join(sorted(named))}); a diff compares the "
                        "deploys of one host", "compare what the hosts run with `inv status --host "
                        f"{','.join(sorted(named))}`")
    if ra == differ.NOW:
        raise FlagError("--old: `now` goes on the new side (--new now); the old side is a recorded deploy")
    if rb != differ.NOW and steps is not None:
        raise FlagError("--steps: only with --new now (a recorded deploy has its own steps)")
    h = _one_host(inv, next(iter(named), None), "diff")
    recs = differ.fetch(inv, h, [ra, rb])
    va = differ.view_of_record(recs[ra])
    if rb == differ.NOW:
        name = str(recs[ra].get("config_name") or "")
        rec_steps = int(name.split("-s", 1)[1].split("-", 1)[0]) if name.startswith("eagle") and "-s" in name \
            else (0 if name == "baseline" else None)
        opts = _options(step_flag if step_flag is not None else rec_steps, None, None, None, None)
        vb = differ.view_of_plan(h, opts, recs[ra])
    else:
        vb = differ.view_of_record(recs[rb])
    va["host"] = vb["host"] = h.name
    rows = differ.compare(va, vb)
    from fabfile.present.diff_report import print_diff
    from fabfile.present.output import show

    show({"host": h.name, "a": va, "b": vb, "differences": rows}, lambda: print_diff(va, vb, rows), as_json=json)


def _explain_baseline(explain: bool, baseline: Any) -> str | None:
    """``--baseline FILE`` of ``inv bench --explain``: only with --explain."""
    from fabfile.errors import FlagError

    if baseline is not None and not explain:
        raise FlagError("--baseline: only with --explain")
    return flags.path("--baseline", baseline)


def _measuring(opts: Any, measure: bool, no_measure: bool) -> Any:
    """The options with ``--measure``/``--no-measure`` (neither: the inventory's ``measure`` decides)."""
    from dataclasses import replace

    from fabfile.errors import FlagError

    if measure and no_measure:
        raise FlagError("--measure and --no-measure: give one of them (or neither: the inventory's `measure`)")
    return replace(opts, measure=True if measure else False if no_measure else None)


def raise_for(code: int) -> None:
    if code:
        raise Exit(code=code)


ns = Collection(deploy, render, stop, status, logs, watch, check_env, rollback_patches, gpus, bench, sweep, analyze,
                deploy_router, trust_host, adopt, diff, cancel, profile)
ns.add_task(explain)
