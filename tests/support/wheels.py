"""The session's real SGLang wheels (``wheels`` fixture): every matrix release fetched once, in parallel threads.

Without network and without a cached wheel, a version is kept as its error, and its tests skip (fail when
``SPECDEPLOY_WHEELS_REQUIRED`` is set, as in CI).
"""

from __future__ import annotations

import os
import re
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fabfile.remote.versions import NEWEST_SUPPORTED
from fabfile.remote.versions import key as version_order
from tools.wheels import VERSIONS, cache_dir, fetch_wheel, latest_version


@pytest.fixture(scope="session")
def wheels(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Resolve 'latest' and fetch every wheel in parallel threads; failures are kept per version."""
    t0 = time.monotonic()
    resolved: dict[str, Any] = {v: v for v in VERSIONS}
    try:
        newest_on_index: str | None = latest_version()
    except (OSError, ValueError, KeyError):
        newest_on_index = None
    out: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        futs = {v: pool.submit(fetch_wheel, rv) for v, rv in resolved.items() if isinstance(rv, str)}
        for v, rv in resolved.items():
            if not isinstance(rv, str):
                out[v] = rv
                continue
            try:
                out[v] = futs[v].result()
            except (OSError, ValueError, LookupError) as e:
                out[v] = e
    total = time.monotonic() - t0
    tr = request.config.pluginmanager.getplugin("terminalreporter")
    lines = []
    for v, info in out.items():
        if isinstance(info, dict):
            how = "cached" if info["cached"] else "downloaded in {:.1f}s".format(info["seconds"])
            lines.append(
                f"  sglang {info['version']:>8} ({v}): {info['path'].name} {info['size'] / 1e6:.1f} MB {how}"
            )
        else:
            lines.append(f"  sglang {v}: unavailable: {info}")
    if newest_on_index and version_order(newest_on_index) > version_order(NEWEST_SUPPORTED):
        lines.append(f"  note: the index's newest SGLang is {newest_on_index}, newer than the matrix's "
                     f"{NEWEST_SUPPORTED}: add it to VERSIONS and run `python -m tools.contract --write`")
    summary = f"wheels: {total:.1f}s total in {cache_dir()}\n" + "\n".join(lines)
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if tr is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line("\n" + summary)
    (cache_dir() / "last-run.txt").write_text(summary + "\n")
    return out


def wheel_path(version: str) -> Path:
    try:
        return Path(fetch_wheel(version)["path"])
    except (OSError, ValueError, LookupError) as e:
        if os.environ.get("SPECDEPLOY_WHEELS_REQUIRED"):
            raise
        pytest.skip(f"SGLang {version} wheel unavailable: {e}")


def health_contract(whl: Path) -> dict[str, bool]:
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
