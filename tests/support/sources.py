"""The library's own source, parsed once per test process: several unit tests read every module of ``fabfile/``
(the version gates, the agent's error kinds, the verbs' senders, who imports tasks.py), and each parse of the tree
cost ~0.5 s of CPU. The trees are shared: read them, never change them."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the file, in ``ast.walk``'s order."""
    return tuple(ast.walk(parsed(path)))


def modules(folder: Path) -> list[Path]:
    """The folder's ``.py`` files, resolved and sorted (the cache's keys are the same path however it was reached)."""
    return sorted(p.resolve() for p in folder.rglob("*.py"))
