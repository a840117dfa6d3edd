"""What one host's deploy prints for a person: where it serves and how it started, or why it failed.
``DeployResult.as_dict`` is the JSON form."""

from __future__ import annotations

import shlex
from pathlib import Path

from fabfile.inventory.hosts import Host
from fabfile.present.output import err, out, print_error
from fabfile.present.text import first_time
from fabfile.results.deploys import DeployResult


def deploy_summary(r: DeployResult, ssh_config: Path | None = None) -> None:
    """What a person reads after one host's deploy: where it serves and how it started, or why it failed."""
    if not r.ok:
        if r.error is not None:
            print_error(r.error)
            ev = (r.error.details.get("verify") or {})
            if ev.get("evaluation"):
                from fabfile.present.checkenv_report import render_matrix

                # The compact matrix, as `inv check-env` prints it: the 56-row table put the fix 180 lines down.
                render_matrix(ev["evaluation"], (ev.get("evidence") or {}).get("facts") or {}, err)
        return
    rec = r.record
    if rec is None:  # a deploy that served has its record (``deploy_host``)
        return
    total = sum(r.timings.values())
    # The lines that carry a command, an id, a path or an address are never wrapped (a terminal folds them for the
    # eye, a copy or a grep gets them whole); only prose wraps, and only on a terminal.
    out.print(f"[green]✓[/green] [bold]{r.host}[/bold] ready at [bold]{r.plan.url}[/bold]  pid {rec.get('pid')}  "
              f"config [bold]{r.plan.config_name}[/bold]  (SGLang {r.sglang_version}, patch mode {r.patch_mode}, "
              f"tool's clock) in {total:.2f} s", soft_wrap=True)
    tunnel = tunnel_line(r.plan.host, ssh_config)
    if tunnel:
        out.print(f"  {tunnel}", markup=False, soft_wrap=True)
    scheds = rec.get("schedulers") or []
    if scheds:
        out.print("  schedulers: " + ", ".join(f"{s['title']} (pid {s['pid']})" for s in scheds), soft_wrap=False)
    verified = rec.get("verify")
    if verified:
        rows = verified["evaluation"].get("rows") or []
        proven = sum(1 for x in rows if x.get("status") == "proven")
        out.print(f"  check-env: {proven}/{len(rows)} values proven in every rank")
    for note in r.plan.notes:
        if first_time(note):  # said already at preflight (stderr) or for another host: not again
            out.print(f"  note: {note}", markup=False, highlight=False)
    for note in r.plan.knob_notes:
        if first_time(f"knob: {note}"):  # said at preflight already (the step lines), else here
            out.print(f"  knob: {note}", markup=False, highlight=False)
    for line in rec.get("sglang_warnings") or []:
        out.print(f"  sglang warns: {line}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"  log: {rec.get('log_path')}   deploy id: {r.plan.deploy_id}   plan: {r.plan.plan_hash}",
              soft_wrap=True)
    out.print("  timings (tool's clock): " + " · ".join(f"{k} {v:.2f}s" for k, v in r.timings.items()),
              markup=False, soft_wrap=False)


def tunnel_line(host: Host, ssh_config: Path | None = None, local_port: int | None = None) -> str | None:
    """The address a deploy serves at is on the remote host: the ``ssh -L`` line that reaches it from here (None for
    a local host), through the inventory's own ssh_config when it names one. A server listening on every address is
    reached through the host's loopback."""
    if host.connection != "ssh":
        return None
    target = "127.0.0.1" if host.listen in ("0.0.0.0", "::", "") else host.listen
    config = f"-F {shlex.quote(str(ssh_config))} " if ssh_config is not None else ""
    here = local_port or host.port  # several hosts on one port: each tunnel its own port here
    return (f"from this machine: ssh {config}-N -L {here}:{target}:{host.port} {host.ssh_host}  "
            f"then http://127.0.0.1:{here}")
