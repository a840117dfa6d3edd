"""The real SGLang release wheels the tests and the contract generator read (with zipfile, never installed).

Wheels come from the package index's JSON API and are cached in ``$SPECDEPLOY_WHEEL_CACHE`` (default
``~/.cache/specdeploy/wheels``); a cached wheel whose sha256 matches is used without any network access.
Set ``SPECDEPLOY_PYPI_JSON`` to point at another JSON API root (default ``https://pypi.org/pypi``). The
per-version endpoint is tried first and the project endpoint second (some mirrors only serve the latter);
relative file URLs are resolved against the answering URL. pip's own index configuration is not used: the
JSON API is what both this machine and a plain CI machine with PyPI reach. Downloads stream to a temp file
in the cache dir and are renamed into place only after their sha256 matched, so an interrupted download never
poisons the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from fabfile.remote.common import sha256_file
from fabfile.remote.versions import NEWEST_SUPPORTED
from fabfile.remote.versions import key as version_order
from fabfile.remote.versions import valid as versions_valid

# Pinned, the newest being the tool's NEWEST_SUPPORTED: CI must not turn red because the index gained a release
# overnight. The wheels tier's session summary says when the index has a newer one (add it here, then run
# `python -m tools.contract --write`: the contract test then shows what the new release changed).
VERSIONS = ["0.4.9", "0.5.3", "0.5.7", "0.5.9", "0.5.12", "0.5.15.post1", "0.5.16", "0.5.18", "0.5.20",
            NEWEST_SUPPORTED]


TIMEOUT = 120


def cache_dir() -> Path:
    d = os.environ.get("SPECDEPLOY_WHEEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "specdeploy", "wheels"
    )
    p = Path(d)
    p.mkdir(parents=True, exist_ok=True)
    return p


def _json_root() -> str:
    return os.environ.get("SPECDEPLOY_PYPI_JSON", "https://pypi.org/pypi").rstrip("/")


def _get_json(url: str) -> tuple[dict[str, Any], str]:
    req = urllib.request.Request(
        url, headers={"Accept": "application/json", "User-Agent": "specdeploy-tests"}
    )
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return json.load(r), r.geturl()


def _pick_wheel(files: list[dict[str, Any]]) -> dict[str, Any] | None:
    wheels = [f for f in files if f["filename"].endswith(".whl") and not f.get("yanked")]
    if not wheels:
        return None

    def rank(f: dict[str, Any]) -> tuple[int, int]:
        name = f["filename"]
        if "py3-none-any" in name:
            return (0, 0)
        if "x86_64" in name and "cp311" in name:
            return (1, 0)
        return (2, int(f.get("size") or 0))

    return sorted(wheels, key=rank)[0]


_PROJECT_JSON: dict[str, tuple[dict[str, Any], str]] = {}


def _project_json() -> tuple[dict[str, Any], str]:
    if "p" not in _PROJECT_JSON:
        _PROJECT_JSON["p"] = _get_json(f"{_json_root()}/sglang/json")
    return _PROJECT_JSON["p"]


def _release_files(version: str) -> tuple[list[dict[str, Any]], str]:
    try:
        data, url = _get_json(f"{_json_root()}/sglang/{version}/json")
        return list(data.get("urls") or []), url
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
    data, url = _project_json()  # mirrors that only serve the project endpoint
    return list(data.get("releases", {}).get(version) or []), url


def latest_version() -> str:
    data, _ = _project_json()
    return str(data["info"]["version"])


def releases_on_index(oldest: str) -> list[str]:
    """Every release of sglang on the index from ``oldest`` to the newest, oldest first: final and post releases
    with a wheel that is not yanked (pre-releases and development builds left out)."""
    data, _ = _project_json()
    out = []
    for v, files in data.get("releases", {}).items():
        if not versions_valid(v) or version_order(v) < version_order(oldest) or version_order(v)[1] != 3:
            continue
        if version_order(v)[4] == 0 or _pick_wheel(list(files or [])) is None:
            continue
        out.append(v)
    return sorted(out, key=version_order)


def fetch_wheel(version: str) -> dict[str, Any]:
    """Return {"version", "path", "size", "seconds", "cached"}; downloads at most once per cache dir."""
    cache = cache_dir()
    pointer = cache / f"sglang-{version}.json"
    if pointer.exists():
        info = json.loads(pointer.read_text())
        path = cache / info["filename"]
        if path.exists() and sha256_file(str(path)) == info["sha256"]:
            return {
                "version": version,
                "path": path,
                "size": path.stat().st_size,
                "seconds": 0.0,
                "cached": True,
            }
    files, base = _release_files(version)
    chosen = _pick_wheel(files)
    if chosen is None:
        raise LookupError(f"no wheel of sglang {version} in the index")
    url = urllib.parse.urljoin(base, chosen["url"])
    want = chosen["digests"]["sha256"]
    path = cache / chosen["filename"]
    t0 = time.monotonic()
    if not (path.exists() and sha256_file(str(path)) == want):
        fd, tmp = tempfile.mkstemp(prefix=".part-", dir=cache)
        try:
            h = hashlib.sha256()
            req = urllib.request.Request(url, headers={"User-Agent": "specdeploy-tests"})
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(req, timeout=TIMEOUT) as r:
                for chunk in iter(lambda: r.read(1 << 20), b""):
                    h.update(chunk)
                    out.write(chunk)
            if h.hexdigest() != want:
                raise OSError(f"sha256 mismatch for {url}")
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    # A private temporary name: parallel test workers may fetch the same release at once.
    fd, ptmp = tempfile.mkstemp(prefix=".pointer-", dir=cache)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"filename": chosen["filename"], "sha256": want, "url": url}))
    os.chmod(ptmp, 0o644)
    os.replace(ptmp, pointer)
    return {
        "version": version,
        "path": path,
        "size": path.stat().st_size,
        "seconds": time.monotonic() - t0,
        "cached": False,
    }

