"""The patch engine's state on the host: the manifest, the content-addressed backups, the lock, and the
transactional writer that apply and rollback share.

Every source file's original bytes are kept under ``STATE/patches/backups/`` (named by their hash) and recorded in
``STATE/patches/manifest.json``; writes go through ``execute``, which restores what it already wrote when a later
write fails, and drops the written modules' bytecode caches.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from ..common import AgentError, atomic_write, ensure_private_dir, sha256_bytes, sha256_file
from .modes import MANIFEST_VERSION, SENTINEL_BEGIN

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import Manifest, ManifestEntry


def _patches_dir(state_dir: str) -> str:
    return os.path.join(state_dir, "patches")


def manifest_path(state_dir: str) -> str:
    return os.path.join(_patches_dir(state_dir), "manifest.json")


def load_manifest(state_dir: str) -> Manifest:
    path = manifest_path(state_dir)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {"version": MANIFEST_VERSION, "entries": [], "dirs": []}
    except ValueError as e:
        raise AgentError(
            "manifest_corrupt",
            f"The patch manifest {path} is not valid JSON: {e}.",
            hint=f"Inspect it by hand; backups of original files are under {backup_dir(state_dir)}.",
        ) from None
    if not isinstance(data, dict):
        raise AgentError("manifest_corrupt", f"The patch manifest {path} is no JSON object.",
                         hint=f"Inspect it by hand; backups of original files are under {backup_dir(state_dir)}.")
    data.setdefault("entries", [])
    data.setdefault("dirs", [])
    # Written by ``save_manifest`` alone: its shape is ours.
    return cast("Manifest", data)


def save_manifest(state_dir: str, data: Manifest) -> None:
    ensure_private_dir(_patches_dir(state_dir))
    atomic_write(
        manifest_path(state_dir), (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(), 0o600
    )


def backup_dir(state_dir: str) -> str:
    return os.path.join(_patches_dir(state_dir), "backups")


def store_backup(state_dir: str, data: bytes) -> str:
    d = backup_dir(state_dir)
    ensure_private_dir(d)
    digest = sha256_bytes(data)
    path = os.path.join(d, digest + ".orig")
    if not (os.path.exists(path) and sha256_file(path) == digest):
        atomic_write(path, data, 0o600)
    return path


@contextlib.contextmanager
def locked(state_dir: str) -> Iterator[None]:
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


def read_bytes(path: str) -> bytes | None:
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


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Op:
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


def execute(ops: list[Op], after_all: Any | None = None) -> None:
    """Perform ``ops`` in order; on any failure put back the prior bytes of every op already done."""
    done: list[Op] = []
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


def require(req: Mapping[str, Any], key: str) -> Any:
    if key not in req:
        raise AgentError("bad_request", f"Patch request lacks {key!r}.")
    return req[key]


def current_state(entry: ManifestEntry, cur: bytes | None) -> str:
    h = None if cur is None else sha256_bytes(cur)
    if h is not None and h == entry.get("sha256_after"):
        return "patched"
    if h == entry.get("sha256_before"):  # None == None: a created file that is gone again
        return "original"
    return "changed" if cur is not None else "missing"


def changed_error(kind: str, entries: list[ManifestEntry], action: str) -> AgentError:
    names = ", ".join(e["path"] for e in entries)
    return AgentError(
        kind,
        f"Refusing to {action}: {names} changed since specdeploy patched it (its sha256 is neither the "
        "patched nor the original one; SGLang was probably upgraded or edited).",
        hint="Nothing was modified. Inspect the file(s); if the change is intended, reinstall SGLang or run "
        "rollback with forget_changed=true to drop them from the manifest.",
        files=[e["path"] for e in entries],
    )


def backup_bytes(state_dir: str, entry: ManifestEntry) -> bytes:
    path = entry.get("backup") or os.path.join(backup_dir(state_dir), str(entry["sha256_before"]) + ".orig")
    data = read_bytes(path)
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


def is_ours(data: bytes) -> bool:
    return b"specdeploy nccl-env" in data[:4096] or SENTINEL_BEGIN.encode() in data


def remove_empty_dirs(dirs: list[str]) -> None:
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
