"""The commands besides deploy (stop, status, logs, check-env, rollback-patches, gpus, cancel), on one host or many.

Read-only commands run on all selected hosts in parallel with a cap, so one slow host does not hold up the rest;
each host's work is bounded by its own connect and command timeouts. Each command returns a ``HostsResult`` (every
host's outcome and the exit code: 0 when every host succeeded, else the worst host's code); its ``*_hosts`` form
returns it with how people see it (one table, ``fabfile.present.hosts_report``): a ``CommandResult`` the command line
prints, tables or one JSON document, and exits with.
"""

from __future__ import annotations

import threading
from typing import Any

from fabfile.commands.fanout import for_each_host
from fabfile.commands.result import CommandResult
from fabfile.inventory.hosts import Host, Inventory
from fabfile.present import hosts_report as report
from fabfile.present.output import terminal_safe
from fabfile.results.hosts import CancelResult, CheckEnvResult, HostsResult, StatusResult, StopResult
from fabfile.transport.session import HostSession


# -- stop -----------------------------------------------------------------------------------------------------
def stop(inv: Inventory, hosts: list[Host], *, dry_run: bool, host_timeout: float | None = None) -> HostsResult:
    def work(s: HostSession) -> Any:
        return s.stop(dry_run=dry_run)

    # Every host at once, each bounded: a host whose sshd hangs is reported as timed out, the others still stop.
    bound = host_timeout if host_timeout is not None else \
        max(h.timeouts.host + 3 * h.timeouts.stop_grace + h.timeouts.lock_wait for h in hosts)
    return StopResult(for_each_host(inv, hosts, work, host_timeout=bound))


def stop_hosts(inv: Inventory, hosts: list[Host], *, dry_run: bool,
               host_timeout: float | None = None) -> CommandResult:
    r = stop(inv, hosts, dry_run=dry_run, host_timeout=host_timeout)
    return CommandResult(r, lambda: report.print_stop(r, dry_run=dry_run), r.exit_code)


