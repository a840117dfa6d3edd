"""The SGLang facts the tool relies on, checked against the real release wheels (read with zipfile, never installed),
and the simulator checked against the same wheels: version files and health endpoints per release.

Wheels come from ``tests/test_patch_wheels.fetch_wheel`` (cached in ``$SPECDEPLOY_WHEEL_CACHE``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from fabfile.remote import facts, versions
from fabfile.remote.measure import bench, metrics
from fabfile.remote.patch import modes as patch_modes
from fabfile.remote.serve import server
from tests.simhost.sim.install import install_simulator
from tests.test_patch_wheels import fetch_wheel

ROOT = Path(__file__).resolve().parent.parent
# Every shape of the version files: the literal (<= 0.5.6), the 0.5.7 import, the 0.5.8+ import with the metadata
# fallback, setuptools-scm (0.5.7-0.5.9) and vcs-versioning (0.5.10+) _version.py, a post release, a /ready release.
WHEEL_VERSIONS = ["0.4.9", "0.5.3", "0.5.7", "0.5.9", "0.5.12", "0.5.15.post1", "0.5.16", "0.5.18", "0.5.20",
                  "0.5.23"]


def _wheel(version: str) -> Path:
    try:
        return Path(fetch_wheel(version)["path"])
    except (OSError, ValueError, LookupError) as e:
        if os.environ.get("SPECDEPLOY_WHEELS_REQUIRED"):
            raise
        pytest.skip(f"SGLang {version} wheel unavailable: {e}")


def _extract_version_files(whl: Path, site: Path) -> None:
    """What a pip install of the wheel leaves that bears on the version: the package's version files and the
    dist-info. An empty ``__init__.py`` stands in for SGLang's (finding the package never runs it)."""
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name.endswith("/"):
                continue
            if name in ("sglang/version.py", "sglang/_version.py") or re.match(r"sglang-[^/]+\.dist-info/", name):
                dest = site / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(name))
    (site / "sglang" / "__init__.py").write_text("")


def _sglang_info_in(site: Path) -> dict[str, Any]:
    """facts.sglang_info() as the agent runs it on a host whose site-packages is ``site``."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from fabfile.remote import facts; "
            "print(json.dumps(facts.sglang_info()))")
    out = subprocess.run([sys.executable, "-c", code, str(site)], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    info: dict[str, Any] = json.loads(out.stdout)
    return info


def _run_version_py(site: Path) -> str:
    """``sglang.version.__version__`` as Python sees it with ``site`` first on sys.path (an empty package
    ``__init__``, so nothing but the version files runs)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import sglang.version as v; print(v.__version__)")
    out = subprocess.run([sys.executable, "-I", "-c", code, str(site)], capture_output=True, text=True, timeout=60,
                         check=True)
    return out.stdout.strip()


# ---------------------------------------------------------------------------------------------------- the parser


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
    assert server.readiness_path(version) == path


# ------------------------------------------------------------------------------------- version read from the host


