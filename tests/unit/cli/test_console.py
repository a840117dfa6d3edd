"""The installed `specdeploy` console command runs the same tasks as `inv`, from any folder,
finding the inventory by --inventory, $SPECDEPLOY_INVENTORY or the current folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import host_doc

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent / "specdeploy"


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "SPECDEPLOY_INVENTORY"}
    full.update({"COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=full,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(autouse=True)
def _installed() -> None:
    assert BIN.is_file(), "the console command is installed by `pip install -e .` ([project.scripts])"


def test_console_command_finds_the_inventory_by_flag_env_or_current_folder(tmp_path: Path) -> None:
    shipped = ROOT / "inventory.yaml"
    by_flag = run("render", "--host", "gpu1", "--steps", "3", "--json", "--inventory", str(shipped), cwd=tmp_path)
    by_env = run("render", "--host", "gpu1", "--steps", "3", "--json", cwd=tmp_path,
                 env={"SPECDEPLOY_INVENTORY": str(shipped)})
    shutil.copy(shipped, tmp_path / "inventory.yaml")
    by_cwd = run("render", "--host", "gpu1", "--steps", "3", "--json", cwd=tmp_path)
    for r in (by_flag, by_env, by_cwd):
        assert r.returncode == 0, r.stderr
        doc = host_doc(json.loads(r.stdout))
        assert doc["host"] == "gpu1" and doc["config"] == "eagle3-s3-k1-d4" and doc["touches_hosts"] is False


def test_console_command_without_an_inventory_says_where_it_looked(tmp_path: Path) -> None:
    r = run("status", cwd=tmp_path)
    assert r.returncode == 2
    assert str(tmp_path) in r.stderr and "SPECDEPLOY_INVENTORY" in r.stderr and "Traceback" not in r.stderr


def test_console_command_has_the_same_tasks_help_and_completion(tmp_path: Path) -> None:
    listing = run("--list", cwd=tmp_path)
    assert listing.returncode == 0
    for name in ("deploy", "adopt", "check-env", "status", "sweep"):
        assert name in listing.stdout
    helped = run("--help", "deploy", cwd=tmp_path)
    assert helped.returncode == 0 and "Usage: specdeploy [--core-opts] deploy" in helped.stdout
    script = run("--print-completion-script", "bash", cwd=tmp_path)
    assert script.returncode == 0 and "complete" in script.stdout and "specdeploy" in script.stdout
    done = run("--complete", "--", "specdeploy", "check", cwd=tmp_path)
    assert "check-env" in done.stdout.split()
