"""``patch_rollback``: put SGLang's files back byte for byte.

Rollback refuses a file that changed behind the engine's back (its hash is not the one it wrote).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..common import AgentError, EventSink, expand, sha256_file
from .modes import MANIFEST_VERSION
from .store import (
    Op,
    backup_bytes,
    changed_error,
    current_state,
    execute,
    load_manifest,
    locked,
    now,
    read_bytes,
    remove_empty_dirs,
    require,
    save_manifest,
)

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import Manifest, ManifestEntry, PatchFile, PatchRollbackAnswer, PatchRollbackRequest


def _undo_ops(state_dir: str, entries: list[ManifestEntry], currents: dict[str, bytes | None],
              dry: bool) -> tuple[list[Op], list[PatchFile]]:
    """The writes that put each manifest entry back (a source's backup bytes, or removing a file the engine added)
    and the per-file result rows; an entry already back as it was needs no write."""
    ops: list[Op] = []
    results: list[PatchFile] = []
    for e in entries:
        cur = currents[e["path"]]
        st = current_state(e, cur)
        if st == "patched":
            if e["kind"] == "source":
                ops.append(Op(e["path"], backup_bytes(state_dir, e), cur))
                action = "restored"
            else:
                ops.append(Op(e["path"], None, cur))
                action = "removed"
        else:
            action = "already_original" if e["kind"] == "source" else "already_removed"
        results.append(
            {"path": e["path"], "kind": e["kind"], "action": ("would_" if dry else "") + action}
        )
    return ops, results


def rollback(req: Mapping[str, Any]) -> PatchRollbackAnswer:
    """Undo everything in the manifest, byte for byte.

    Request ``{"state_dir", "dry_run"?, "forget_changed"?}``.

    Result: ``{"dry_run", "nothing_to_do", "files": [{"path", "kind", "action"}], "forgotten": [...]}`` with
    action restored | removed | already_original | already_removed (with ``would_`` prefix on dry runs).
    """
    state_dir = require(req, "state_dir")
    dry = bool(req.get("dry_run"))
    with locked(state_dir):
        manifest = load_manifest(state_dir)
        entries = manifest["entries"]
        if not entries:
            return {
                "dry_run": dry,
                "nothing_to_do": True,
                "message": "nothing to roll back",
                "files": [],
                "forgotten": [],
            }
        currents = {e["path"]: read_bytes(e["path"]) for e in entries}
        changed = [e for e in entries if current_state(e, currents[e["path"]]) == "changed"]
        changed += [e for e in entries if e["kind"] == "source" and currents[e["path"]] is None]
        forgotten: list[str] = []
        if changed and req.get("forget_changed"):
            forgotten = [e["path"] for e in changed]
            entries = [e for e in entries if e["path"] not in forgotten]
        elif changed:
            raise changed_error("rollback_refused", changed, "roll back")
        ops, results = _undo_ops(state_dir, entries, currents, dry)
        if dry:
            return {"dry_run": True, "nothing_to_do": not ops, "files": results, "forgotten": forgotten}
        cleared: Manifest = {
            "version": MANIFEST_VERSION,
            "entries": [],
            "dirs": [],
            "updated": now(),
            "last_rollback": now(),
        }
        execute(ops, after_all=lambda: save_manifest(state_dir, cleared))
        remove_empty_dirs(manifest.get("dirs", []))
        bad = [
            e["path"]
            for e in entries
            if e["kind"] == "source"
            and (read_bytes(e["path"]) is None or sha256_file(e["path"]) != e["sha256_before"])
        ]
        if bad:  # pragma: no cover - only on a racing writer
            raise AgentError("rollback_verify_failed", f"After rollback {bad} do not match their originals.")
        return {"dry_run": False, "nothing_to_do": not ops, "files": results, "forgotten": forgotten}


def rollback_verb(req: PatchRollbackRequest, sink: EventSink) -> PatchRollbackAnswer:
    """The ``patch_rollback`` verb: :func:`rollback`, not under a running deploy's feet (it patched these files for
    the server it starts), so a real rollback waits for the host's deploy lock."""
    from ..serve.lock import DeployLock

    state_dir = expand(req["state_dir"])
    lock = None
    if not req.get("dry_run"):
        lock = DeployLock(state_dir)
        lock.acquire({"deploy_id": "rollback-patches", "client": req.get("client")}, float(req.get("lock_wait", 0)))
    try:
        return rollback({**req, "state_dir": state_dir})
    finally:
        if lock is not None:
            lock.release()
