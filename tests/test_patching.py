"""Unit tests of the NCCL-env patch engine on small synthetic SGLang trees (no network, no real SGLang)."""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import py_compile
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fabfile.errors import PatchModeError
from fabfile.remote.common import AgentError, sha256_file
from fabfile.remote.patch import store as patchstore
from fabfile.remote.patch.anchors import strip_blocks
from fabfile.remote.patch.apply import apply
from fabfile.remote.patch.markers import parse_marker
from fabfile.remote.patch.modes import SENTINEL_BEGIN, auto_mode, supported_modes
from fabfile.remote.patch.rollback import rollback
from fabfile.remote.patch.store import load_manifest
from fabfile.render import patchset

VALUES = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}

ENGINE = textwrap.dedent(
    """\
    import os
    import types

    mp = types.SimpleNamespace(set_start_method=lambda *a, **k: None)
    ServerArgs = object


    class Engine:
        def _set_envs_and_config(server_args: ServerArgs):
            mp.set_start_method("spawn", force=True)


    def helper():
        def _set_envs_and_config(server_args: ServerArgs):
            mp.set_start_method("spawn", force=True)

        return _set_envs_and_config


    def _set_envs_and_config(server_args: ServerArgs):
        # Set global environments
        os.environ["NCCL_CUMEM_ENABLE"] = "0"

        # Set mp start method
        mp.set_start_method("spawn", force=True)
        return dict(os.environ)


    def _launch_subprocesses(server_args):
        _set_envs_and_config(server_args)
    """
)

SCHEDULER = textwrap.dedent(
    """\
    import os
    import sys


    class Helper:
        def run_scheduler_process(
            self,
        ):
            return "class"


    def run_scheduler_process_with_init_pipe(
        server_args,
    ):
        return "pipe"


    def outer():
        def run_scheduler_process(
            x,
        ):
            return "nested"

        return run_scheduler_process


    def run_scheduler_process(
        server_args,
        port_args,
        gpu_id=None,
    ):
        # Generate the logger prefix
        prefix = ""
        return dict(os.environ)
    """
)

DECOY = textwrap.dedent(
    """\
    def run_scheduler_process(
        server_args,
    ):
        return "diffusion"
    """
)

ENGINE_REL = "sglang/srt/entrypoints/engine.py"
SCHED_REL = "sglang/srt/managers/scheduler.py"
DECOY_REL = "sglang/multimodal_gen/runtime/managers/gpu_worker.py"


