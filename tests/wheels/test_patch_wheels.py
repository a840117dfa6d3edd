"""The patch engine against the real sources of SGLang release wheels (read with zipfile, never installed): the
wheels of the matrix in tools/wheels.py, fetched once per session (tests/support/wheels.py)."""

from __future__ import annotations

import ast
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from fabfile.remote.common import sha256_file
from fabfile.remote.patch.apply import apply
from fabfile.remote.patch.modes import supported_modes
from fabfile.remote.patch.rollback import rollback
from fabfile.render import patchset
from tests.support.trees import tree as tree_hashes
from tools.wheels import VERSIONS

pytestmark = pytest.mark.wheels

VALUES = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
MEMBERS = {
    "engine": "sglang/srt/entrypoints/engine.py",
    "scheduler": "sglang/srt/managers/scheduler.py",
    "decoy": "sglang/multimodal_gen/runtime/managers/gpu_worker.py",
    "version": "sglang/version.py",
    "plugins": "sglang/srt/plugins/__init__.py",
}


def _extract(whl: Path, site: Path) -> dict[str, Path]:
    got = {}
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        for key, member in MEMBERS.items():
            if member in names:
                dest = site / member
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(member))
                got[key] = dest
        meta = [n for n in names if n.startswith("sglang-") and n.endswith(".dist-info/METADATA")]
        for member in meta:  # lets the agent cross-check the claimed version
            dest = site / member
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(z.read(member))
    return got


def _module_func(tree: ast.Module, name: str) -> ast.FunctionDef:
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, name
    return found[0]


def _dumps(stmts: list[ast.stmt]) -> list[str]:
    return [ast.dump(s) for s in stmts]


@pytest.mark.parametrize("label", VERSIONS)
def test_real_wheel(label: str, wheels: dict[str, Any], tmp_path: Path) -> None:
    info = wheels[label]
    if not isinstance(info, dict):
        if os.environ.get("SPECDEPLOY_WHEELS_REQUIRED"):
            pytest.fail(f"sglang {label}: wheel unavailable ({info})")
        pytest.skip(f"sglang {label}: wheel unavailable ({info}); set SPECDEPLOY_WHEELS_REQUIRED=1 to fail")
    version = info["version"]
    site = tmp_path / "site-packages"
    files = _extract(info["path"], site)
    assert {"engine", "scheduler"} <= set(files), f"{version}: wheel lacks engine.py/scheduler.py"
    pristine = tree_hashes(site)
    state = tmp_path / "state"
    modes = [m for m in supported_modes(version) if m != "env"]
    assert ("plugin" in modes) == ("plugins" in files), version
    for mode in modes:
        req = patchset.build_patch_request(mode, VALUES, False, version, str(state), str(site), "0.1.0")
        res = apply(req)
        assert res["changed"], (version, mode)
        if mode in ("engine", "scheduler"):
            target = files[mode]
            text = target.read_text()
            compile(text, str(target), "exec")
            block = ast.parse(req["files"][f"{mode}_block"]).body
            tree = ast.parse(text)
            if mode == "scheduler":
                fn = _module_func(tree, "run_scheduler_process")
                assert _dumps(fn.body[: len(block)]) == _dumps(block), version
            else:
                fn = _module_func(tree, "_set_envs_and_config")
                idx = [
                    i
                    for i, st in enumerate(fn.body)
                    if (ast.get_source_segment(text, st) or "") == 'mp.set_start_method("spawn", force=True)'
                ]
                assert len(idx) == 1, version
                assert _dumps(fn.body[idx[0] - len(block) : idx[0]]) == _dumps(block), version
        else:
            for rel, content in (req["files"].get("plugin") or {"sitecustomize.py": ""}).items():
                p = site / rel
                assert p.exists(), (version, mode, rel)
                if rel.endswith(".py") and content:
                    compile(p.read_text(), str(p), "exec")
        if "decoy" in files:
            assert sha256_file(str(files["decoy"])) == pristine[MEMBERS["decoy"]], version
        again = apply(req)
        assert not again["changed"] and {f["action"] for f in again["files"]} == {"unchanged"}, (
            version,
            mode,
        )
        rb = rollback({"state_dir": str(state)})
        assert not rb["nothing_to_do"]
        assert tree_hashes(site) == pristine, (version, mode)
        assert rollback({"state_dir": str(state)})["nothing_to_do"]
