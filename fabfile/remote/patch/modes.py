"""The patch engine's fixed facts and its modes: which SGLang files it edits, the sentinel lines around its
blocks, the plugin entry point, and which mode each SGLang version supports (plugins need 0.5.11+).

Stdlib only, Python 3.9+; imported by the client too (``fabfile.plan`` checks a mode before any host is touched).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .. import versions
from ..common import AgentError

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import Evaluation, Hint

MANIFEST_VERSION = 1
SENTINEL_BEGIN = "# >>> specdeploy nccl-env begin"
SENTINEL_END = "# <<< specdeploy nccl-env end"
PLUGIN_GROUP = "sglang.srt.plugins"
PLUGIN_NAME = "specdeploy_nccl_env"
PLUGIN_MIN_VERSION = versions.feature_key(versions.PLUGIN_SYSTEM)  # 0.5.11: the plugin system

# The one list of patch modes (the agent's); ``auto`` picks one of them per version (:func:`auto_mode`). The
# client's --patch-mode and the inventory's patch_mode take ``PATCH_MODES``.
ALL_MODES = ("env", "engine", "scheduler", "plugin", "sitecustomize")
PATCH_MODES = ("auto", *ALL_MODES)

ENGINE_REL = "sglang/srt/entrypoints/engine.py"
SCHEDULER_REL = "sglang/srt/managers/scheduler.py"
SITECUSTOMIZE_REL = "sitecustomize.py"

ENGINE_DEF_RE = re.compile(r"^def _set_envs_and_config\(")
ENGINE_ANCHOR_LINE = '    mp.set_start_method("spawn", force=True)'
SCHED_DEF_RE = re.compile(r"^def run_scheduler_process\(")
SIG_END_RE = re.compile(r"^\)\s*:\s*$")


def plugin_allowlist(value: str | None) -> list[str] | None:
    """The entry-point names a ``SGLANG_PLUGINS`` value lets SGLang load, or None when it loads every plugin.

    SGLang 0.5.11+ (``sglang/srt/plugins/__init__.py``, ``load_plugins_by_group``): an unset or empty value loads
    all; any other value is split on commas, each name stripped, empties dropped, and only entry points named there
    load (so " , " loads none).
    """
    if not value:
        return None
    return [name.strip() for name in value.split(",") if name.strip()]


def plugin_excluded_by(value: str | None) -> bool:
    """Whether this ``SGLANG_PLUGINS`` value keeps specdeploy's plugin from loading."""
    allowed = plugin_allowlist(value)
    return allowed is not None and PLUGIN_NAME not in allowed


def with_plugin_allowed(value: str) -> str:
    """A user's ``SGLANG_PLUGINS`` with specdeploy's plugin added, the user's text kept as written."""
    if not plugin_excluded_by(value):
        return value
    return value + ("" if value.rstrip().endswith(",") else ",") + PLUGIN_NAME


def explain_unloaded_plugin(evaluation: Evaluation, mode: str | None, launcher_pid: int | None,
                            planned_env: Mapping[str, str] | None) -> None:
    """When a plugin-mode server did not prove its values and its ``SGLANG_PLUGINS`` leaves the plugin out, say so
    first among check-env's hints (the generic hints would send the user to the plugin mode they already use)."""
    if mode != "plugin" or evaluation.get("ok"):
        return
    value: str | None = None
    where = "the server's environment"
    if launcher_pid:
        try:
            with open(f"/proc/{int(launcher_pid)}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(b"SGLANG_PLUGINS="):
                        value = item.split(b"=", 1)[1].decode("utf-8", "replace")
        except OSError:
            value = None
    if value is None and planned_env:
        value, where = planned_env.get("SGLANG_PLUGINS"), "the launch environment"
    if not plugin_excluded_by(value):
        return
    hint: Hint = {"code": "plugin_not_allowed", "severity": "error", "vars": [], "pids": [launcher_pid] if launcher_pid
            else [],
            "message": f"SGLANG_PLUGINS={value!r} in {where} does not name {PLUGIN_NAME}: SGLang 0.5.11+ loads only "
                       f"the plugins it names, so specdeploy's plugin never ran. Add {PLUGIN_NAME} to it (set in the "
                       "inventory env, specdeploy adds it itself), unset it, or use --patch-mode scheduler"}
    evaluation["hints"] = [hint] + [h for h in evaluation.get("hints") or [] if h.get("code") != hint["code"]]


def parse_version(version: str) -> versions.Key:
    """The release whose code ``version`` carries (:func:`versions.feature_key`: "0.5.12rc1" counts as 0.5.12), as
    the agent's error when it is no version."""
    try:
        return versions.feature_key(str(version))
    except ValueError:
        raise AgentError(
            "bad_version",
            f"Cannot understand SGLang version {version!r}.",
            hint="Pass a version such as 0.5.12 (what importlib.metadata.version('sglang') reports).",
        ) from None


def supported_modes(version: str) -> list[str]:
    """Modes that can work with this SGLang version (``plugin`` needs the 0.5.11+ plugin system)."""
    plugins = parse_version(version) >= PLUGIN_MIN_VERSION
    return [m for m in ALL_MODES if m != "plugin" or plugins]


def auto_mode(version: str) -> str:
    """``plugin`` where SGLang has a plugin system (no source edit), else ``scheduler``."""
    return "plugin" if parse_version(version) >= PLUGIN_MIN_VERSION else "scheduler"


def check_mode(mode: str, version: str) -> None:
    """The one check of a patch mode (``auto`` resolved) against the list and the version: the agent's before it
    patches, the client's (``render.patchset.resolve_mode``) before anything is sent."""
    if mode not in ALL_MODES:
        raise AgentError(
            "bad_mode",
            f"unknown patch mode {mode!r}; choose one of: {', '.join(PATCH_MODES)}",
        )
    if mode not in supported_modes(version):
        raise AgentError(
            "mode_unsupported",
            f"patch mode {mode!r} needs SGLang >= {versions.PLUGIN_SYSTEM} (the plugin system), but the host "
            f"has SGLang {version}; use patch_mode 'scheduler' (or 'auto', which picks it for this version)",
            hint="Patch mode 'scheduler' is a source patch at the top of run_scheduler_process.",
            mode=mode,
            sglang_version=version,
        )