# -- status ---------------------------------------------------------------------------------------------------
def server_view(d: dict[str, Any]) -> dict[str, Any]:
    """What a ``status`` answer says runs on the host, in one place for ``inv status`` and a rollout's table.

    ``state``: running (its process is alive and its readiness endpoint answers 200) | not ready (it answers
    something else) | no answer (alive, but its endpoint does not answer: hung, or busy past the probe) | hung
    (its process is stopped by a signal) | deploying (a deploy holds the host's lock) | exited (the record says
    running, but its process is gone) | stopped | failed | none (no deploy recorded). ``problem``: a sentence when
    the host is not in the state its record intends; ``config``/``pid``: the server that runs now, else None.
    ``serving``: a server of ours is alive and its readiness endpoint answered 200 just now (during a deploy: the
    one it has not stopped yet, or the one it started), or a router of ours answers; ``idle``: why nothing serves,
    when that is no problem of the record's (stopped, none, a deploy under way). ``inv status`` exits 1 unless
    every host serves.
    """
    rec = d.get("record") or {}
    health = d.get("health") or {}
    code = health.get("status")
    in_progress = d.get("deploy_in_progress")
    new_server = d.get("deploying_server") or {}
    view: dict[str, Any] = {"state": "none", "config": None, "pid": None, "deploy_id": rec.get("deploy_id"),
                            "health": code, "health_path": health.get("path"), "problem": None,
                            "serving": bool(d.get("running")) and d.get("process_state") != "T" and code == 200,
                            "idle": None}
    # A router of ours that runs and answers /health serves the host's clients, with or without a server beside it.
    routed = any(r.get("running") and r.get("health") == 200 for r in d.get("routers") or [])
    if d.get("running"):
        view.update(config=rec.get("config_name"), pid=rec.get("pid"))
        if d.get("process_state") == "T":
            view["state"] = "hung"
            view["problem"] = f"the server (pid {rec.get('pid')}) is stopped by a signal (SIGSTOP?): it serves nothing"
        elif code == 200:
            view["state"] = "running"
        elif code is None:
            view["state"] = "no answer"
            view["problem"] = f"the server runs but {health.get('path')} did not answer: it may hang"
        else:
            view["state"] = "not ready"
            view["problem"] = f"the server runs but {health.get('path')} answered {code}"
    elif rec:
        status = str(rec.get("status") or "none")
        view["state"] = "exited" if status == "running" else status
        if status == "running":
            view["problem"] = (f"deploy {rec.get('deploy_id')} is recorded as running, but its server (pid "
                               f"{rec.get('pid')}) is gone")
        elif status == "failed":
            # The host serves nothing because its last deploy failed: a problem (exit 1), not a state to pass by.
            view["problem"] = (f"deploy {rec.get('deploy_id')} ({rec.get('config_name')}) failed and nothing "
                               "serves: `inv logs` shows why; deploy again, or start the one before it with "
                               "`inv deploy --previous`")
        elif status == "stopped":
            view["idle"] = (f"nothing serves: deploy {rec.get('deploy_id')} ({rec.get('config_name')}) was stopped "
                            "(`inv stop`); `inv deploy` starts a server again")
        else:
            view["idle"] = (f"nothing serves: deploy {rec.get('deploy_id')} ({rec.get('config_name')}) is recorded "
                            f"as {status} and no process of it runs; `inv deploy` starts a server again")
    else:
        view["idle"] = "nothing serves: no deploy is recorded on this host; `inv deploy` starts one"
    if routed:
        view["serving"], view["idle"] = True, None
    if in_progress:
        # A deploy owns the host right now: what its server is doing is its business until it ends.
        view["state"] = "deploying"
        view["problem"] = None
        view["idle"] = None if view["serving"] else (
            f"nothing serves yet: deploy {in_progress.get('deploy_id')} is under way (step "
            f"{in_progress.get('step', '?')}) and no server of ours answers its readiness endpoint; `inv status` "
            "again when it ends")
        view["deploy_id"] = in_progress.get("deploy_id")
        if new_server:
            view.update(config=new_server.get("config_name"), pid=new_server.get("pid"), health=None)
    return view


def status(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None) -> HostsResult:
    """Each host's ``status`` answer, with its :func:`server_view` under ``data["state"]``."""
    outcomes = for_each_host(inv, hosts, lambda s: s.status(), host_timeout=_bound(hosts, host_timeout))
    for o in outcomes:
        if o.ok:
            o.data["state"] = server_view(o.data)
    # Exit 1 unless every host serves: a server that runs but does not answer, a record that disagrees with the
    # host, and a host where nothing serves (stopped, none, a deploy under way without a server up) alike.
    return StatusResult(outcomes)


def status_hosts(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None) -> CommandResult:
    r = status(inv, hosts, host_timeout=host_timeout)
    return CommandResult(r, lambda: report.print_status(r), r.exit_code)


def _bound(hosts: list[Host], flag: float | None) -> float:
    return flag if flag is not None else max(h.timeouts.host for h in hosts)


# -- logs -----------------------------------------------------------------------------------------------------
def show_logs(inv: Inventory, hosts: list[Host], *, lines: int, follow: bool, follow_s: float,
              host_timeout: float | None = None) -> int:
    """The server log of each host; with several hosts every line is prefixed with its host's name. Lines print
    as they arrive (no JSON form: a log is a stream)."""
    prefix = len(hosts) > 1
    width = max(len(h.name) for h in hosts)
    lock = threading.Lock()
    collected: dict[str, list[str]] = {h.name: [] for h in hosts}
    answered: set[str] = set()

    def work(s: HostSession) -> Any:
        name = s.host.name
        from fabfile.plan.deploy_plan import mask_secrets, secret_values

        hidden = secret_values(s.host)

        def on_event(ev: dict[str, Any]) -> None:
            answered.add(name)
            got = [terminal_safe(mask_secrets(str(x), hidden)) for x in ev.get("lines") or []]
            if follow or not prefix:
                with lock:
                    report.print_log_lines(name, got, prefix=prefix, width=width)
            else:
                collected[name] += got

        return s.logs(lines=lines, follow=follow, follow_s=follow_s,
                      timeout=(follow_s + 30) if follow else s.host.timeouts.command, on_event=on_event)

    # --host-timeout bounds each host until it answers (a stopped sshd is reported in seconds, not after the
    # follow); a host that answered is bounded by --timeout of the follow itself (the agent's call timeout).
    outcomes = for_each_host(inv, hosts, work, host_timeout=_bound(hosts, host_timeout),
                             answered=answered if follow else None)
    if prefix and not follow:
        for h in hosts:
            report.print_log_lines(h.name, collected[h.name], prefix=True, width=width)
    r = HostsResult(outcomes)
    report.print_logs_summary(r, prefix=prefix)
    return r.exit_code