def test_every_version_gate_asks_versions_py() -> None:
    """What changed in which release is written once, in fabfile/remote/versions.py: no other module compares a
    version with a literal release, parses versions its own way, or writes the newest supported release."""
    import ast

    generated = {"sglang_env_facts.py", "sglang_spec_facts.py"}
    found = []
    for path in sorted((ROOT / "fabfile").rglob("*.py")):
        if path.name in generated or path == Path(versions.__file__).resolve():
            continue
        text = path.read_text()
        where = path.relative_to(ROOT)
        if versions.NEWEST_SUPPORTED in text:
            found.append(f"{where}: writes {versions.NEWEST_SUPPORTED}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "at_least" \
                    and any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args[1:]):
                found.append(f"{where}:{node.lineno}: at_least with a literal release")
            if isinstance(node, ast.Tuple) and len(node.elts) == 3 and all(
                    isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts) \
                    and node.elts[0].value == 0:
                found.append(f"{where}:{node.lineno}: a release written as a tuple")
    assert not found, found


@pytest.mark.wheels
@pytest.mark.parametrize("version", WHEEL_VERSIONS)
def test_facts_read_the_version_a_real_wheel_installs(version: str, tmp_path: Path) -> None:
    """From 0.5.7 ``sglang/version.py`` holds only the "0.0.0.dev0" fallback; the release is in the generated
    ``_version.py`` and the METADATA. The agent must read what Python would see, without importing SGLang."""
    site = tmp_path / "site-packages"
    _extract_version_files(_wheel(version), site)
    assert _run_version_py(site) == version  # what `import sglang; sglang.__version__` would say
    info = _sglang_info_in(site)
    assert info["version"] == version, info
    assert "version_conflict" not in info
    assert set(info["version_sources"].values()) == {version}
    assert f"sglang-{version}.dist-info" in info["version_sources"]


@pytest.mark.wheels
@pytest.mark.parametrize("version", WHEEL_VERSIONS)
def test_simulator_installs_the_version_files_of_the_release(version: str, tmp_path: Path) -> None:
    """The simulator's package has the release's version files: the same names, the same behaviour of
    ``version.py`` with and without ``_version.py`` and the metadata, and the same generated ``_version.py``."""
    real, sim = tmp_path / "real", tmp_path / "sim"
    _extract_version_files(_wheel(version), real)
    install_simulator(sim, tmp_path / "bin", version, sys.executable)
    sim_site = next(sim.glob("lib/python*/site-packages"))

    def names(site: Path) -> set[str]:
        return {p.name for p in (site / "sglang").glob("*version.py")}

    assert names(sim_site) == names(real)
    real_gen, sim_gen = real / "sglang" / "_version.py", sim_site / "sglang" / "_version.py"
    if real_gen.exists():
        assert sim_gen.read_text().splitlines()[0] == real_gen.read_text().splitlines()[0]  # the generator
        for var in ("__version__", "__version_tuple__"):
            want = facts._literal_version(str(real_gen), top_level_only=False)
            assert facts._literal_version(str(sim_gen), top_level_only=False) == want == version
            assert re.search(rf"^{var} = .*$", sim_gen.read_text(), re.M).group(0) == \
                re.search(rf"^{var} = .*$", real_gen.read_text(), re.M).group(0)  # type: ignore[union-attr]
    # version.py's behaviour, step by step as files go missing: _version.py, then the metadata
    for site in (real, sim_site):
        (site / "sglang" / "__init__.py").write_text("")
    assert _run_version_py(sim_site) == _run_version_py(real) == version
    for site in (real, sim_site):
        (site / "sglang" / "_version.py").unlink(missing_ok=True)
    assert _run_version_py(sim_site) == _run_version_py(real)
    for site in (real, sim_site):
        for meta in site.glob("sglang-*.dist-info/METADATA"):
            meta.unlink()
    assert _run_version_py(sim_site) == _run_version_py(real)
    assert _run_version_py(real) in (version, versions.DEV_FALLBACK)


def test_a_mixed_install_is_refused_with_a_sentence(tmp_path: Path) -> None:
    install_simulator(tmp_path / "venv", tmp_path / "bin", "0.5.16", sys.executable)
    site = next((tmp_path / "venv").glob("lib/python*/site-packages"))
    meta = site / "sglang-0.5.16.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.16", "Version: 0.5.12"))
    info = _sglang_info_in(site)
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
    info = _sglang_info_in(site)
    assert info["version"] is None
    host = {"sglang": {**info, "layout": {"engine": True, "scheduler": True, "launch_server": True}}, "paths": {},
            "gpu": {"available": False, "gpus": []}, "disk_free_gb": None, "python": {"executable": sys.executable}}
    (problem,) = facts.problems(host, {})
    assert problem.startswith("cannot tell the SGLang version")


# ------------------------------------------------------------------------------------------- health endpoints


def _health_contract(whl: Path) -> dict[str, bool]:
    """What the release's http_server.py does on /health, read from its source."""
    with zipfile.ZipFile(whl) as z:
        src = z.read("sglang/srt/entrypoints/http_server.py").decode()
    return {
        "ready_route": '@app.get("/ready")' in src,
        # /health stacked on the health-generate handler (0.5.1+) rather than a bare 200 (0.4.x)
        "health_generates": bool(re.search(r'@app\.get\("/health"\)\s*\n@app\.get\("/health_generate"\)', src)),
        "generation_switch": "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION" in src,
        "sleeps_a_second": "await asyncio.sleep(1)" in src,
        "timeout_20": 'HEALTH_CHECK_TIMEOUT = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20))' in src,
    }


@pytest.mark.wheels
@pytest.mark.parametrize("version", WHEEL_VERSIONS)
def test_probe_fits_the_health_endpoint_of_the_release(version: str) -> None:
    """The readiness endpoint the tool picks exists in that release, and the probe waits longer than its handler
    can take: one second at least, SGLANG_HEALTH_CHECK_TIMEOUT at most (then SGLang itself says 503)."""
    c = _health_contract(_wheel(version))
    path = server.readiness_path(version)
    assert (path == "/ready") == c["ready_route"]
    assert c["sleeps_a_second"] and c["timeout_20"]
    if path == "/health" or path == "/health_generate":
        assert path == "/health_generate" or c["health_generates"]
        assert server.probe_timeout_s(path, {}) > versions.HEALTH_CHECK_TIMEOUT_S
        assert server.probe_timeout_s(path, {"SGLANG_HEALTH_CHECK_TIMEOUT": "40"}) > 40


