"""SGLang release numbers as the tool reads them: parsed, ordered, garbage refused, every version gate asking
``versions.py``, a mixed install refused in a sentence, and the readiness path per release."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fabfile.remote import facts, versions
from fabfile.remote.patch import modes as patch_modes
from fabfile.remote.serve import health
from tests.simhost.sim.install import install_simulator
from tests.support import sources
from tests.support.agent import sglang_info_in

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("text", "release"), [
    ("0.5.12", (0, 5, 12)), ("v0.5.12", (0, 5, 12)), ("0.5.20rc1", (0, 5, 20)), ("0.5.15.post1", (0, 5, 15)),
    ("0.5.21.dev12+g1a2b3c4", (0, 5, 21)), ("0.4.3.post4", (0, 4, 3)), ("0.5", (0, 5, 0)), ("1.0.0a2", (1, 0, 0)),
])
def test_release_numbers(text: str, release: tuple[int, int, int]) -> None:
    numbers = versions.key(text)[0]  # the release numbers, trailing zeros dropped
    assert numbers + (0,) * (3 - len(numbers)) == release


def test_total_order() -> None:
    order = ["0.5.19", "0.5.20.dev3", "0.5.20a1", "0.5.20rc1", "0.5.20", "0.5.20.post1.dev2", "0.5.20.post1",
             "0.5.21"]
    assert sorted(order, key=versions.key) == order
    assert versions.key("0.5.15.post1") > versions.key("0.5.15")
    assert versions.key("0.5.7.0") == versions.key("0.5.7")


@pytest.mark.parametrize("bad", ["", "latest", "0.5.x", "five", "0..5"])
def test_garbage_is_not_a_version(bad: str) -> None:
    assert not versions.valid(bad)
    with pytest.raises(ValueError):
        versions.key(bad)
    assert not versions.at_least(bad, "0.0.1")


@pytest.mark.parametrize(("version", "path"), [
    ("0.4.9", "/health_generate"), ("0.4.10.post1", "/health_generate"), ("0.4.10.post2", "/health"),
    ("0.5.1", "/health"), ("0.5.19", "/health"), ("0.5.20rc1", "/ready"),
    ("0.5.20", "/ready"), ("0.5.23", "/ready"),
])
def test_readiness_path(version: str, path: str) -> None:
    # server.version_tuple turned "0.5.20rc1" into (0, 5): the wrong endpoint for a release candidate
    assert versions.readiness_path(version) == path


def test_readiness_is_decided_in_versions_for_a_deploy_and_for_its_record() -> None:
    """A multi-node rank >= 1 serves only SGLang's stub health server: /health there on every release. The client
    once chose that endpoint itself and sent it; the agent's deploy wait and the status/watch probes of the record
    now ask versions.readiness_path with the node's rank, and nothing else names an SGLang health endpoint."""
    assert versions.readiness_path("0.5.23", node_rank=1) == "/health" != versions.readiness_path("0.5.23")
    assert versions.readiness_path("0.4.9", node_rank=2) == "/health"
    rank1 = {"sglang_version": "0.5.23", "listen": "127.0.0.1", "port": 1,
             "request": {"node": {"rank": 1, "nnodes": 2}, "summary": {"env": {"SGLANG_HEALTH_CHECK_TIMEOUT": "40"}}}}
    assert health.recorded_health(rank1, answers=False) == \
        {"path": "/health", "status": None, "latency_s": None, "timeout_s": 45.0}
    one_node = {**rank1, "request": {"node": None}}
    assert health.recorded_health(one_node, answers=False)["path"] == "/ready"
    assert health.ready_path_of({"node": {"rank": 0}}, "0.4.9") == "/health_generate"
    from fabfile.commands import deploy

    # The client sends the node; the endpoint is not its choice.
    assert not any(isinstance(n, ast.Constant) and n.value == "ready_path"
                   for n in sources.nodes(Path(deploy.__file__).resolve()))


def test_every_version_gate_asks_versions_py() -> None:
    """What changed in which release is written once, in fabfile/remote/versions.py: no other module compares a
    version with a literal release, parses versions its own way, or writes the newest supported release."""
    import ast

    generated = {"sglang_env_facts.py", "sglang_spec_facts.py", "sglang_knob_facts.py"}
    found = []
    for path in sources.modules(ROOT / "fabfile"):
        if path.name in generated or path == Path(versions.__file__).resolve():
            continue
        where = path.relative_to(ROOT.resolve())
        if versions.NEWEST_SUPPORTED in path.read_text():
            found.append(f"{where}: writes {versions.NEWEST_SUPPORTED}")
        for node in sources.nodes(path):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "at_least" \
                    and any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args[1:]):
                found.append(f"{where}:{node.lineno}: at_least with a literal release")
            if isinstance(node, ast.Tuple) and len(node.elts) == 3 and all(
                    isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts) \
                    and node.elts[0].value == 0:
                found.append(f"{where}:{node.lineno}: a release written as a tuple")
    assert not found, found


