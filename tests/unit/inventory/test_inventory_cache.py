"""The CLI's cache of validated inventories (for a quick start): same result, same errors, private, and only
for exactly the bytes it validated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabfile.errors import InventoryError
from fabfile.inventory import hosts as inventory

ROOT = Path(__file__).resolve().parents[3]

FULL = """
ssh_config: ssh_config
known_hosts: known_hosts
presets:
  nccl:
    tuned: {NCCL_PROTO: Simple, NCCL_BUFFSIZE: 4194304}
defaults:
  python: /opt/venv/bin/python3
  model: /models/m
  draft_model: /models/d
  port: 9000
  nccl_preset: pcie
  env: {A: "1", B: two}
  secret_env: [B]
  sglang_args: [--mem-fraction-static, "0.88", --disable-custom-all-reduce]
  timeouts: {connect: 7, lock_wait: 0}
  speculative: {steps: 2, topk: 1}
groups:
  big:
    hosts: [n0, n1]
    defaults: {gpus: 2, tp: 2, nccl_preset: tuned}
hosts:
  n0: {default: true, ssh_host: node-0, address: 10.0.0.1, accept_gate: 1.5}
  n1: {ssh_host: node-1, address: 10.0.0.2, nccl_env: {NCCL_BUFFSIZE: 1048576}}
  solo: {gpus: 1, listen: 0.0.0.0, patch_mode: plugin, min_free_disk_gb: 0.5}
clusters:
  pair: {hosts: [n0, n1], tp: 4}
routers:
  front: {host: solo, group: big, port: 30001, args: [--log-level, debug]}
