"""The NCCL release the tool's tables were read from, and the first release with per-collective NCCL_PROTO entries,
are each written once (``remote/evidence/ncclenv``: ``NCCL_KNOWN``, ``PER_COLLECTIVE_SINCE``); every sentence that
names one reads it from there. "2.28" was once written in six modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fabfile.remote.evidence import ncclenv
from fabfile.remote.evidence.ncclenv import NCCL_KNOWN, NCCL_KNOWN_SERIES, PER_COLLECTIVE_SINCE, SelectionError
from tests.support.sources import modules, parsed

ROOT = Path(__file__).resolve().parents[4]
# The two releases with a home; other releases are facts said once where they matter (a deprecation since 2.17).
PER_COLLECTIVE = ".".join(map(str, PER_COLLECTIVE_SINCE))
RELEASE = re.compile(rf"(?<![\d.])({re.escape(NCCL_KNOWN_SERIES)}|{re.escape(PER_COLLECTIVE)})(?![\d])")


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_no_nccl_release_is_written_in_code_outside_its_one_home() -> None:
    home = ROOT / "fabfile" / "remote" / "evidence" / "ncclenv.py"
    found = []
    for path in modules(ROOT / "fabfile"):
        if path == home or path.name.endswith("_facts.py"):  # generated from the wheels: SGLang's releases
            continue
        tree = parsed(path)
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                    and RELEASE.search(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert found == []


def test_the_sentences_name_the_release_from_its_home() -> None:
    assert NCCL_KNOWN_SERIES == "2.28" and NCCL_KNOWN.startswith("2.28.")  # the series is what sentences say
    assert ncclenv.read_when("NCCL_NO_SUCH_THING") == \
        ("unknown", "NCCL_NO_SUCH_THING is not a variable NCCL 2.28 reads (check the spelling)")
    with pytest.raises(SelectionError, match=r"need NCCL 2\.24 or later; this host has 2\.23"):
        ncclenv.selection("NCCL_PROTO", "allreduce:LL", nccl=(2, 23))
    assert PER_COLLECTIVE == "2.24"
