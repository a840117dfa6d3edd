"""Inventory: the YAML file that names hosts and how to run SGLang on them, validated before any connection.

This is the door: ``load(path)`` returns an ``Inventory`` (from the CLI's cache of validated files when it can, else
through ``schema`` and ``resolve``), and every inventory value is importable from here by name; they are defined
in ``values``. Layering, lowest first: built-in NCCL presets < ``presets.nccl`` < ``defaults`` <
``groups.<g>.defaults`` < host (``resolve``). Every error names the file and the field, in one line, and nothing is
touched on any host (exit 2).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fabfile.errors import InventoryError, several
from fabfile.inventory.resolve import Problems, build, check_files
from fabfile.inventory.values import (
    BUILTIN_NCCL_PRESETS,
    DEFAULT_ACCEPT_GATE,
    DEFAULT_LOG_DIR,
    MAX_DRAFT_TOKENS,
    MAX_INVENTORY_BYTES,
    Cluster,
    Host,
    Inventory,
    NodeRole,
    Router,
    Speculative,
    Timeouts,
    check_speculative,
)

__all__ = ["BUILTIN_NCCL_PRESETS", "DEFAULT_ACCEPT_GATE", "DEFAULT_LOG_DIR", "MAX_DRAFT_TOKENS", "MAX_INVENTORY_BYTES",
           "Cluster", "Host", "Inventory", "NodeRole", "Router", "Speculative", "Timeouts", "check_speculative",
           "find", "load", "one_host", "with_lock_wait"]


def load(path: str | Path, *, cache: bool = False) -> Inventory:
    """Read and validate an inventory file; raise :class:`InventoryError` naming the file and the field.

    ``cache`` (the CLI): reuse the result of an earlier validation of exactly these bytes (see :func:`_cache_key`),
    which spares each command the ~80 ms of importing PyYAML and pydantic and building the schema. A file is
    validated in full whenever its bytes, its path, this code or those libraries changed; errors are never cached,
    and the files the inventory names are checked for existence on every load, as without the cache.
    """
    try:
        return _load(path, cache)
    except InventoryError as e:
        # One line each, always: a key or value with a newline or control character in it is shown escaped.
        for one in e.each or (e,):
            one.message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in one.message)
            one.args = (one.message,)
        if e.each:
            e.message = "\n".join(one.message for one in e.each)
            e.args = (e.message,)
        raise


def _load(path: str | Path, cache: bool) -> Inventory:
    p = Path(path).expanduser()
    if not p.is_file():
        what = "is not a regular file" if p.exists() else "does not exist"
        raise InventoryError(f"inventory file {p} {what}", "pass --inventory PATH or create inventory.yaml")
    try:
        if p.stat().st_size > MAX_INVENTORY_BYTES:
            raise InventoryError(f"{p}: larger than {MAX_INVENTORY_BYTES >> 20} MiB; an inventory is a short file")
        data = p.read_bytes()
    except OSError as e:
        raise InventoryError(f"{p}: cannot read: {e.strerror}") from None
    key = _cache_key(p, data) if cache else None
    if key is not None:
        from fabfile.inventory import cache as store

        found = _from_doc(store.lookup("inventory", key))
        if found is not None:
            try:
                check_files(found.ssh_config, found.known_hosts)
            except ValueError as e:
                raise InventoryError(f"{p}: {e}") from None
            return found
    from fabfile.inventory import schema

    raw = schema.read(p, data)
    if not isinstance(raw, dict):
        raise InventoryError(f"{p}: the top level must be a mapping with a `hosts:` key")
    try:
        inv = build(p, raw)
    except schema.InvalidField as e:
        # every bad field at once, one line each (a file is fixed in one go, not one run per field)
        raise several([InventoryError(f"{p}: {line}") for line in schema.pydantic_messages(e, "")]) from None
    except Problems as e:
        raise several([InventoryError(f"{p}: {line}") for line in e.lines]) from None
    except ValueError as e:
        raise InventoryError(f"{p}: {e}") from None
    if key is not None:
        doc = _to_doc(inv)
        if _from_doc(json.loads(json.dumps(doc))) == inv:  # only what comes back identical is worth keeping
            store.store("inventory", key, doc)
    return inv


# -- the cache of validated inventories (the CLI's fast path) -----------------------------------------------------
CACHE_FORMAT = "1"


def _cache_key(p: Path, data: bytes) -> str | None:
    """What a validated inventory depends on: the file's bytes, its path as given (relative paths in it resolve
    against its folder, and the working directory), HOME (``~`` in ssh_config/known_hosts), the code that validates
    it, and the PyYAML and pydantic installed (their files' size and time). None: no key, no cache."""
    import hashlib
    import importlib.util

    h = hashlib.sha256()
    try:
        parts = [CACHE_FORMAT, str(p), os.getcwd(), os.path.expanduser("~")]
        here = Path(__file__).resolve().parent
        for name in ("hosts.py", "values.py", "resolve.py", "schema.py", "launch_flags.py"):
            h.update(hashlib.sha256((here / name).read_bytes()).digest())
        for lib in ("yaml", "pydantic"):
            spec = importlib.util.find_spec(lib)
            if spec is None or spec.origin is None:
                return None
            st = os.stat(spec.origin)
            parts.append(f"{spec.origin}:{st.st_size}:{st.st_mtime_ns}")
    except (OSError, ValueError, ImportError):
        return None
    for part in parts:
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    h.update(data)
    return h.hexdigest()


def _to_doc(inv: Inventory) -> dict[str, Any]:
    return {"path": str(inv.path), "hosts": {n: asdict(h) for n, h in inv.hosts.items()},
            "groups": {g: list(m) for g, m in inv.groups.items()},
            "ssh_config": None if inv.ssh_config is None else str(inv.ssh_config),
            "known_hosts": None if inv.known_hosts is None else str(inv.known_hosts),
            "clusters": {n: asdict(c) for n, c in inv.clusters.items()},
            "routers": {n: asdict(r) for n, r in inv.routers.items()}, "nccl_presets": inv.nccl_presets}


def _from_doc(d: Any) -> Inventory | None:
    """The inventory a document of :func:`_to_doc` holds; None for anything else (an older format, say)."""
    if not isinstance(d, dict):
        return None
    try:
        hosts = {n: Host(**{**h, "speculative": Speculative(**h["speculative"]), "timeouts": Timeouts(**h["timeouts"]),
                            "sglang_args": tuple(h["sglang_args"]), "secret_env": tuple(h["secret_env"]),
                            "quiet_notes": tuple(h.get("quiet_notes") or ()), "node": None})
                 for n, h in d["hosts"].items()}
        return Inventory(
            path=Path(d["path"]), hosts=hosts, groups={g: tuple(m) for g, m in d["groups"].items()},
            ssh_config=None if d["ssh_config"] is None else Path(d["ssh_config"]),
            known_hosts=None if d["known_hosts"] is None else Path(d["known_hosts"]),
            clusters={n: Cluster(**{**c, "hosts": tuple(c["hosts"])}) for n, c in d["clusters"].items()},
            routers={n: Router(**{**r, "members": tuple(r["members"]), "args": tuple(r["args"])})
                     for n, r in d["routers"].items()},
            nccl_presets={n: dict(v) for n, v in d["nccl_presets"].items()})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None




def find(path: str | None) -> Inventory:
    """The inventory a command reads: ``--inventory PATH``, else $SPECDEPLOY_INVENTORY, else ./inventory.yaml (from
    the cache of validated files when it can); none of them is an InventoryError saying which three were tried."""
    chosen = path or os.environ.get("SPECDEPLOY_INVENTORY")
    if chosen is None and not os.path.exists("inventory.yaml"):
        raise InventoryError(f"no inventory: no --inventory, $SPECDEPLOY_INVENTORY is not set, and {os.getcwd()} "
                             "has no inventory.yaml", "pass --inventory PATH, export SPECDEPLOY_INVENTORY=PATH, or "
                             "run in the folder that holds inventory.yaml")
    return load(chosen or "inventory.yaml", cache=True)


def with_lock_wait(inv: Inventory, seconds: float | None) -> Inventory:
    """``--lock-wait SECONDS`` (0 = fail at once when another deploy holds the host) over every host's
    ``timeouts.lock_wait``; None leaves the inventory's."""
    from dataclasses import replace

    if seconds is None:
        return inv
    return replace(inv, hosts={n: replace(h, timeouts=replace(h.timeouts, lock_wait=seconds))
                               for n, h in inv.hosts.items()})


def one_host(inv: Inventory, name: str | None, command: str) -> Host:
    """The one host ``--host`` names, for a command that works on one host at a time (a FlagError otherwise)."""
    from fabfile.errors import FlagError

    hosts = inv.select(name)
    if len(hosts) != 1:
        raise FlagError(f"--host: {command} works on one host at a time, got {len(hosts)} "
                        f"({', '.join(h.name for h in hosts)})")
    return hosts[0]
