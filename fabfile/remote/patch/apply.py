"""``patch_apply``: put one mode's code into SGLang (edited sources, a plugin, or a sitecustomize), all or nothing.

Every new content is computed before the first write; the writes go through ``store.execute``.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from .. import versions
from ..common import AgentError, EventSink, expand, sha256_bytes
from .anchors import has_block, insert_block, strip_blocks
from .modes import ENGINE_REL, MANIFEST_VERSION, SCHEDULER_REL, SITECUSTOMIZE_REL, check_mode
from .store import (
    Op,
    backup_bytes,
    backup_dir,
    changed_error,
    current_state,
    execute,
    is_ours,
    load_manifest,
    locked,
    manifest_path,
    now,
    read_bytes,
    remove_empty_dirs,
    require,
    save_manifest,
    store_backup,
)

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import Manifest, ManifestEntry, PatchApplyAnswer, PatchApplyRequest, PatchFile


def _check_installed_version(site: str, version: str) -> None:
    """If this site-packages has one ``sglang-*.dist-info``, its version must be the one the client claims.

    (``sglang/version.py`` is no guide: some releases ship ``0.0.0.dev0`` there.)
    """
    infos = glob.glob(os.path.join(glob.escape(site), "sglang-*.dist-info", "METADATA"))
    if len(infos) != 1:
        return
    data = read_bytes(infos[0]) or b""
    m = re.search(r"^Version:\s*(\S+)\s*$", data.decode("utf-8", "replace"), re.M)
    if m and m.group(1) != version:
        raise AgentError(
            "version_mismatch",
            f"The request is for SGLang {version} but {infos[0]} says {m.group(1)}.",
            hint="Re-probe the host; SGLang may have been upgraded.",
            expected=version,
            found=m.group(1),
        )


class Wanted(TypedDict, total=False):
    """One file the request wants on disk: where, its role and kind, and the block (a source) or the content."""

    path: str
    rel: str
    role: str
    kind: str
    block: str
    content: str


def _plan_files(req: Mapping[str, Any]) -> list[Wanted]:
    """What the request wants on disk, one ``Wanted`` per file."""
    mode = req["mode"]
    site = req["site_packages"]
    files = req.get("files") or {}
    out: list[Wanted] = []

    def need(role: str) -> Any:
        if role not in files:
            raise AgentError("bad_request", f"Patch mode {mode!r} needs files[{role!r}] in the request.")
        return files[role]

    if mode == "engine":
        out.append({"rel": ENGINE_REL, "role": "engine", "kind": "source", "block": need("engine_block")})
    elif mode == "scheduler":
        out.append(
            {"rel": SCHEDULER_REL, "role": "scheduler", "kind": "source", "block": need("scheduler_block")}
        )
    elif mode == "plugin":
        plugin_files = need("plugin")
        for rel in sorted(plugin_files):
            norm = os.path.normpath(rel)
            if norm.startswith(("..", "/")) or os.path.isabs(norm):
                raise AgentError("bad_request", f"Plugin file path {rel!r} escapes site-packages.")
            out.append({"rel": norm, "role": "plugin", "kind": "plugin", "content": plugin_files[rel]})
    elif mode == "sitecustomize":
        out.append(
            {
                "rel": SITECUSTOMIZE_REL,
                "role": "sitecustomize",
                "kind": "sitecustomize",
                "content": need("sitecustomize"),
            }
        )
    for item in out:
        item["path"] = os.path.join(site, item["rel"])
    return out


def apply(req: Mapping[str, Any]) -> PatchApplyAnswer:
    """Make the host match the request: the files of ``mode`` patched/installed, anything else we did undone.

    Request: ``{"state_dir", "site_packages", "sglang_version", "mode", "force", "tool_version",
    "files": {...}, "values_hash"?, "values"?, "python"?}`` where files holds ``engine_block`` /
    ``scheduler_block`` (column-0 code with sentinel comments), ``plugin`` ({relpath: text}) or
    ``sitecustomize`` (text). Result: ``{"mode", "changed", "files": [{"path", "role", "kind", "action"}],
    "manifest", "warnings"}`` with action patched | unchanged | repatched | installed | restored | removed.
    """
    state_dir = require(req, "state_dir")
    site = require(req, "site_packages")
    version = str(require(req, "sglang_version"))
    mode = require(req, "mode")
    tool_version = str(req.get("tool_version", ""))
    check_mode(mode, version)
    if not os.path.isdir(site):
        raise AgentError("site_packages_missing", f"site-packages directory {site} does not exist.")
    _check_installed_version(site, version)
    if (
        mode == "plugin"
        and os.path.isdir(os.path.join(site, "sglang"))
        and not os.path.isfile(os.path.join(site, "sglang", "srt", "plugins", "__init__.py"))
    ):
        raise AgentError(
            "mode_unsupported",
            f"SGLang {version} in {site} has no sglang/srt/plugins/__init__.py, "
            "so patch mode 'plugin' cannot work.",
            hint="Use patch mode 'scheduler'.",
        )
    with locked(state_dir):
        return _apply_locked(req, state_dir, site, version, mode, tool_version)


def _unchanged_currents(old_entries: dict[str, ManifestEntry]) -> dict[str, bytes | None]:
    """The current bytes of every file the manifest records; refuses (``file_changed``) when one changed behind the
    engine's back or a recorded source is gone."""
    currents: dict[str, bytes | None] = {}
    changed = []
    for path, e in old_entries.items():
        currents[path] = read_bytes(path)
        st = current_state(e, currents[path])
        if st == "changed" or (st == "missing" and e["kind"] == "source"):
            changed.append(e)
    if changed:
        raise changed_error("file_changed", changed, "patch")
    return currents


