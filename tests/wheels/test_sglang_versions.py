"""The SGLang facts the tool relies on, checked against the real release wheels (read with zipfile, never
installed), and the simulator's install checked against the same wheels: version files, health endpoints, plugin
allowlists, decode lines, bench datasets and the device timer per release.

Wheels come from ``tools/wheels.fetch_wheel`` (cached in ``$SPECDEPLOY_WHEEL_CACHE``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fabfile.remote import facts, versions
from fabfile.remote.measure import bench, metrics
from fabfile.remote.patch import modes as patch_modes
from fabfile.remote.serve import health
from tests.simhost.sim.install import install_simulator
from tests.support.agent import sglang_info_in
from tests.support.wheels import health_contract, wheel_path

ROOT = Path(__file__).resolve().parents[2]
# Every shape of the version files: the literal (<= 0.5.6), the 0.5.7 import, the 0.5.8+ import with the metadata
# fallback, setuptools-scm (0.5.7-0.5.9) and vcs-versioning (0.5.10+) _version.py, a post release, a /ready release.
WHEEL_VERSIONS = ["0.4.9", "0.5.3", "0.5.7", "0.5.9", "0.5.12", "0.5.15.post1", "0.5.16", "0.5.18", "0.5.20",
                  "0.5.23"]


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


def _run_version_py(site: Path) -> str:
    """``sglang.version.__version__`` as Python sees it with ``site`` first on sys.path (an empty package
    ``__init__``, so nothing but the version files runs)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import sglang.version as v; print(v.__version__)")
    out = subprocess.run([sys.executable, "-I", "-c", code, str(site)], capture_output=True, text=True, timeout=60,
                         check=True)
    return out.stdout.strip()


# ---------------------------------------------------------------------------------------------------- the parser


# ------------------------------------------------------------------------------------- version read from the host


@pytest.mark.wheels
@pytest.mark.parametrize("version", WHEEL_VERSIONS)
def test_facts_read_the_version_a_real_wheel_installs(version: str, tmp_path: Path) -> None:
    """From 0.5.7 ``sglang/version.py`` holds only the "0.0.0.dev0" fallback; the release is in the generated
    ``_version.py`` and the METADATA. The agent must read what Python would see, without importing SGLang."""
    site = tmp_path / "site-packages"
    _extract_version_files(wheel_path(version), site)
    assert _run_version_py(site) == version  # what `import sglang; sglang.__version__` would say
    info = sglang_info_in(site)
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
    _extract_version_files(wheel_path(version), real)
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


# ------------------------------------------------------------------------------------------- health endpoints


@pytest.mark.wheels
@pytest.mark.parametrize("version", WHEEL_VERSIONS)
def test_probe_fits_the_health_endpoint_of_the_release(version: str) -> None:
    """The readiness endpoint the tool picks exists in that release, and the probe waits longer than its handler
    can take: one second at least, SGLANG_HEALTH_CHECK_TIMEOUT at most (then SGLang itself says 503)."""
    c = health_contract(wheel_path(version))
    path = versions.readiness_path(version)
    assert (path == "/ready") == c["ready_route"]
    assert c["sleeps_a_second"] and c["timeout_20"]
    if path == "/health" or path == "/health_generate":
        assert path == "/health_generate" or c["health_generates"]
        assert health.probe_timeout_s(path, {}) > versions.HEALTH_CHECK_TIMEOUT_S
        assert health.probe_timeout_s(path, {"SGLANG_HEALTH_CHECK_TIMEOUT": "40"}) > 40


# ------------------------------------------------------------------------------------------- SGLANG_PLUGINS


@pytest.mark.wheels
@pytest.mark.parametrize("version", ["0.5.9", "0.5.12", "0.5.16", "0.5.23"])
def test_plugin_allowlist_is_parsed_as_the_release_parses_it(version: str) -> None:
    """The tool's reading of SGLANG_PLUGINS is SGLang's: no plugin system before 0.5.11; from then a non-empty
    value is split on commas, names stripped, and entry points not named there are skipped."""
    with zipfile.ZipFile(wheel_path(version)) as z:
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
    src = _decode_log_source(wheel_path(version))
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
    real = _dataset_choices_in(wheel_path(version))
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
    f = _timer_facts(wheel_path(version))
    assert f["timer"] == versions.at_least(version, versions.DEVICE_TIMER)
    assert f["verify_calls"] == versions.at_least(version, versions.SPEC_VERIFY_CALLS)
    assert f["eager_verify"] == versions.at_least(version, versions.EAGER_VERIFY_CATEGORY)


