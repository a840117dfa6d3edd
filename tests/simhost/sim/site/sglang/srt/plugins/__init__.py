"""Simulated ``sglang.srt.plugins`` (TEST EQUIPMENT), shaped like SGLang 0.5.11+'s plugin loader.

Entry points of group ``sglang.srt.plugins`` are loaded with importlib.metadata and called with no
arguments; ``SGLANG_PLUGINS`` is a comma-separated allowlist of entry-point names (unset or empty: load all).
Idempotent per process; exceptions are logged, not raised. Removed by the installer for versions
before 0.5.11, as in SGLang.
"""

from __future__ import annotations

import logging
import os
from importlib.metadata import entry_points

from sglang.srt.plugins.hook_registry import HookRegistry

logger = logging.getLogger(__name__)

PLATFORM_PLUGINS_GROUP = "sglang.srt.platforms"
GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"

_plugins_loaded = False


def _allowed_names() -> set[str] | None:
    # As SGLang: only an unset or empty value means "all"; " , " is an empty allowlist that loads none.
    raw = os.environ.get("SGLANG_PLUGINS", "")
    if not raw:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def load_plugins_by_group(group: str) -> dict[str, object]:
    allowed = _allowed_names()
    found = {}
    for ep in entry_points(group=group):
        if allowed is not None and ep.name not in allowed:
            logger.info("Skipping plugin %s (not in SGLANG_PLUGINS)", ep.name)
            continue
        try:
            found[ep.name] = ep.load()
        except Exception:
            logger.exception("Failed to load plugin %s", ep.name)
    return found


def load_plugins() -> None:
    """Load general plugins. Should be called early in every process (main, engine core, workers)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for name, func in load_plugins_by_group(GENERAL_PLUGINS_GROUP).items():
        try:
            func()  # type: ignore[operator]
            logger.info("Loaded plugin %s", name)
        except Exception:
            logger.exception("Failed to run plugin %s", name)
    HookRegistry.apply_hooks()
