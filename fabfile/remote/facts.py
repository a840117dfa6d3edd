"""What the host is: Python, SGLang (version and file layout), paths, disk, GPUs. Read-only."""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import platform
import re
import shutil
import socket
import sys
import sysconfig
from typing import TYPE_CHECKING

from . import gpus, versions
from .boot import unsafe_reason
from .common import EventSink, expand
from .serve.lock import DeployLock

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from .protocol import FactsAnswer, FactsRequest, NcclInfo, PathFact, SGLangInfo

LAYOUT = {
    "engine": "srt/entrypoints/engine.py",
    "scheduler": "srt/managers/scheduler.py",
    "launch_server": "launch_server.py",
    "plugins": "srt/plugins/__init__.py",
}


def _literal_version(path: str, top_level_only: bool) -> str | None:
    """The string assigned to ``__version__`` in a Python file, read with ``ast`` (never executed or imported).

    ``top_level_only``: only a module-level ``__version__ = "x"`` counts, the way Python would see it; one inside a
    ``try``/``except`` is a fallback (SGLang 0.5.7+'s ``version.py`` keeps ``"0.0.0.dev0"`` there), not the version.
    """
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    found = None
    for node in tree.body if top_level_only else list(ast.walk(tree)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str) \
                and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
            found = node.value.value  # the last assignment wins, as when the module runs
    return found


def _dist_metadata(site: str) -> tuple[str | None, str | None]:
    """(version, dist-info name) of the ``sglang`` distribution installed next to the package; or the one
    ``importlib.metadata`` finds on sys.path (an editable install keeps its dist-info away from the source tree).
    Reading metadata imports nothing of SGLang."""
    infos = sorted(glob.glob(os.path.join(glob.escape(site), "sglang-*.dist-info", "METADATA")))
    if len(infos) == 1:
        try:
            with open(infos[0], encoding="utf-8", errors="replace") as f:
                head = f.read(64 * 1024)
        except OSError:
            head = ""
        m = re.search(r"^Version:\s*(\S+)\s*$", head, re.M)
        if m:
            return m.group(1), os.path.basename(os.path.dirname(infos[0]))
    try:
        from importlib import metadata

        dist = metadata.distribution("sglang")
        return dist.version, "importlib.metadata"
    except Exception:
        return None, None


def sglang_info() -> SGLangInfo:
    """Where SGLang is and which version, read without importing it (importing real SGLang pulls in torch and takes
    seconds; find_spec only locates the package).

    The version is what ``sglang.version.__version__`` would be: a module-level literal in ``version.py`` (up to
    0.5.6), else the build-generated ``_version.py`` (0.5.7+; ``version.py`` only imports it), else the installed
    metadata. Every source found must agree with the installed distribution's METADATA (what pip and the patch step
    go by); a disagreement is a mixed install and is reported, not guessed at.
    """
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return {"installed": False}
    root = next(iter(spec.submodule_search_locations))
    site = os.path.dirname(root)
    sources: dict[str, str] = {}
    literal = _literal_version(os.path.join(root, "version.py"), top_level_only=True)
    if literal:
        sources["sglang/version.py"] = literal
    generated = _literal_version(os.path.join(root, "_version.py"), top_level_only=False)
    if generated:
        sources["sglang/_version.py"] = generated
    dist_version, dist_name = _dist_metadata(site)
    if dist_version:
        sources[dist_name or "metadata"] = dist_version
    version = literal or generated or dist_version
    if version == versions.DEV_FALLBACK:
        version = None
    layout = {k: os.path.isfile(os.path.join(root, rel)) for k, rel in LAYOUT.items()}
    info: SGLangInfo = {"installed": True, "version": version, "version_sources": sources, "root": root,
                        "site_packages": site, "layout": layout}
    if len(set(sources.values())) > 1:
        info["version_conflict"] = sources
    return info


def nccl_info(site: str | None) -> NcclInfo | None:
    """The NCCL release the host's torch loads, from the pip wheel beside SGLang (``nvidia-nccl-cu12``/``-cu13``
    dist-info: ``nvidia_nccl_cu13-2.28.9.dist-info``), read without loading it; None when there is no such wheel
    (a system NCCL: check-env reads NCCL's own version line instead)."""
    if not site:
        return None
    found = sorted(glob.glob(os.path.join(glob.escape(site), "nvidia_nccl_cu*-*.dist-info")))
    for path in reversed(found):
        m = re.match(r"^(nvidia_nccl_cu\d+)-(\d+\.\d+[^-]*)\.dist-info$", os.path.basename(path))
        if m:
            return {"version": m.group(2), "source": m.group(1).replace("_", "-")}
    return None