"""


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(d))
    return d / "specdeploy" / "cli"


@pytest.fixture
def full(tmp_path: Path) -> Path:
    (tmp_path / "ssh_config").write_text("Host *\n")
    (tmp_path / "known_hosts").write_text("")
    p = tmp_path / "inventory.yaml"
    p.write_text(FULL)
    return p


def _entries(d: Path) -> list[Path]:
    return sorted(d.glob("inventory-*.json")) if d.exists() else []


def test_a_cached_load_is_the_inventory_a_full_validation_gives(full: Path, cache_home: Path) -> None:
    fresh = inventory.load(full)
    assert not _entries(cache_home)  # only the CLI asks for the cache
    first = inventory.load(full, cache=True)
    [entry] = _entries(cache_home)
    again = inventory.load(full, cache=True)
    assert fresh == first == again
    assert again.clusters["pair"].dist_init_addr == "10.0.0.1:29500" and again.routers["front"].members == ("n0", "n1")
    assert again.hosts["n1"].sglang_args == ("--mem-fraction-static", "0.88", "--disable-custom-all-reduce")
    # private: a 0700 directory of ours, a 0600 file (a value may be a secret, as in the inventory itself)
    assert cache_home.stat().st_mode & 0o777 == 0o700 and entry.stat().st_mode & 0o777 == 0o600


def test_the_shipped_inventory_round_trips(cache_home: Path) -> None:
    path = ROOT / "inventory.yaml"
    assert inventory.load(path) == inventory.load(path, cache=True) == inventory.load(path, cache=True)


def test_a_cached_load_does_not_import_the_validator(full: Path, tmp_path: Path) -> None:
    """What the cache is for: a command whose inventory is unchanged does not pay for pydantic and the schema."""
    code = ("import sys; from fabfile.inventory.hosts import find; inv = find(sys.argv[1]); "
            "print(sorted(m for m in ('pydantic', 'fabfile.inventory.schema') if m in sys.modules), "
            "inv.default_host().name)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg-cache")}
    runs = [subprocess.run([sys.executable, "-c", code, str(full)], cwd=ROOT, env=env, capture_output=True,
                           text=True, check=True).stdout.split("\n")[0] for _ in range(2)]
    assert runs == ["['fabfile.inventory.schema', 'pydantic'] n0", "[] n0"]


def test_an_edit_is_validated_again_with_the_same_error(full: Path, cache_home: Path) -> None:
    inventory.load(full, cache=True)
    full.write_text(FULL.replace("port: 9000", "port: 90000"))
    with pytest.raises(InventoryError) as cached:
        inventory.load(full, cache=True)
    with pytest.raises(InventoryError) as plain:
        inventory.load(full)
    assert cached.value.message == plain.value.message
    assert plain.value.message.endswith("defaults.port: must be a TCP port between 1 and 65535")
    assert len(_entries(cache_home)) == 1  # a refused file is never cached


def test_named_files_are_checked_on_every_load(full: Path, cache_home: Path) -> None:
    inventory.load(full, cache=True)
    (full.parent / "known_hosts").unlink()
    with pytest.raises(InventoryError) as cached:
        inventory.load(full, cache=True)
    with pytest.raises(InventoryError) as plain:
        inventory.load(full)
    assert cached.value.message == plain.value.message
    assert cached.value.message.endswith(f"known_hosts: file {full.parent / 'known_hosts'} does not exist")


@pytest.mark.parametrize("how", ["readable by others", "key of another file", "not json", "symlink"])
def test_a_cache_entry_that_is_not_trustworthy_is_ignored(full: Path, cache_home: Path, how: str) -> None:
    """A planted or damaged entry never becomes the inventory: the file is validated again."""
    inventory.load(full, cache=True)
    [entry] = _entries(cache_home)
    doc = json.loads(entry.read_text())
    doc["value"]["hosts"]["n0"]["python"] = "/tmp/evil/python3"
    if how == "key of another file":
        doc["key"] = "0" * 64
    text = "{not json" if how == "not json" else json.dumps(doc)
    entry.unlink()
    if how == "symlink":
        planted = cache_home.parent / "planted.json"
        planted.write_text(text)
        planted.chmod(0o600)
        entry.symlink_to(planted)
    else:
        entry.write_text(text)
        entry.chmod(0o644 if how == "readable by others" else 0o600)
    assert inventory.load(full, cache=True).hosts["n0"].python == "/opt/venv/bin/python3"
    # the full validation put its own entry in place of the bad one
    assert not entry.is_symlink() and entry.stat().st_mode & 0o777 == 0o600
    assert json.loads(entry.read_text())["value"]["hosts"]["n0"]["python"] == "/opt/venv/bin/python3"


def test_a_cache_directory_others_can_enter_is_not_used(full: Path, cache_home: Path) -> None:
    inventory.load(full, cache=True)
    cache_home.chmod(0o755)
    [entry] = _entries(cache_home)
    doc = json.loads(entry.read_text())
    doc["value"]["hosts"]["n0"]["python"] = "/tmp/evil/python3"
    entry.write_text(json.dumps(doc))
    assert inventory.load(full, cache=True).hosts["n0"].python == "/opt/venv/bin/python3"


def test_the_same_bytes_under_another_path_are_validated_for_that_path(full: Path, cache_home: Path,
                                                                       tmp_path: Path) -> None:
    """Relative ssh_config/known_hosts resolve against the file's folder: a copy elsewhere is its own entry."""
    inventory.load(full, cache=True)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "inventory.yaml").write_text(FULL)
    with pytest.raises(InventoryError, match=r"ssh_config: file .*elsewhere/ssh_config does not exist"):
        inventory.load(other / "inventory.yaml", cache=True)


def test_the_cache_key_covers_every_inventory_module_the_validation_reads() -> None:
    """The key hashes the validating modules' own bytes; schema.py came to read inventory/launch_flags.py (the
    flags refused in sglang_args), and a key without that file kept a stale verdict after the table changed."""
    import ast

    from tests.support.sources import nodes

    here = Path(inventory.__file__).resolve().parent
    hashed = next({e.value for e in n.elts if isinstance(e, ast.Constant)} for n in nodes(here / "hosts.py")
                  if isinstance(n, ast.Tuple) and any(isinstance(e, ast.Constant) and e.value == "schema.py"
                                                      for e in n.elts))
    read = {f"{n.module.rsplit('.', 1)[1]}.py" for name in hashed for n in nodes(here / str(name))
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("fabfile.inventory.")}
    assert read - {"cache.py"} <= hashed, read - hashed
