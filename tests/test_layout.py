"""The layout's rules that `./dev check` enforces (`python -m bench.layout`): no private name (`_x`) taken from
another module, by import or as an attribute; the agent imports nothing of the client; and the library holds
them today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layout(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.layout", str(root)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in {"fabfile/__init__.py": "", **files}.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_a_private_name_taken_from_another_module_fails_the_check(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "fabfile/owner.py": "def _helper() -> int:\n    return 1\n\n\ndef public() -> int:\n    return _helper()\n",
        "fabfile/by_import.py": "from fabfile.owner import _helper, public\n",
        "fabfile/by_attribute.py": "from fabfile import owner\n\n\ndef f() -> int:\n    return owner._helper()\n",
        "fabfile/room/__init__.py": "",
        "fabfile/room/relative.py": "from ..owner import _helper\n",
    })
    r = _layout(root)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "private names used across modules (fabfile/): 3" in r.stdout
    assert "fabfile/by_import.py:1 from fabfile.owner import _helper" in r.stdout
    assert "fabfile/by_attribute.py:5 fabfile.owner._helper" in r.stdout
    assert "fabfile/room/relative.py:1 from fabfile.owner import _helper" in r.stdout


def test_tests_are_counted_but_do_not_fail_and_a_module_may_use_its_own_private_names(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "fabfile/owner.py": "def _helper() -> int:\n    return 1\n\n\nVALUE = _helper()\n",
        "tests/__init__.py": "",
        "tests/test_owner.py": "from fabfile.owner import _helper\n",
    })
    r = _layout(root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "private names used across modules (fabfile/): 0" in r.stdout
    assert "by tests/ (counted, not enforced): 1" in r.stdout


def test_the_agent_importing_the_client_is_a_break(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "fabfile/errors.py": "",
        "fabfile/remote/__init__.py": "",
        "fabfile/remote/serve/__init__.py": "",
        "fabfile/remote/serve/deploy.py": "from fabfile import errors\n",
    })
    r = _layout(root)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "fabfile.remote.serve.deploy -> fabfile.errors" in r.stdout


def test_the_library_holds_the_layout_rules() -> None:
    r = _layout(ROOT)
    assert r.returncode == 0, r.stdout
    assert "import cycles: none" in r.stdout
    assert "imports against the rooms' order: 0" in r.stdout
    assert "private names used across modules (fabfile/, bench/" in r.stdout and "): 0\n" in r.stdout
