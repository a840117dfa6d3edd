"""The commands besides deploy (stop, status, logs, check-env, rollback-patches, gpus), on one host or many.

Read-only commands run on all selected hosts in parallel with a cap, so one slow host does not hold up the rest;
each host's work is bounded by its own connect and command timeouts. Every command prints one table (or one JSON
document) and returns the exit code: 0 when every host succeeded, else the worst host's code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rich.markup import escape
from rich.table import Table

from fabfile.commands.fanout import HostOutcome, for_each_host
from fabfile.errors import HostTimeoutError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.present.output import err, out, print_error, print_json, terminal_safe
from fabfile.remote.protocol import CheckEnvRequest
from fabfile.transport.session import HostSession


def summary_table(outcomes: list[HostOutcome], figures: Callable[[Any], str],
                  verdict: Callable[[Any], str] | None = None) -> Table:
    """One row per host: result and key figures; failures say why in one line (details follow the table).
    ``verdict`` judges a host that answered (default: ok); a command whose answer can itself be a failure
    (check-env: not proven) passes one, so the row never says ok for it."""
    t = Table(header_style="bold")
    for col in ("host", "result", "figures"):
        t.add_column(col)
    for o in outcomes:
        if o.error is None:
            t.add_row(o.host.name, verdict(o.data) if verdict else "[green]ok[/green]", figures(o.data))
        elif isinstance(o.error, HostTimeoutError):
            t.add_row(o.host.name, "[red]timed out[/red]", o.error.message[:80])
        else:
            t.add_row(o.host.name, "[red]failed[/red]", f"{type(o.error).__name__}: {o.error.message[:70]}")
    return t


def _exit_code(outcomes: list[HostOutcome], extra: int = 0) -> int:
    codes = [o.error.exit_code for o in outcomes if o.error is not None]
    return max([*codes, extra]) if (codes or extra) else 0


def _errors(outcomes: list[HostOutcome]) -> None:
    for o in outcomes:
        if o.error is not None:
            print_error(o.error)


def _json(outcomes: list[HostOutcome], key: str = "data") -> None:
    docs = [{"host": o.host.name, "ok": o.ok, key: o.data, "error": o.error.as_dict() if o.error else None}
            for o in outcomes]
    print_json(docs[0] if len(docs) == 1 else {"ok": all(o.ok for o in outcomes), "hosts": docs})


# -- stop -----------------------------------------------------------------------------------------------------
def stop_hosts(inv: Inventory, hosts: list[Host], *, dry_run: bool, as_json: bool,
               host_timeout: float | None = None) -> int:
    def work(s: HostSession) -> Any:
        return s.stop(dry_run=dry_run)

    # Every host at once, each bounded: a host whose sshd hangs is reported as timed out, the others still stop.
    bound = host_timeout if host_timeout is not None else \
        max(h.timeouts.host + 3 * h.timeouts.stop_grace + h.timeouts.lock_wait for h in hosts)
    outcomes = for_each_host(inv, hosts, work, host_timeout=bound)
    if as_json:
        _json(outcomes)
        return _exit_code(outcomes)
    for o in outcomes:
        if o.error is not None:
            continue
        d = o.data
        for name in d.get("routers_running") or []:
            err.print(f"[yellow]{o.host.name}: router {name} still runs here[/yellow] (`inv stop --router {name}` "
                      "stops it)")
        if dry_run:
            items = d["would_stop"]
            out.print(f"[bold]{o.host.name}[/bold]: would stop {len(items)} process(es)")
            for p in items:
                out.print(f"  pid {p['pid']}  {p['cmdline'][:100]}  [dim]({p['why']})[/dim]")
            continue
        n = len(d["terminated"]) + len(d["killed"])
        out.print(f"[green]✓[/green] [bold]{o.host.name}[/bold]: stopped {n} process(es)"
                  + (f", {len(d['killed'])} needed SIGKILL" if d["killed"] else "") if n else
                  f"[green]✓[/green] [bold]{o.host.name}[/bold]: nothing was running")
        for p in d["survivors"]:
            err.print(f"  [red]survived:[/red] pid {p['pid']} {p['cmdline']}")
    _errors(outcomes)
    return _exit_code(outcomes, 1 if any(o.ok and o.data.get("survivors") for o in outcomes) else 0)


# -- status ---------------------------------------------------------------------------------------------------
WILDCARDS = ("0.0.0.0", "::", "")


def server_view(d: dict[str, Any]) -> dict[str, Any]:
    """What a ``status`` answer says runs on the host, in one place for ``inv status`` and a rollout's table.

    ``state``: running (its process is alive and its readiness endpoint answers 200) | not ready (it answers
    something else) | no answer (alive, but its endpoint does not answer: hung, or busy past the probe) | hung
    (its process is stopped by a signal) | deploying (a deploy holds the host's lock) | exited (the record says
    running, but its process is gone) | stopped | failed | none (no deploy recorded). ``problem``: a sentence when
    the host is not in the state its record intends; ``config``/``pid``: the server that runs now, else None.
    """
    rec = d.get("record") or {}
    health = d.get("health") or {}
    code = health.get("status")
    in_progress = d.get("deploy_in_progress")
    new_server = d.get("deploying_server") or {}
    view: dict[str, Any] = {"state": "none", "config": None, "pid": None, "deploy_id": rec.get("deploy_id"),
                            "health": code, "health_path": health.get("path"), "problem": None}
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
    if in_progress:
        # A deploy owns the host right now: what its server is doing is its business until it ends.
        view["state"] = "deploying"
        view["problem"] = None
        view["deploy_id"] = in_progress.get("deploy_id")
        if new_server:
            view.update(config=new_server.get("config_name"), pid=new_server.get("pid"), health=None)
    return view


STATE_STYLE = {"running": "green", "deploying": "yellow", "stopped": "dim", "failed": "dim", "none": "dim"}


def status_hosts(inv: Inventory, hosts: list[Host], *, as_json: bool, host_timeout: float | None = None) -> int:
    outcomes = for_each_host(inv, hosts, lambda s: s.call("status", {}), host_timeout=_bound(hosts, host_timeout))
    views = {o.host.name: server_view(o.data) for o in outcomes if o.ok}
    # A server that runs but does not serve, or a record that disagrees with the host, is a problem: exit 1.
    problem = 1 if any(v["problem"] for v in views.values()) else 0
    if as_json:
        for o in outcomes:
            if o.ok:
                o.data["state"] = views[o.host.name]
        _json(outcomes)
        return _exit_code(outcomes, problem)
    from fabfile.present.tables import Col, print_table

    # Key values (host, config, numbers, deploy id) are never cut: at 80 columns the rows print as a list.
    cols = [Col("host"), Col("state"), Col("config"), Col("pid", justify="right"), Col("uptime"),
            Col("health", key=False), Col("accept len"), Col("tok/s"), Col("deploy")]
    rows: list[list[str]] = []
    for o in outcomes:
        if o.error is not None:
            what = "timed out" if isinstance(o.error, HostTimeoutError) else "error"
            rows.append([o.host.name, f"[red]{what}[/red]", "-", "-", "-", escape(o.error.message), "-", "-", "-"])
            continue
        d = o.data
        v = views[o.host.name]
        rec = d.get("record") or {}
        style = STATE_STYLE.get(v["state"], "red")
        decode = (d.get("last_decode") or {}) if v["state"] != "deploying" else {}
        age = f" ({_duration(decode['age_s'])} ago)" if decode.get("age_s") is not None else ""
        if v["health_path"] and v["state"] != "deploying":
            code = v["health"]
            took = (d.get("health") or {}).get("latency_s")
            health = f"{v['health_path']} " + (str(code) if code is not None else "no answer")
            health += f" in {took:.1f}s" if code is not None and took is not None else ""
            health = health if code == 200 else f"[red]{health}[/red]"
        else:
            health = "-"
        deploy = str(v["deploy_id"] or "-")
        if v["config"] is None and rec.get("config_name"):
            deploy += f" (last: {rec.get('config_name')}, {rec.get('status')})"
        rows.append([o.host.name, f"[{style}]{v['state']}[/{style}]", str(v["config"] or "-"),
                     str(v["pid"] or "-"), _duration(d.get("uptime_s")) if v["state"] != "deploying" else "-",
                     health, f"{decode['accept_len']}{age}" if "accept_len" in decode else "-",
                     f"{decode['gen_throughput']}{age}" if "gen_throughput" in decode else "-", deploy])
    print_table(out, cols, rows)
    _in_progress(outcomes)
    _router_table(outcomes)
    for o in outcomes:
        if o.ok and o.data.get("other_sglang_processes"):
            n = len(o.data["other_sglang_processes"])
            out.print(f"[yellow]{o.host.name}: {n} SGLang process(es) not started by specdeploy are running[/yellow]")
    for name, v in views.items():
        if v["problem"]:
            err.print(f"[red]{name}:[/red] {v['problem']}")
    _errors(outcomes)
    return _exit_code(outcomes, problem)


def router_url(host: Host, listen: Any, port: Any) -> str:
    """Where clients reach a router: a wildcard listen address is not an address, the host's is."""
    addr = (host.address or host.ssh_host) if str(listen) in WILDCARDS else str(listen)
    return f"http://{addr}:{port}"


