"""``inv deploy-router``: SGLang's router (``python -m sglang_router.launch_router --worker-urls ...``) in front of
the healthy replicas of a group, on the host the inventory names.

The replicas are judged first (the ``status`` verb on each member, in parallel, each bounded): only members whose
server runs and answers its readiness endpoint become worker URLs (``http://ADDRESS:PORT``, the address other hosts
reach it by). The router is then started detached on its host, health-checked on ``/health`` like a server, and
recorded there (``STATE/routers/NAME.json``), so ``inv status`` shows it.
"""

from __future__ import annotations

import shlex
from typing import Any

from fabfile.commands.fanout import for_each_host
from fabfile.commands.result import CommandResult
from fabfile.errors import FlagError, LaunchError, SpecDeployError
from fabfile.flags import quote
from fabfile.inventory.hosts import Host, Inventory, Router
from fabfile.plan.argv import opt
from fabfile.render.jinja import shell_path
from fabfile.results.deploys import RouterResult
from fabfile.transport.session import HostSession


def pick(inv: Inventory, name: str | None) -> Router:
    if not inv.routers:
        raise FlagError(f"--router: {inv.path} defines no `routers:`",
                        "add a routers: section (see docs/reference.md, Fleets)")
    if name is None:
        if len(inv.routers) == 1:
            return next(iter(inv.routers.values()))
        raise FlagError(f"--router: the inventory defines {len(inv.routers)} routers; name one of "
                        f"{', '.join(sorted(inv.routers))}")
    if name not in inv.routers:
        raise FlagError(f"--router: unknown router {quote(name, as_repr=True)}; known: "
                        f"{', '.join(sorted(inv.routers))}")
    return inv.routers[name]


def healthy_workers(inv: Inventory, router: Router, host_timeout: float | None) -> tuple[list[str], dict[str, str]]:
    members = [inv.hosts[m] for m in router.members]
    outcomes = for_each_host(inv, members, lambda s: s.status(),
                             host_timeout=host_timeout or max(h.timeouts.host for h in members))
    workers: list[str] = []
    skipped: dict[str, str] = {}
    for o in outcomes:
        h = o.host
        if o.error is not None:
            skipped[h.name] = f"unreachable: {o.error.message}"
            continue
        answer = o.answer
        health = (answer.get("health") or {}).get("status")
        if not answer.get("running"):
            skipped[h.name] = "no server running"
        elif health != 200:
            skipped[h.name] = f"not healthy ({(answer.get('health') or {}).get('path')} answered {health})"
        elif h.name != router.host and h.listen in ("127.0.0.1", "localhost", "::1"):
            skipped[h.name] = f"listens on {h.listen} only; set `listen: 0.0.0.0` for it so the router can reach it"
        else:
            workers.append(worker_url(router, h))
    return workers, skipped


def worker_url(router: Router, h: Host) -> str:
    """How ``router`` reaches replica ``h`` (the URL it was given, and the one it lists)."""
    addr = "127.0.0.1" if h.name == router.host and h.listen in ("127.0.0.1", "localhost") else h.address
    return f"http://{addr}:{h.port}"


def routers_of(inv: Inventory, h: Host) -> list[Router]:
    return [r for r in inv.routers.values() if h.name in r.members]


def drain(inv: Inventory, h: Host, *, back: bool) -> list[str]:
    """Take replica ``h`` out of every router of the inventory that fronts it (``back``: put it back), through the
    router's host. A router that is not running is skipped; what happened comes back as sentences. Errors are
    sentences too, never raised: a router that cannot be told must not stop a deploy (its own health checks
    still find a restarted replica, only later)."""
    notes: list[str] = []
    for r in routers_of(inv, h):
        url = worker_url(r, h)
        host = inv.hosts[r.host]
        try:
            with HostSession.open(inv, host) as s:
                data = s.router_worker(r.name, url, back=back, drain_s=r.drain_s)
        except SpecDeployError as e:
            if (e.details or {}).get("agent_kind") == "not_running":
                continue
            notes.append(f"router {r.name}: could not {'add' if back else 'remove'} {url}: {e.message}")
            continue
        if back:
            notes.append(f"router {r.name}: {url} is back in")
        elif data.get("removed"):
            notes.append(f"router {r.name}: {url} taken out (in-flight requests drained in "
                         f"{data.get('drained_s', 0):.1f} s)")
    return notes


