"""Host side of the NCCL-env patch engine: edit SGLang sources, or install a tiny plugin / sitecustomize.

Stdlib only, Python 3.9+. The client renders every piece of code (``fabfile.patchset``) and sends it in the
request; this module only finds anchors, applies, records and undoes. Public verbs: :func:`apply`,
:func:`rollback`, :func:`status`; helpers :func:`supported_modes`, :func:`auto_mode`, :func:`parse_marker`.

Guarantees:

* all-or-nothing: every new content is computed before the first write; a failed write restores what was
  already written;
* every source file's original bytes are kept content-addressed under ``STATE/patches/backups/`` and recorded
  in ``STATE/patches/manifest.json`` (hash before/after), so rollback is byte-exact and refuses to touch
  a file that changed behind our back;
* Python bytecode caches of every written/restored module are deleted so no stale ``.pyc`` is ever served.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import glob
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from . import versions
from .common import AgentError, atomic_write, ensure_private_dir, sha256_bytes, sha256_file

MANIFEST_VERSION = 1
SENTINEL_BEGIN = "# >>> specdeploy nccl-env begin"
SENTINEL_END = "# <<< specdeploy nccl-env end"
PLUGIN_GROUP = "sglang.srt.plugins"
PLUGIN_NAME = "specdeploy_nccl_env"
PLUGIN_MIN_VERSION = (0, 5, 11)

ALL_MODES = ("env", "scheduler", "engine", "plugin", "sitecustomize")

ENGINE_REL = "sglang/srt/entrypoints/engine.py"
SCHEDULER_REL = "sglang/srt/managers/scheduler.py"
SITECUSTOMIZE_REL = "sitecustomize.py"

ENGINE_DEF_RE = re.compile(r"^def _set_envs_and_config\(")
ENGINE_ANCHOR_LINE = '    mp.set_start_method("spawn", force=True)'
SCHED_DEF_RE = re.compile(r"^def run_scheduler_process\(")
SIG_END_RE = re.compile(r"^\)\s*:\s*$")


# ----------------------------------------------------------------------------------------------------
# versions and modes


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


def explain_unloaded_plugin(evaluation: dict[str, Any], mode: str | None, launcher_pid: int | None,
                            planned_env: dict[str, Any] | None) -> None:
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
    hint = {"code": "plugin_not_allowed", "severity": "error", "vars": [], "pids": [launcher_pid] if launcher_pid
            else [],
            "message": f"SGLANG_PLUGINS={value!r} in {where} does not name {PLUGIN_NAME}: SGLang 0.5.11+ loads only "
                       f"the plugins it names, so specdeploy's plugin never ran. Add {PLUGIN_NAME} to it (set in the "
                       "inventory env, specdeploy adds it itself), unset it, or use --patch-mode scheduler"}
    evaluation["hints"] = [hint] + [h for h in evaluation.get("hints") or [] if h.get("code") != hint["code"]]


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.5.10.post1"`` -> (0, 5, 10); ``"0.5.12rc1"`` -> (0, 5, 12) (the agent's one parser,
    :mod:`versions`). Raises AgentError on garbage."""
    try:
        return versions.release(str(version))
    except ValueError:
        raise AgentError(
            "bad_version",
            f"Cannot understand SGLang version {version!r}.",
            hint="Pass a version such as 0.5.12 (what importlib.metadata.version('sglang') reports).",
        ) from None


def supported_modes(version: str) -> list[str]:
    """Modes that can work with this SGLang version (``plugin`` needs the 0.5.11+ plugin system)."""
    modes = ["env", "scheduler", "engine"]
    if parse_version(version) >= PLUGIN_MIN_VERSION:
        modes.append("plugin")
    modes.append("sitecustomize")
    return modes


def auto_mode(version: str) -> str:
    """``plugin`` where SGLang has a plugin system (no source edit), else ``scheduler``."""
    return "plugin" if parse_version(version) >= PLUGIN_MIN_VERSION else "scheduler"


