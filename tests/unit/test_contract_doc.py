"""docs/sglang-contract.md says one thing of a release: its every-release table (``--all --write``) and its
per-version section (``--write``) are written by different runs, and the table said 66/66 facts for 0.5.12 to
0.5.23 where their sections, and the tool, said 68/68."""

from __future__ import annotations

from pathlib import Path

from tools.contract.table import EVERY_BEGIN, SECTION, every_section, stale_rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "sglang-contract.md"


def test_the_every_release_table_agrees_with_every_per_version_section() -> None:
    doc = DOC.read_text()
    assert every_section(doc) and len(SECTION.findall(doc)) >= 5  # both parts are there to compare
    assert stale_rows(doc) == [], "re-run `python -m tools.contract --all --write`:\n" + "\n".join(stale_rows(doc))


def test_a_table_left_behind_by_a_grown_contract_is_caught() -> None:
    doc = DOC.read_text()
    version, wheel, count = SECTION.findall(doc)[-1]
    row = f"| {version} | {wheel} | {count} |"
    assert row in doc
    stale = doc.replace(row, f"| {version} | {wheel} | 1/1 |")
    assert stale_rows(stale) == [f"{version}: the every-release table says 1/1 facts match, its section {count}"]
    gone = doc.replace(row, "| 9.9.9 | x.whl | 1/1 |")
    assert stale_rows(gone) == [f"{version}: a section ({count}) but no row in the every-release table"]
    assert EVERY_BEGIN in doc
