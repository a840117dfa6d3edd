"""What `inv deploys` prints (each host's recorded deploys, newest first) and the lines of `inv deploy --previous` /
`--id` (what would start, the warning before a deploy that ended cancelled or failed, what started)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from fabfile.present.hosts_report import print_errors
from fabfile.present.output import err, out
from fabfile.present.tables import DASH, Col, cell, print_table
from fabfile.results.hosts import HostsResult

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.results.hosts import DeployHistory

ENDED_STYLE = {"ready": "green", "replaced": "dim", "stopped": "dim", "cancelled": "yellow", "failed": "red",
               "unfinished": "yellow"}


def ended_text(ended: Mapping[str, Any]) -> str:
    """``ready``, ``replaced by ID``, ``cancelled``, ``failed``, ... with when, from the record's ``ended``."""
    kind = str(ended.get("kind") or "?")
    text = kind
    if kind == "replaced" and ended.get("by"):
        text += f" by {ended['by']}"
        if ended.get("by_client"):
            text += f" ({ended['by_client']})"
    if ended.get("at"):
        text += f" at {ended['at']}"
    return text


def describe(d: Mapping[str, Any]) -> str:
    """``ID (CONFIG, started AT by CLIENT, ended KIND)`` for one line."""
    return (f"deploy {d.get('deploy_id')} ({d.get('config_name')}, started {d.get('started_at') or '?'} by "
            f"{d.get('client') or '?'}, {ended_text(d.get('ended') or {})})")


def print_deploys(result: HostsResult[DeployHistory]) -> None:
    cols = [Col("host"), Col("deploy"), Col("config"), Col("started"), Col("by"), Col("ended", key=False),
            Col("note", key=False)]
    rows: list[list[str]] = []
    for o in result.outcomes:
        if o.error is not None:
            continue
        current = o.answer["current"]
        if not o.answer["deploys"]:
            rows.append([o.host.name, DASH, DASH, DASH, DASH, "no deploy recorded", DASH])
        for d in o.answer["deploys"]:
            ended = d.get("ended") or {}
            style = ENDED_STYLE.get(str(ended.get("kind")), "")
            notes = []
            if d["deploy_id"] == current:
                notes.append("current")
            if d.get("rollback_of"):
                notes.append(f"started again from {d['rollback_of']}")
            if not d.get("redeployable"):
                notes.append("cannot be started again")
            text = escape(ended_text(ended))
            rows.append([o.host.name, str(d["deploy_id"]), cell(d.get("config_name")), cell(d.get("started_at")),
                         escape(str(d.get("client") or DASH)), f"[{style}]{text}[/{style}]" if style else text,
                         ", ".join(notes) or DASH])
    print_table(out, cols, rows, title="recorded deploys (newest first; inv deploy --id ID --host H starts one)")
    print_errors(result.outcomes)


def print_unsafe_warning(host: str, target: Mapping[str, Any]) -> None:
    ended = target.get("ended") or {}
    why = f": {ended['why']}" if ended.get("why") else ""
    err.print(f"[yellow]warning:[/yellow] {host}: {escape(describe(target))} never became ready"
              f"{escape(str(why))}; starting it again may end the same way", soft_wrap=True)


def print_would_start(host: str, target: Mapping[str, Any], current: Mapping[str, Any] | None) -> None:
    out.print(f"[bold]{host}[/bold]: would start {escape(describe(target))} again", soft_wrap=True)
    out.print(f"  replacing {escape(describe(current))}" if current else "  replacing nothing (no deploy recorded)",
              soft_wrap=True)
    out.print("  nothing was started (--dry-run)")


def print_started(host: str, target: Mapping[str, Any], data: Mapping[str, Any]) -> None:
    out.print(f"[green]✓[/green] [bold]{host}[/bold]: deploy {target['deploy_id']} ({data.get('config_name')}) runs "
              f"again as {data.get('deploy_id')}, pid {data.get('pid')}", soft_wrap=True)


def print_failed_count(failed: int, total: int) -> None:
    err.print(f"[red]failed on {failed} of {total} host(s)[/red]")
