"""Installer of the SGLang simulator (TEST EQUIPMENT for specdeploy's simulated GPU hosts).

``create_venv`` makes a bare venv from the running Python's base interpreter and copies the
``setproctitle`` package into it (no network, no pip).  ``install_simulator`` drops the simulated
``sglang`` package (SGLang's real module layout, version-dependent), ``simgpu_holder`` and a fake
``nvidia-smi`` into it, plus the runtime config ``<venv>/sim-state/config.json``.

Paths given here are paths on the machine's real filesystem; inside a simulated host the venv is seen
elsewhere (bind mount), which is why everything at runtime locates itself via ``sys.prefix``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

SIM_ROOT = Path(__file__).resolve().parent
SITE_SRC = SIM_ROOT / "site"
NVIDIA_SMI_SRC = SIM_ROOT / "bin" / "nvidia-smi"

_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")


def _site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _base_python() -> str:
    exe = getattr(sys, "_base_executable", None)
    if exe and os.path.exists(exe):
        return str(exe)
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    for name in (f"python{ver}", "python3"):
        cand = Path(sys.base_prefix) / "bin" / name
        if cand.exists():
            return str(cand)
    return sys.executable


def create_venv(prefix: Path) -> None:
    """``python -m venv --without-pip PREFIX`` with the base interpreter, plus a copy of setproctitle."""
    prefix = Path(prefix)
    subprocess.run(
        [_base_python(), "-m", "venv", "--without-pip", str(prefix)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    site = _site_packages(prefix)
    site.mkdir(parents=True, exist_ok=True)
    spec = importlib.util.find_spec("setproctitle")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("setproctitle is not installed in the running environment")
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    shutil.copytree(pkg_dir, site / "setproctitle", ignore=_IGNORE, dirs_exist_ok=True)
    dist = importlib.metadata.distribution("setproctitle")
    dist_path = Path(str(dist._path))  # type: ignore[attr-defined]
    shutil.copytree(dist_path, site / dist_path.name, ignore=_IGNORE, dirs_exist_ok=True)


def _version_tuple(version: str) -> tuple[int, int, int]:
    nums = [int(x) for x in re.findall(r"\d+", version.split("post")[0])[:3]]
    while len(nums) < 3:
        nums.append(0)
    return nums[0], nums[1], nums[2]


# sglang/version.py as the releases ship it. Up to 0.5.6 it holds the literal. From 0.5.7 the version comes from
# sglang/_version.py, which the build generates (setuptools-scm up to 0.5.9, vcs-versioning from 0.5.10); the only
# literal left in version.py is the development fallback. 0.5.8 added the metadata and setuptools_scm fallbacks.
# (Written for the simulator after the wheels' files; the same behaviour, not their text.)
_VERSION_PY_LITERAL = '__version__ = "{version}"\n'
_VERSION_PY_057 = """try:
    from sglang._version import __version__, __version_tuple__
except ImportError:
    # a source tree without a build: no generated _version.py
    __version__ = "0.0.0.dev0"
    __version_tuple__ = (0, 0, 0, "dev0")
"""
_VERSION_PY_058 = """try:
    from sglang._version import __version__, __version_tuple__
except ImportError:
    try:
        import importlib.metadata

        __version__ = importlib.metadata.version("sglang")
        __version_tuple__ = tuple(__version__.split("."))
    except Exception:
        try:
            import pathlib

            from setuptools_scm import get_version

            __version__ = get_version(
                root=str(pathlib.Path(__file__).parent.parent.parent), fallback_version="0.0.0.dev0"
            )
            __version_tuple__ = tuple(__version__.split("."))
        except Exception:
            # a source tree without a build and without setuptools_scm
            __version__ = "0.0.0.dev0"
            __version_tuple__ = (0, 0, 0, "dev0")
"""


def _scm_version_tuple(version: str) -> tuple[int | str, ...]:
    """setuptools-scm's tuple: numbers as ints, the rest as strings ("0.5.15.post1" -> (0, 5, 15, 'post1'))."""
    return tuple(int(p) if p.isdigit() else p for p in version.split("."))


def _write_version_files(site: Path, version: str) -> None:
    """``sglang/version.py`` and, from 0.5.7, the build-generated ``sglang/_version.py`` of that release."""
    pkg = site / "sglang"
    v = _version_tuple(version)
    if v < (0, 5, 7):
        (pkg / "version.py").write_text(_VERSION_PY_LITERAL.format(version=version))
        return
    (pkg / "version.py").write_text(_VERSION_PY_057 if v < (0, 5, 8) else _VERSION_PY_058)
    generator = "setuptools-scm" if v < (0, 5, 10) else "vcs-versioning"
    (pkg / "_version.py").write_text(
        f"# file generated by {generator}\n"
        "# don't change, don't track in version control\n"
        "from __future__ import annotations\n\n"
        '__all__ = ["__version__", "__version_tuple__", "version", "version_tuple", "__commit_id__", "commit_id"]\n\n'
        f"__version__ = version = {version!r}\n"
        f"__version_tuple__ = version_tuple = {_scm_version_tuple(version)!r}\n\n"
        "__commit_id__ = commit_id = None\n"
    )