def make_site(tmp_path: Path, engine: str = ENGINE, scheduler: str = SCHEDULER, plugins: bool = True) -> Path:
    site = tmp_path / "site-packages"
    for rel, text in ((ENGINE_REL, engine), (SCHED_REL, scheduler), (DECOY_REL, DECOY)):
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    if plugins:
        p = site / "sglang/srt/plugins/__init__.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    return site


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): sha256_file(str(p))
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def req(
    site: Path,
    mode: str,
    version: str = "0.5.12",
    values: dict[str, str] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    return patchset.build_patch_request(
        mode, values or VALUES, force, version, str(site.parent / "state"), str(site), "0.1.0"
    )


def state(site: Path) -> str:
    return str(site.parent / "state")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SPECDEPLOY_", "PYTHON"))}
    env.update(extra)
    return env


def run_py(code: str, site: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(PYTHONPATH=str(site), **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def markers(stderr: str) -> list[dict[str, Any]]:
    return [m for m in (parse_marker(ln) for ln in stderr.splitlines()) if m is not None]


def func(text: str, name: str) -> ast.FunctionDef:
    found = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1
    return found[0]


# ---------------------------------------------------------------------------------------------------------
# anchors


def test_scheduler_block_lands_first_in_module_level_function_only(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    before = tree(site)
    r = req(site, "scheduler")
    res = apply(r)
    assert [(f["role"], f["action"]) for f in res["files"]] == [("scheduler", "patched")]
    text = (site / SCHED_REL).read_text()
    block = ast.parse(r["files"]["scheduler_block"]).body
    fn = func(text, "run_scheduler_process")
    assert [ast.dump(s) for s in fn.body[: len(block)]] == [ast.dump(s) for s in block]
    assert text.count(SENTINEL_BEGIN) == 1
    # the class method, the nested function, the _with_init_pipe variant and the decoy file are untouched
    assert strip_blocks(text) == SCHEDULER
    assert tree(site)[DECOY_REL] == before[DECOY_REL]
    assert tree(site)[ENGINE_REL] == before[ENGINE_REL]


def test_engine_block_lands_just_before_set_start_method(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    r = req(site, "engine")
    apply(r)
    text = (site / ENGINE_REL).read_text()
    block = ast.parse(r["files"]["engine_block"]).body
    fn = func(text, "_set_envs_and_config")
    idx = [i for i, s in enumerate(fn.body) if "set_start_method" in ast.dump(s)]
    assert len(idx) == 1
    assert [ast.dump(s) for s in fn.body[idx[0] - len(block) : idx[0]]] == [ast.dump(s) for s in block]
    assert text.count(SENTINEL_BEGIN) == 1
    assert strip_blocks(text) == ENGINE


@pytest.mark.parametrize(
    ("mode", "engine", "scheduler", "kind", "anchor"),
    [
        (
            "scheduler",
            ENGINE,
            SCHEDULER.replace("def run_scheduler_process(\n    server", "def other(\n    s"),
            "anchor_not_found",
            "def run_scheduler_process(",
        ),
        ("scheduler", ENGINE, SCHEDULER + "\n\n" + DECOY, "anchor_ambiguous", "def run_scheduler_process("),
        (
            "scheduler",
            ENGINE,
            SCHEDULER.replace("    gpu_id=None,\n):", "    gpu_id=None,\n) -> None:"),
            "anchor_not_found",
            "):",
        ),
        (
            "engine",
            ENGINE.replace('    # Set mp start method\n    mp.set_start_method("spawn", force=True)', ""),
            SCHEDULER,
            "anchor_not_found",
            "set_start_method",
        ),
        (
            "engine",
            ENGINE.replace("    # Set mp start method\n", '    mp.set_start_method("spawn", force=True)\n'),
            SCHEDULER,
            "anchor_ambiguous",
            "set_start_method",
        ),
    ],
)
def test_bad_anchor_modifies_nothing_and_names_file_anchor_version(
    tmp_path: Path, mode: str, engine: str, scheduler: str, kind: str, anchor: str
) -> None:
    site = make_site(tmp_path, engine=engine, scheduler=scheduler)
    before = tree(site)
    with pytest.raises(AgentError) as ei:
        apply(req(site, mode, version="0.5.9"))
    e = ei.value
    assert e.kind == kind
    assert (ENGINE_REL if mode == "engine" else SCHED_REL) in e.message
    assert anchor in e.message and "0.5.9" in e.message
    assert tree(site) == before
    assert load_manifest(state(site))["entries"] == []


def test_second_apply_is_a_noop(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    r = req(site, "scheduler")
    apply(r)
    manifest = Path(state(site), "patches", "manifest.json").read_bytes()
    after = tree(site)
    res = apply(r)
    assert not res["changed"]
    assert [f["action"] for f in res["files"]] == ["unchanged"]
    assert tree(site) == after
    assert Path(state(site), "patches", "manifest.json").read_bytes() == manifest


def test_manifest_records_everything(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    orig = sha256_file(str(site / SCHED_REL))
    apply(req(site, "scheduler"))
    m = load_manifest(state(site))
    (e,) = m["entries"]
    assert e["path"] == str(site / SCHED_REL) and e["mode"] == "scheduler" and e["kind"] == "source"
    assert e["sha256_before"] == orig and e["sha256_after"] == sha256_file(e["path"])
    assert Path(e["backup"]).read_bytes() == SCHEDULER.encode()
    assert Path(e["backup"]).name == orig + ".orig"
    assert e["tool_version"] == "0.1.0" and e["time"]


def test_repatch_with_other_values_restores_original_first(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    apply(req(site, "scheduler"))
    res = apply(req(site, "scheduler", values={"NCCL_PROTO": "Simple"}))
    assert [f["action"] for f in res["files"]] == ["repatched"]
    text = (site / SCHED_REL).read_text()
    assert text.count(SENTINEL_BEGIN) == 1 and "'Simple'" in text and "'Ring'" not in text
    rollback({"state_dir": state(site)})
    assert (site / SCHED_REL).read_text() == SCHEDULER


def test_mode_switch_restores_the_other_file(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    before = tree(site)
    apply(req(site, "scheduler"))
    res = apply(req(site, "engine"))
    actions = {(Path(f["path"]).name, f["action"]) for f in res["files"]}
    assert actions == {("engine.py", "patched"), ("scheduler.py", "restored")}
    assert (site / SCHED_REL).read_text() == SCHEDULER
    res = apply(req(site, "plugin"))
    assert ("engine.py", "restored") in {(Path(f["path"]).name, f["action"]) for f in res["files"]}
    env = apply(req(site, "env"))
    assert {f["action"] for f in env["files"]} == {"removed"}
    assert tree(site) == before


def test_lost_manifest_with_our_block_in_file_is_recovered(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    apply(req(site, "scheduler"))
    Path(state(site), "patches", "manifest.json").unlink()
    res = apply(req(site, "scheduler", values={"NCCL_PROTO": "LL"}))
    assert [f["action"] for f in res["files"]] == ["repatched"]
    rollback({"state_dir": state(site)})
    assert (site / SCHED_REL).read_text() == SCHEDULER


# ---------------------------------------------------------------------------------------------------------
# all-or-nothing


def _fail_on_nth_write(monkeypatch: pytest.MonkeyPatch, n: int) -> list[str]:
    calls: list[str] = []
    real = patchstore.atomic_write  # the transactional writer's module (patchstore._write_one)

    def flaky(path: str, data: bytes, mode: int | None = None) -> None:
        if "/patches/" not in path:  # backups and manifest are not counted
            calls.append(path)
            if len(calls) == n:
                raise OSError(28, "No space left on device", path)
        real(path, data, mode)

    monkeypatch.setattr(patchstore, "atomic_write", flaky)
    return calls


def test_failed_second_write_restores_first_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = make_site(tmp_path)
    apply(req(site, "scheduler"))
    before = tree(site)
    manifest = Path(state(site), "patches", "manifest.json").read_bytes()
    calls = _fail_on_nth_write(monkeypatch, 2)  # 1: engine.py patched, 2: scheduler.py restore fails
    with pytest.raises(AgentError) as ei:
        apply(req(site, "engine"))
    assert ei.value.kind == "write_failed"
    assert calls[0].endswith("engine.py") and calls[1].endswith("scheduler.py")
    assert tree(site) == before  # engine.py byte-identical again, scheduler.py still patched
    assert Path(state(site), "patches", "manifest.json").read_bytes() == manifest


def test_failed_plugin_install_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = make_site(tmp_path)
    before = tree(site)
    _fail_on_nth_write(monkeypatch, 3)
    with pytest.raises(AgentError) as ei:
        apply(req(site, "plugin"))
    assert ei.value.kind == "write_failed"
    assert tree(site) == before
    assert load_manifest(state(site))["entries"] == []


# ---------------------------------------------------------------------------------------------------------
# rollback


@pytest.mark.parametrize("mode", ["scheduler", "engine", "plugin", "sitecustomize"])
def test_rollback_is_byte_identical_and_twice_safe(tmp_path: Path, mode: str) -> None:
    site = make_site(tmp_path)
    before = tree(site)
    apply(req(site, mode))
    assert tree(site) != before
    dry = rollback({"state_dir": state(site), "dry_run": True})
    assert dry["dry_run"] and all(f["action"].startswith("would_") for f in dry["files"])
    assert tree(site) != before
    res = rollback({"state_dir": state(site)})
    assert not res["nothing_to_do"]
    assert tree(site) == before
    assert not any(p.name.startswith("specdeploy") for p in site.iterdir())
    again = rollback({"state_dir": state(site)})
    assert again["nothing_to_do"] and again["message"] == "nothing to roll back"
    assert load_manifest(state(site))["entries"] == []


def test_rollback_refuses_changed_file_and_touches_nothing(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    apply(req(site, "plugin"))
    apply(req(site, "scheduler"))  # plugin removed again; now scheduler.py only
    apply(req(site, "plugin"))
    mod = site / "specdeploy_nccl_env" / "__init__.py"
    mod.write_text(mod.read_text() + "# edited\n")
    snap = tree(site)
    manifest = Path(state(site), "patches", "manifest.json").read_bytes()
    with pytest.raises(AgentError) as ei:
        rollback({"state_dir": state(site)})
    assert ei.value.kind == "rollback_refused" and str(mod) in ei.value.message
    assert tree(site) == snap
    assert Path(state(site), "patches", "manifest.json").read_bytes() == manifest
    with pytest.raises(AgentError) as ei:
        apply(req(site, "plugin", values={"NCCL_PROTO": "Simple"}))
    assert ei.value.kind == "file_changed" and str(mod) in ei.value.message
    assert tree(site) == snap


def test_rollback_refuses_upgraded_sglang(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    apply(req(site, "scheduler"))
    (site / SCHED_REL).write_text(SCHEDULER + "# 0.5.13\n")
    snap = tree(site)
    with pytest.raises(AgentError) as ei:
        rollback({"state_dir": state(site)})
    assert ei.value.kind == "rollback_refused" and SCHED_REL in ei.value.message
    assert tree(site) == snap
    # The refused file stays in the manifest, so a later rollback still knows it.
    assert [e["path"] for e in load_manifest(state(site))["entries"]] == [str(site / SCHED_REL)]
    res = rollback({"state_dir": state(site), "forget_changed": True})
    assert res["forgotten"] == [str(site / SCHED_REL)] and tree(site) == snap
    assert rollback({"state_dir": state(site)})["nothing_to_do"]


def test_pyc_removed_after_write_and_restore(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    src = site / SCHED_REL
    pyc = Path(py_compile.compile(str(src), doraise=True))
    assert pyc.exists() and pyc.parent.name == "__pycache__"
    apply(req(site, "scheduler"))
    assert not pyc.exists()
    py_compile.compile(str(src), doraise=True)
    rollback({"state_dir": state(site)})
    assert not pyc.exists()


# ---------------------------------------------------------------------------------------------------------
# the patched code really runs


SCHED_CALL = (
    "import json; from sglang.srt.managers import scheduler as s; "
    "env = s.run_scheduler_process(None, None); "
    "print(json.dumps({k: v for k, v in env.items() if k.startswith('NCCL_')}))"
)


def test_patched_scheduler_sets_env_and_prints_marker(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    r = req(site, "scheduler")
    apply(r)
    out = run_py(SCHED_CALL, site, SPECDEPLOY_DEPLOY_ID="dep-1")
    assert json.loads(out.stdout) == VALUES
    (m,) = markers(out.stderr)
    assert m["mode"] == "scheduler" and m["hash"] == r["values_hash"] and m["deploy"] == "dep-1"
    assert m["pid"] > 0 and m["set"] == VALUES and m["kept"] == {}

    out = run_py(SCHED_CALL, site, NCCL_ALGO="Tree")  # an operator's explicit value is kept
    assert json.loads(out.stdout)["NCCL_ALGO"] == "Tree"
    (m,) = markers(out.stderr)
    assert m["kept"] == {"NCCL_ALGO": "Tree"} and "NCCL_ALGO" not in m["set"] and m["deploy"] is None

    apply(req(site, "scheduler", force=True))
    out = run_py(SCHED_CALL, site, NCCL_ALGO="Tree")
    assert json.loads(out.stdout)["NCCL_ALGO"] == "Ring"
    (m,) = markers(out.stderr)
    assert m["set"] == VALUES and m["kept"] == {}


def test_patched_engine_sets_env(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    apply(req(site, "engine"))
    out = run_py(
        "import json; from sglang.srt.entrypoints import engine as e; env = e._set_envs_and_config(None); "
        "print(json.dumps({k: v for k, v in env.items() if k.startswith('NCCL_')}))",
        site,
    )
    assert json.loads(out.stdout) == dict(VALUES, NCCL_CUMEM_ENABLE="0")
    (m,) = markers(out.stderr)
    assert m["mode"] == "engine" and m["set"] == VALUES


def test_plugin_is_discoverable_and_applies(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    res = apply(req(site, "plugin"))
    assert {f["action"] for f in res["files"]} == {"installed"}
    code = (
        "import json, os; from importlib.metadata import entry_points, version; "
        "eps = entry_points(group='sglang.srt.plugins'); "
        "[ep.load()() for ep in eps]; "
        "print(json.dumps({'names': sorted(ep.name for ep in eps), "
        "'version': version('specdeploy-nccl-env'), 'proto': os.environ.get('NCCL_PROTO')}))"
    )
    out = run_py(code, site)
    data = json.loads(out.stdout)
    assert data == {"names": ["specdeploy_nccl_env"], "version": "0.1.0", "proto": "LL"}
    (m,) = markers(out.stderr)
    assert m["mode"] == "plugin" and m["set"] == VALUES
    assert apply(req(site, "plugin"))["changed"] is False


def test_plugin_record_matches_files(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    apply(req(site, "plugin"))
    (record,) = site.glob("specdeploy_nccl_env-*.dist-info/RECORD")
    for line in record.read_text().splitlines():
        path, digest, size = line.split(",")
        if not digest:
            continue
        data = (site / path).read_bytes()
        want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == want and int(size) == len(data)


def test_sitecustomize_acts_only_with_deploy_id(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    apply(req(site, "sitecustomize"))
    code = "import os, json; print(json.dumps(os.environ.get('NCCL_PROTO')))"
    out = run_py(code, site)
    assert json.loads(out.stdout) is None and markers(out.stderr) == []
    out = run_py(code, site, SPECDEPLOY_DEPLOY_ID="d42")
    assert json.loads(out.stdout) == "LL"
    (m,) = markers(out.stderr)
    assert m["mode"] == "sitecustomize" and m["deploy"] == "d42"


def test_foreign_sitecustomize_is_refused(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    (site / "sitecustomize.py").write_text("import apport_python_hook\n")
    before = tree(site)
    with pytest.raises(AgentError) as ei:
        apply(req(site, "sitecustomize"))
    assert ei.value.kind == "foreign_file" and "sitecustomize.py" in ei.value.message
    assert tree(site) == before


def test_sitecustomize_shadow_check(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    r = req(site, "sitecustomize")
    r["python"] = sys.executable  # this interpreter does not have `site` on its path: a warning, not an error
    res = apply(r)
    assert res["warnings"] and "sitecustomize" in res["warnings"][0]


# ---------------------------------------------------------------------------------------------------------
# modes and marker


def test_plugin_refused_before_0_5_11(tmp_path: Path) -> None:
    with pytest.raises(PatchModeError) as ei:
        patchset.resolve_mode("plugin", "0.5.10.post1")
    assert "0.5.10.post1" in str(ei.value) and "scheduler" in str(ei.value)
    site = make_site(tmp_path, plugins=False)
    r = req(site, "plugin")  # built for 0.5.12, then claimed as 0.5.9 on the host
    r["sglang_version"] = "0.5.9"
    with pytest.raises(AgentError) as ei2:
        apply(r)
    assert ei2.value.kind == "mode_unsupported" and "0.5.9" in ei2.value.message
    r["sglang_version"] = "0.5.12"  # version says yes, but the tree has no sglang/srt/plugins
    with pytest.raises(AgentError) as ei2:
        apply(r)
    assert ei2.value.kind == "mode_unsupported"


@pytest.mark.parametrize(
    ("requested", "version", "expected"),
    [
        ("auto", "0.4.9", "scheduler"),
        ("auto", "0.5.10.post1", "scheduler"),
        ("auto", "0.5.11", "plugin"),
        ("auto", "0.5.23", "plugin"),
        ("engine", "0.5.3", "engine"),
        ("env", "0.5.3", "env"),
        ("sitecustomize", "0.5.12", "sitecustomize"),
    ],
)
def test_resolve_mode(requested: str, version: str, expected: str) -> None:
    assert patchset.resolve_mode(requested, version) == expected


def test_resolve_mode_errors() -> None:
    with pytest.raises(PatchModeError, match="unknown patch mode"):
        patchset.resolve_mode("magic", "0.5.12")
    with pytest.raises(PatchModeError):
        patchset.resolve_mode("auto", "not-a-version")
    with pytest.raises(PatchModeError):
        patchset.normalize_values({"NCCL PROTO": "LL"})
    with pytest.raises(PatchModeError):
        patchset.normalize_values({"NCCL_PROTO": "L\nL"})


def test_env_mode_ships_nothing(tmp_path: Path) -> None:
    site = make_site(tmp_path)
    r = req(site, "env")
    assert r["files"] == {}
    before = tree(site)
    assert apply(r)["files"] == [] and tree(site) == before


def test_parse_marker() -> None:
    line = (
        "2026-01-01 INFO [specdeploy] nccl-env mode=plugin hash=abc123def456 pid=42 deploy=d1 "
        'set={"NCCL_PROTO": "LL"} kept={"NCCL_ALGO": "Tree {x}"}'
    )
    assert parse_marker(line) == {
        "mode": "plugin",
        "hash": "abc123def456",
        "pid": 42,
        "deploy": "d1",
        "set": {"NCCL_PROTO": "LL"},
        "kept": {"NCCL_ALGO": "Tree {x}"},
    }
    assert parse_marker("[specdeploy] nccl-env mode=x pid=1 set={} kept={} trailing") is None
    assert parse_marker("[specdeploy] nccl-env mode=x pid=z set={} kept={}") is None
    assert parse_marker("NCCL INFO NCCL_PROTO set by environment to LL") is None


def test_supported_modes() -> None:
    assert "plugin" not in supported_modes("0.5.10.post1")
    assert "plugin" in supported_modes("0.5.11")
    assert auto_mode("0.5.12rc1") == "plugin"
