"""The patch engine against the real sources of SGLang release wheels (read with zipfile, never installed).

Wheels come from the package index's JSON API and are cached in ``$SPECDEPLOY_WHEEL_CACHE`` (default
``~/.cache/specdeploy/wheels``); a cached wheel whose sha256 matches is used without any network access.
Set ``SPECDEPLOY_PYPI_JSON`` to point at another JSON API root (default ``https://pypi.org/pypi``). The
per-version endpoint is tried first and the project endpoint second (some mirrors only serve the latter);
relative file URLs are resolved against the answering URL. pip's own index configuration is not used: the
JSON API is what both this machine and a plain CI machine with PyPI reach. Downloads stream to a temp file
in the cache dir and are renamed into place only after their sha256 matched, so an interrupted download never
poisons the cache. Without network and without a cached wheel, a version is skipped (failed when
``SPECDEPLOY_WHEELS_REQUIRED`` is set).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from fabfile.remote.common import sha256_file
from fabfile.remote.patch.apply import apply
from fabfile.remote.patch.modes import supported_modes
from fabfile.remote.patch.rollback import rollback
from fabfile.remote.versions import NEWEST_SUPPORTED
from fabfile.remote.versions import key as version_order
from fabfile.remote.versions import valid as versions_valid
from fabfile.render import patchset
from tests.test_patching import tree as tree_hashes

pytestmark = pytest.mark.wheels

# Pinned, the newest being the tool's NEWEST_SUPPORTED: CI must not turn red because the index gained a release
# overnight. The session summary says when the index has a newer one (add it here, then run
# `python -m tests.contract --write`: the contract test then shows what the new release changed).
VERSIONS = ["0.4.9", "0.5.3", "0.5.7", "0.5.9", "0.5.12", "0.5.15.post1", "0.5.16", "0.5.18", "0.5.20",
            NEWEST_SUPPORTED]
VALUES = {
    "NCCL_PROTO": "LL",
    "NCCL_ALGO": "Ring",
    "NCCL_P2P_LEVEL": "SYS",
    "NCCL_MAX_NCHANNELS": "16",
    "NCCL_BUFFSIZE": "16777216",
    "NCCL_NTHREADS": "512",
}
MEMBERS = {
    "engine": "sglang/srt/entrypoints/engine.py",
    "scheduler": "sglang/srt/managers/scheduler.py",
    "decoy": "sglang/multimodal_gen/runtime/managers/gpu_worker.py",
    "version": "sglang/version.py",
    "plugins": "sglang/srt/plugins/__init__.py",
}
TIMEOUT = 120


def _cache_dir() -> Path:
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


def _latest_version() -> str:
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
    cache = _cache_dir()
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


@pytest.fixture(scope="session")
def wheels(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Resolve 'latest' and fetch every wheel in parallel threads; failures are kept per version."""
    t0 = time.monotonic()
    resolved: dict[str, Any] = {v: v for v in VERSIONS}
    try:
        newest_on_index: str | None = _latest_version()
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
                     f"{NEWEST_SUPPORTED}: add it to VERSIONS and run `python -m tests.contract --write`")
    summary = f"wheels: {total:.1f}s total in {_cache_dir()}\n" + "\n".join(lines)
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if tr is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line("\n" + summary)
    (_cache_dir() / "last-run.txt").write_text(summary + "\n")
    return out


def _extract(whl: Path, site: Path) -> dict[str, Path]:
    got = {}
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        for key, member in MEMBERS.items():
            if member in names:
                dest = site / member
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(member))
                got[key] = dest
        meta = [n for n in names if n.startswith("sglang-") and n.endswith(".dist-info/METADATA")]
        for member in meta:  # lets the agent cross-check the claimed version
            dest = site / member
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(z.read(member))
    return got



def _module_func(tree: ast.Module, name: str) -> ast.FunctionDef:
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, name
    return found[0]


def _dumps(stmts: list[ast.stmt]) -> list[str]:
    return [ast.dump(s) for s in stmts]


@pytest.mark.parametrize("label", VERSIONS)
def test_real_wheel(label: str, wheels: dict[str, Any], tmp_path: Path) -> None:
    info = wheels[label]
    if not isinstance(info, dict):
        if os.environ.get("SPECDEPLOY_WHEELS_REQUIRED"):
            pytest.fail(f"sglang {label}: wheel unavailable ({info})")
        pytest.skip(f"sglang {label}: wheel unavailable ({info}); set SPECDEPLOY_WHEELS_REQUIRED=1 to fail")
    version = info["version"]
    site = tmp_path / "site-packages"
    files = _extract(info["path"], site)
    assert {"engine", "scheduler"} <= set(files), f"{version}: wheel lacks engine.py/scheduler.py"
    pristine = tree_hashes(site)
    state = tmp_path / "state"
    modes = [m for m in supported_modes(version) if m != "env"]
    assert ("plugin" in modes) == ("plugins" in files), version
    for mode in modes:
        req = patchset.build_patch_request(mode, VALUES, False, version, str(state), str(site), "0.1.0")
        res = apply(req)
        assert res["changed"], (version, mode)
        if mode in ("engine", "scheduler"):
            target = files[mode]
            text = target.read_text()
            compile(text, str(target), "exec")
            block = ast.parse(req["files"][f"{mode}_block"]).body
            tree = ast.parse(text)
            if mode == "scheduler":
                fn = _module_func(tree, "run_scheduler_process")
                assert _dumps(fn.body[: len(block)]) == _dumps(block), version
            else:
                fn = _module_func(tree, "_set_envs_and_config")
                idx = [
                    i
                    for i, st in enumerate(fn.body)
                    if (ast.get_source_segment(text, st) or "") == 'mp.set_start_method("spawn", force=True)'
                ]
                assert len(idx) == 1, version
                assert _dumps(fn.body[idx[0] - len(block) : idx[0]]) == _dumps(block), version
        else:
            for rel, content in (req["files"].get("plugin") or {"sitecustomize.py": ""}).items():
                p = site / rel
                assert p.exists(), (version, mode, rel)
                if rel.endswith(".py") and content:
                    compile(p.read_text(), str(p), "exec")
        if "decoy" in files:
            assert sha256_file(str(files["decoy"])) == pristine[MEMBERS["decoy"]], version
        again = apply(req)
        assert not again["changed"] and {f["action"] for f in again["files"]} == {"unchanged"}, (
            version,
            mode,
        )
        rb = rollback({"state_dir": str(state)})
        assert not rb["nothing_to_do"]
        assert tree_hashes(site) == pristine, (version, mode)
        assert rollback({"state_dir": str(state)})["nothing_to_do"]