def _in_progress(outcomes: list[HostOutcome]) -> None:
    """A deploy (or stop) holding a host now: who, which step, and its journal's last lines."""
    for o in outcomes:
        h = (o.data or {}).get("deploy_in_progress") if o.ok else None
        if not h:
            continue
        what = "deploy" if h.get("journal") else "command"
        out.print(f"[yellow]{o.host.name}: {what} {h.get('deploy_id')} in progress[/yellow] (from {h.get('client')}, "
                  f"since {h.get('since')}, agent pid {h.get('pid')}), step [bold]{h.get('step', '?')}[/bold]")
        if h.get("journal"):
            out.print(f"  journal: {h['journal']}", markup=False)
            for line in h.get("journal_tail") or []:
                out.print(f"    {line}", markup=False)
            out.print("  `inv deploy` waits for it (--lock-wait SECONDS); `inv cancel` stops it and tears its new "
                      "server down")


def _router_table(outcomes: list[HostOutcome]) -> None:
    rows = [(o.host, r) for o in outcomes if o.ok for r in o.data.get("routers") or []]
    if not rows:
        return
    t = Table(header_style="bold", title="routers")
    for col in ("router", "on host", "state", "pid", "url", "health", "workers (as the router lists them now)"):
        t.add_column(col)
    for host, r in rows:
        recorded = str(r.get("status") or "down")
        state = "[green]running[/green]" if r.get("running") else \
            ("[red]exited[/red]" if recorded in ("running", "starting") else f"[dim]{recorded}[/dim]")
        workers = []
        for w in r.get("workers") or []:
            if isinstance(w, dict):
                code = w.get("health")
                mark = f"/health {code}" if code is not None else "no answer"
                workers.append(f"{w.get('url')} ({mark})" if code == 200 else f"[red]{w.get('url')} ({mark})[/red]")
            else:
                workers.append(str(w))
        health = r.get("health")
        t.add_row(str(r.get("name")), host.name, state, str(r.get("pid", "-")),
                  router_url(host, r.get("listen"), r.get("port")),
                  "-" if health is None else (str(health) if health == 200 else f"[red]{health}[/red]"),
                  ", ".join(workers) or "-")
    out.print(t)


