"""Results that are already their JSON form (a sweep, a bench, a plan, a diff: one dict), with the exit code they
earn. ``present`` prints them; ``as_dict`` is the ``--json`` document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

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


class _ViewRequired(TypedDict):
    label: str
    host: str | None
    config: str | None
    status: str | None
    argv: list[str]
    env: dict[str, str]
    sglang_version: str | None
    patch_mode: str | None
    patched_files: dict[str, str]  # path -> sha256 (or "(not recorded)")
    check_env: str


class DeployView(_ViewRequired, total=False):
    """One side of ``inv diff``: what a recorded deploy ran, or what a deploy would run now."""

    files_partial: bool  # only whole files are known before a deploy (a source patch depends on the host's file)
