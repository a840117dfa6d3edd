"""specdeploy command line: `inv deploy --host gpu1 --steps 3`, `inv check-env`, `inv rollback-patches`, ...

This file is only the CLI: flags, their validation, and errors mapped to exit codes (0 ok, 1 failed, 2 bad input
with nothing touched). Every flag is a flag, never a positional, so `inv deploy --help` cannot run a deploy.
The work lives in the fabfile/ library.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from invoke.collection import Collection
from invoke.exceptions import Exit
from invoke.tasks import task

F = TypeVar("F", bound=Callable[..., Any])

INVENTORY_HELP = "inventory file (default: $SPECDEPLOY_INVENTORY or ./inventory.yaml)"
HOST_HELP = "host, group, or comma list of them (default: the inventory's default host)"
JSON_HELP = "print one JSON document on stdout instead of tables"


def cli(fn: F) -> F:
    """Map the tool's errors to exit codes and sentences; never show a traceback for a failure we understand."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from fabfile.errors import SpecDeployError
        from fabfile.output import print_error

        try:
            return fn(*args, **kwargs)
        except SpecDeployError as e:
            print_error(e)
            raise Exit(code=e.exit_code) from None
        except KeyboardInterrupt:
            raise Exit("interrupted. A deploy already started on a host finishes there (or tears itself down); "
                       "`inv status` shows the outcome.", code=130) from None

    return wrapper  # type: ignore[return-value]


def _int(flag: str, value: Any, minimum: int = 0) -> int | None:
    from fabfile.errors import FlagError

    if value is None:
        return None
    try:
        n = int(str(value).strip())
    except ValueError:
        raise FlagError(f"{flag}: expected a whole number, got {value!r}") from None
    if n < minimum:
        raise FlagError(f"{flag}: must be {minimum} or more, got {n}")
    return n


def _float(flag: str, value: Any) -> float | None:
    from fabfile.errors import FlagError

    if value is None:
        return None
    try:
        x = float(str(value).strip())
    except ValueError:
        raise FlagError(f"{flag}: expected a number of seconds, got {value!r}") from None
    if x <= 0:
        raise FlagError(f"{flag}: must be positive, got {value}")
    return x


def _inventory(path: str | None) -> Any:
    from fabfile import inventory

    return inventory.load(path or os.environ.get("SPECDEPLOY_INVENTORY") or "inventory.yaml")


def _options(steps: Any, topk: Any, draft_tokens: Any, patch_mode: Any, timeout: Any, verify: bool = True) -> Any:
    from fabfile.errors import FlagError
    from fabfile.inventory import PATCH_MODES
    from fabfile.plan import Options

    if patch_mode is not None and patch_mode not in PATCH_MODES:
        raise FlagError(f"--patch-mode: unknown mode {patch_mode!r}; choose one of {', '.join(PATCH_MODES)}")
    return Options(steps=_int("--steps", steps), topk=_int("--topk", topk, 1),
                   draft_tokens=_int("--draft-tokens", draft_tokens, 1), patch_mode=patch_mode,
                   timeout=_float("--timeout", timeout), verify=verify)


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
}


@task(help=DEPLOY_HELP)
@cli
def deploy(c: Any, host: Any = None, steps: Any = None, topk: Any = None, draft_tokens: Any = None,
           patch_mode: Any = None, timeout: Any = None, dry_run: bool = False, json: bool = False,
           inventory: Any = None, no_verify: bool = False) -> None:
    """Deploy SGLang (EAGLE-3 unless --steps 0) to host(s): patch, stop stale, start, wait ready, verify env."""
    inv = _inventory(inventory)
    opts = _options(steps, topk, draft_tokens, patch_mode, timeout, verify=not no_verify)
    hosts = inv.select(host)
    if dry_run:
        _render(inv, hosts, opts, json)
        return
    from fabfile.deploy import deploy_host
    from fabfile.output import deploy_summary, print_json
    from fabfile.plan import build
    from fabfile.progress import Reporter

    for h in hosts:  # validate every host's plan before touching the first
        build(h, opts)
    results = []
    for h in hosts:
        r = deploy_host(inv, h, opts, Reporter(h.name))
        results.append(r)
        if not json:
            deploy_summary(r)
    if json:
        docs = [r.as_dict() for r in results]
        print_json(docs[0] if len(docs) == 1 else {"ok": all(r.ok for r in results), "hosts": docs})
    failed = [r for r in results if not r.ok]
    if failed:
        raise Exit(code=max(r.error.exit_code if r.error else 1 for r in failed))