def _new_source(w: Wanted, cur: bytes | None, old: ManifestEntry | None, state_dir: str, version: str,
                site: str) -> tuple[bytes, bytes]:
    """(original, new) bytes of an SGLang source: the pristine file (from the backup when it is patched now) and
    the same file with this request's block inserted."""
    if cur is None:
        raise AgentError(
            "file_missing",
            "{} does not exist (SGLang {} in {}).".format(w["rel"], version, site),
            hint="Check site_packages and the SGLang install.",
            file=w["path"],
        )
    if old is not None:
        original = backup_bytes(state_dir, old) if current_state(old, cur) == "patched" else cur
    else:
        text = cur.decode("utf-8")
        original = strip_blocks(text).encode("utf-8") if has_block(text) else cur
    new = insert_block(w["role"], original.decode("utf-8"), w["block"], w["rel"], version).encode(
        "utf-8"
    )
    return original, new


def _new_file(w: Wanted, cur: bytes | None, old: ManifestEntry | None) -> bytes:
    """The bytes of a file the engine owns (plugin, sitecustomize); refuses to overwrite one it did not write."""
    if cur is not None and old is None and not is_ours(cur):
        raise AgentError(
            "foreign_file",
            f"{w['path']} already exists and was not written by specdeploy; refusing to overwrite it.",
            hint=f"Move it away or use another patch mode (e.g. 'plugin' on {versions.PLUGIN_SYSTEM}+, or "
            "'scheduler').",
            file=w["path"],
        )
    return bytes(w["content"].encode("utf-8"))


def _undo_unwanted(old_entries: dict[str, ManifestEntry], wanted_paths: set[str],
                   currents: dict[str, bytes | None], state_dir: str, ops: list[Op],
                   results: list[PatchFile]) -> None:
    """Files of a previous mode or request that this one does not want: restore (a source) or remove (ours)."""
    for path, e in old_entries.items():
        if path in wanted_paths:
            continue
        cur = currents[path]
        st = current_state(e, cur)
        if st == "patched":
            if e["kind"] == "source":
                ops.append(Op(path, backup_bytes(state_dir, e), cur))
                results.append({"path": path, "role": e["role"], "kind": e["kind"], "action": "restored"})
            else:
                ops.append(Op(path, None, cur))
                results.append({"path": path, "role": e["role"], "kind": e["kind"], "action": "removed"})


@dataclass(frozen=True)
class _Target:
    """What one apply writes for: the host's state and site-packages, its SGLang version, the mode, the request."""

    state_dir: str
    site: str
    version: str
    mode: str
    tool_version: str
    values_hash: Any
    now: str


def _plan_one(w: Wanted, cur: bytes | None, old: ManifestEntry | None,
              tg: _Target) -> tuple[Op | None, PatchFile, ManifestEntry, tuple[bytes, str] | None]:
    """One wanted file: (the write it needs or None, its result row, its manifest entry, the original to back up)."""
    path = w["path"]
    backup: tuple[bytes, str] | None = None
    if w["kind"] == "source":
        original, new = _new_source(w, cur, old, tg.state_dir, tg.version, tg.site)
        backup = (original, sha256_bytes(original))
        before_hash: str | None = backup[1]
    else:
        new = _new_file(w, cur, old)
        before_hash = None
    after_hash = sha256_bytes(new)
    if cur == new:
        action = "unchanged"
    elif old is None and (cur is None or w["kind"] != "source" or not has_block(cur.decode("utf-8"))):
        action = "installed" if w["kind"] != "source" else "patched"
    else:
        action = "repatched"
    op = Op(path, new, cur) if action != "unchanged" else None
    # sha256: what the file holds after this deploy (`inv diff` compares it between deploys)
    result: PatchFile = {"path": path, "role": w["role"], "kind": w["kind"], "action": action, "sha256": after_hash}
    entry: ManifestEntry = {
        "path": path,
        "rel": w["rel"],
        "role": w["role"],
        "kind": w["kind"],
        "mode": tg.mode,
        "sha256_before": before_hash,
        "sha256_after": after_hash,
        "backup": None
        if before_hash is None
        else os.path.join(backup_dir(tg.state_dir), before_hash + ".orig"),
        "time": tg.now if action != "unchanged" or old is None else old.get("time", tg.now),
        "tool_version": tg.tool_version if action != "unchanged" or old is None else old.get("tool_version"),
        "values_hash": tg.values_hash,
        "sglang_version": tg.version,
    }
    return op, result, entry, backup