def disk_free_gb(path: str) -> float | None:
    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        return round(shutil.disk_usage(probe or "/").free / 1e9, 2)
    except OSError:
        return None


def collect(req: FactsRequest) -> FactsAnswer:
    """What the host has; ``problems`` is left empty for :func:`problems` to fill from it."""
    # nvidia-smi first: it runs (tens of ms on a real host) while the rest is read.
    smi = gpus.start_snapshot(with_apps=False) if req.get("gpus", True) else None
    state_dir = expand(req.get("state_dir", "~/.specdeploy"))
    paths = {k: v for k, v in (req.get("paths") or {}).items() if v}
    path_info: dict[str, PathFact] = {}
    for key, p in paths.items():
        p = expand(p)
        path_info[key] = {"path": p, "exists": os.path.exists(p), "is_dir": os.path.isdir(p)}
    holder = DeployLock(state_dir).holder() if os.path.isdir(state_dir) else None
    sglang = sglang_info()
    return {
        "hostname": socket.gethostname(),
        "home": os.path.expanduser("~"),
        "user": os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid()),
        "state_dir": state_dir,
        "python": {"executable": sys.executable, "version": platform.python_version(),
                   "purelib": sysconfig.get_paths()["purelib"]},
        "sglang": sglang,
        "nccl": nccl_info(sglang.get("site_packages")),
        "paths": path_info,
        "disk_free_gb": disk_free_gb(expand(req.get("log_dir") or state_dir)),
        "gpu": gpus.read_snapshot(smi) if smi is not None else {"available": False, "gpus": [], "apps": []},
        "lock_holder": holder,
        # Directories the deploy writes logs and secrets to and runs code from: refused (exit 2) when another
        # account owns them or can write them.
        "unsafe": [r for r in (unsafe_reason(state_dir, "state_dir"),
                               unsafe_reason(expand(req["log_dir"]), "log_dir") if req.get("log_dir") else None,
                               _unsafe_file(expand(req["log_path"])) if req.get("log_path") else None)
                   if r],
        "problems": [],
    }


def _unsafe_file(path: str) -> str | None:
    """Why an existing log file must not be appended to (a link, or not our own regular file), or None."""
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink (to {os.readlink(path)}); the log is never written through a link"
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return f"{path} is not a regular file of this user"
    return None


def problems(facts: FactsAnswer, req: FactsRequest) -> list[str]:
    """Everything that would make a deploy fail, as sentences; empty when the host is ready."""
    out: list[str] = []
    sg = facts["sglang"]
    if not sg.get("installed"):
        out.append(f"SGLang is not installed for {facts['python']['executable']}")
    else:
        missing = [LAYOUT[k] for k in ("engine", "scheduler", "launch_server") if not sg["layout"].get(k)]
        if missing:
            out.append(f"SGLang {sg.get('version')} at {sg['root']} lacks {', '.join(missing)}: an unknown layout")
        conflict = sg.get("version_conflict")
        if conflict:
            said = ", ".join(f"{src} says {v}" for src, v in conflict.items())
            out.append(f"SGLang at {sg['root']} is a mixed install ({said}): reinstall it with pip so the files and "
                       "the metadata agree")
        elif not sg.get("version"):
            out.append(f"cannot tell the SGLang version at {sg['root']}: neither sglang/version.py, "
                       "sglang/_version.py nor an installed sglang-*.dist-info names a release (install it with pip)")
    for key, info in facts["paths"].items():
        if key == "log_dir":
            continue
        if not info["exists"]:
            out.append(f"{key} {info['path']} does not exist on the host")
    need = int(req.get("need_gpus") or 0)
    g = facts["gpu"]
    if need:
        if not g["available"]:
            out.append("nvidia-smi is not on the host's PATH, so GPUs cannot be counted or checked")
        elif len(g["gpus"]) < need:
            out.append(f"the host has {len(g['gpus'])} GPU(s) but tp needs {need}")
    min_free = float(req.get("min_free_disk_gb") or 0)
    free = facts["disk_free_gb"]
    if free is not None and free < min_free:
        out.append(f"only {free} GB free on the log disk, below min_free_disk_gb {min_free}")
    return out


def report(req: FactsRequest, sink: EventSink) -> FactsAnswer:
    """The ``facts`` verb (the preflight): what the host has, and the problems a deploy cannot live with."""
    data = collect(req)
    data["problems"] = problems(data, req)
    return data