def _record_line(site: Path, path: Path) -> str:
    rel = path.relative_to(site).as_posix()
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def install_simulator(
    venv_prefix: Path,
    bin_dir: Path,
    version: str,
    python_in_host: str,
    config: dict[str, Any] | None = None,
) -> None:
    """Install the simulated SGLang ``version`` into ``venv_prefix`` and ``nvidia-smi`` into ``bin_dir``.

    ``python_in_host`` is the venv python as seen inside the host (e.g. ``/root/ml-env/bin/python3``);
    it becomes the shebang of ``nvidia-smi``.
    """
    venv_prefix = Path(venv_prefix)
    bin_dir = Path(bin_dir)
    site = _site_packages(venv_prefix)
    site.mkdir(parents=True, exist_ok=True)

    # packages
    for old in site.glob("sglang-*.dist-info"):
        shutil.rmtree(old)
    shutil.rmtree(site / "sglang", ignore_errors=True)
    shutil.copytree(SITE_SRC / "sglang", site / "sglang", ignore=_IGNORE)
    shutil.copy2(SITE_SRC / "simgpu_holder.py", site / "simgpu_holder.py")
    shutil.rmtree(site / "sglang_router", ignore_errors=True)
    shutil.copytree(SITE_SRC / "sglang_router", site / "sglang_router", ignore=_IGNORE)
    _write_version_files(site, version)
    if _version_tuple(version) < (0, 5, 11):
        shutil.rmtree(site / "sglang" / "srt" / "plugins")
    if _version_tuple(version) < (0, 5, 5):
        shutil.rmtree(site / "sglang" / "multimodal_gen")

    # the dist-info a pip install of that release's wheel leaves (METADATA, WHEEL, RECORD, ...), so
    # importlib.metadata.version("sglang") works and a reader of the metadata sees what it would on a GPU host
    dist = site / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.4\n"
        "Name: sglang\n"
        f"Version: {version}\n"
        "Summary: SIMULATED SGLang (test equipment for specdeploy; no GPU, no model)\n"
        "Requires-Python: >=3.10\n"
    )
    (dist / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: specdeploy-simhost\nRoot-Is-Purelib: true\nTag: py3-none-any\n\n"
    )
    (dist / "INSTALLER").write_text("pip\n")
    (dist / "REQUESTED").write_text("")
    (dist / "top_level.txt").write_text("sglang\nsimgpu_holder\n")
    meta_files = ["METADATA", "WHEEL", "INSTALLER", "REQUESTED", "top_level.txt"]
    files = sorted(p for p in (site / "sglang").rglob("*") if p.is_file())
    files += [site / "simgpu_holder.py", *(dist / name for name in meta_files)]
    record = [_record_line(site, p) for p in files]
    record.append(f"{dist.name}/RECORD,,")
    (dist / "RECORD").write_text("\n".join(record) + "\n")

    # nvidia-smi with the host's venv python as interpreter
    bin_dir.mkdir(parents=True, exist_ok=True)
    src = NVIDIA_SMI_SRC.read_text().split("\n", 1)[1]
    target = bin_dir / "nvidia-smi"
    target.write_text(f"#!{python_in_host}\n{src}")
    target.chmod(0o755)

    # activate scripts: point them at the prefix seen inside the host
    host_prefix = str(Path(python_in_host).parent.parent)
    real_prefix = str(venv_prefix)
    if host_prefix != real_prefix:
        for script in (venv_prefix / "bin").glob("activate*"):
            try:
                text = script.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            script.write_text(text.replace(real_prefix, host_prefix))

    # runtime state
    state = venv_prefix / "sim-state"
    (state / "gpu-procs").mkdir(parents=True, exist_ok=True)
    (state / "config.json").write_text(json.dumps(dict(config or {}), indent=2, sort_keys=True) + "\n")


def write_config(venv_prefix: Path, config: dict[str, Any]) -> None:
    """Replace ``<venv>/sim-state/config.json`` (e.g. to inject a failure between deploys)."""
    state = Path(venv_prefix) / "sim-state"
    (state / "gpu-procs").mkdir(parents=True, exist_ok=True)
    tmp = state / ".config.json.tmp"
    tmp.write_text(json.dumps(dict(config), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, state / "config.json")