def _render(inv: Any, hosts: list[Any], opts: Any, as_json: bool) -> None:
    from fabfile.output import print_json
    from fabfile.render_plan import describe, plan_document

    docs = [plan_document(h, opts) for h in hosts]
    if as_json:
        print_json(docs[0] if len(docs) == 1 else {"hosts": docs})
    else:
        for d in docs:
            describe(d)


@task(help={k: DEPLOY_HELP[k] for k in ("host", "steps", "topk", "draft_tokens", "patch_mode", "timeout", "json",
                                        "inventory")})
@cli
def render(c: Any, host: Any = None, steps: Any = None, topk: Any = None, draft_tokens: Any = None,
           patch_mode: Any = None, timeout: Any = None, json: bool = False, inventory: Any = None) -> None:
    """Print what a deploy would do (the plan and every rendered file) without touching any host."""
    inv = _inventory(inventory)
    _render(inv, inv.select(host), _options(steps, topk, draft_tokens, patch_mode, timeout), json)


@task(help={"host": HOST_HELP, "dry_run": "list what would be stopped, stop nothing", "json": JSON_HELP,
            "inventory": INVENTORY_HELP})
@cli
def stop(c: Any, host: Any = None, dry_run: bool = False, json: bool = False, inventory: Any = None) -> None:
    """Stop the SGLang server(s) on host(s): TERM, grace, KILL; confirms every process is gone."""
    from fabfile.operations import stop_hosts

    inv = _inventory(inventory)
    raise_for(stop_hosts(inv, inv.select(host), dry_run=dry_run, as_json=json))


@task(help={"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP})
@cli
def status(c: Any, host: Any = None, json: bool = False, inventory: Any = None) -> None:
    """Show what runs on host(s): config, pid, uptime, health, accept length."""
    from fabfile.operations import status_hosts

    inv = _inventory(inventory)
    raise_for(status_hosts(inv, inv.select(host), as_json=json))


@task(help={"host": HOST_HELP, "follow": "keep printing new lines (Ctrl-C to stop)",
            "lines": "how many lines of the end to show first (default 50)",
            "timeout": "with --follow, stop after this many seconds (default 3600)", "inventory": INVENTORY_HELP})
@cli
def logs(c: Any, host: Any = None, follow: bool = False, lines: Any = None, timeout: Any = None,
         inventory: Any = None) -> None:
    """Print the server log of a host (the current deploy's log file)."""
    from fabfile.operations import show_logs

    inv = _inventory(inventory)
    hosts = inv.select(host)
    if len(hosts) != 1:
        from fabfile.errors import FlagError

        raise FlagError("--host: logs reads one host at a time")
    show_logs(inv, hosts[0], lines=_int("--lines", lines, 1) or 50, follow=follow,
              follow_s=_float("--timeout", timeout) or 3600.0)


@task(name="check-env", help={"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP})
@cli
def check_env(c: Any, host: Any = None, json: bool = False, inventory: Any = None) -> None:
    """Prove, per scheduler rank, that every expected NCCL variable reached the worker (exit 1 if not)."""
    from fabfile.operations import check_env_hosts

    inv = _inventory(inventory)
    raise_for(check_env_hosts(inv, inv.select(host), as_json=json))


@task(name="rollback-patches", help={"host": HOST_HELP, "dry_run": "say what would be restored, change nothing",
                                     "json": JSON_HELP, "inventory": INVENTORY_HELP})
@cli
def rollback_patches(c: Any, host: Any = None, dry_run: bool = False, json: bool = False,
                     inventory: Any = None) -> None:
    """Restore every patched SGLang file byte for byte and remove plugin/sitecustomize installs."""
    from fabfile.operations import rollback_hosts

    inv = _inventory(inventory)
    raise_for(rollback_hosts(inv, inv.select(host), dry_run=dry_run, as_json=json))


@task(help={"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP})
@cli
def gpus(c: Any, host: Any = None, json: bool = False, inventory: Any = None) -> None:
    """Show GPUs and the processes holding them on host(s)."""
    from fabfile.operations import gpus_hosts

    inv = _inventory(inventory)
    raise_for(gpus_hosts(inv, inv.select(host), as_json=json))


def raise_for(code: int) -> None:
    if code:
        raise Exit(code=code)


ns = Collection(deploy, render, stop, status, logs, check_env, rollback_patches, gpus)
