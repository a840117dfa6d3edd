"""The agent runs with whatever Python the GPU host has (3.9 and newer): every verb that needs no server answers
under each interpreter this machine has, from the very bundle that is shipped."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from fabfile.transport.agentclient import agent_bundle

PYTHONS = sorted(p for v in ("3.9", "3.10", "3.11", "3.12", "3.13")
                 for p in Path("/root/.pyenv/versions").glob(f"{v}*/bin/python3") if p.exists())
PYTHONS += [Path(p) for p in ("/usr/bin/python3",) if Path(p).exists()]


@pytest.mark.skipif(not PYTHONS, reason="no other Python interpreters on this machine")
@pytest.mark.parametrize("python", PYTHONS, ids=[str(p) for p in PYTHONS])
def test_agent_verbs_answer_under_each_python(python: Path, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    zipfile.ZipFile(io.BytesIO(agent_bundle()[0])).extractall(agent)
    state = tmp_path / "state"
    for verb in ("facts", "gpus", "status", "stale", "evidence", "patch_status"):
        req = base64.b64encode(json.dumps({"state_dir": str(state), "expected": {}}).encode()).decode()
        r = subprocess.run([str(python), "-I", str(agent), verb, req], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (verb, r.stderr)
        result = json.loads(r.stdout.strip().splitlines()[-1])
        assert result["event"] == "result" and result["ok"] is True, (verb, result)


@pytest.mark.skipif(not PYTHONS, reason="no other Python interpreters on this machine")
@pytest.mark.parametrize("python", PYTHONS, ids=[str(p) for p in PYTHONS])
def test_every_agent_module_imports_under_each_python(python: Path, tmp_path: Path) -> None:
    # The verbs above import their modules lazily, so a module no verb reached could still hold a runtime
    # expression 3.9 cannot evaluate (``int | None`` in a type alias): import every module of the shipped bundle.
    agent = tmp_path / "agent"
    zipfile.ZipFile(io.BytesIO(agent_bundle()[0])).extractall(agent)
    names = sorted(p.stem for p in (agent / "specdeploy_agent").glob("*.py") if p.stem != "__main__")
    code = ("import importlib, sys\nsys.path.insert(0, sys.argv[1])\n"
            "for n in sys.argv[2:]: importlib.import_module('specdeploy_agent.' + n)\nprint('ok')")
    r = subprocess.run([str(python), "-I", "-c", code, str(agent), *names], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert len(names) > 20


def test_a_bytecode_file_renamed_during_the_check_does_not_fail_the_agent(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Two agent calls of a fresh install at once: one lists __pycache__ while the other's ``x.pyc.<id>`` temp file
    # is renamed into place. Seen as `inv deploy` failing with "No such file or directory: ...pyc.1403...".
    import os

    from fabfile.remote import boot
    from fabfile.transport.agentclient import bundle

    agent = tmp_path / "agent"
    agent.mkdir(mode=0o700)
    zipfile.ZipFile(io.BytesIO(agent_bundle()[0])).extractall(agent)
    for p in agent.rglob("*"):
        p.chmod(0o700 if p.is_dir() else 0o600)
    real_walk = os.walk

    def walk_with_a_vanishing_temp(top: str) -> object:
        for root, dirs, files in real_walk(top):
            yield root, dirs, [*files, "deploy.cpython-311.pyc.140335497426624"]

    monkeypatch.setattr(boot.os, "walk", walk_with_a_vanishing_temp)
    boot.verify_tree(str(agent), bundle().manifest_sha256)
    (agent / "specdeploy_agent" / "verbs.py").unlink()  # a shipped file that is gone is still refused
    with pytest.raises(boot.Unsafe, match=r"missing: specdeploy_agent/verbs\.py"):
        boot.verify_tree(str(agent), bundle().manifest_sha256)
