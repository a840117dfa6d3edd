"""Tests marked with one ``xdist_group`` run on one worker, in any file: the sim tier relies on it
(tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

TEST = '''
import os, pytest

@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    with open(os.environ["WORKERS_FILE"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
'''


def test_one_group_runs_on_one_worker_across_files(tmp_path: Path) -> None:
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(TEST)
    workers = tmp_path / "workers.txt"
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
            "-p", "tests.support.xdist_groups", str(tmp_path)]
    env = {"PYTHONPATH": str(ROOT), "WORKERS_FILE": str(workers), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = workers.read_text().split()
    assert len(seen) == 8 and len(set(seen)) == 1, seen
