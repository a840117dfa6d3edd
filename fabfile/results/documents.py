"""Results that are already their JSON form (a sweep, a bench, a plan, a diff: one dict), with the exit code they
earn. ``present`` prints them; ``as_dict`` is the ``--json`` document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `inv --list` imports none of the plan
    from fabfile.plan.sweep_doc import SweepDocument


@dataclass
class SweepResult:
    """``inv sweep``'s document (``sweep.json``): exit 1 when a configuration failed, a level met no limit, or the
    final deploy left nothing running."""
    doc: SweepDocument

    @property
    def exit_code(self) -> int:
        failed = any(not r.get("ok") for r in self.doc.get("rows") or [])
        unmet = bool((self.doc.get("sla") or {}).get("unmet_levels"))
        return 1 if failed or unmet or self.doc.get("running") is None else 0

    def as_dict(self) -> SweepDocument:
        return self.doc
