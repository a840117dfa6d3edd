"""What the commands besides deploy print (stop, status, logs, check-env, rollback-patches, gpus, cancel): a table
or a line per host, then each failed host's error. Their ``--json`` form is their result's ``as_dict``
(``fabfile.results.hosts``), chosen by :func:`fabfile.present.output.show`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rich.console import Console
from rich.markup import escape

from fabfile.errors import HostTimeoutError
from fabfile.inventory.hosts import Host
from fabfile.present.output import err, out, print_error
from fabfile.present.tables import DASH, Col, cell, print_table
from fabfile.results.hosts import HostOutcome, HostsResult

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.remote import protocol as p
    from fabfile.results.hosts import HostStatus

T = TypeVar("T")

WILDCARDS = ("0.0.0.0", "::", "")


def print_summary(console: Console, outcomes: list[HostOutcome[T]], figures: Callable[[T], str],
                  verdict: Callable[[T], str] | None = None) -> None:
    """One row per host: result and key figures; failures say why in one line (details follow the table).
    ``verdict`` judges a host that answered (default: ok); a command whose answer can itself be a failure
    (check-env: not proven) passes one, so the row never says ok for it."""
    rows = []
    for o in outcomes:
        if o.error is None:
            rows.append([o.host.name, verdict(o.answer) if verdict else "[green]ok[/green]", figures(o.answer)])
        elif isinstance(o.error, HostTimeoutError):
            rows.append([o.host.name, "[red]timed out[/red]", BELOW])
        else:
            rows.append([o.host.name, "[red]failed[/red]", BELOW])
    print_table(console, [Col("host"), Col("result"), Col("figures", key=False)], rows)


# A failed host's cell: its error is printed once, whole, after the table (print_errors), never also cut in a cell.
BELOW = "[dim]error below[/dim]"


def print_errors(outcomes: list[HostOutcome[T]]) -> None:
    for o in outcomes:
        if o.error is not None:
            print_error(o.error)


# -- stop -----------------------------------------------------------------------------------------------------
def print_stop(result: HostsResult[p.StopAnswer], *, dry_run: bool) -> None:
    for o in result.outcomes:
        if o.error is not None:
            continue
        d = o.answer
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
    print_errors(result.outcomes)


# -- status ---------------------------------------------------------------------------------------------------
STATE_STYLE = {"running": "green", "deploying": "yellow", "stopped": "dim", "failed": "dim", "cancelled": "dim",
               "none": "dim"}


def print_status(result: HostsResult[HostStatus], verbose: bool = False) -> None:
    """The status table (each host's ``data["state"]`` is its :func:`fabfile.commands.operations.server_view`),
    deploys in progress, the routers, SGLang processes started by hand, and each host's problem; ``verbose`` adds
    each host's recorded launch (command line and environment) and SGLang's own warnings about it, one line each."""
    outcomes = result.outcomes
    # Key values (host, config, numbers, deploy id) are never cut: at 80 columns the rows print as a list.
    cols = [Col("host"), Col("state"), Col("config"), Col("pid", justify="right"), Col("uptime"),
            Col("health", key=False), Col("accept len"), Col("gen tok/s"), Col("deploy")]
    rows: list[list[str]] = []
    for o in outcomes:
        if o.error is not None:
            what = "timed out" if isinstance(o.error, HostTimeoutError) else "error"
            rows.append([o.host.name, f"[red]{what}[/red]", DASH, DASH, DASH, BELOW, DASH, DASH, DASH])
            continue
        rows.append(_status_row(o.host.name, o.answer))
    print_table(out, cols, rows)
    _replaced(outcomes)
    windows = sorted({int((o.answer.get("last_decode") or {}).get("window_forwards") or 0) for o in outcomes
                      if o.ok and (o.answer.get("last_decode") or {}).get("accept_len") is not None} - {0})
    if windows:
        # One name for one figure: these are SGLang's, over one Decode line's window, not a bench's requests.
        out.print(f"  accept len, gen tok/s: SGLang's last Decode batch line, over its last "
                  f"{'/'.join(map(str, windows))} decode forwards (fwd), with its age; `inv bench` measures its own "
                  "requests", highlight=False)
    _in_progress(outcomes)
    _router_table(outcomes)
    for o in outcomes:
        if o.ok and o.answer.get("other_sglang_processes"):
            n = len(o.answer["other_sglang_processes"])
            out.print(f"[yellow]{o.host.name}: {n} SGLang process(es) not started by specdeploy are running[/yellow]")
    if verbose:
        for o in outcomes:
            for line in launch_lines(o.host.name, o.answer.get("record")) if o.ok else []:
                out.print(line, markup=False, highlight=False, soft_wrap=True)  # a command is never wrapped
            for line in (o.answer.get("sglang_warnings") or []) if o.ok else []:
                out.print(f"{o.host.name}: sglang warns: {line}", markup=False, highlight=False, soft_wrap=True)
    for o in outcomes:
        if o.ok and o.answer["state"]["problem"]:
            err.print(f"[red]{o.host.name}:[/red] {o.answer['state']['problem']}")
        elif o.ok and o.answer["state"].get("idle"):
            # exit 1 (nothing serves): the sentence says why, on stderr with the problems
            err.print(f"[yellow]{o.host.name}:[/yellow] {escape(str(o.answer['state']['idle']))}")
    print_errors(outcomes)


def launch_lines(name: str, rec: p.DeployRecord | None) -> list[str]:
    """The recorded deploy's launch (``status --verbose``): its command line and its environment, one line each, as
    the deploy recorded them (secrets masked by the plan), so two hosts' drift shows side by side."""
    import shlex

    launch = rec.get("launch") if rec else None
    if not rec or not launch or not launch.get("argv"):
        return []
    said = f"deploy {rec.get('deploy_id')}"
    env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted((launch.get("env") or {}).items()))
    return [f"{name}: launch ({said}): {shlex.join(str(a) for a in launch['argv'])}",
            f"{name}: env ({said}): {env or '(none set)'}"]


