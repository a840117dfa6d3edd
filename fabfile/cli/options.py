"""From flags to a command's typed options: each value read by the one parser (fabfile/flags.py), the defaults
filled in, the flags that go together checked. Imports inside each function, as the tasks do: `inv --list` imports
none of the library."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from fabfile import flags
from fabfile.flags import (
    MAX_ACCEPT,
    MAX_CONCURRENCY,
    MAX_DRAFT_TOKENS,
    MAX_MS,
    MAX_REQUESTS,
    MAX_STEPS,
    MAX_TOK_S,
    MAX_TOKENS,
    MAX_TOPK,
)

if TYPE_CHECKING:  # the options' types are annotations only: `inv --list` imports none of the library
    from pathlib import Path

    from fabfile.commands.bench import BenchParams
    from fabfile.inventory.hosts import Inventory
    from fabfile.plan.deploy_plan import Options
    from fabfile.plan.sla import Limits


class SweepLength(TypedDict, total=False):
    """A sweep's length as ``BenchParams`` fields: fixed (``target_ci`` None) or adaptive between request bounds."""

    target_ci: float | None
    min_requests: int
    num_prompts: int


def inventory(path: str | None, lock_wait: Any = None) -> Inventory:
    """The inventory (``--inventory``, else $SPECDEPLOY_INVENTORY, else ./inventory.yaml), with ``--lock-wait``."""
    from fabfile.inventory.hosts import find, with_lock_wait

    return with_lock_wait(find(path), flags.seconds("--lock-wait", lock_wait, zero=True))


def deploy(steps: Any, topk: Any, draft_tokens: Any, patch_mode: Any, timeout: Any, verify: bool = True,
           accept_gate: Any = None) -> Options:
    """A deploy's (and render's, a sweep's base) ``Options`` from its flags."""
    from fabfile.errors import Collector
    from fabfile.plan.deploy_plan import Options
    from fabfile.remote.patch.modes import PATCH_MODES

    found = Collector()  # every bad flag at once, one line each
    values = dict(
        steps=found.check(flags.whole, "--steps", steps, minimum=0, maximum=MAX_STEPS),
        topk=found.check(flags.whole, "--topk", topk, minimum=1, maximum=MAX_TOPK),
        draft_tokens=found.check(flags.whole, "--draft-tokens", draft_tokens, minimum=1, maximum=MAX_DRAFT_TOKENS),
        patch_mode=found.check(flags.choice, "--patch-mode", patch_mode, PATCH_MODES, what="mode"),
        timeout=found.check(flags.seconds, "--timeout", timeout),
        accept_gate=found.check(flags.number, "--accept-gate", accept_gate, minimum=0.0, maximum=MAX_ACCEPT,
                                open_maximum=True, what="an accept length (e.g. 1.1, or 0 for no gate)"))
    found.done()
    return Options(verify=verify, **values)


def bench(concurrency: Any, input_len: Any, output_len: Any, num_prompts: Any, client: Any,
          timeout: Any) -> BenchParams:
    """A benchmark's load (``BenchParams``: bench, profile, explain, a sweep's first level), defaults filled in."""
    from fabfile.commands.bench import CLIENTS, BenchParams
    from fabfile.errors import Collector

    found = Collector()  # every bad flag at once, one line each
    found.check(flags.choice, "--client", client, CLIENTS, what="client")
    d = BenchParams()
    concurrency = found.check(flags.whole, "--concurrency", concurrency, minimum=1, maximum=MAX_CONCURRENCY)
    input_len = found.check(flags.whole, "--input-len", input_len, minimum=1, maximum=MAX_TOKENS)
    output_len = found.check(flags.whole, "--output-len", output_len, minimum=2, maximum=MAX_TOKENS)
    num_prompts = found.check(flags.whole, "--num-prompts", num_prompts, minimum=1, maximum=MAX_REQUESTS)
    seconds = found.check(flags.seconds, "--timeout", timeout)
    found.done()
    return BenchParams(concurrency=concurrency or d.concurrency, input_len=input_len or d.input_len,
                       output_len=output_len or d.output_len, num_prompts=num_prompts or d.num_prompts,
                       client=client or d.client, timeout=seconds)


def resume_path(value: Any) -> Path | None:
    """``sweep --resume DIR`` as a path (``~`` expanded)."""
    from pathlib import Path

    path = flags.path("--resume", value)
    if path is None:
        return None
    try:
        return Path(path).expanduser()
    except RuntimeError:  # "~name" of no user on this machine
        from fabfile.errors import FlagError

        raise FlagError(f"--resume: {flags.quote(path)} names the home of no user here; "
                        "give the sweep's folder") from None


def sweep_length(num_prompts: Any, target_ci: Any, min_requests: Any, max_requests: Any) -> SweepLength:
    """Sweep length: a fixed --num-prompts, or adaptive (default) to ±--target-ci % between the request bounds."""
    from fabfile.errors import FlagError

    flags.only_with(num_prompts is None, "an adaptive length and a fixed --num-prompts exclude each other",
                    ("--target-ci", target_ci), ("--min-requests", min_requests), ("--max-requests", max_requests))
    if num_prompts is not None:
        return {"target_ci": None}
    # ±50 % or more is no measurement at all.
    pct = flags.number("--target-ci", target_ci, minimum=0.0, open_minimum=True, maximum=50.0, open_maximum=True,
                       unit="%", what="a percentage, e.g. 2")
    lo = flags.whole("--min-requests", min_requests, minimum=2, maximum=MAX_REQUESTS) or 8
    hi = flags.whole("--max-requests", max_requests, minimum=2, maximum=MAX_REQUESTS) or 256
    if hi < lo:
        raise FlagError(f"--max-requests: {hi} is below --min-requests {lo}")
    return {"target_ci": (2.0 if pct is None else pct) / 100.0, "min_requests": lo, "num_prompts": hi}


def explain_baseline(explain: bool, baseline: Any) -> str | None:
    """``--baseline FILE`` of ``inv bench --explain``: only with --explain."""
    flags.only_with(explain, "only with --explain", ("--baseline", baseline))
    return flags.path("--baseline", baseline)


def measuring(opts: Options, measure: bool, no_measure: bool) -> Options:
    """The options with ``--measure``/``--no-measure`` (neither: the inventory's ``measure`` decides)."""
    from dataclasses import replace

    from fabfile.errors import FlagError

    if measure and no_measure:
        raise FlagError("--measure and --no-measure: give one of them (or neither: the inventory's `measure`)")
    return replace(opts, measure=True if measure else False if no_measure else None)


def limit(flag: str, value: Any, maximum: float, unit: str, what: str) -> float | None:
    """One service limit of `inv sweep` and `inv tune`: > 0 and bounded, or absent."""
    return flags.number(flag, value, minimum=0.0, open_minimum=True, maximum=maximum, unit=unit, what=what)


def sla_limits(max_ttft_ms: Any, max_tpot_ms: Any, min_tok_s: Any) -> Limits:
    """The service limits of `inv tune` (``plan.sla.Limits``), each through ``limit``."""
    from fabfile.plan.sla import Limits

    return Limits(max_ttft_ms=limit("--max-ttft-ms", max_ttft_ms, MAX_MS, "ms", "a number of milliseconds"),
                  max_tpot_ms=limit("--max-tpot-ms", max_tpot_ms, MAX_MS, "ms", "a number of milliseconds"),
                  min_tok_s=limit("--min-tok-s", min_tok_s, MAX_TOK_S, "tok/s", "a number of tokens per second"))
