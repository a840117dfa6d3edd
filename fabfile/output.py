"""What the commands print: summaries for people (rich, stdout) and one JSON document for machines (--json)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console

from fabfile.errors import SpecDeployError

if TYPE_CHECKING:
    from fabfile.deploy import DeployResult

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), *range(0x7f, 0xa0)] if c != 0x09}


def terminal_safe(text: str) -> str:
    """Host text (log lines, excerpts) with control characters shown as ``\\xNN``: an ESC sequence in a log line
    must not drive the operator's terminal (retitle it, rewrite what was shown, answer back)."""
    return text.translate(_CONTROL)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def print_error(e: SpecDeployError) -> None:
    err.print(f"[red]error:[/red] {e.describe()}", markup=True)
    excerpt = e.details.get("excerpt")
    if excerpt:
        err.print(f"[dim]--- last lines of {e.details.get('log_path', 'the log')} ---[/dim]")
        for line in excerpt[-25:]:
            err.print(f"  {terminal_safe(str(line))}", markup=False)
    stderr = e.details.get("stderr")
    if stderr:
        err.print("[dim]--- host stderr ---[/dim]")
        err.print(terminal_safe(str(stderr)), markup=False)
    torn = e.details.get("torn_down")
    if torn:
        err.print(f"[dim]stopped the failed server's processes: {', '.join(map(str, torn))} (none left running)[/dim]")


def deploy_summary(r: DeployResult) -> None:
    if not r.ok:
        if r.error is not None:
            print_error(r.error)
            ev = (r.error.details.get("verify") or {})
            if ev.get("evaluation"):
                from fabfile.checkenv_report import render_table

                render_table(ev["evaluation"], (ev.get("evidence") or {}).get("facts") or {}, err)
        return
    rec = r.record
    total = sum(r.timings.values())
    out.print(f"[green]✓[/green] [bold]{r.host}[/bold] ready at [bold]{r.plan.url}[/bold]  pid {rec.get('pid')}  "
              f"config [bold]{r.plan.config_name}[/bold]  (SGLang {r.sglang_version}, patch mode {r.patch_mode}) "
              f"in {total:.2f} s")
    scheds = rec.get("schedulers") or []
    if scheds:
        out.print("  schedulers: " + ", ".join(f"{s['title']} (pid {s['pid']})" for s in scheds))
    ev = (rec.get("verify") or {}).get("evaluation")
    if ev is not None:
        rows = ev.get("rows") or []
        proven = sum(1 for x in rows if x.get("status") == "proven")
        out.print(f"  check-env: {proven}/{len(rows)} values proven in every rank")
    for note in r.plan.notes:
        out.print(f"  note: {note}", markup=False, highlight=False)
    out.print(f"  log: {rec.get('log_path')}   deploy id: {r.plan.deploy_id}   plan: {r.plan.plan_hash}")
    out.print("  timings: " + " · ".join(f"{k} {v:.2f}s" for k, v in r.timings.items()), markup=False)
