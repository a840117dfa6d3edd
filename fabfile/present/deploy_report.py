"""What one host's deploy prints for a person: where it serves and how it started, or why it failed.
``DeployResult.as_dict`` is the JSON form."""

from __future__ import annotations

from fabfile.present.output import err, out, print_error
from fabfile.results.deploys import DeployResult


def deploy_summary(r: DeployResult) -> None:
    """What a person reads after one host's deploy: where it serves and how it started, or why it failed."""
    if not r.ok:
        if r.error is not None:
            print_error(r.error)
            ev = (r.error.details.get("verify") or {})
            if ev.get("evaluation"):
                from fabfile.present.checkenv_report import render_table

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