def _apply_locked(
    req: Mapping[str, Any], state_dir: str, site: str, version: str, mode: str, tool_version: str
) -> PatchApplyAnswer:
    manifest = load_manifest(state_dir)
    old_entries = {e["path"]: e for e in manifest["entries"]}
    wanted = _plan_files(req)
    wanted_paths = {w["path"] for w in wanted}

    # 1. refuse early if any file we recorded changed behind our back
    currents = _unchanged_currents(old_entries)

    # 2. compute every new content (no writes yet)
    ops: list[Op] = []
    results: list[PatchFile] = []
    new_entries: list[ManifestEntry] = []
    backups: list[tuple[bytes, str]] = []
    tg = _Target(state_dir, site, version, mode, tool_version, req.get("values_hash"), now())
    for w in wanted:
        path = w["path"]
        cur = currents[path] if path in currents else read_bytes(path)
        op, result, entry, backup = _plan_one(w, cur, old_entries.get(path), tg)
        if backup is not None:
            backups.append(backup)
        if op is not None:
            ops.append(op)
        results.append(result)
        new_entries.append(entry)

    # 3. files from a previous mode/request that this one does not want: undo them
    _undo_unwanted(old_entries, wanted_paths, currents, state_dir, ops, results)

    created_dirs = sorted({os.path.dirname(w["path"]) for w in wanted if w["kind"] == "plugin"})
    created_dirs = [d for d in created_dirs if os.path.normpath(d) != os.path.normpath(site)]
    new_manifest: Manifest = {
        "version": MANIFEST_VERSION,
        "mode": mode,
        "site_packages": site,
        "sglang_version": version,
        "tool_version": tool_version,
        "values_hash": req.get("values_hash"),
        "values": req.get("values"),
        "force": bool(req.get("force")),
        "updated": tg.now,
        "entries": new_entries,
        "dirs": created_dirs,
    }
    changed_any = bool(ops)
    _commit(state_dir, manifest, new_manifest, backups, ops, created_dirs)

    warnings = []
    if mode == "sitecustomize" and req.get("python"):
        warnings.extend(_check_sitecustomize_wins(req["python"], os.path.join(site, SITECUSTOMIZE_REL)))
    return {
        "mode": mode,
        "sglang_version": version,
        "changed": changed_any,
        "files": results,
        "manifest": manifest_path(state_dir),
        "warnings": warnings,
    }


def _commit(state_dir: str, manifest: Manifest, new_manifest: Manifest, backups: list[tuple[bytes, str]],
            ops: list[Op], created_dirs: list[str]) -> None:
    """4. backups first (content-addressed, harmless), then the files, then the manifest."""
    for data, _h in backups:
        store_backup(state_dir, data)
    if (
        bool(ops)
        or new_manifest["entries"] != manifest["entries"]
        or not os.path.exists(manifest_path(state_dir))
    ):
        execute(ops, after_all=lambda: save_manifest(state_dir, new_manifest))
        remove_empty_dirs([d for d in manifest.get("dirs", []) if d not in created_dirs])


def _check_sitecustomize_wins(python: str, ours: str) -> list[str]:
    """A system sitecustomize earlier on sys.path (Debian/Ubuntu ship one) would shadow ours: warn."""
    try:
        out = subprocess.run(
            [
                python,
                "-I",
                "-c",
                "import importlib.util as u; s = u.find_spec('sitecustomize'); print(s.origin if s else '')",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return [f"could not check which sitecustomize {python} imports: {e}"]
    if os.path.realpath(out or "/nonexistent") != os.path.realpath(ours):
        return [
            "{} imports sitecustomize from {}, not {}; the sitecustomize mode will not act".format(
                python, out or "nowhere", ours
            )
        ]
    return []


def apply_verb(req: PatchApplyRequest, sink: EventSink) -> PatchApplyAnswer:
    """The ``patch_apply`` verb: :func:`apply` in the request's own state directory."""
    return apply({**req, "state_dir": expand(req["state_dir"])})