def _status_row(name: str, d: HostStatus) -> list[str]:
    v = d["state"]
    rec = d.get("record")
    style = STATE_STYLE.get(v["state"], "red")
    decode = (d.get("last_decode") or {}) if v["state"] != "deploying" else {}
    fwd = f"{decode['window_forwards']} fwd, " if decode.get("window_forwards") else ""
    age = f" ({fwd}{_duration(decode['age_s'])} ago)" if decode.get("age_s") is not None else \
        f" ({fwd.rstrip(', ')})" if fwd else ""
    if v["health_path"] and v["state"] != "deploying":
        code = v["health"]
        took = (d.get("health") or {}).get("latency_s")
        health = f"{v['health_path']} " + (str(code) if code is not None else "no answer")
        health += f" in {took:.1f}s" if code is not None and took is not None else ""
        health = health if code == 200 else f"[red]{health}[/red]"
    else:
        health = DASH
    deploy = cell(v["deploy_id"])
    if v["config"] is None and rec and rec.get("config_name"):
        deploy += f" (last: {rec.get('config_name')}, {rec.get('status')})"
    return [name, f"[{style}]{v['state']}[/{style}]", cell(v["config"]),
            cell(v["pid"]), _duration(d.get("uptime_s")) if v["state"] != "deploying" else DASH,
            health, f"{decode['accept_len']}{age}" if "accept_len" in decode else DASH,
            f"{decode['gen_throughput']}{age}" if "gen_throughput" in decode else DASH, deploy]


def router_url(host: Host, listen: Any, port: Any) -> str:
    """Where clients reach a router: a wildcard listen address is not an address, the host's is."""
    addr = (host.address or host.ssh_host) if str(listen) in WILDCARDS else str(listen)
    return f"http://{addr}:{port}"


def _replaced(outcomes: list[HostOutcome[HostStatus]]) -> None:
    """Who replaced what: the recorded deploy and the one it replaced (a second operator's deploy is never silent)."""
    for o in outcomes:
        rec = o.answer.get("record") if o.ok else None
        prev = rec.get("previous") if rec else None
        if not rec or not prev or not rec.get("deploy_id") or not prev.get("deploy_id"):
            continue
        what = "replaced" if prev.get("running") else "came after"
        out.print(f"[dim]{o.host.name}: deploy {rec['deploy_id']} (from {rec.get('client') or '?'}, started "
                  f"{rec.get('started_at') or '?'}) {what} deploy {prev['deploy_id']} ({prev.get('config_name')}, "
                  f"from {prev.get('client') or '?'}, started {prev.get('started_at') or '?'}"
                  + ("" if prev.get("running") else f", which had ended {(prev.get('ended') or {}).get('kind', '?')}")
                  + ")[/dim]", soft_wrap=True)


