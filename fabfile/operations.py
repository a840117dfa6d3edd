"""The commands besides deploy (stop, status, logs, check-env, rollback-patches, gpus), on one host or many.

Read-only commands run on all selected hosts in parallel with a cap, so one slow host does not hold up the rest;
each host's work is bounded by its own connect and command timeouts. Every command prints one table (or one JSON
document) and returns the exit code: 0 when every host succeeded, else the worst host's code.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from fabfile.errors import SpecDeployError
from fabfile.inventory import Host, Inventory
from fabfile.output import err, out, print_error, print_json
from fabfile.session import HostSession

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
                  parallel: bool = True) -> list[HostOutcome]:
    def one(h: Host) -> HostOutcome:
        try:
            with HostSession.open(inv, h) as s:
                return HostOutcome(h, data=work(s))
        except SpecDeployError as e:
            if e.host is None:
                e.host = h.name
            return HostOutcome(h, error=e)

    if not parallel or len(hosts) == 1:
        return [one(h) for h in hosts]
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(hosts))) as pool:
        return list(pool.map(one, hosts))


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
def status_hosts(inv: Inventory, hosts: list[Host], *, as_json: bool) -> int:
    outcomes = for_each_host(inv, hosts, lambda s: s.call("status", {}))
    if as_json:
        _json(outcomes)
        return _exit_code(outcomes)
    t = Table(header_style="bold")
    for col in ("host", "state", "config", "pid", "uptime", "health", "accept len", "tok/s", "deploy"):
        t.add_column(col)
    for o in outcomes:
        if o.error is not None:
            t.add_row(o.host.name, "[red]error[/red]", o.error.message[:60], "", "", "", "", "", "")
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
        t.add_row(o.host.name, state, str(rec.get("config_name", "-")), str(rec.get("pid", "-")),
                  _duration(d.get("uptime_s")), f"{health.get('path', '')} {health.get('status', '')}".strip() or "-",
                  str(decode.get("accept_len", "-")), str(decode.get("gen_throughput", "-")),
                  str(rec.get("deploy_id", "-")))
    out.print(t)
    for o in outcomes:
        if o.ok and o.data.get("other_sglang_processes"):
            n = len(o.data["other_sglang_processes"])
            out.print(f"[yellow]{o.host.name}: {n} SGLang process(es) not started by specdeploy are running[/yellow]")
    _errors(outcomes)
    return _exit_code(outcomes)


def _duration(seconds: Any) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# -- logs -----------------------------------------------------------------------------------------------------
def show_logs(inv: Inventory, host: Host, *, lines: int, follow: bool, follow_s: float) -> None:
    def on_event(ev: dict[str, Any]) -> None:
        for line in ev.get("lines") or []:
            out.print(line, markup=False, highlight=False)

    with HostSession.open(inv, host) as s:
        s.call("logs", {"lines": lines, "follow": follow, "follow_s": follow_s},
               timeout=(follow_s + 30) if follow else s.host.timeouts.command, on_event=on_event)


# -- check-env ------------------------------------------------------------------------------------------------
def check_env_request(host: Host) -> dict[str, Any]:
    return {"expected": dict(host.nccl_env)}


def check_env_hosts(inv: Inventory, hosts: list[Host], *, as_json: bool) -> int:
    from fabfile.checkenv_report import exit_code, render_table, to_json

    outcomes = for_each_host(inv, hosts, lambda s: s.call("evidence", check_env_request(s.host)))
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
            out.print(f"[bold]{o.host.name}[/bold]")
            render_table(evaluation, facts, out)
    if as_json:
        print_json(docs[0] if len(docs) == 1 else {"hosts": docs})
    else:
        _errors(outcomes)
    return max([_exit_code(outcomes), *codes])


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
def gpus_hosts(inv: Inventory, hosts: list[Host], *, as_json: bool) -> int:
    outcomes = for_each_host(inv, hosts, lambda s: s.call("gpus", {}))
    if as_json:
        _json(outcomes)
        return _exit_code(outcomes)
    t = Table(header_style="bold")
    for col in ("host", "gpu", "name", "used MiB", "total MiB", "held by"):
        t.add_column(col)
    for o in outcomes:
        if o.error is not None:
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