def _bound(hosts: list[Host], flag: float | None) -> float:
    return flag if flag is not None else max(h.timeouts.host for h in hosts)


def _duration(seconds: Any) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# -- logs -----------------------------------------------------------------------------------------------------
def show_logs(inv: Inventory, hosts: list[Host], *, lines: int, follow: bool, follow_s: float,
              host_timeout: float | None = None) -> int:
    """The server log of each host; with several hosts every line is prefixed with its host's name."""
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
                    for line in got:
                        out.print(f"{name:<{width}} | {line}" if prefix else line, markup=False, highlight=False)
            else:
                collected[name] += got

        return s.call("logs", {"lines": lines, "follow": follow, "follow_s": follow_s},
                      timeout=(follow_s + 30) if follow else s.host.timeouts.command, on_event=on_event)

    # --host-timeout bounds each host until it answers (a stopped sshd is reported in seconds, not after the
    # follow); a host that answered is bounded by --timeout of the follow itself (the agent's call timeout).
    outcomes = for_each_host(inv, hosts, work, host_timeout=_bound(hosts, host_timeout),
                             answered=answered if follow else None)
    if prefix and not follow:
        for h in hosts:
            for line in collected[h.name]:
                out.print(f"{h.name:<{width}} | {line}", markup=False, highlight=False)
    if prefix or any(not o.ok for o in outcomes):
        if prefix:
            err.print(summary_table(outcomes, lambda d: str((d or {}).get("log_path", ""))))
        _errors(outcomes)
    return _exit_code(outcomes)