def check_mode(mode: str, version: str) -> None:
    if mode not in ALL_MODES:
        raise AgentError(
            "bad_mode",
            f"Unknown patch mode {mode!r}.",
            hint="Use one of: {}.".format(", ".join(ALL_MODES)),
        )
    if mode not in supported_modes(version):
        raise AgentError(
            "mode_unsupported",
            f"Patch mode {mode!r} is not available on SGLang {version}: "
            "SGLang has no plugin system before 0.5.11.",
            hint="Use patch mode 'scheduler' (a source patch at the top of run_scheduler_process).",
            mode=mode,
            sglang_version=version,
        )


# ----------------------------------------------------------------------------------------------------
# marker line


# The marker line format and its parser live in fabfile.remote.markers (check-env reads them too).
from .markers import MARKER_PREFIX as MARKER_PREFIX  # noqa: E402
from .markers import parse_marker as parse_marker  # noqa: E402

# ----------------------------------------------------------------------------------------------------
# anchors


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _newline_of(line: str) -> str:
    if line.endswith("\r\n"):
        return "\r\n"
    return "\n"


def _indent_block(block: str, indent: str, nl: str) -> str:
    out = []
    for raw in block.splitlines():
        out.append((indent + raw if raw.strip() else "") + nl)
    return "".join(out)


def _module_level_defs(lines: list[str], regex: re.Pattern[str]) -> list[int]:
    return [i for i, ln in enumerate(lines) if regex.match(ln)]


def _try_parse(text: str, path: str) -> ast.Module | None:
    try:
        return ast.parse(text, filename=path)
    except SyntaxError:
        return None  # the host Python may be older than SGLang's syntax; fall back to the line scan only


def _anchor_err(kind: str, rel: str, anchor: str, version: str, count: int, detail: str = "") -> AgentError:
    what = "not found" if kind == "anchor_not_found" else f"found {count} times"
    msg = f"Patch anchor {what} in {rel} (SGLang {version}): {anchor}."
    if detail:
        msg = msg[:-1] + " (" + detail + ")."
    return AgentError(
        kind,
        msg,
        hint="This SGLang version's source does not look as expected; use patch mode 'env' or 'plugin' "
        "(0.5.11+), or report the version.",
        file=rel,
        anchor=anchor,
        sglang_version=version,
    )


def _find_func_end(lines: list[str], start: int) -> int:
    """Index one past the last line of the column-0 def at ``start`` (next column-0 code line)."""
    i = start + 1
    while i < len(lines):
        ln = lines[i]
        if ln.strip() and not ln[0].isspace() and not ln.startswith(("#", ")")):
            return i
        i += 1
    return i


