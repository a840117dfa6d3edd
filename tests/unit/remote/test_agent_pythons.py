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

from fabfile.transport.agentclient import bundle

PYTHONS = sorted(p for v in ("3.9", "3.10", "3.11", "3.12", "3.13")
                 for p in Path("/root/.pyenv/versions").glob(f"{v}*/bin/python3") if p.exists())
PYTHONS += [Path(p) for p in ("/usr/bin/python3",) if Path(p).exists()]


@pytest.mark.skipif(not PYTHONS, reason="no other Python interpreters on this machine")
@pytest.mark.parametrize("python", PYTHONS, ids=[str(p) for p in PYTHONS])
def test_agent_verbs_answer_under_each_python(python: Path, tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    zipfile.ZipFile(io.BytesIO(bundle().data)).extractall(agent)
    state = tmp_path / "state"
    for verb in ("facts", "gpus", "status", "check_env"):
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
    zipfile.ZipFile(io.BytesIO(bundle().data)).extractall(agent)
    names = sorted(".".join(p.relative_to(agent / "specdeploy_agent").with_suffix("").parts).removesuffix(".__init__")
                   for p in (agent / "specdeploy_agent").rglob("*.py") if p.parent.name != "__pycache__")
    names = [n for n in names if n not in ("__main__", "__init__")]
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

    agent = tmp_path / "agent"
    agent.mkdir(mode=0o700)
    zipfile.ZipFile(io.BytesIO(bundle().data)).extractall(agent)
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


def test_the_bundle_ships_every_agent_module_and_the_boot_check_covers_its_sub_packages(tmp_path: Path) -> None:
    # The agent has rooms (patch/, evidence/, measure/, serve/): a file of a sub-package left out of the archive
    # would fail only on the host, at the first verb that imports it; one changed there must be refused like any.
    from fabfile.remote import boot
    from fabfile.transport.agentclient import REMOTE_SRC, bundle

    b = bundle()
    shipped = {name for name, _ in b.files}
    on_disk = {f"specdeploy_agent/{p.relative_to(REMOTE_SRC).as_posix()}" for p in REMOTE_SRC.rglob("*.py")}
    assert on_disk <= shipped and "specdeploy_agent/patch/apply.py" in shipped
    assert set(json.loads(b.manifest)) == shipped
    agent = tmp_path / "agent"
    agent.mkdir(mode=0o700)
    zipfile.ZipFile(io.BytesIO(b.data)).extractall(agent)
    for p in agent.rglob("*"):
        p.chmod(0o700 if p.is_dir() else 0o600)
    boot.verify_tree(str(agent), b.manifest_sha256)
    with (agent / "specdeploy_agent" / "patch" / "apply.py").open("a") as f:
        f.write("# changed on the host\n")
    with pytest.raises(boot.Unsafe, match=r"patch/apply\.py differs from the file shipped"):
        boot.verify_tree(str(agent), b.manifest_sha256)