# -- check-env ------------------------------------------------------------------------------------------------
def check_env_request(host: Host) -> CheckEnvRequest:
    """The inventory's values, by the same precedence the launch uses; the host judges a running deploy by its
    record instead (what that deploy was asked for) and reports where the inventory has moved on."""
    from fabfile.plan.deploy_plan import nccl_settings

    return {"expected": nccl_settings(host).tuning}


def check_env_hosts(inv: Inventory, hosts: list[Host], *, as_json: bool, host_timeout: float | None = None,
                    verbose: bool = False) -> int:
    from fabfile.present.checkenv_report import exit_code, render_matrix, render_table, to_json

    outcomes = for_each_host(inv, hosts, lambda s: s.call("evidence", check_env_request(s.host)),
                             host_timeout=_bound(hosts, host_timeout))
    codes = []
    docs = []
    for o in outcomes:
        if o.error is not None:
            docs.append({"host": o.host.name, "ok": False, "error": o.error.as_dict()})
            continue
        evaluation = o.data["evaluation"]
        facts = o.data["evidence"].get("facts") or {}
        codes.append(exit_code(evaluation))
        docs.append({"host": o.host.name, **to_json(evaluation, facts)})
        if not as_json:
            role = f" (cluster {o.host.node.cluster}, node rank {o.host.node.rank})" if o.host.node else ""
            out.print(f"[bold]{o.host.name}[/bold]{role}")
            (render_table if verbose else render_matrix)(evaluation, facts, out)
    if as_json:
        print_json(docs[0] if len(docs) == 1 else {"hosts": docs})
    else:
        if len(outcomes) > 1:
            out.print(summary_table(outcomes, _checkenv_figures, verdict=_checkenv_verdict))
        _errors(outcomes)
    return max([_exit_code(outcomes), *codes])


def _checkenv_verdict(d: Any) -> str:
    ev = d["evaluation"]
    if ev.get("ok") is True:
        return "[green]proven[/green]"
    if not (d.get("evidence") or {}).get("schedulers"):
        return "[red]no server[/red]"
    return "[red]not proven[/red]"


def _checkenv_figures(d: Any) -> str:
    ev = d["evaluation"]
    rows = ev.get("rows") or []
    proven = sum(1 for x in rows if x.get("status") == "proven")
    ranks = len((d.get("evidence") or {}).get("schedulers") or [])
    verdict = "proven" if ev.get("ok") else "[red]NOT proven[/red]"
    return f"{verdict}: {proven}/{len(rows)} values, {ranks} scheduler rank(s)"


