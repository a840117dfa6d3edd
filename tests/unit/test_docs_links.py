"""The docs' links lead somewhere, and raw logs live in ``docs/logs/`` (the pages beside them stay readable in a
listing: 14 logs of 1.1 MB once sat among nine pages)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# [text](target): a relative target, without its #anchor; http(s), mailto and pure anchors are not files.
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
# A `docs/...log` path named in code spans, as the pages cite a log they do not link.
CITED_LOG = re.compile(r"`(docs/[^`\s]+\.log)`")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_and_cited_log_of_the_docs_exists() -> None:
    broken = []
    for page in _pages():
        text = page.read_text()
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
        broken += [f"{page.relative_to(ROOT)}: {p}" for p in CITED_LOG.findall(text) if not (ROOT / p).exists()]
    assert broken == []


def test_raw_logs_sit_under_docs_logs() -> None:
    assert sorted(p.name for p in (ROOT / "docs").glob("*.log")) == []
    assert any((ROOT / "docs" / "logs").glob("real-sglang-*.log"))
