"""Client side of the NCCL-env patch engine: choose the patch mode and render what gets shipped to the host.

The host side (:mod:`fabfile.remote.patch`) only finds anchors, writes, records and undoes; every line of
code that ends up on the host is rendered here from ``templates/patch/*.j2``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from fabfile.errors import PatchModeError
from fabfile.remote import common
from fabfile.remote.patch import markers
from fabfile.remote.patch import modes as patch_modes
from fabfile.remote.protocol import PatchApplyRequest, PatchPieces
from fabfile.render.jinja import render_text

PLUGIN_DIST = patch_modes.PLUGIN_NAME
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def supported_modes(sglang_version: str) -> list[str]:
    """Modes available for this SGLang version (``plugin`` only from 0.5.11, which has the plugin system)."""
    try:
        return patch_modes.supported_modes(sglang_version)
    except common.AgentError as e:
        raise PatchModeError(e.message) from None


def resolve_mode(requested: str, sglang_version: str) -> str:
    """``auto`` -> plugin (0.5.11+) or scheduler; any other mode is checked against the version."""
    supported_modes(sglang_version)  # a version that is none: refused first
    if requested == "auto":
        return patch_modes.auto_mode(sglang_version)
    try:
        patch_modes.check_mode(requested, sglang_version)  # the agent checks the same before it patches
    except common.AgentError as e:
        raise PatchModeError(e.message) from None
    return requested


def normalize_values(values: Mapping[str, Any]) -> dict[str, str]:
    """Validate variable names/values and return them sorted by name, all values as strings."""
    if not values:
        raise PatchModeError("no NCCL variables to patch in (the values are empty); use patch_mode 'env'")
    out: dict[str, str] = {}
    for name in sorted(values):
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise PatchModeError(f"invalid environment variable name {name!r}")
        raw = values[name]
        if isinstance(raw, bool) or raw is None or isinstance(raw, (dict, list)):
            raise PatchModeError(f"value of {name} must be a string or number, not {raw!r}")
        value = str(raw)
        if "\x00" in value or "\n" in value or "\r" in value:
            raise PatchModeError(f"value of {name} contains a NUL byte or a line break")
        out[name] = value
    return out


def values_hash(values: Mapping[str, str], force: bool) -> str:
    """Short stable hash of what a block does (sorted values and the force flag); it appears in sentinels and
    in every marker line, so status and check-env can tell which values a running process was patched with."""
    blob = json.dumps({"force": bool(force), "values": dict(sorted(values.items()))}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _ctx(mode: str, values: dict[str, str], force: bool, tool_version: str) -> dict[str, Any]:
    return {
        "mode": mode,
        "values": values,
        "force": bool(force),
        "values_hash": values_hash(values, force),
        "tool_version": tool_version,
        "marker_prefix": markers.MARKER_PREFIX,
        "sentinel_begin": patch_modes.SENTINEL_BEGIN,
        "sentinel_end": patch_modes.SENTINEL_END,
        "plugin_group": patch_modes.PLUGIN_GROUP,
    }


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def render_plugin_files(ctx: Mapping[str, Any], dist_version: str) -> dict[str, str]:
    """The tiny distribution, as {path relative to site-packages: text}, RECORD included."""
    module = PLUGIN_DIST
    dist_info = f"{PLUGIN_DIST}-{dist_version}.dist-info"
    files: dict[str, str] = {
        f"{module}/__init__.py": render_text("patch/plugin_init.py.j2", **ctx),
        f"{dist_info}/METADATA": render_text(
            "patch/plugin_METADATA.j2",
            dist_name=PLUGIN_DIST.replace("_", "-"),
            dist_version=dist_version,
            values_hash=ctx["values_hash"],
        ),
        f"{dist_info}/entry_points.txt": render_text(
            "patch/plugin_entry_points.txt.j2",
            plugin_group=ctx["plugin_group"],
            entry_point_name=PLUGIN_DIST,
            module=module,
        ),
        f"{dist_info}/INSTALLER": "specdeploy\n",
        f"{dist_info}/top_level.txt": module + "\n",
    }
    rows = []
    for path in sorted(files):
        data = files[path].encode()
        rows.append({"path": path, "hash": _record_hash(data), "size": len(data)})
    record = f"{dist_info}/RECORD"
    files[record] = render_text("patch/plugin_RECORD.j2", rows=rows, record_path=record)
    return files


def _dist_version(tool_version: str) -> str:
    # A dist-info directory name carries the version; keep it PEP 440-ish and free of path separators.
    v = re.sub(r"[^A-Za-z0-9.+]", "_", tool_version or "0")
    return v or "0"


def render_files(mode: str, values: Mapping[str, Any], force: bool, tool_version: str) -> PatchPieces:
    """Rendered pieces by role, as the host's ``patch.apply.apply`` expects them in ``request["files"]``."""
    if mode == "env":
        return {}
    vals = normalize_values(values)
    ctx = _ctx(mode, vals, force, tool_version)
    if mode in ("engine", "scheduler"):
        return {f"{mode}_block": render_text("patch/source_block.py.j2", **ctx)}
    if mode == "plugin":
        return {"plugin": render_plugin_files(ctx, _dist_version(tool_version))}
    if mode == "sitecustomize":
        return {"sitecustomize": render_text("patch/sitecustomize.py.j2", **ctx)}
    raise PatchModeError(f"unknown patch mode {mode!r}")


def build_patch_request(
    mode: str,
    values: Mapping[str, Any],
    force: bool,
    sglang_version: str,
    state_dir: str,
    site_packages: str,
    tool_version: str,
    python: str | None = None,
) -> PatchApplyRequest:
    """The JSON request for the host verb ``patch_apply`` (``patch.apply.apply``). ``mode`` may be ``auto``.

    ``python`` (the venv interpreter on the host), when given, lets the host check that a sitecustomize it
    writes is the one that interpreter really imports.
    """
    resolved = resolve_mode(mode, sglang_version)
    vals = normalize_values(values) if resolved != "env" else {k: str(v) for k, v in sorted(values.items())}
    req: PatchApplyRequest = {
        "state_dir": state_dir,
        "site_packages": site_packages,
        "sglang_version": sglang_version,
        "mode": resolved,
        "force": bool(force),
        "tool_version": tool_version,
        "values": vals,
        "values_hash": values_hash(vals, force),
        "files": render_files(resolved, vals, force, tool_version),
    }
    if python:
        req["python"] = python
    return req