def _the_module_level_def(text: str, lines: list[str], def_re: re.Pattern[str], name: str, rel: str,
                          version: str) -> int:
    """Line index of the one module-level ``def name(`` (a regex over the lines, confirmed by ``ast`` when this
    Python can parse the file); a missing or duplicated definition is an anchor error naming file and version."""
    defs = _module_level_defs(lines, def_re)
    tree = _try_parse(text, rel)
    if tree is not None:
        ast_defs = [n.lineno - 1 for n in tree.body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
        defs = [d for d in defs if d in ast_defs]
    if len(defs) != 1:
        raise _anchor_err("anchor_not_found" if not defs else "anchor_ambiguous", rel,
                          f"module-level 'def {name}('", version, len(defs))
    return defs[0]


def find_engine_anchor(text: str, rel: str, version: str) -> int:
    """Line index before which the engine block goes (the ``mp.set_start_method`` line)."""
    lines = _lines(text)
    start = _the_module_level_def(text, lines, ENGINE_DEF_RE, "_set_envs_and_config", rel, version)
    end = _find_func_end(lines, start)
    hits = [i for i in range(start + 1, end) if lines[i].rstrip("\r\n").rstrip() == ENGINE_ANCHOR_LINE]
    anchor2 = f"{ENGINE_ANCHOR_LINE.strip()!r} inside _set_envs_and_config"
    if len(hits) != 1:
        raise _anchor_err(
            "anchor_not_found" if not hits else "anchor_ambiguous", rel, anchor2, version, len(hits)
        )
    return hits[0]


def find_scheduler_anchor(text: str, rel: str, version: str) -> int:
    """Line index of the ``):`` line closing ``run_scheduler_process``'s signature (block goes after it)."""
    lines = _lines(text)
    start = _the_module_level_def(text, lines, SCHED_DEF_RE, "run_scheduler_process", rel, version)
    anchor2 = "line '):' closing the signature of run_scheduler_process"
    for i in range(start + 1, len(lines)):
        ln = lines[i]
        if SIG_END_RE.match(ln):
            return i
        if ln.strip() and not ln[0].isspace():
            break  # left the signature without a bare '):' line
    raise _anchor_err("anchor_not_found", rel, anchor2, version, 0)


def _verify_placement(role: str, orig: str, new: str, rel: str, version: str, block_lines: int) -> None:
    """Self-check with ast (when this Python can parse the file): it compiles and the block sits right."""
    if _try_parse(orig, rel) is None:
        return
    try:
        tree = ast.parse(new, filename=rel)
    except SyntaxError as e:
        raise AgentError(
            "patch_verify_failed",
            f"The patched {rel} (SGLang {version}) does not parse: {e}.",
            file=rel,
            sglang_version=version,
        ) from None
    name = "_set_envs_and_config" if role == "engine" else "run_scheduler_process"
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    ok = False
    if len(fn) == 1:
        body = fn[0].body
        if role == "scheduler":
            ok = bool(body) and isinstance(body[0], ast.Import) and "specdeploy" in ast.dump(body[0])
        else:
            for j, st in enumerate(body):
                src = ast.get_source_segment(new, st) or ""
                if src.strip() == ENGINE_ANCHOR_LINE.strip():
                    ok = j > 0 and "_specdeploy" in (ast.get_source_segment(new, body[j - 1]) or "")
                    break
    if not ok:
        raise AgentError(
            "patch_verify_failed",
            f"The block did not land where expected in {rel} (SGLang {version}).",
            file=rel,
            sglang_version=version,
        )


def strip_blocks(text: str) -> str:
    """Remove every specdeploy block (sentinel lines inclusive) from ``text``."""
    out: list[str] = []
    inside = False
    for ln in _lines(text):
        s = ln.strip()
        if s.startswith(SENTINEL_BEGIN):
            inside = True
            continue
        if s.startswith(SENTINEL_END):
            inside = False
            continue
        if not inside:
            out.append(ln)
    return "".join(out)


def has_block(text: str) -> bool:
    return SENTINEL_BEGIN in text


def insert_block(role: str, original: str, block: str, rel: str, version: str) -> str:
    lines = _lines(original)
    if role == "engine":
        at = find_engine_anchor(original, rel, version)
        nl = _newline_of(lines[at])
    else:
        at = find_scheduler_anchor(original, rel, version) + 1
        nl = _newline_of(lines[at - 1])
    text = _indent_block(block, "    ", nl)
    new = "".join(lines[:at]) + text + "".join(lines[at:])
    _verify_placement(role, original, new, rel, version, text.count(nl))
    return new


# ----------------------------------------------------------------------------------------------------
# state


def _patches_dir(state_dir: str) -> str:
    return os.path.join(state_dir, "patches")


def _manifest_path(state_dir: str) -> str:
    return os.path.join(_patches_dir(state_dir), "manifest.json")


def load_manifest(state_dir: str) -> dict[str, Any]:
    path = _manifest_path(state_dir)
    try:
        with open(path, encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return {"version": MANIFEST_VERSION, "entries": [], "dirs": []}
    except ValueError as e:
        raise AgentError(
            "manifest_corrupt",
            f"The patch manifest {path} is not valid JSON: {e}.",
            hint=f"Inspect it by hand; backups of original files are under {_backup_dir(state_dir)}.",
        ) from None
    data.setdefault("entries", [])
    data.setdefault("dirs", [])
    return data


def _save_manifest(state_dir: str, data: dict[str, Any]) -> None:
    ensure_private_dir(_patches_dir(state_dir))
    atomic_write(
        _manifest_path(state_dir), (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), 0o600
    )


def _backup_dir(state_dir: str) -> str:
    return os.path.join(_patches_dir(state_dir), "backups")


def _store_backup(state_dir: str, data: bytes) -> str:
    d = _backup_dir(state_dir)
    ensure_private_dir(d)
    digest = sha256_bytes(data)
    path = os.path.join(d, digest + ".orig")
    if not (os.path.exists(path) and sha256_file(path) == digest):
        atomic_write(path, data, 0o600)
    return path


@contextlib.contextmanager
def _locked(state_dir: str) -> Iterator[None]:
    ensure_private_dir(_patches_dir(state_dir))
    fd = os.open(os.path.join(_patches_dir(state_dir), ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise AgentError(
                "patch_busy",
                f"Another specdeploy patch operation holds {state_dir}.",
                hint="Wait for it to finish and retry.",
            ) from None
        yield
    finally:
        os.close(fd)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def drop_pycache(path: str) -> list[str]:
    """Delete ``__pycache__/<module>.*.pyc`` next to ``path``; returns what was removed."""
    d, base = os.path.split(path)
    mod = base[:-3] if base.endswith(".py") else base
    removed = []
    for pyc in glob.glob(os.path.join(glob.escape(d), "__pycache__", glob.escape(mod) + ".*.pyc")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pyc)
            removed.append(pyc)
    return removed


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ----------------------------------------------------------------------------------------------------
# transactional writer


class _Op:
    __slots__ = ("after", "path", "prior")

    def __init__(self, path: str, after: bytes | None, prior: bytes | None) -> None:
        self.path = path
        self.after = after  # None = delete
        self.prior = prior  # None = did not exist


def _write_one(path: str, data: bytes | None) -> None:
    if data is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, data)
    if path.endswith(".py"):
        drop_pycache(path)


def _execute(ops: list[_Op], after_all: Any | None = None) -> None:
    """Perform ``ops`` in order; on any failure put back the prior bytes of every op already done."""
    done: list[_Op] = []
    try:
        for op in ops:
            done.append(op)
            _write_one(op.path, op.after)
        if after_all is not None:
            after_all()
    except BaseException as e:
        undo_errors = []
        for op in reversed(done):
            try:
                _write_one(op.path, op.prior)
            except OSError as ue:  # pragma: no cover - best effort
                undo_errors.append(f"{op.path}: {ue}")
        if isinstance(e, AgentError):
            raise
        if isinstance(e, OSError):
            raise AgentError(
                "write_failed",
                "Writing {} failed ({}); every file already written was restored{}.".format(
                    getattr(e, "filename", None) or (done[-1].path if done else "?"),
                    e.strerror or e,
                    "" if not undo_errors else " except: " + "; ".join(undo_errors),
                ),
                hint="Check free space and permissions on the host, then retry.",
                restored=[op.path for op in done],
                undo_errors=undo_errors,
            ) from None
        raise


# ----------------------------------------------------------------------------------------------------
# apply


def _require(req: dict[str, Any], key: str) -> Any:
    if key not in req:
        raise AgentError("bad_request", f"Patch request lacks {key!r}.")
    return req[key]


def _check_installed_version(site: str, version: str) -> None:
    """If this site-packages has one ``sglang-*.dist-info``, its version must be the one the client claims.

    (``sglang/version.py`` is no guide: some releases ship ``0.0.0.dev0`` there.)
    """
    infos = glob.glob(os.path.join(glob.escape(site), "sglang-*.dist-info", "METADATA"))
    if len(infos) != 1:
        return
    data = _read(infos[0]) or b""
    m = re.search(r"^Version:\s*(\S+)\s*$", data.decode("utf-8", "replace"), re.M)
    if m and m.group(1) != version:
        raise AgentError(
            "version_mismatch",
            f"The request is for SGLang {version} but {infos[0]} says {m.group(1)}.",
            hint="Re-probe the host; SGLang may have been upgraded.",
            expected=version,
            found=m.group(1),
        )


def _plan_files(req: dict[str, Any]) -> list[dict[str, Any]]:
    """What the request wants on disk: [{"path", "rel", "role", "kind", "block" | "content"}]."""
    mode = req["mode"]
    site = req["site_packages"]
    files = req.get("files") or {}
    out: list[dict[str, Any]] = []

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


def _current_state(entry: dict[str, Any], cur: bytes | None) -> str:
    h = None if cur is None else sha256_bytes(cur)
    if h is not None and h == entry.get("sha256_after"):
        return "patched"
    if h == entry.get("sha256_before"):  # None == None: a created file that is gone again
        return "original"
    return "changed" if cur is not None else "missing"


def _changed_error(kind: str, entries: list[dict[str, Any]], action: str) -> AgentError:
    names = ", ".join(e["path"] for e in entries)
    return AgentError(
        kind,
        f"Refusing to {action}: {names} changed since specdeploy patched it (its sha256 is neither the "
        "patched nor the original one; SGLang was probably upgraded or edited).",
        hint="Nothing was modified. Inspect the file(s); if the change is intended, reinstall SGLang or run "
        "rollback with forget_changed=true to drop them from the manifest.",
        files=[e["path"] for e in entries],
    )


def apply(req: dict[str, Any]) -> dict[str, Any]:
    """Make the host match the request: the files of ``mode`` patched/installed, anything else we did undone.

    Request: ``{"state_dir", "site_packages", "sglang_version", "mode", "force", "tool_version",
    "files": {...}, "values_hash"?, "values"?, "python"?}`` where files holds ``engine_block`` /
    ``scheduler_block`` (column-0 code with sentinel comments), ``plugin`` ({relpath: text}) or
    ``sitecustomize`` (text). Result: ``{"mode", "changed", "files": [{"path", "role", "kind", "action"}],
    "manifest", "warnings"}`` with action patched | unchanged | repatched | installed | restored | removed.
    """
    state_dir = _require(req, "state_dir")
    site = _require(req, "site_packages")
    version = str(_require(req, "sglang_version"))
    mode = _require(req, "mode")
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
    with _locked(state_dir):
        return _apply_locked(req, state_dir, site, version, mode, tool_version)


def _apply_locked(
    req: dict[str, Any], state_dir: str, site: str, version: str, mode: str, tool_version: str
) -> dict[str, Any]:
    manifest = load_manifest(state_dir)
    old_entries = {e["path"]: e for e in manifest["entries"]}
    wanted = _plan_files(req)
    wanted_paths = {w["path"] for w in wanted}

    # 1. refuse early if any file we recorded changed behind our back
    currents: dict[str, bytes | None] = {}
    changed = []
    for path, e in old_entries.items():
        currents[path] = _read(path)
        st = _current_state(e, currents[path])
        if st == "changed" or (st == "missing" and e["kind"] == "source"):
            changed.append(e)
    if changed:
        raise _changed_error("file_changed", changed, "patch")

    # 2. compute every new content (no writes yet)
    ops: list[_Op] = []
    results: list[dict[str, Any]] = []
    new_entries: list[dict[str, Any]] = []
    backups: list[tuple[bytes, str]] = []
    now = _now()
    for w in wanted:
        path = w["path"]
        cur = currents[path] if path in currents else _read(path)
        old = old_entries.get(path)
        if w["kind"] == "source":
            if cur is None:
                raise AgentError(
                    "file_missing",
                    "{} does not exist (SGLang {} in {}).".format(w["rel"], version, site),
                    hint="Check site_packages and the SGLang install.",
                    file=path,
                )
            if old is not None:
                original = _backup_bytes(state_dir, old) if _current_state(old, cur) == "patched" else cur
            else:
                text = cur.decode("utf-8")
                original = strip_blocks(text).encode("utf-8") if has_block(text) else cur
            new = insert_block(w["role"], original.decode("utf-8"), w["block"], w["rel"], version).encode(
                "utf-8"
            )
            before_hash = sha256_bytes(original)
            backups.append((original, before_hash))
        else:
            new = w["content"].encode("utf-8")
            if cur is not None and old is None and not _is_ours(cur):
                raise AgentError(
                    "foreign_file",
                    f"{path} already exists and was not written by specdeploy; refusing to overwrite it.",
                    hint="Move it away or use another patch mode (e.g. 'plugin' on 0.5.11+, or 'scheduler').",
                    file=path,
                )
            before_hash = None
        after_hash = sha256_bytes(new)
        if cur == new:
            action = "unchanged"
        elif old is None and (cur is None or w["kind"] != "source" or not has_block(cur.decode("utf-8"))):
            action = "installed" if w["kind"] != "source" else "patched"
        else:
            action = "repatched"
        if action != "unchanged":
            ops.append(_Op(path, new, cur))
        results.append({"path": path, "role": w["role"], "kind": w["kind"], "action": action})
        entry = {
            "path": path,
            "rel": w["rel"],
            "role": w["role"],
            "kind": w["kind"],
            "mode": mode,
            "sha256_before": before_hash,
            "sha256_after": after_hash,
            "backup": None
            if before_hash is None
            else os.path.join(_backup_dir(state_dir), before_hash + ".orig"),
            "time": now if action != "unchanged" or old is None else old.get("time", now),
            "tool_version": tool_version if action != "unchanged" or old is None else old.get("tool_version"),
            "values_hash": req.get("values_hash"),
            "sglang_version": version,
        }
        new_entries.append(entry)

    # 3. files from a previous mode/request that this one does not want: undo them
    for path, e in old_entries.items():
        if path in wanted_paths:
            continue
        cur = currents[path]
        st = _current_state(e, cur)
        if st == "patched":
            if e["kind"] == "source":
                ops.append(_Op(path, _backup_bytes(state_dir, e), cur))
                results.append({"path": path, "role": e["role"], "kind": e["kind"], "action": "restored"})
            else:
                ops.append(_Op(path, None, cur))
                results.append({"path": path, "role": e["role"], "kind": e["kind"], "action": "removed"})

    created_dirs = sorted({os.path.dirname(w["path"]) for w in wanted if w["kind"] == "plugin"})
    created_dirs = [d for d in created_dirs if os.path.normpath(d) != os.path.normpath(site)]
    new_manifest: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "mode": mode,
        "site_packages": site,
        "sglang_version": version,
        "tool_version": tool_version,
        "values_hash": req.get("values_hash"),
        "values": req.get("values"),
        "force": bool(req.get("force")),
        "updated": now,
        "entries": new_entries,
        "dirs": created_dirs,
    }

    # 4. backups first (content-addressed, harmless), then the files, then the manifest
    for data, _h in backups:
        _store_backup(state_dir, data)
    changed_any = bool(ops)
    if (
        changed_any
        or new_manifest["entries"] != manifest["entries"]
        or not os.path.exists(_manifest_path(state_dir))
    ):
        _execute(ops, after_all=lambda: _save_manifest(state_dir, new_manifest))
        _remove_empty_dirs([d for d in manifest.get("dirs", []) if d not in created_dirs])

    warnings = []
    if mode == "sitecustomize" and req.get("python"):
        warnings.extend(_check_sitecustomize_wins(req["python"], os.path.join(site, SITECUSTOMIZE_REL)))
    return {
        "mode": mode,
        "sglang_version": version,
        "changed": changed_any,
        "files": results,
        "manifest": _manifest_path(state_dir),
        "warnings": warnings,
    }


def _backup_bytes(state_dir: str, entry: dict[str, Any]) -> bytes:
    path = entry.get("backup") or os.path.join(_backup_dir(state_dir), str(entry["sha256_before"]) + ".orig")
    data = _read(path)
    if data is None or sha256_bytes(data) != entry["sha256_before"]:
        raise AgentError(
            "backup_corrupt",
            f"The backup {path} of {entry['path']} is missing or does not match its recorded sha256; "
            "refusing to continue.",
            hint="Nothing was modified. Reinstall SGLang to get pristine sources, "
            f"then clear {state_dir}/patches.",
            file=entry["path"],
            backup=path,
        )
    return data


def _is_ours(data: bytes) -> bool:
    return b"specdeploy nccl-env" in data[:4096] or SENTINEL_BEGIN.encode() in data


def _remove_empty_dirs(dirs: list[str]) -> None:
    for d in sorted(dirs, key=len, reverse=True):
        pyc = os.path.join(d, "__pycache__")
        if os.path.isdir(pyc):
            for name in os.listdir(pyc):
                if name.startswith("__init__.") and name.endswith(".pyc"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(pyc, name))
            with contextlib.suppress(OSError):
                os.rmdir(pyc)
        with contextlib.suppress(OSError):
            os.rmdir(d)


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


# ----------------------------------------------------------------------------------------------------
# rollback and status


def rollback(req: dict[str, Any]) -> dict[str, Any]:
    """Undo everything in the manifest, byte for byte.

    Request ``{"state_dir", "dry_run"?, "forget_changed"?}``.

    Result: ``{"dry_run", "nothing_to_do", "files": [{"path", "kind", "action"}], "forgotten": [...]}`` with
    action restored | removed | already_original | already_removed (with ``would_`` prefix on dry runs).
    """
    state_dir = _require(req, "state_dir")
    dry = bool(req.get("dry_run"))
    with _locked(state_dir):
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
        currents = {e["path"]: _read(e["path"]) for e in entries}
        changed = [e for e in entries if _current_state(e, currents[e["path"]]) == "changed"]
        changed += [e for e in entries if e["kind"] == "source" and currents[e["path"]] is None]
        forgotten: list[str] = []
        if changed and req.get("forget_changed"):
            forgotten = [e["path"] for e in changed]
            entries = [e for e in entries if e["path"] not in forgotten]
        elif changed:
            raise _changed_error("rollback_refused", changed, "roll back")
        ops: list[_Op] = []
        results = []
        for e in entries:
            cur = currents[e["path"]]
            st = _current_state(e, cur)
            if st == "patched":
                if e["kind"] == "source":
                    ops.append(_Op(e["path"], _backup_bytes(state_dir, e), cur))
                    action = "restored"
                else:
                    ops.append(_Op(e["path"], None, cur))
                    action = "removed"
            else:
                action = "already_original" if e["kind"] == "source" else "already_removed"
            results.append(
                {"path": e["path"], "kind": e["kind"], "action": ("would_" if dry else "") + action}
            )
        if dry:
            return {"dry_run": True, "nothing_to_do": not ops, "files": results, "forgotten": forgotten}
        cleared = {
            "version": MANIFEST_VERSION,
            "entries": [],
            "dirs": [],
            "updated": _now(),
            "last_rollback": _now(),
        }
        _execute(ops, after_all=lambda: _save_manifest(state_dir, cleared))
        _remove_empty_dirs(manifest.get("dirs", []))
        bad = [
            e["path"]
            for e in entries
            if e["kind"] == "source"
            and (_read(e["path"]) is None or sha256_file(e["path"]) != e["sha256_before"])
        ]
        if bad:  # pragma: no cover - only on a racing writer
            raise AgentError("rollback_verify_failed", f"After rollback {bad} do not match their originals.")
        return {"dry_run": False, "nothing_to_do": not ops, "files": results, "forgotten": forgotten}


def status(req: dict[str, Any]) -> dict[str, Any]:
    """Manifest plus, per file, ``state``: patched | original | changed | missing.

    Request ``{"state_dir", "site_packages"?}``; with site_packages, also lists ``unmanaged``: files that
    carry a specdeploy sentinel but are not in the manifest.
    """
    state_dir = _require(req, "state_dir")
    manifest = load_manifest(state_dir)
    files = []
    for e in manifest["entries"]:
        st = _current_state(e, _read(e["path"]))
        files.append(dict(e, state=st))
    unmanaged = []
    site = req.get("site_packages")
    if site:
        known = {e["path"] for e in manifest["entries"]}
        for rel in (ENGINE_REL, SCHEDULER_REL, SITECUSTOMIZE_REL):
            p = os.path.join(site, rel)
            data = _read(p)
            if data is not None and p not in known and _is_ours(data):
                unmanaged.append(p)
    return {
        "mode": manifest.get("mode") if manifest["entries"] else None,
        "values_hash": manifest.get("values_hash") if manifest["entries"] else None,
        "patched": bool(files) and all(f["state"] == "patched" for f in files),
        "clean": not files and not unmanaged,
        "files": files,
        "unmanaged": unmanaged,
        "manifest": _manifest_path(state_dir),
    }
