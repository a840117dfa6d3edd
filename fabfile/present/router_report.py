"""What ``inv deploy-router`` and ``inv stop --router`` print for a person. ``RouterResult.as_dict`` (and the stop's
document) are the JSON forms."""

from __future__ import annotations

from typing import Any

from fabfile.errors import SpecDeployError
from fabfile.present.output import err, out, print_error
from fabfile.results.deploys import RouterResult


def print_router(result: RouterResult) -> None:
    r = result.router
    for name, why in result.skipped.items():
        err.print(f"[yellow]•[/yellow] {name}: left out of the router: {why}")
    if result.error is not None:
        print_error(result.error)
        return
    out.print(f"[green]✓[/green] router [bold]{r.name}[/bold] on [bold]{r.host}[/bold] at "
              f"{result.url}  pid {result.record['pid'] if result.record else None}  policy {r.policy}")
    out.print("  workers: " + ", ".join(result.workers))


def print_router_stop(doc: dict[str, Any], error: SpecDeployError | None) -> None:
    if error is not None:
        print_error(error)
    elif doc["stopped"]:
        out.print(f"[green]✓[/green] router [bold]{doc['router']}[/bold] on [bold]{doc['host']}[/bold]: stopped "
                  f"{len(doc['stopped'])} process(es)")
    else:
        out.print(f"[green]✓[/green] router [bold]{doc['router']}[/bold] on [bold]{doc['host']}[/bold]: it was not "
                  "running")
