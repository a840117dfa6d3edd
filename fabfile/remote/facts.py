"""What the host is: Python, SGLang (version and file layout), paths, disk, GPUs. Read-only."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import socket
import sys
import sysconfig
from typing import Any, Dict, List, Optional

from . import gpus
from .boot import unsafe_reason
from .lock import DeployLock

LAYOUT = {
    "engine": "srt/entrypoints/engine.py",
    "scheduler": "srt/managers/scheduler.py",
    "launch_server": "launch_server.py",
    "plugins": "srt/plugins/__init__.py",
}


def expand(path: str) -> str:
    return os.path.expanduser(path) if path.startswith("~") else path


def sglang_info() -> Dict[str, Any]:
    # find_spec locates the package without importing it: importing real SGLang pulls in torch and takes seconds.
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return {"installed": False}
    root = next(iter(spec.submodule_search_locations))
    version = None
    try:
        with open(os.path.join(root, "version.py"), encoding="utf-8") as f:
            m = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", f.read())
            version = m.group(1) if m else None
    except OSError:
        pass
    if version is None:
        try:
            from importlib import metadata

            version = metadata.version("sglang")
        except Exception:
            version = None
    layout = {k: os.path.isfile(os.path.join(root, rel)) for k, rel in LAYOUT.items()}
    return {"installed": True, "version": version, "root": root, "site_packages": os.path.dirname(root),
            "layout": layout}


def disk_free_gb(path: str) -> Optional[float]:
    probe = path
    while probe and not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:
        return round(shutil.disk_usage(probe or "/").free / 1e9, 2)
    except OSError:
        return None


def collect(req: Dict[str, Any]) -> Dict[str, Any]:
    state_dir = expand(req.get("state_dir", "~/.specdeploy"))
    paths = {k: v for k, v in (req.get("paths") or {}).items() if v}
    path_info = {}
    for key, p in paths.items():
        p = expand(p)
        path_info[key] = {"path": p, "exists": os.path.exists(p), "is_dir": os.path.isdir(p)}
    snap = gpus.snapshot(with_apps=False) if req.get("gpus", True) else {"available": False, "gpus": [], "apps": []}
    holder = DeployLock(state_dir).holder() if os.path.isdir(state_dir) else None
    return {
        "hostname": socket.gethostname(),
        "home": os.path.expanduser("~"),
        "user": os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid()),
        "state_dir": state_dir,
        "python": {"executable": sys.executable, "version": platform.python_version(),
                   "purelib": sysconfig.get_paths()["purelib"]},
        "sglang": sglang_info(),
        "paths": path_info,
        "disk_free_gb": disk_free_gb(expand(req.get("log_dir") or state_dir)),
        "gpu": snap,
        "lock_holder": holder,
        # Directories the deploy writes logs and secrets to and runs code from: refused (exit 2) when another
        # account owns them or can write them.
        "unsafe": [r for r in (unsafe_reason(state_dir, "state_dir"),
                               unsafe_reason(expand(req["log_dir"]), "log_dir") if req.get("log_dir") else None,
                               _unsafe_file(expand(req["log_path"])) if req.get("log_path") else None)
                   if r],
    }


def _unsafe_file(path: str) -> Optional[str]:
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


def problems(facts: Dict[str, Any], req: Dict[str, Any]) -> List[str]:
    """Everything that would make a deploy fail, as sentences; empty when the host is ready."""
    out: List[str] = []
    sg = facts["sglang"]
    if not sg.get("installed"):
        out.append(f"SGLang is not installed for {facts['python']['executable']}")
    else:
        missing = [LAYOUT[k] for k in ("engine", "scheduler", "launch_server") if not sg["layout"].get(k)]
        if missing:
            out.append(f"SGLang {sg.get('version')} at {sg['root']} lacks {', '.join(missing)}: an unknown layout")
        if not sg.get("version"):
            out.append(f"cannot tell the SGLang version at {sg['root']}")
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