# -- check-env ------------------------------------------------------------------------------------------------
def expected_env(host: Host) -> dict[str, str]:
    """The inventory's values, by the same precedence the launch uses; the host judges a running deploy by its
    record instead (what that deploy was asked for) and reports where the inventory has moved on."""
    from fabfile.plan.deploy_plan import nccl_settings

    return dict(nccl_settings(host).tuning)


def check_env(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None) -> HostsResult:
    """Each host's evidence and its evaluation; exit 1 when a value is not proven on some host."""
    return CheckEnvResult(for_each_host(inv, hosts, lambda s: s.check_env(expected_env(s.host)),
                                        host_timeout=_bound(hosts, host_timeout)))


def check_env_hosts(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None,
                    verbose: bool = False) -> CommandResult:
    r = check_env(inv, hosts, host_timeout=host_timeout)
    return CommandResult(r, lambda: report.print_check_env(r, verbose=verbose), r.exit_code)


# -- rollback-patches -----------------------------------------------------------------------------------------
def rollback(inv: Inventory, hosts: list[Host], *, dry_run: bool) -> HostsResult:
    def work(s: HostSession) -> Any:
        return s.patch_rollback(dry_run=dry_run)

    return HostsResult(for_each_host(inv, hosts, work, parallel=False))


def rollback_hosts(inv: Inventory, hosts: list[Host], *, dry_run: bool) -> CommandResult:
    r = rollback(inv, hosts, dry_run=dry_run)
    return CommandResult(r, lambda: report.print_rollback(r, dry_run=dry_run), r.exit_code)


# -- gpus -----------------------------------------------------------------------------------------------------
def gpus(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None) -> HostsResult:
    outcomes = for_each_host(inv, hosts, lambda s: s.gpus(), host_timeout=_bound(hosts, host_timeout))
    return HostsResult(outcomes)


def gpus_hosts(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None) -> CommandResult:
    r = gpus(inv, hosts, host_timeout=host_timeout)
    return CommandResult(r, lambda: report.print_gpus(r), r.exit_code)


# -- cancel ---------------------------------------------------------------------------------------------------
def cancel(inv: Inventory, hosts: list[Host], *, wait_s: float | None) -> HostsResult:
    """Cancel the deploy holding each host (the agent's ``cancel`` verb) and wait until it has let go; exit 1 when
    a cancelled deploy has not let go in time."""
    def work(s: HostSession) -> Any:
        wait = wait_s if wait_s is not None else 3 * s.host.timeouts.stop_grace + 30
        return s.cancel(reason=f"cancelled by {_client()} with `inv cancel`", wait_s=wait, timeout=wait + 30)

    return CancelResult(for_each_host(inv, hosts, work))


def cancel_hosts(inv: Inventory, hosts: list[Host], *, wait_s: float | None) -> CommandResult:
    r = cancel(inv, hosts, wait_s=wait_s)
    return CommandResult(r, lambda: report.print_cancel(r), r.exit_code)


def _client() -> str:
    from fabfile.plan.deploy_plan import client_name  # only when a request names its client

    return client_name()
