"""A private on-disk cache of JSON documents, each named by the hash of everything it was derived from.

Used by the CLI to skip work whose result depends only on bytes it can hash (an inventory file's validation: see
``hosts.load``). It lives in ``$XDG_CACHE_HOME/specdeploy/cli`` (default ``~/.cache/specdeploy/cli``): a directory
of the user's own, 0700, files 0600 (a document may hold what the file it came from holds, secrets included).
Anything unexpected (another owner, looser modes, a symlink, unreadable or foreign content) makes a lookup miss,
never fail: the caller then does the work itself. A failed write is silent for the same reason. The directory
keeps the newest ``KEEP`` documents; removing it at any time is safe.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

KEEP = 32


def directory() -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or ""
    try:
        root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    except RuntimeError:  # no HOME and no passwd entry: no cache
        return None
    return root / "specdeploy" / "cli"


def _private_dir(d: Path) -> bool:
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def lookup(kind: str, key: str) -> Any:
    """The document stored under ``key`` (a hex digest), or None."""
    d = directory()
    if d is None or not _private_dir(d):
        return None
    try:
        fd = os.open(d / f"{kind}-{key}.json", os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                return None
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    return doc.get("value")


def store(kind: str, key: str, value: Any) -> None:
    """Write ``value`` under ``key`` atomically (0600, in the private directory); any failure leaves no trace."""
    import tempfile

    d = directory()
    if d is None:
        return
    tmp = None
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private_dir(d):
            return
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{kind}-", suffix=".tmp")  # 0600, a name nobody can predict
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": key, "value": value}, f, separators=(",", ":"))
        os.replace(tmp, d / f"{kind}-{key}.json")
        tmp = None
        _prune(d, kind)
    except (OSError, TypeError, ValueError):
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _prune(d: Path, kind: str) -> None:
    """Keep the newest ``KEEP`` documents of this kind (an edited file leaves its old entries behind)."""
    entries = []
    for p in d.glob(f"{kind}-*.json"):
        try:
            entries.append((p.stat().st_mtime_ns, p))
        except OSError:
            continue
    for _, p in sorted(entries, reverse=True)[KEEP:]:
        try:
            p.unlink()
        except OSError:
            pass
