"""The library's own source for the tests that scan it (the version gates, the agent's error kinds, the verbs'
senders, who imports tasks.py): each parse of the tree cost ~0.5 s of CPU, so every file is parsed once per test
process, by the same cache the layout check uses (``bench.layout.parsed`` and ``nodes``). The trees are shared:
read them, never change them."""

from __future__ import annotations

from pathlib import Path

from bench.layout import nodes, parsed

__all__ = ["modules", "nodes", "parsed"]


def modules(folder: Path) -> list[Path]:
    """The folder's ``.py`` files, resolved and sorted (the cache's keys are the same path however it was reached)."""
    return sorted(p.resolve() for p in folder.rglob("*.py"))