def router_argv(router: Router, workers: list[str]) -> list[str]:
    # --worker-urls is nargs='+' (its URLs follow as words; the tool builds them as http://...); every other value
    # in the same word as its flag, so argparse reads it as that value whatever it starts with (plan/argv.py).
    return [router.python, "-m", "sglang_router.launch_router", "--worker-urls", *workers, opt("--host", router.listen),
            opt("--port", router.port), opt("--policy", router.policy), *router.args]


def launch_script(router: Router, argv: list[str], cwd: str) -> str:
    # Names go into the comment through repr-like escaping: a newline in one must not become a command.
    what = f"router {router.name} in front of {router.group}".encode("unicode_escape").decode("ascii")
    return ("#!/bin/sh\n"
            f"# specdeploy: {what}\n"
            f"cd {shell_path(cwd)} || exit 1\n"
            "exec env -i HOME=\"$HOME\" PATH=\"$PATH\" LANG=C.UTF-8 PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 "
            f"{shlex.join(argv)}\n")


def deploy_router(inv: Inventory, router: Router, *, ready_s: float = 60.0,
                  host_timeout: float | None = None) -> RouterResult:
    from fabfile.present.hosts_report import router_url

    result = RouterResult(router, url=router_url(inv.hosts[router.host], router.listen, router.port))
    try:
        result.workers, result.skipped = healthy_workers(inv, router, host_timeout)
        if not result.workers:
            raise LaunchError(f"no healthy replica in {router.group} to route to",
                              "deploy the group first (`inv deploy --host GROUP`); `inv status` shows why "
                              "each one is left out", skipped=result.skipped)
        host = inv.hosts[router.host]
        argv = router_argv(router, result.workers)
        state = host.state_dir.rstrip("/")
        script = f"{state}/router-{router.name}.sh"
        with HostSession.open(inv, host) as s:
            s.transport.put(launch_script(router, argv, host.log_dir).encode(), script, 0o700)
            data = s.router_start(name=router.name, script=script,
                                  log_path=f"{host.log_dir.rstrip('/')}/router-{router.name}.log",
                                  listen=router.listen, port=router.port, workers=result.workers,
                                  policy=router.policy, argv=argv, ready_s=ready_s)
        result.record = data["record"]
    except SpecDeployError as e:
        if e.host is None:
            e.host = router.host
        result.error = e
    return result


def deploy_router_command(inv: Inventory, router: Router, *, ready_s: float = 60.0,
                          host_timeout: float | None = None) -> CommandResult:
    """``inv deploy-router``: the router started (or why not), for the command line."""
    from fabfile.present.router_report import print_router

    r = deploy_router(inv, router, ready_s=ready_s, host_timeout=host_timeout)
    return CommandResult(r, lambda: print_router(r), r.error.exit_code if r.error is not None else 0)


def stop_router(inv: Inventory, router: Router) -> CommandResult:
    """``inv stop --router NAME``: stop the router on its host (TERM, grace, KILL, confirmed gone)."""
    from fabfile.present.router_report import print_router_stop

    host = inv.hosts[router.host]
    doc: dict[str, Any] = {"router": router.name, "host": router.host, "ok": True}
    error: SpecDeployError | None = None
    try:
        with HostSession.open(inv, host) as s:
            data = s.router_stop(router.name)
        doc["stopped"] = data.get("stopped") or []
    except SpecDeployError as e:
        if e.host is None:
            e.host = router.host
        doc.update(ok=False, error=e.as_dict())
        error = e
    return CommandResult(doc, lambda: print_router_stop(doc, error), error.exit_code if error is not None else 0)
