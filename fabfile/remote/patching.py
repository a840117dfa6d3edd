"""Host side of the NCCL-env patch engine: edit SGLang sources, or install a tiny plugin / sitecustomize.

Stdlib only, Python 3.9+. The client renders every piece of code (``fabfile.patchset``) and sends it in the
request; the engine only finds anchors (``patchanchors``), applies (``patchapply``), records (``patchstore``) and
undoes (``patchrollback``); its modes and fixed facts live in ``patchmodes``. This module is the one door: callers
import ``patching`` and find it all. Public verbs: :func:`apply`, :func:`rollback`, :func:`status` (the agent's
verbs, with the request's ``state_dir`` and the host's lock: :func:`apply_verb`, :func:`rollback_verb`,
:func:`status_verb`); helpers
:func:`supported_modes`, :func:`auto_mode`, :func:`parse_marker`.

Guarantees:

* all-or-nothing: every new content is computed before the first write; a failed write restores what was
  already written;
* every source file's original bytes are kept content-addressed under ``STATE/patches/backups/`` and recorded
  in ``STATE/patches/manifest.json`` (hash before/after), so rollback is byte-exact and refuses to touch
  a file that changed behind our back;
* Python bytecode caches of every written/restored module are deleted so no stale ``.pyc`` is ever served.
"""


from __future__ import annotations

from .common import EventSink, expand

# The marker line format and its parser live in fabfile.remote.markers (check-env reads them too).
from .markers import MARKER_PREFIX, parse_marker
from .patchanchors import find_engine_anchor, find_scheduler_anchor, has_block, insert_block, strip_blocks
from .patchapply import apply
from .patchmodes import (
                         ALL_MODES,
                         ENGINE_ANCHOR_LINE,
                         ENGINE_DEF_RE,
                         ENGINE_REL,
                         MANIFEST_VERSION,
                         PLUGIN_GROUP,
                         PLUGIN_MIN_VERSION,
                         PLUGIN_NAME,
                         SCHED_DEF_RE,
                         SCHEDULER_REL,
                         SENTINEL_BEGIN,
                         SENTINEL_END,
                         SIG_END_RE,
                         SITECUSTOMIZE_REL,
                         auto_mode,
                         check_mode,
                         explain_unloaded_plugin,
                         parse_version,
                         plugin_allowlist,
                         plugin_excluded_by,
                         supported_modes,
                         with_plugin_allowed,
)
from .patchrollback import rollback, status
from .patchstore import drop_pycache, load_manifest
from .protocol import (
    PatchApplyAnswer,
    PatchApplyRequest,
    PatchRollbackAnswer,
    PatchRollbackRequest,
    PatchStatusAnswer,
    PatchStatusRequest,
)

__all__ = [
                         "ALL_MODES",
                         "ENGINE_ANCHOR_LINE",
                         "ENGINE_DEF_RE",
                         "ENGINE_REL",
                         "MANIFEST_VERSION",
                         "MARKER_PREFIX",
                         "PLUGIN_GROUP",
                         "PLUGIN_MIN_VERSION",
                         "PLUGIN_NAME",
                         "SCHEDULER_REL",
                         "SCHED_DEF_RE",
                         "SENTINEL_BEGIN",
                         "SENTINEL_END",
                         "SIG_END_RE",
                         "SITECUSTOMIZE_REL",
                         "apply",
                         "apply_verb",
                         "auto_mode",
                         "check_mode",
                         "drop_pycache",
                         "explain_unloaded_plugin",
                         "find_engine_anchor",
                         "find_scheduler_anchor",
                         "has_block",
                         "insert_block",
                         "load_manifest",
                         "parse_marker",
                         "parse_version",
                         "plugin_allowlist",
                         "plugin_excluded_by",
                         "rollback",
                         "rollback_verb",
                         "status",
                         "status_verb",
                         "strip_blocks",
                         "supported_modes",
                         "with_plugin_allowed",
]


def apply_verb(req: PatchApplyRequest, sink: EventSink) -> PatchApplyAnswer:
    return apply({**req, "state_dir": expand(req["state_dir"])})


def rollback_verb(req: PatchRollbackRequest, sink: EventSink) -> PatchRollbackAnswer:
    """Undo every patch; not under a running deploy's feet (it patched these files for the server it starts), so
    a real rollback waits for the host's deploy lock."""
    from .lock import DeployLock

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


def status_verb(req: PatchStatusRequest, sink: EventSink) -> PatchStatusAnswer:
    return status({**req, "state_dir": expand(req["state_dir"])})