@pytest.mark.wheels
@pytest.mark.parametrize("version", ["0.4.9", "0.5.3", "0.5.7", "0.5.20"])
def test_simulator_health_endpoints_follow_the_release(version: str, tmp_path: Path) -> None:
    """The simulator's /health and /health_generate do what the release's source does: a generate check (a
    one-token prefill in the log, the answer after SGLang's one-second sleep) or a bare 200."""
    from tests.test_simulator import Sim, http

    c = _health_contract(_wheel(version))
    sim = Sim(tmp_path)
    try:
        sim.install(version)
        launcher = sim.launch(tp=1)
        sim.wait_log("fired up", proc=launcher)

        def check(path: str, env_off: bool = False) -> tuple[int, bool, float]:
            before = sim.text().count("#new-token: 1,")
            t0 = time.monotonic()
            code = http(sim.url(path), timeout=30)[0]
            took = time.monotonic() - t0
            return code, sim.text().count("#new-token: 1,") > before, took

        code, generated, took = check("/health_generate")
        assert code == 200 and generated and took >= 1.0  # asyncio.sleep(1) comes before the first look
        code, generated, took = check("/health")
        assert code == 200 and generated == c["health_generates"]
        if generated:
            assert took >= 1.0
        if c["generation_switch"]:
            sim.kill_all()
            launcher = sim.launch(tp=1, extra_env={"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"})
            sim.wait_log("fired up", proc=launcher)
            code, generated, _ = check("/health")
            assert code == 200 and not generated
            assert check("/health_generate")[:2] == (200, True)
    finally:
        sim.kill_all()


# ------------------------------------------------------------------------------------------- SGLANG_PLUGINS


@pytest.mark.wheels
@pytest.mark.parametrize("version", ["0.5.9", "0.5.12", "0.5.16", "0.5.23"])
def test_plugin_allowlist_is_parsed_as_the_release_parses_it(version: str) -> None:
    """The tool's reading of SGLANG_PLUGINS is SGLang's: no plugin system before 0.5.11; from then a non-empty
    value is split on commas, names stripped, and entry points not named there are skipped."""
    with zipfile.ZipFile(_wheel(version)) as z:
        names = set(z.namelist())
        src = z.read("sglang/srt/plugins/__init__.py").decode() if "sglang/srt/plugins/__init__.py" in names \
            else None
    if not versions.at_least(version, "0.5.11"):
        assert src is None
        return
    assert src is not None
    assert re.search(r'allowed_str = envs\.SGLANG_PLUGINS\.get\(\)\s*\n\s*if allowed_str:\s*\n\s*'
                     r'allowed_set = \{x\.strip\(\) for x in allowed_str\.split\(","\) if x\.strip\(\)\}', src)
    assert "if allowed_set is not None and ep.name not in allowed_set:" in src
    assert patch_modes.plugin_allowlist("") is None and patch_modes.plugin_allowlist(None) is None
    assert patch_modes.plugin_allowlist(" a , b,,") == ["a", "b"]
    assert patch_modes.plugin_allowlist(" , ") == []  # allowed_set == set(): SGLang loads no plugin
    assert patch_modes.plugin_excluded_by(" , ") and patch_modes.plugin_excluded_by("other")
    assert not patch_modes.plugin_excluded_by("other, specdeploy_nccl_env ")


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


# ------------------------------------------------------------------------------------------- Decode batch lines


def _decode_log_source(whl: Path) -> str:
    """The statements that build the ``Decode batch`` line, from ``Decode batch`` to its ``logger.info(msg)``."""
    with zipfile.ZipFile(whl) as z:
        for name in sorted(z.namelist()):
            if (name.startswith("sglang/srt/") and name.endswith(".py") and "metrics" in name) or \
                    name == "sglang/srt/managers/scheduler.py":
                src = z.read(name).decode()
                m = re.search(r'msg = f?"Decode batch.*?logger\.info\(\s*msg', src, re.S)
                if m:
                    return m.group(0)
    raise AssertionError(f"no Decode batch line in {whl.name}")


@pytest.mark.wheels
@pytest.mark.parametrize("version", ["0.4.9", "0.5.3", "0.5.5", "0.5.7", "0.5.9", "0.5.11", "0.5.16", "0.5.23"])
def test_decode_line_notes_follow_the_release(version: str) -> None:
    """metrics' reading of the ``Decode batch`` line is the release's: what ``accept rate`` divides, and whether
    the line ends with ", " (0.5.1-0.5.8)."""
    src = _decode_log_source(_wheel(version))
    meaning = metrics.accept_rate_meaning(version)
    if "accept rate" not in src:
        assert meaning.startswith("not printed")
    elif "draft_per_round" in src:  # (accepted - forwards) / (forwards * (draft_tokens - 1))
        assert meaning.startswith("(accept_len - 1) / (draft_tokens - 1)")
    elif "speculative_num_draft_tokens or draft_tokens_fallback" in src:
        assert meaning.startswith("accept_len / draft_tokens")
    else:
        assert re.search(r"total_draft_tokens = self\.\w+ \* \(\s*\(self\.server_args\.speculative_num_steps or 0\)"
                         r" \+ 1\s*\)", src)
        assert meaning.startswith("accept_len / (steps + 1)")
    tail = re.findall(r'f"#queue-req: \{[^}]*\}(, )?"', src)
    assert tail, src[-400:]
    trailing = tail[-1] == ", "
    assert trailing == (versions.at_least(version, "0.5.1") and not versions.at_least(version, "0.5.9"))


# ------------------------------------------------------------------------------------------- bench_serving


def _dataset_choices_in(whl: Path) -> list[str]:
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        for member in ("sglang/benchmark/serving.py", "sglang/bench_serving.py"):
            if member in names:
                src = z.read(member).decode()
                m = re.search(r'"--dataset-name",.*?choices=\[(.*?)\]', src, re.S)
                if m:
                    return re.findall(r'"([^"]+)"', m.group(1))
    raise AssertionError(f"no --dataset-name choices in {whl.name}")


@pytest.mark.wheels
@pytest.mark.parametrize("version", ["0.4.5", "0.4.9", "0.5.12", "0.5.16", "0.5.23"])
def test_bench_dataset_follows_the_release(version: str, tmp_path: Path) -> None:
    """The tool runs bench_serving with random-ids only where the release has it (0.4.6+), and the simulator's
    bench_serving offers it exactly there; the agent reads the choices from the module's own --help."""
    real = _dataset_choices_in(_wheel(version))
    assert (bench.BENCH_DATASET in real) == versions.at_least(version, "0.4.6"), real
    install_simulator(tmp_path / "venv", tmp_path / "bin", version, sys.executable)
    site = next((tmp_path / "venv").glob("lib/python*/site-packages"))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site)}
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from fabfile.remote.measure import bench; "
            "print(json.dumps(bench.bench_serving_help({'PYTHONPATH': sys.argv[2]})[0]))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT), str(site)], capture_output=True, text=True,
                         timeout=120, env=env, check=True)
    offered = json.loads(out.stdout)
    assert (bench.BENCH_DATASET in offered) == (bench.BENCH_DATASET in real)


# ------------------------------------------------------------------------------------------- the device timer


def _timer_facts(whl: Path) -> dict[str, bool]:
    """What the release's source says about the device timer, the verify counter and the eager verify's category."""
    timer = verify_calls = eager_verify = False
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if not (name.startswith("sglang/srt/") and name.endswith(".py")):
                continue
            src = z.read(name).decode("utf-8", "replace")
            timer = timer or "sglang:forward_execution_seconds_total" in src
            verify_calls = verify_calls or "sglang:spec_verify_calls_total" in src
            if "model_executor" in name and "device_timer" in src and re.search(
                    r'"target_verify"\s*\n\s*if forward_batch\.forward_mode\.is_target_verify\(\)', src):
                eager_verify = True
    return {"timer": timer, "verify_calls": verify_calls, "eager_verify": eager_verify}


@pytest.mark.wheels
@pytest.mark.parametrize("version", ["0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.16",
                                     "0.5.23"])
def test_device_timer_facts_follow_the_release(version: str) -> None:
    """versions.DEVICE_TIMER / SPEC_VERIFY_CALLS / EAGER_VERIFY_CATEGORY, which devicetimer's reading rests on."""
    f = _timer_facts(_wheel(version))
    assert f["timer"] == versions.at_least(version, versions.DEVICE_TIMER)
    assert f["verify_calls"] == versions.at_least(version, versions.SPEC_VERIFY_CALLS)
    assert f["eager_verify"] == versions.at_least(version, versions.EAGER_VERIFY_CATEGORY)


def test_the_nccl_table_stores_changes_only_and_each_release_reads_its_own_writes() -> None:
    """The generated table (``python -m tests.contract --write``) keeps a release's NCCL writes only where they
    differ from the release before it; looked up, every release read still gets its own (the wheels tier checks
    them against each wheel: tests/test_contract.py)."""
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