# -- rollback-patches -----------------------------------------------------------------------------------------
def rollback_hosts(inv: Inventory, hosts: list[Host], *, dry_run: bool, as_json: bool) -> int:
    def work(s: HostSession) -> Any:
        return s.call("patch_rollback", {"dry_run": dry_run, "lock_wait": s.host.timeouts.lock_wait,
                                         "client": _client()},
                      timeout=s.host.timeouts.lock_wait + s.host.timeouts.command)

    outcomes = for_each_host(inv, hosts, work, parallel=False)
    if as_json:
        _json(outcomes)
        return _exit_code(outcomes)
    for o in outcomes:
        if o.error is not None:
            continue
        d = o.data or {}
        items = d.get("files") or d.get("restored") or []
        verb = "would roll back" if dry_run else "rolled back"
        if not items:
            out.print(f"[green]✓[/green] [bold]{o.host.name}[/bold]: nothing to roll back")
            continue
        out.print(f"[green]✓[/green] [bold]{o.host.name}[/bold]: {verb} {len(items)} item(s)")
        for f in items:
            action = str(f.get("action", verb)).replace("would_", "would ").replace("_", " ")
            out.print(f"  {action}: {f.get('path')}")
    _errors(outcomes)
    return _exit_code(outcomes)


# -- gpus -----------------------------------------------------------------------------------------------------
def gpus_hosts(inv: Inventory, hosts: list[Host], *, as_json: bool, host_timeout: float | None = None) -> int:
    outcomes = for_each_host(inv, hosts, lambda s: s.call("gpus", {}), host_timeout=_bound(hosts, host_timeout))
    if as_json:
        _json(outcomes)
        return _exit_code(outcomes)
    t = Table(header_style="bold")
    for col in ("host", "gpu", "name", "used MiB", "total MiB", "held by"):
        t.add_column(col)
    for o in outcomes:
        if o.error is not None:
            what = "timed out" if isinstance(o.error, HostTimeoutError) else "error"
            t.add_row(o.host.name, "-", f"[red]{what}[/red]", "", "", o.error.message[:60])
            continue
        if not o.data["available"]:
            t.add_row(o.host.name, "-", "no nvidia-smi", "", "", "")
        for g in o.data["gpus"]:
            holders = [f"{a['pid']} {a['cmdline'][:40]}" for a in o.data["apps"] if a["gpu"] == g["index"]]
            t.add_row(o.host.name, str(g["index"]), g["name"], str(g["used_mib"]), str(g["total_mib"]),
                      "; ".join(holders) or "-")
    out.print(t)
    _errors(outcomes)
    return _exit_code(outcomes)


# -- cancel ---------------------------------------------------------------------------------------------------
def cancel_hosts(inv: Inventory, hosts: list[Host], *, as_json: bool, wait_s: float | None) -> int:
    """Cancel the deploy holding each host (the agent's ``cancel`` verb) and wait until it has let go."""
    def work(s: HostSession) -> Any:
        wait = wait_s if wait_s is not None else 3 * s.host.timeouts.stop_grace + 30
        return s.call("cancel", {"reason": f"cancelled by {_client()} with `inv cancel`", "wait_s": wait},
                      timeout=wait + 30)

    outcomes = for_each_host(inv, hosts, work)
    if as_json:
        _json(outcomes)
        return _exit_code(outcomes, 1 if any(o.ok and o.data.get("ended") is False for o in outcomes) else 0)
    late = 0
    for o in outcomes:
        if o.error is not None:
            continue
        d = o.data
        name = o.host.name
        if d.get("cancelled") is None:
            holder = d.get("holder")
            out.print(f"[bold]{name}[/bold]: no deploy in progress, nothing to cancel"
                      + (f" ({holder.get('deploy_id')} holds the host; it is no deploy)" if holder else ""))
        elif d.get("ended"):
            out.print(f"[green]✓[/green] [bold]{name}[/bold]: deploy {d['cancelled']} cancelled "
                      f"(it was at step {d.get('step') or '?'}); it ended {d.get('status') or 'without a record'}, "
                      "its new server torn down")
        else:
            late += 1
            out.print(f"[yellow]{name}: asked deploy {d['cancelled']} to stop; it has not let go of the host yet"
                      "[/yellow] (it stops at its next step; `inv status` shows it)")
    _errors(outcomes)
    return _exit_code(outcomes, 1 if late else 0)


def _client() -> str:
    import getpass
    import socket

    return f"{getpass.getuser()}@{socket.gethostname()}"
