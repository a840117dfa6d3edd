"""``./dev check``'s own rules (tools/hygiene.py): a test that cannot fail and a build machine's path in the product
are found, and what is fine passes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tools import hygiene

ROOT = Path(__file__).resolve().parents[2]


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    for folder in ("tests", "fabfile", "templates"):
        (tmp_path / folder).mkdir(exist_ok=True)
    return tmp_path


def test_an_assertion_free_test_and_an_or_true_assert_are_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"tests/test_a.py": """
        import pytest

        def test_nothing():
            x = 1 + 1

        def test_always():
            assert f() is None or True

        def test_checks():
            assert 1 + 1 == 2

        def test_raises():
            with pytest.raises(ValueError):
                int("x")
        """})
    breaks = hygiene.test_breaks(root)
    assert any("test_nothing checks nothing" in b for b in breaks), breaks
    assert any(b.startswith("tests/test_a.py:8:") and "holds whatever" in b for b in breaks), breaks
    assert not any("test_checks" in b or "test_raises" in b for b in breaks), breaks


def test_a_test_that_checks_through_a_helper_passes(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "tests/support/helpers.py": """
            def expect_ok(r):
                assert r == 0

            def run_and_expect(r):
                expect_ok(r)
            """,
        "tests/test_b.py": """
            from tests.support.helpers import run_and_expect

            def test_through_two_helpers():
                run_and_expect(0)
            """})
    assert hygiene.test_breaks(root) == []


def test_a_build_machines_path_in_the_product_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "fabfile/m.py": "# measured by hand (/work/shared/reference/profiling.md)\nLOG = '/var/tmp/x'\n",
        "templates/launch.sh.j2": "cd /home/alice/src && run\n",
    })
    breaks = hygiene.path_breaks(root)
    assert [b.split(":")[:2] for b in breaks] == [["fabfile/m.py", "1"], ["templates/launch.sh.j2", "1"]], breaks


def test_the_project_itself_holds_both_rules() -> None:
    r = subprocess.run([sys.executable, "-m", "tools.hygiene", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout
