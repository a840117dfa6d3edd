"""What a command run on several hosts comes back with: each host's outcome (its data or its error), and the exit
code they earn. Built by ``fabfile.commands`` (``fanout`` runs the hosts); printed by ``fabfile.present``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fabfile.errors import SpecDeployError
from fabfile.inventory.hosts import Host


@dataclass
class HostOutcome:
    host: Host
    data: Any = None
    error: SpecDeployError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class HostsResult:
    """One command's outcomes on the selected hosts. ``exit_code``: 0 when every host succeeded, else the worst
    host's code, or the command's own judgement (a server that does not serve, a process that survived a stop)."""
    outcomes: list[HostOutcome]
    exit_code: int = 0

    def as_dict(self) -> Any:
        docs = [{"host": o.host.name, "ok": o.ok, "data": o.data, "error": o.error.as_dict() if o.error else None}
                for o in self.outcomes]
        # One shape for one host or many: `ok` and `hosts` always (a script reads doc["hosts"] either way); one
        # host's document keeps its own keys at the top too, as before.
        whole = {"ok": all(o.ok for o in self.outcomes), "hosts": docs}
        return {**docs[0], **whole} if len(docs) == 1 else whole


def exit_code(outcomes: list[HostOutcome], extra: int = 0) -> int:
    """The worst host's exit code, or ``extra`` (the command's own verdict) when it is worse; 0 when all is well."""
    codes = [o.error.exit_code for o in outcomes if o.error is not None]
    return max([*codes, extra]) if (codes or extra) else 0
