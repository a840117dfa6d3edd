"""The commands besides deploy (stop, status, logs, check-env, rollback-patches, gpus), on one host or many.

Read-only commands run on all selected hosts in parallel with a cap, so one slow host does not hold up the rest;
each host's work is bounded by its own connect and command timeouts. Every command prints one table (or one JSON
document) and returns the exit code: 0 when every host succeeded, else the worst host's code.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from fabfile.errors import HostTimeoutError, RemoteError, SpecDeployError
from fabfile.inventory import Host, Inventory
from fabfile.output import err, out, print_error, print_json
from fabfile.plan import mask_secrets, secret_values
from fabfile.session import HostSession
from fabfile.transport import Transport

MAX_PARALLEL = 16


@dataclass
class HostOutcome:
    host: Host
    data: Any = None
    error: SpecDeployError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def for_each_host(inv: Inventory, hosts: list[Host], work: Callable[[HostSession], Any],
                  parallel: bool = True, host_timeout: float | None = None) -> list[HostOutcome]:
    """Run ``work`` on every host (at most MAX_PARALLEL at once); outcomes in the order of ``hosts``.

    With ``host_timeout``, a host whose part takes longer (counted from when it started, connecting included) is
    reported as timed out while the others finish. Its thread cannot be killed (paramiko), so the main thread closes
    that host's SSH session, which unblocks the thread; the thread is a daemon and its late result is ignored.
    """
    def one(h: Host, on_open: Callable[[Transport], None] | None = None) -> HostOutcome:
        try:
            with HostSession.open(inv, h, on_open) as s:
                return HostOutcome(h, data=work(s))
        except SpecDeployError as e:
            if e.host is None:
                e.host = h.name
            return HostOutcome(h, error=e)
        except Exception as e:  # a session closed under a thread can raise anything
            return HostOutcome(h, error=RemoteError(f"{type(e).__name__}: {e}", host=h.name))

    if not parallel or (len(hosts) == 1 and host_timeout is None):
        return [one(h) for h in hosts]
    cv = threading.Condition()
    results: dict[str, HostOutcome] = {}
    started: dict[str, float] = {}
    transports: dict[str, Transport] = {}

    def runner(h: Host) -> None:
        def on_open(t: Transport) -> None:
            with cv:
                transports[h.name] = t

        outcome = one(h, on_open)
        with cv:
            results.setdefault(h.name, outcome)
            cv.notify_all()

    pending = list(hosts)
    running: set[str] = set()
    with cv:
        while len(results) < len(hosts):
            running -= set(results)
            while pending and len(running) < MAX_PARALLEL:
                h = pending.pop(0)
                running.add(h.name)
                started[h.name] = time.monotonic()
                threading.Thread(target=runner, args=(h,), name=f"host-{h.name}", daemon=True).start()
            to_abort: list[Transport] = []
            now = time.monotonic()
            for h in hosts:
                if h.name in running and host_timeout is not None and now - started[h.name] > host_timeout:
                    results[h.name] = HostOutcome(h, error=HostTimeoutError(
                        f"no answer within {host_timeout:.0f} s; its session was closed and its result is unknown",
                        "the host, its sshd or its network may hang: check it over SSH; raise --host-timeout "
                        "if it is only slow", host=h.name, timed_out=True))
                    running.discard(h.name)
                    t = transports.get(h.name)
                    if t is not None:
                        to_abort.append(t)
            if to_abort:
                cv.release()
                try:
                    for t in to_abort:
                        threading.Thread(target=t.abort, daemon=True).start()
                finally:
                    cv.acquire()
                continue
            if len(results) < len(hosts):
                cv.wait(0.05)
    return [results[h.name] for h in hosts]


def summary_table(outcomes: list[HostOutcome], figures: Callable[[Any], str]) -> Table:
    """One row per host: result and key figures; failures say why in one line (details follow the table)."""
    t = Table(header_style="bold")
    for col in ("host", "result", "figures"):
        t.add_column(col)
    for o in outcomes:
        if o.error is None:
            t.add_row(o.host.name, "[green]ok[/green]", figures(o.data))
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
def stop_hosts(inv: Inventory, hosts: list[Host], *, dry_run: bool, as_json: bool) -> int:
    def work(s: HostSession) -> Any:
        return s.call("stop", {"target_gpus": list(range(s.host.tp)), "grace": s.host.timeouts.stop_grace,
                               "dry_run": dry_run, "lock_wait": s.host.timeouts.lock_wait},
                      timeout=3 * s.host.timeouts.stop_grace + 30)

    outcomes = for_each_host(inv, hosts, work, parallel=False)
    if as_json:
        _json(outcomes)
        return _exit_code(outcomes)
    for o in outcomes:
        if o.error is not None:
            continue
        d = o.data
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
def status_hosts(inv: Inventory, hosts: list[Host], *, as_json: bool, host_timeout: float | None = None) -> int:
    outcomes = for_each_host(inv, hosts, lambda s: s.call("status", {}), host_timeout=_bound(hosts, host_timeout))
    if as_json:
        _json(outcomes)
        return _exit_code(outcomes)
    t = Table(header_style="bold")
    for col in ("host", "state", "config", "pid", "uptime", "health", "accept len", "tok/s", "deploy"):
        t.add_column(col)
    for o in outcomes:
        if o.error is not None:
            what = "timed out" if isinstance(o.error, HostTimeoutError) else "error"
            t.add_row(o.host.name, f"[red]{what}[/red]", o.error.message[:60], "", "", "", "", "", "")
            continue
        d = o.data
        rec = d.get("record") or {}
        decode = d.get("last_decode") or {}
        if d.get("running"):
            state = "[green]running[/green]"
        elif d.get("deploy_in_progress"):
            state = "[yellow]deploying[/yellow]"
        else:
            state = f"[dim]{rec.get('status', 'none')}[/dim]"
        health = d.get("health") or {}
        took = health.get("latency_s")
        if health.get("status") is not None and took is not None:
            health = {**health, "status": f"{health['status']} in {took:.1f}s"}
        t.add_row(o.host.name, state, str(rec.get("config_name", "-")), str(rec.get("pid", "-")),
                  _duration(d.get("uptime_s")), f"{health.get('path', '')} {health.get('status', '')}".strip() or "-",
                  str(decode.get("accept_len", "-")), str(decode.get("gen_throughput", "-")),
                  str(rec.get("deploy_id", "-")))
    out.print(t)
    _router_table(outcomes)
    for o in outcomes:
        if o.ok and o.data.get("other_sglang_processes"):
            n = len(o.data["other_sglang_processes"])
            out.print(f"[yellow]{o.host.name}: {n} SGLang process(es) not started by specdeploy are running[/yellow]")
    _errors(outcomes)
    return _exit_code(outcomes)


def _router_table(outcomes: list[HostOutcome]) -> None:
    rows = [(o.host.name, r) for o in outcomes if o.ok for r in o.data.get("routers") or []]
    if not rows:
        return
    t = Table(header_style="bold", title="routers")
    for col in ("router", "on host", "state", "pid", "url", "health", "workers"):
        t.add_column(col)
    for host, r in rows:
        state = "[green]running[/green]" if r.get("running") else f"[red]{r.get('status', 'down')}[/red]"
        t.add_row(str(r.get("name")), host, state, str(r.get("pid", "-")), f"{r.get('listen')}:{r.get('port')}",
                  str(r.get("health", "-")), ", ".join(r.get("workers") or []))
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

    def work(s: HostSession) -> Any:
        name = s.host.name
        hidden = secret_values(s.host)

        def on_event(ev: dict[str, Any]) -> None:
            got = [mask_secrets(str(x), hidden) for x in ev.get("lines") or []]
            if follow or not prefix:
                with lock:
                    for line in got:
                        out.print(f"{name:<{width}} | {line}" if prefix else line, markup=False, highlight=False)
            else:
                collected[name] += got

        return s.call("logs", {"lines": lines, "follow": follow, "follow_s": follow_s},
                      timeout=(follow_s + 30) if follow else s.host.timeouts.command, on_event=on_event)

    bound = (follow_s + 60) if follow else _bound(hosts, host_timeout)
    outcomes = for_each_host(inv, hosts, work, host_timeout=bound)
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
def check_env_request(host: Host) -> dict[str, Any]:
    """The inventory's values, by the same precedence the launch uses; the host judges a running deploy by its
    record instead (what that deploy was asked for) and reports where the inventory has moved on."""
    from fabfile.plan import nccl_settings

    return {"expected": nccl_settings(host).tuning}


def check_env_hosts(inv: Inventory, hosts: list[Host], *, as_json: bool, host_timeout: float | None = None) -> int:
    from fabfile.checkenv_report import exit_code, render_table, to_json

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
            render_table(evaluation, facts, out)
    if as_json:
        print_json(docs[0] if len(docs) == 1 else {"hosts": docs})
    else:
        if len(outcomes) > 1:
            out.print(summary_table(outcomes, _checkenv_figures))
        _errors(outcomes)
    return max([_exit_code(outcomes), *codes])


def _checkenv_figures(d: Any) -> str:
    ev = d["evaluation"]
    rows = ev.get("rows") or []
    proven = sum(1 for x in rows if x.get("status") == "proven")
    ranks = len((d.get("evidence") or {}).get("schedulers") or [])
    verdict = "proven" if ev.get("ok") else "[red]NOT proven[/red]"
    return f"{verdict}: {proven}/{len(rows)} values, {ranks} scheduler rank(s)"


# -- rollback-patches -----------------------------------------------------------------------------------------
def rollback_hosts(inv: Inventory, hosts: list[Host], *, dry_run: bool, as_json: bool) -> int:
    outcomes = for_each_host(inv, hosts, lambda s: s.call("patch_rollback", {"dry_run": dry_run}), parallel=False)
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
