"""The host-side agent run in a fresh Python on this machine, as it runs on a host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.invoke_cli import ROOT


def sglang_info_in(site: Path) -> dict[str, Any]:
    """facts.sglang_info() as the agent runs it on a host whose site-packages is ``site``."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from fabfile.remote import facts; "
            "print(json.dumps(facts.sglang_info()))")
    out = subprocess.run([sys.executable, "-c", code, str(site)], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    info: dict[str, Any] = json.loads(out.stdout)
    return info
