"""Simulated NCCL communicator init (TEST EQUIPMENT).

Prints, like NCCL 2.28 with ``NCCL_DEBUG=INFO``, the ``NCCL_*`` values this process really holds in
``os.environ`` at the moment of the call; a value set in-process (patch, plugin) is reported, one that
was stripped is not.
"""

from __future__ import annotations

import os
import random
import threading
from typing import Any

from sglang._sim.runtime import hostname, write_all

# Not NCCL parameters (NCCL reads them for its own logging, or they come from container images).
_NOT_PARAMS = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_VERSION", "NCCL_HOME"}
# Tuning parameters that NCCL only reads when it tunes, i.e. with two or more ranks.
_MULTI_RANK_ONLY = {"NCCL_PROTO", "NCCL_ALGO"}


def _subsys_enabled(name: str) -> bool:
    spec = os.environ.get("NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV")
    items = [s.strip().upper() for s in spec.split(",") if s.strip()]
    if items and items[0].startswith("^"):
        excluded = {items[0][1:], *items[1:]}
        return name not in excluded
    return "ALL" in items or name in items


def _fmt_value(value: str) -> str:
    v = value.strip()
    try:
        int(v, 0)
    except ValueError:
        return value
    return f"{v}."


def _open_sink(host: str) -> int:
    path = os.environ.get("NCCL_DEBUG_FILE")
    if not path:
        return 1
    path = path.replace("%h", host).replace("%p", str(os.getpid()))
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return 1


def simulate_comm_init(rank: int, nranks: int, cuda_dev: int, cfg: dict[str, Any]) -> dict[str, str]:
    """Simulate ncclCommInitRankConfig in this process; return the NCCL_* env NCCL 'read'."""
    seen = {k: v for k, v in os.environ.items() if k.startswith("NCCL_") and k not in _NOT_PARAMS}
    if os.environ.get("NCCL_DEBUG", "").strip().lower() != "info":
        return seen
    host = hostname(cfg)
    prefix = f"{host}:{os.getpid()}:{threading.get_native_id()} [{cuda_dev}] NCCL INFO "
    lines = [f"NCCL version {cfg.get('nccl_version', '2.28.9+cuda13.0')}"]
    if _subsys_enabled("ENV"):
        for key in sorted(seen):
            if key in _MULTI_RANK_ONLY and nranks <= 1:
                continue
            lines.append(f"{key} set by environment to {_fmt_value(seen[key])}")
    if _subsys_enabled("INIT"):
        comm = f"0x{random.getrandbits(32):x}"
        comm_id = f"0x{random.getrandbits(64):x}"
        bus = 0x18 + 0x10 * cuda_dev
        head = (
            f"ncclCommInitRankConfig comm {comm} rank {rank} nranks {nranks} cudaDev {cuda_dev} "
            f"nvmlDev {cuda_dev} busId {bus:x}000 commId {comm_id}"
        )
        lines.append(f"{head} - Init START")
        lines.append(f"{head} - Init COMPLETE")
    fd = _open_sink(host)
    try:
        for line in lines:
            write_all(fd, (prefix + line + "\n").encode())
    finally:
        if fd != 1:
            os.close(fd)
    return seen
