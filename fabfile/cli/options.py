"""From flags to a command's typed options: each value read by its spec (fabfile/cli/flagspec.py, through the one
parser, fabfile/flags.py), the defaults filled in, the flags that go together checked. Each function takes the task
whose flags it reads (`--steps` is one number for a deploy, a comma list for a sweep). Imports inside each function,
as the tasks do: `inv --list` imports none of the library."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from fabfile import flags
from fabfile.cli.flagspec import read

if TYPE_CHECKING:  # the options' types are annotations only: `inv --list` imports none of the library
    from fabfile.commands.bench import BenchParams
    from fabfile.inventory.hosts import Inventory
    from fabfile.plan.deploy_plan import Options
    from fabfile.plan.sla import Limits


class SweepLength(TypedDict, total=False):
    """A sweep's length as ``BenchParams`` fields: fixed (``target_ci`` None) or adaptive between request bounds."""

    target_ci: float | None
    min_requests: int
    num_prompts: int


def inventory(path: str | None, lock_wait: float | None = None) -> Inventory:
    """The inventory (``--inventory``, else $SPECDEPLOY_INVENTORY, else ./inventory.yaml), with ``--lock-wait`` (read
    by its spec: seconds, 0 = refuse at once)."""
    from fabfile.inventory.hosts import find, with_lock_wait

    return with_lock_wait(find(path), lock_wait)


def deploy(task: str, steps: Any, topk: Any, draft_tokens: Any, patch_mode: Any, timeout: Any, verify: bool = True,
           accept_gate: Any = None) -> Options:
    """A deploy's (and render's, a sweep's base) ``Options`` from its flags."""
    from fabfile.errors import Collector
    from fabfile.plan.deploy_plan import Options

    found = Collector()  # every bad flag at once, one line each
    values = {k: found.check(read, task, k, v) for k, v in (("steps", steps), ("topk", topk),
                                                             ("draft_tokens", draft_tokens), ("patch_mode", patch_mode),
                                                             ("timeout", timeout), ("accept_gate", accept_gate))}
    found.done()
    return Options(verify=verify, **values)


def bench(task: str, concurrency: Any = None, input_len: Any = None, output_len: Any = None, num_prompts: Any = None,
          client: Any = None, timeout: Any = None) -> BenchParams:
    """A benchmark's load (``BenchParams``: bench, profile, explain, tune, a sweep's first level), defaults filled
    in."""
    from fabfile.commands.bench import BenchParams
    from fabfile.errors import Collector

    found = Collector()  # every bad flag at once, one line each
    client = found.check(read, task, "client", client)
    d = BenchParams()
    concurrency = found.check(read, task, "concurrency", concurrency)
    input_len = found.check(read, task, "input_len", input_len)
    output_len = found.check(read, task, "output_len", output_len)
    num_prompts = found.check(read, task, "num_prompts", num_prompts)
    seconds = found.check(read, task, "timeout", timeout)
    found.done()
    return BenchParams(concurrency=concurrency or d.concurrency, input_len=input_len or d.input_len,
                       output_len=output_len or d.output_len, num_prompts=num_prompts or d.num_prompts,
                       client=client or d.client, timeout=seconds)


def sweep_length(num_prompts: Any, target_ci: Any, min_requests: Any, max_requests: Any) -> SweepLength:
    """Sweep length: a fixed --num-prompts, or adaptive (default) to ±--target-ci % between the request bounds."""
    from fabfile.errors import FlagError

    flags.only_with(num_prompts is None, "an adaptive length and a fixed --num-prompts exclude each other",
                    ("--target-ci", target_ci), ("--min-requests", min_requests), ("--max-requests", max_requests))
    if num_prompts is not None:
        return {"target_ci": None}
    pct = read("sweep", "target_ci", target_ci)
    lo = read("sweep", "min_requests", min_requests) or 8
    hi = read("sweep", "max_requests", max_requests) or 256
    if hi < lo:
        raise FlagError(f"--max-requests: {hi} is below --min-requests {lo}")
    return {"target_ci": (2.0 if pct is None else pct) / 100.0, "min_requests": lo, "num_prompts": hi}


def explain_baseline(explain: bool, baseline: Any) -> str | None:
    """``--baseline FILE`` of ``inv bench --explain``: only with --explain."""
    flags.only_with(explain, "only with --explain", ("--baseline", baseline))
    path: str | None = read("bench", "baseline", baseline)
    return path


def measuring(opts: Options, measure: bool, no_measure: bool) -> Options:
    """The options with ``--measure``/``--no-measure`` (neither: the inventory's ``measure`` decides)."""
    from dataclasses import replace

    from fabfile.errors import FlagError

    if measure and no_measure:
        raise FlagError("--measure and --no-measure: give one of them (or neither: the inventory's `measure`)")
    return replace(opts, measure=True if measure else False if no_measure else None)


def sla_limits(task: str, max_ttft_ms: Any, max_tpot_ms: Any, min_tok_s: Any) -> Limits:
    """The service limits of `inv sweep` and `inv tune` (``plan.sla.Limits``), every bad one said at once."""
    from fabfile.errors import Collector
    from fabfile.plan.sla import Limits

    found = Collector()
    limits = Limits(max_ttft_ms=found.check(read, task, "max_ttft_ms", max_ttft_ms),
                    max_tpot_ms=found.check(read, task, "max_tpot_ms", max_tpot_ms),
                    min_tok_s=found.check(read, task, "min_tok_s", min_tok_s))
    found.done()
    return limits
