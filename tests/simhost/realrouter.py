"""The real SGLang router (``sglang-router`` from the package index) for the simulated hosts.

It is an ordinary pip package (a Rust extension plus a Python launcher; no GPU): installed once with pip into
``$SPECDEPLOY_WHEEL_CACHE/sglang-router-<ver>-<python tag>/`` (``pip install --target``, dependencies included),
then made importable in a host's venv in place of the simulator's stand-in ``sglang_router``: the stand-in is
removed and a ``.pth`` file names the install (or, when the cache lies where hosts cannot see it, under /root or
/tmp, the install is copied into the host's site-packages).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "0.3.2"
PTH = "sglang_router_real.pth"


def _cache() -> Path:
    d = os.environ.get("SPECDEPLOY_WHEEL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "specdeploy",
                                                                  "wheels")
    p = Path(d).resolve()
    p.mkdir(parents=True, exist_ok=True)
    return p


def install() -> Path:
    """The directory holding the real router and its dependencies (pip, once; later calls reuse it)."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    target = _cache() / f"sglang-router-{VERSION}-{tag}"
    if (target / "sglang_router" / "launch_router.py").exists():
        return target
    tmp = Path(tempfile.mkdtemp(prefix=".router-", dir=target.parent))
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--target", str(tmp), f"sglang-router=={VERSION}"], check=True, timeout=600,
                       capture_output=True, text=True)
        os.rename(tmp, target)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if (target / "sglang_router" / "launch_router.py").exists():
            return target  # a parallel test worker installed the same release first
        detail = getattr(e, "stderr", "") or str(e)
        raise RuntimeError(f"cannot install sglang-router=={VERSION} with pip: {detail[-500:]}") from None
    return target


def put_in(site_packages: Path, target: Path) -> None:
    """Make ``target``'s sglang_router the one ``python -m sglang_router.launch_router`` finds in a host."""
    shutil.rmtree(site_packages / "sglang_router", ignore_errors=True)
    hidden = str(target).startswith(("/root/", "/tmp/")) or str(target) in ("/root", "/tmp")
    if hidden:
        for item in target.iterdir():
            dest = site_packages / item.name
            if item.is_dir():
                shutil.copytree(item, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(item, dest)
    else:
        (site_packages / PTH).write_text(f"{target}\n")
