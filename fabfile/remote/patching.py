"""Host side of the NCCL-env patch engine: edit SGLang sources, or install a tiny plugin / sitecustomize.

Stdlib only, Python 3.9+. The client renders every piece of code (``fabfile.patchset``) and sends it in the
request; the engine only finds anchors (``patchanchors``), applies (``patchapply``), records (``patchstore``) and
undoes (``patchrollback``); its modes and fixed facts live in ``patchmodes``. This module is the one door: callers
import ``patching`` and find it all. Public verbs: :func:`apply`, :func:`rollback`; helpers
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
from .patchrollback import rollback
from .patchstore import drop_pycache, load_manifest

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
                         "strip_blocks",
                         "supported_modes",
                         "with_plugin_allowed",
]