def _in_progress(outcomes: list[HostOutcome[HostStatus]]) -> None:
    """A deploy (or stop) holding a host now: who, which step, and its journal's last lines."""
    for o in outcomes:
        h = o.answer.get("deploy_in_progress") if o.ok else None
        if not h:
            continue
        what = "deploy" if h.get("journal") else "command"
        out.print(f"[yellow]{o.host.name}: {what} {h.get('deploy_id')} in progress[/yellow] (from {h.get('client')}, "
                  f"since {h.get('since')}, agent pid {h.get('pid')}), step [bold]{h.get('step', '?')}[/bold]")
        if h.get("journal"):
            out.print(f"  journal: {h['journal']}", markup=False)
            for line in h.get("journal_tail") or []:
                out.print(f"    {line}", markup=False)
            out.print("  `inv deploy` refuses while it runs (--lock-wait SECONDS queues behind it, then replaces it); "
                      "`inv cancel` stops it and tears its new server down")


def _router_table(outcomes: list[HostOutcome[HostStatus]]) -> None:
    found = [(o.host, r) for o in outcomes if o.ok for r in o.answer.get("routers") or []]
    if not found:
        return
    cols = [Col("router"), Col("on host"), Col("state"), Col("pid", justify="right"), Col("url"), Col("health"),
            Col("workers (as the router lists them now)", key=False)]
    rows = []
    for host, r in found:
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
        rows.append([str(r.get("name")), host.name, state, cell(r.get("pid")),
                     router_url(host, r.get("listen"), r.get("port")),
                     cell(health) if health in (None, 200) else f"[red]{health}[/red]", ", ".join(workers) or DASH])
    print_table(out, cols, rows, title="routers")


def _duration(seconds: Any) -> str:
    if seconds is None:
        return DASH
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# -- logs -----------------------------------------------------------------------------------------------------
def print_log_lines(name: str, lines: list[str], *, prefix: bool, width: int) -> None:
    """Server log lines as they are (never markup); with several hosts each line is prefixed with its host."""
    for line in lines:
        out.print(f"{name:<{width}} | {line}" if prefix else line, markup=False, highlight=False)


def print_logs_summary(result: HostsResult[p.LogsAnswer], *, prefix: bool) -> None:
    """After the lines: with several hosts, which log each came from; any host's failure."""
    if prefix or any(not o.ok for o in result.outcomes):
        if prefix:
            print_summary(err, result.outcomes, lambda d: str((d or {}).get("log_path", "")))
        print_errors(result.outcomes)


# -- check-env ------------------------------------------------------------------------------------------------
def print_check_env(result: HostsResult[p.CheckEnvAnswer], *, verbose: bool) -> None:
    """One host: its matrix (``--verbose``: every cell). Several: the details of the hosts that fail only (every
    host's with ``--verbose``), then one compact table across hosts (ranks proven, the verdict, the worst hint): 16
    hosts of 8 proven ranks were 16 matrices and their facts, ~40 lines each, to find the one that failed."""
    from fabfile.present.checkenv_report import render_matrix, render_table

    several = len(result.outcomes) > 1
    for o in result.outcomes:
        if o.error is not None or (several and not verbose and o.answer["evaluation"].get("ok") is True):
            continue
        role = f" (cluster {o.host.node.cluster}, node rank {o.host.node.rank})" if o.host.node else ""
        out.print(f"[bold]{o.host.name}[/bold]{role}")
        d = o.answer
        (render_table if verbose else render_matrix)(d["evaluation"], d["evidence"].get("facts") or {}, out)
    if several:  # last: what a terminal shows at the end is the fleet at a glance
        rows = []
        for o in result.outcomes:
            if o.error is None:
                proven, total = ranks_proven(o.answer)
                rows.append([o.host.name, f"{proven}/{total}" if total else DASH, _checkenv_verdict(o.answer),
                             worst_hint(o.answer)])
            else:
                what = "timed out" if isinstance(o.error, HostTimeoutError) else "failed"
                rows.append([o.host.name, DASH, f"[red]{what}[/red]", BELOW])
        print_table(out, [Col("host"), Col("ranks proven", justify="right"), Col("verdict"),
                          Col("worst hint", key=False)], rows)
    print_errors(result.outcomes)


def ranks_proven(d: p.CheckEnvAnswer) -> tuple[int, int]:
    """The scheduler ranks where every expected value is proven, of the ranks the server should have (its world
    size, when a rank is gone: those count as not proven)."""
    ev = d["evaluation"]
    by_rank: dict[Any, bool] = {}
    for r in ev.get("rows") or []:
        key = r.get("pid")
        by_rank[key] = by_rank.get(key, True) and r.get("status") == "proven"
    total = max(len(by_rank), int(ev.get("nranks") or 0), int(ev.get("schedulers") or 0))
    return sum(by_rank.values()), total