def test_a_mixed_install_is_refused_with_a_sentence(tmp_path: Path) -> None:
    install_simulator(tmp_path / "venv", tmp_path / "bin", "0.5.16", sys.executable)
    site = next((tmp_path / "venv").glob("lib/python*/site-packages"))
    meta = site / "sglang-0.5.16.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.16", "Version: 0.5.12"))
    info = sglang_info_in(site)
    assert info["version_conflict"] == {"sglang/_version.py": "0.5.16", "sglang-0.5.16.dist-info": "0.5.12"}
    host = {"sglang": info, "paths": {}, "gpu": {"available": False, "gpus": []}, "disk_free_gb": None,
            "python": {"executable": sys.executable}}
    (problem,) = facts.problems(host, {})
    assert "mixed install" in problem and "_version.py says 0.5.16" in problem and "0.5.12" in problem


def test_only_the_development_fallback_is_no_version(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "version.py").write_text(
        "try:\n    from sglang._version import __version__\nexcept ImportError:\n    __version__ = '0.0.0.dev0'\n")
    info = sglang_info_in(site)
    assert info["version"] is None
    host = {"sglang": {**info, "layout": {"engine": True, "scheduler": True, "launch_server": True}}, "paths": {},
            "gpu": {"available": False, "gpus": []}, "disk_free_gb": None, "python": {"executable": sys.executable}}
    (problem,) = facts.problems(host, {})
    assert problem.startswith("cannot tell the SGLang version")


def test_check_env_names_an_allowlist_that_leaves_the_plugin_out(tmp_path: Path) -> None:
    """When the plugin mode did not prove its values and the server's environment has an SGLANG_PLUGINS without the
    plugin, the first hint says that (read from the real process's /proc/PID/environ)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SGLANG_PLUGINS": "other"}
    proc = subprocess.Popen(["sleep", "60"], env=env)
    try:
        while b"SGLANG_PLUGINS" not in Path(f"/proc/{proc.pid}/environ").read_bytes():  # exec has completed
            time.sleep(0.01)
        generic = {"code": "env_stripped", "severity": "error", "message": "use --patch-mode plugin", "vars": [],
                   "pids": []}
        evaluation: dict[str, Any] = {"ok": False, "hints": [dict(generic)]}
        patch_modes.explain_unloaded_plugin(evaluation, "plugin", proc.pid, {"SGLANG_PLUGINS": "other,x"})
        first = evaluation["hints"][0]
        assert first["code"] == "plugin_not_allowed" and first["pids"] == [proc.pid]
        assert "SGLANG_PLUGINS='other'" in first["message"] and "specdeploy_nccl_env" in first["message"]
        assert evaluation["hints"][1] == generic
        # proven, another mode, or a list naming the plugin: nothing to explain
        for ok, mode, value in ((True, "plugin", "other"), (False, "scheduler", "other"),
                                (False, "plugin", "other,specdeploy_nccl_env")):
            ev: dict[str, Any] = {"ok": ok, "hints": []}
            patch_modes.explain_unloaded_plugin(ev, mode, None, {"SGLANG_PLUGINS": value})
            assert ev["hints"] == []
        # no readable process: the launch environment of the deploy record says it
        ev = {"ok": False, "hints": []}
        patch_modes.explain_unloaded_plugin(ev, "plugin", None, {"SGLANG_PLUGINS": "a,b"})
        assert "SGLANG_PLUGINS='a,b' in the launch environment" in ev["hints"][0]["message"]
    finally:
        proc.kill()
        proc.wait()


def test_gates_and_tables_use_the_same_order() -> None:
    # A build counts as the release whose code it carries, placed in key()'s order; a table read from the wheels
    # gives a host the facts of the newest release read that is not newer.
    assert versions.feature_key("0.5.20rc1") == versions.key("0.5.20") == versions.feature_key("0.5.20.dev3")
    assert versions.feature_key("0.5.20.post1.dev2") == versions.key("0.5.20.post1")
    known = ["0.5.16", "0.5.9", "0.5.15.post1", "0.5.12"]
    assert versions.newest_not_newer("0.5.15", known) == "0.5.12"
    assert versions.newest_not_newer("0.5.15.post1", known) == "0.5.15.post1"
    assert versions.newest_not_newer("0.5.16rc1", known) == "0.5.16"
    assert versions.newest_not_newer("0.5.99", known) == "0.5.16"
    assert versions.newest_not_newer("0.5.8", known) is None
    assert versions.newest_not_newer("garbage", known) is None and versions.newest_not_newer(None, known) is None


def test_the_nccl_table_stores_changes_only_and_each_release_reads_its_own_writes() -> None:
    """The generated table (``python -m tools.contract --write``) keeps a release's NCCL writes only where they
    differ from the release before it; looked up, every release read still gets its own (the wheels tier checks
    them against each wheel: tests/wheels/test_contract.py)."""
    from fabfile.remote.evidence import sglang_env_facts
    from fabfile.remote.evidence.sglangnccl import sglang_env_facts_for

    table = sglang_env_facts.NCCL_WRITES
    order = sorted(table, key=versions.key)
    assert list(table) == order and table[order[0]] is not None
    effective: list[dict[str, Any]] = []
    for v in order:
        stored = table[v]
        assert stored != effective, f"{v} repeats the writes of the release before it"
        effective = effective if stored is None else stored
        assert sglang_env_facts_for(v) == (v, effective)
        if "post" not in v:
            assert sglang_env_facts_for(v + "rc1") == (v, effective)  # a pre-release counts as its release
