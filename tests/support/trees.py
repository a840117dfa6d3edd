"""A directory tree as {relative path: sha256}: what a patch changed, and that a rollback put back every byte."""

from __future__ import annotations

from pathlib import Path

from fabfile.remote.common import sha256_file


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): sha256_file(str(p))
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