def worst_hint(d: p.CheckEnvAnswer) -> str:
    """The first hint of the most severe kind (the evaluation sorts them so), in words; the dash when none."""
    from fabfile.present.checkenv_report import SEVERITY_STYLE

    hints = d["evaluation"].get("hints") or []
    if not hints:
        return DASH
    h = hints[0]
    sev = str(h.get("severity") or "info")
    return f"[{SEVERITY_STYLE.get(sev, 'default')}]{escape(sev)}[/] {escape(str(h.get('message')))}"


def _checkenv_verdict(d: p.CheckEnvAnswer) -> str:
    ev = d["evaluation"]
    if ev.get("ok") is True:
        return "[green]proven[/green]"
    if not (d.get("evidence") or {}).get("schedulers"):
        return "[red]no server[/red]"
    return "[red]not proven[/red]"


# -- rollback-patches -----------------------------------------------------------------------------------------
def print_rollback(result: HostsResult[p.PatchRollbackAnswer], *, dry_run: bool) -> None:
    for o in result.outcomes:
        if o.error is not None:
            continue
        items = o.answer.get("files") or []
        verb = "would roll back" if dry_run else "rolled back"
        if not items:
            out.print(f"[green]✓[/green] [bold]{o.host.name}[/bold]: nothing to roll back")
            continue
        out.print(f"[green]✓[/green] [bold]{o.host.name}[/bold]: {verb} {len(items)} item(s)")
        for f in items:
            out.print(f"  {rollback_action(str(f.get('action', verb)))}: {f.get('path')}")
    print_errors(result.outcomes)


# The agent's past-tense actions, as a dry run says them ("would_removed" printed "would removed").
_WOULD = {"restored": "restore", "removed": "remove", "already_original": "leave (already original)",
          "already_removed": "leave (already removed)"}


def rollback_action(action: str) -> str:
    if action.startswith("would_"):
        base = action[len("would_"):]
        return "would " + _WOULD.get(base, base.replace("_", " "))
    return action.replace("_", " ")


# -- gpus -----------------------------------------------------------------------------------------------------
def print_gpus(result: HostsResult[p.GpusAnswer]) -> None:
    cols = [Col("host"), Col("gpu", justify="right"), Col("name"), Col("used MiB", justify="right"),
            Col("total MiB", justify="right"), Col("held by", key=False)]
    rows = []
    for o in result.outcomes:
        if o.error is not None:
            what = "timed out" if isinstance(o.error, HostTimeoutError) else "error"
            rows.append([o.host.name, DASH, f"[red]{what}[/red]", "", "", BELOW])
            continue
        d = o.answer
        if not d["available"]:
            rows.append([o.host.name, DASH, "no nvidia-smi", "", "", ""])
        for g in d["gpus"]:
            # Text from the host is never markup (a command line with `[...]` in it).
            holders = [f"{a['pid']} {a['cmdline'][:40]}" for a in d["apps"] if a["gpu"] == g["index"]]
            rows.append([o.host.name, str(g["index"]), escape(str(g["name"])), str(g["used_mib"]),
                         str(g["total_mib"]), escape("; ".join(holders)) or DASH])
    print_table(out, cols, rows)
    print_errors(result.outcomes)


# -- cancel ---------------------------------------------------------------------------------------------------
def print_cancel(result: HostsResult[p.CancelAnswer]) -> None:
    for o in result.outcomes:
        if o.error is not None:
            continue
        d = o.answer
        name = o.host.name
        if d.get("cancelled") is None:
            holder = d.get("holder")
            out.print(f"[bold]{name}[/bold]: no deploy in progress, nothing to cancel"
                      + (f" ({holder.get('deploy_id')} holds the host; it is no deploy)" if holder else ""))
        elif d.get("ended"):
            out.print(f"[green]✓[/green] [bold]{name}[/bold]: deploy {d['cancelled']} cancelled "
                      f"(it was at step {d.get('step') or '?'}); it ended {d.get('status') or 'without a record'}, "
                      "its new server torn down", soft_wrap=True)
            # The deploy had stopped the server that ran before: say how to bring that one back.
            out.print(f"  to start the deploy that ran before it again: inv deploy --previous --host {name}  "
                      "(`inv status` shows what runs now)", markup=False, soft_wrap=True)
        else:
            out.print(f"[yellow]{name}: asked deploy {d['cancelled']} to stop; it has not let go of the host yet"
                      "[/yellow] (it stops at its next step; `inv status` shows it)")
    print_errors(result.outcomes)
