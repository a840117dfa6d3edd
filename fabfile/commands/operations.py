"""The commands besides deploy (stop, status, logs, check-env, rollback-patches, gpus, cancel), on one host or many.

Read-only commands run on all selected hosts in parallel with a cap, so one slow host does not hold up the rest;
each host's work is bounded by its own connect and command timeouts. Each command returns a ``HostsResult`` (every
host's outcome and the exit code: 0 when every host succeeded, else the worst host's code); its ``*_hosts`` form
returns it with how people see it (one table, ``fabfile.present.hosts_report``): a ``CommandResult`` the command line
prints, tables or one JSON document, and exits with.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from fabfile.commands.fanout import for_each_host
from fabfile.commands.result import CommandResult
from fabfile.inventory.hosts import Host, Inventory
from fabfile.present.text import terminal_safe
from fabfile.results.hosts import CancelResult, CheckEnvResult, HostsResult, ServerView, StatusResult, StopResult
from fabfile.transport.session import HostSession

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.remote import protocol as p
    from fabfile.results.hosts import HostStatus


def printing_modules() -> None:
    """Import what prints a read-only command's answers (``present.hosts_report``: Rich's console and tables, ~30 ms)
    while its hosts answer (``for_each_host``'s ``meanwhile``): imported at this module's top, they would come
    before the round trip, and each printer imports them where it prints (a no-op once this ran)."""
    from fabfile.present import hosts_report  # noqa: F401


def check_env_modules() -> None:
    """check-env's :func:`printing_modules`: its tables, and the release facts its rows are read against."""
    printing_modules()
    from fabfile.plan import knob_effects  # noqa: F401
    from fabfile.present import checkenv_report  # noqa: F401


# -- stop -----------------------------------------------------------------------------------------------------
def stop(inv: Inventory, hosts: list[Host], *, dry_run: bool, host_timeout: float | None = None) -> StopResult:
    def work(s: HostSession) -> p.StopAnswer:
        return s.stop(dry_run=dry_run)

    # Every host at once, each bounded: a host whose sshd hangs is reported as timed out, the others still stop.
    bound = host_timeout if host_timeout is not None else \
        max(h.timeouts.host + 3 * h.timeouts.stop_grace + h.timeouts.lock_wait for h in hosts)
    return StopResult(for_each_host(inv, hosts, work, host_timeout=bound))


def stop_hosts(inv: Inventory, hosts: list[Host], *, dry_run: bool,
               host_timeout: float | None = None) -> CommandResult:
    r = stop(inv, hosts, dry_run=dry_run, host_timeout=host_timeout)

    def for_people() -> None:
        from fabfile.present import hosts_report  # Rich's tables: only to print (``printing_modules``)

        hosts_report.print_stop(r, dry_run=dry_run)

    return CommandResult(r, for_people, r.exit_code)


# -- status ---------------------------------------------------------------------------------------------------
def server_view(d: p.StatusAnswer) -> ServerView:
    """What a ``status`` answer says runs on the host, in one place for ``inv status`` and a rollout's table.

    ``state``: running (its process is alive and its readiness endpoint answers 200) | not ready (it answers
    something else) | no answer (alive, but its endpoint does not answer: hung, or busy past the probe) | hung
    (its process is stopped by a signal) | deploying (a deploy holds the host's lock) | exited (the record says
    running, but its process is gone) | stopped | failed | cancelled (its last deploy was cancelled) | none (no
    deploy recorded). ``problem``: a sentence when the host is not in the state its record intends;
    ``config``/``pid``: the server that runs now, else None. ``serving``: a server of ours is alive and its
    readiness endpoint answered 200 just now (during a deploy: the one it has not stopped yet, or the one it
    started), or a router of ours answers; ``idle``: why nothing serves, when that is no problem of the record's
    (stopped, none, a deploy under way). ``inv status`` exits 1 unless every host serves.
    """
    rec = d.get("record")
    health = d.get("health") or {}
    code = health.get("status")
    in_progress = d.get("deploy_in_progress")
    new_server = d.get("deploying_server")
    view: ServerView = {"state": "none", "config": None, "pid": None,
                        "deploy_id": rec.get("deploy_id") if rec else None,
                        "health": code, "health_path": health.get("path"), "problem": None,
                        "serving": bool(d.get("running")) and d.get("process_state") != "T" and code == 200,
                        "idle": None}
    # A router of ours that runs and answers /health serves the host's clients, with or without a server beside it.
    routed = any(r.get("running") and r.get("health") == 200 for r in d.get("routers") or [])
    if d.get("running"):
        if rec:
            view["config"], view["pid"] = rec.get("config_name"), rec.get("pid")
        if d.get("process_state") == "T":
            view["state"] = "hung"
            view["problem"] = f"the server (pid {view['pid']}) is stopped by a signal (SIGSTOP?): it serves nothing"
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
            error = rec.get("error")
            if rec.get("cancelled") or (error and error.get("kind") == "cancelled"):
                view["state"] = "cancelled"
            view["problem"] = failed_problem(rec)
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
            view["config"], view["pid"], view["health"] = new_server.get("config_name"), new_server.get("pid"), None
    return view


# The failures the server itself caused (it crashed, stalled, never got ready, answered no generate): its log says
# why. Any other failed deploy ended on specdeploy's own verdict, and the log's last lines are only SGLang's answer
# to the stop that followed (a SIGTERM's traceback), so the verdict is named instead.
SERVER_FAULTS = frozenset({"fatal_log", "process_died", "stalled", "ready_timeout", "generate_failed"})
_AGAIN = "deploy again, or start the one before it with `inv deploy --previous`"


def failed_problem(rec: p.DeployRecord) -> str:
    """Why a failed deploy's host serves nothing, named by its real cause: the cancel (who, when), specdeploy's own
    verdict with its evidence (the NCCL values it could not prove, and that it stopped the server itself), or the
    server's fault, which its log shows."""
    what = f"deploy {rec.get('deploy_id')} ({rec.get('config_name')})"
    error = rec.get("error")
    kind, message = (error.get("kind"), str(error.get("message") or "").rstrip(".")) if error else (None, "")
    cancelled = rec.get("cancelled")
    if cancelled or kind == "cancelled":
        # The agent records the reason as the canceller wrote it ("cancelled by ana@laptop with `inv cancel`").
        reason = (cancelled.get("reason") if cancelled else "") or f"cancelled ({message})"
        reason = reason if reason.startswith("cancelled") else f"cancelled ({reason})"
        at = f" at {cancelled['at']}" if cancelled and cancelled.get("at") else ""
        return f"{what} was {reason}{at}; nothing serves: {_AGAIN}"
    if kind is None or kind in SERVER_FAULTS:
        return f"{what} failed and nothing serves: `inv logs` shows why; {_AGAIN}"
    verify = rec.get("verify")
    evidence = unproven_evidence(verify) if verify else ""
    return (f"{what} failed on specdeploy's own verdict ({kind}: {message}{'; ' + evidence if evidence else ''}) "
            f"and specdeploy stopped its server (the log's last lines are SGLang's answer to that stop); {_AGAIN}")


def unproven_evidence(verify: p.Verified, most: int = 3) -> str:
    """The first few values check-env could not prove, each with its rank and evidence ("NCCL_ALGO=Ring in TP1:
    unconfirmed, evidence markers")."""
    rows = [r for r in verify["evaluation"].get("rows") or [] if r.get("status") != "proven"]
    said = [f"{r.get('var')}={r.get('expected')} in {r.get('label') or 'pid ' + str(r.get('pid'))}: {r.get('status')}"
            f", evidence {r.get('evidence') or 'none'}" for r in rows[:most]]
    more = f" (+{len(rows) - most} more)" if len(rows) > most else ""
    return "; ".join(said) + more


def viewed(d: p.StatusAnswer) -> HostStatus:
    """A ``status`` answer with its :func:`server_view` under ``state`` and SGLang's own warnings about the recorded
    launch (read from its log while the deploy waited for ready)."""
    rec = d.get("record")
    return {**d, "state": server_view(d), "sglang_warnings": list((rec.get("sglang_warnings") or []) if rec else [])}


def status(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None) -> StatusResult:
    """Each host's ``status`` answer, with its :func:`server_view` under ``data["state"]``."""
    outcomes = for_each_host(inv, hosts, lambda s: s.status(), host_timeout=_bound(hosts, host_timeout),
                             read_only=True, meanwhile=printing_modules)
    # Exit 1 unless every host serves: a server that runs but does not answer, a record that disagrees with the
    # host, and a host where nothing serves (stopped, none, a deploy under way without a server up) alike.
    return StatusResult([o.then(viewed) for o in outcomes])


def status_hosts(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None,
                 verbose: bool = False) -> CommandResult:
    r = status(inv, hosts, host_timeout=host_timeout)

    def for_people() -> None:
        from fabfile.present import hosts_report  # Rich's tables: only to print (``printing_modules``)

        hosts_report.print_status(r, verbose=verbose)

    return CommandResult(r, for_people, r.exit_code)


def _bound(hosts: list[Host], flag: float | None) -> float:
    return flag if flag is not None else max(h.timeouts.host for h in hosts)


# -- logs -----------------------------------------------------------------------------------------------------
def show_logs(inv: Inventory, hosts: list[Host], *, lines: int, follow: bool, follow_s: float,
              host_timeout: float | None = None) -> CommandResult:
    """The server log of each host; with several hosts every line is prefixed with its host's name. Lines print
    as they arrive (no JSON form: a log is a stream), so the result is only the exit code."""
    prefix = len(hosts) > 1
    width = max(len(h.name) for h in hosts)
    lock = threading.Lock()
    collected: dict[str, list[str]] = {h.name: [] for h in hosts}
    answered: set[str] = set()

    def work(s: HostSession) -> p.LogsAnswer:
        name = s.host.name
        from fabfile.plan.deploy_plan import mask_secrets, secret_values

        hidden = secret_values(s.host)

        def on_event(ev: p.AgentEvent) -> None:
            answered.add(name)
            got = [terminal_safe(mask_secrets(str(x), hidden)) for x in ev.get("lines") or []]
            if follow or not prefix:
                from fabfile.present import hosts_report

                with lock:
                    hosts_report.print_log_lines(name, got, prefix=prefix, width=width)
            else:
                collected[name] += got

        return s.logs(lines=lines, follow=follow, follow_s=follow_s,
                      timeout=(follow_s + 30) if follow else s.host.timeouts.command, on_event=on_event)

    # --host-timeout bounds each host until it answers (a stopped sshd is reported in seconds, not after the
    # follow); a host that answered is bounded by --timeout of the follow itself (the agent's call timeout).
    outcomes = for_each_host(inv, hosts, work, host_timeout=_bound(hosts, host_timeout),
                             answered=answered if follow else None, read_only=True, meanwhile=printing_modules)
    from fabfile.present import hosts_report

    if prefix and not follow:
        for h in hosts:
            hosts_report.print_log_lines(h.name, collected[h.name], prefix=True, width=width)
    r = HostsResult(outcomes)
    hosts_report.print_logs_summary(r, prefix=prefix)
    return CommandResult.printed(r.exit_code)


# -- check-env ------------------------------------------------------------------------------------------------
def expected_env(host: Host) -> dict[str, str]:
    """The inventory's values, by the same precedence the launch uses; the host judges a running deploy by its
    record instead (what that deploy was asked for) and reports where the inventory has moved on."""
    from fabfile.plan.ncclsettings import nccl_settings

    return dict(nccl_settings(host).tuning)


def check_env(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None) -> CheckEnvResult:
    """Each host's evidence and its evaluation; exit 1 when a value is not proven on some host."""
    outcomes = for_each_host(inv, hosts, lambda s: s.check_env(expected_env(s.host)),
                             host_timeout=_bound(hosts, host_timeout), read_only=True, meanwhile=check_env_modules)
    for o in outcomes:
        if o.ok:
            evaluation = o.answer["evaluation"]
            version = (o.answer["evidence"].get("facts") or {}).get("sglang_version")
            evaluation["sglang_overwrites"] = sglang_overwrites(o.host, version, evaluation)
    return CheckEnvResult(outcomes)


def sglang_overwrites(host: Host, version: str | None, evaluation: p.Evaluation) -> list[p.EnvRow]:
    """The inventory's own variables (``env:``) that the host's SGLang release assigns itself at every launch
    (plan/knob_effects, read from the wheels; CUDA_DEVICE_MAX_CONNECTIONS=8 on 0.5.x): "overridden by SGLang", said
    beside the rows (the NCCL ones are rows already). They do not change the verdict: no patch mode carries them,
    and render and deploy said so before the launch (``--strict`` refuses them)."""
    from fabfile.plan import knob_effects

    if not version:
        return []
    rowed = {str(r.get("var")) for r in evaluation.get("rows") or []}
    out: list[p.EnvRow] = []
    for var, value in host.env.items():
        e = knob_effects.effect(version, var)
        if var in rowed or e.kind != "overwritten":
            continue
        read = "" if e.release == version else f" (read from the {e.release} wheel)"
        out.append({"var": var, "expected": value, "observed": e.value, "status": "sglang_overrides",
                    "note": f"SGLang {version} sets {var}={e.value} itself{read}: your value never reaches the "
                            "workers"})
    return out


def check_env_hosts(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None,
                    verbose: bool = False) -> CommandResult:
    r = check_env(inv, hosts, host_timeout=host_timeout)

    def for_people() -> None:
        from fabfile.present import hosts_report  # Rich's tables: only to print (``printing_modules``)

        hosts_report.print_check_env(r, verbose=verbose)

    return CommandResult(r, for_people, r.exit_code)


# -- rollback-patches -----------------------------------------------------------------------------------------
def rollback(inv: Inventory, hosts: list[Host], *, dry_run: bool) -> HostsResult[p.PatchRollbackAnswer]:
    def work(s: HostSession) -> p.PatchRollbackAnswer:
        return s.patch_rollback(dry_run=dry_run)

    return HostsResult(for_each_host(inv, hosts, work, parallel=False))


def rollback_hosts(inv: Inventory, hosts: list[Host], *, dry_run: bool) -> CommandResult:
    r = rollback(inv, hosts, dry_run=dry_run)

    def for_people() -> None:
        from fabfile.present import hosts_report  # Rich's tables: only to print (``printing_modules``)

        hosts_report.print_rollback(r, dry_run=dry_run)

    return CommandResult(r, for_people, r.exit_code)


# -- gpus -----------------------------------------------------------------------------------------------------
def gpus(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None) -> HostsResult[p.GpusAnswer]:
    outcomes = for_each_host(inv, hosts, lambda s: s.gpus(), host_timeout=_bound(hosts, host_timeout),
                             read_only=True, meanwhile=printing_modules)
    return HostsResult(outcomes)


def gpus_hosts(inv: Inventory, hosts: list[Host], *, host_timeout: float | None = None) -> CommandResult:
    r = gpus(inv, hosts, host_timeout=host_timeout)

    def for_people() -> None:
        from fabfile.present import hosts_report  # Rich's tables: only to print (``printing_modules``)

        hosts_report.print_gpus(r)

    return CommandResult(r, for_people, r.exit_code)


# -- cancel ---------------------------------------------------------------------------------------------------
def cancel(inv: Inventory, hosts: list[Host], *, wait_s: float | None) -> CancelResult:
    """Cancel the deploy holding each host (the agent's ``cancel`` verb) and wait until it has let go; exit 1 when
    a cancelled deploy has not let go in time."""
    def work(s: HostSession) -> p.CancelAnswer:
        wait = wait_s if wait_s is not None else 3 * s.host.timeouts.stop_grace + 30
        return s.cancel(reason=f"cancelled by {_client()} with `inv cancel`", wait_s=wait, timeout=wait + 30)

    return CancelResult(for_each_host(inv, hosts, work))


def cancel_hosts(inv: Inventory, hosts: list[Host], *, wait_s: float | None) -> CommandResult:
    r = cancel(inv, hosts, wait_s=wait_s)

    def for_people() -> None:
        from fabfile.present import hosts_report  # Rich's tables: only to print (``printing_modules``)

        hosts_report.print_cancel(r)

    return CommandResult(r, for_people, r.exit_code)


def _client() -> str:
    from fabfile.plan.deploy_plan import client_name  # only when a request names its client

    return client_name()
