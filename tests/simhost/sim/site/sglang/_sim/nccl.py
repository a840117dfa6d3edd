"""Simulated NCCL communicator init (TEST EQUIPMENT).

Prints, like NCCL 2.28 with ``NCCL_DEBUG=INFO``, the ``NCCL_*`` values this process really holds in
``os.environ`` at the moment of the call, the way NCCL echoes them: only variables NCCL reads at a single-node
communicator init, integers as ``strtoll`` parsed them plus a dot (``16777216.``), ``NCCL_P2P_LEVEL`` as the
level name (``5`` → ``SYS``; ``sys`` is ignored without a word), ``NCCL_PROTO``/``NCCL_ALGO`` only with two or
more ranks. A value set in-process (patch, plugin) is reported, one that was stripped is not.
"""

from __future__ import annotations

import os
import random
import threading
from typing import Any

from sglang._sim.runtime import hostname, write_all

# What NCCL 2.28 reads at a communicator init on one node, and how it echoes it (NCCL's src/misc/param.cc,
# src/graph/paths.cc, src/graph/tuning.cc). Everything else NCCL reads only on paths a single-node simulated
# server never takes (InfiniBand, network transport, CUDA graph capture...), so it prints nothing for them.
_INT_AT_INIT = {
    "NCCL_BUFFSIZE": -2, "NCCL_LL_BUFFSIZE": -2, "NCCL_LL128_BUFFSIZE": -2, "NCCL_NTHREADS": -2,
    "NCCL_LL128_NTHREADS": -2, "NCCL_MAX_NCHANNELS": -2, "NCCL_MIN_NCHANNELS": -2, "NCCL_MAX_CTAS": -2147483648,
    "NCCL_MIN_CTAS": -2147483648, "NCCL_CUMEM_ENABLE": -2, "NCCL_NVLS_ENABLE": 2,
}  # name -> NCCL's default (printed when a value is refused)
# Read verbatim when a communicator has two or more ranks (NCCL skips tuning for one rank).
_STRINGS_MULTI_RANK = ("NCCL_PROTO", "NCCL_ALGO")
_STRINGS_AT_INIT = ("NCCL_SOCKET_IFNAME",)
_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
# Integer parameters are read once per process (NCCL caches them); strings at every communicator init.
_ECHOED_ONCE: set[str] = set()


def _subsys_enabled(name: str) -> bool:
    spec = os.environ.get("NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV")
    items = [s.strip().upper() for s in spec.split(",") if s.strip()]
    if items and items[0].startswith("^"):
        excluded = {items[0][1:], *items[1:]}
        return name not in excluded
    return "ALL" in items or name in items


def _strtoll(text: str) -> int | None:
    """C strtoll(text, NULL, 0); None on overflow (errno ERANGE)."""
    s = text.lstrip(" \t\n\v\f\r")
    neg = s[:1] == "-"
    if s[:1] in "+-" and s[:1]:
        s = s[1:]
    if s[:2] in ("0x", "0X") and s[2:3] and s[2:3] in "0123456789abcdefABCDEF":
        s, base, ok = s[2:], 16, "0123456789abcdefABCDEF"
    elif s[:1] == "0":
        base, ok = 8, "01234567"
    else:
        base, ok = 10, "0123456789"
    end = 0
    while end < len(s) and s[end] in ok:
        end += 1
    n = int(s[:end], base) if end else 0
    n = -n if neg else n
    return n if -(1 << 63) <= n < (1 << 63) else None


def _int_line(name: str, raw: str) -> str | None:
    if not raw:
        return None  # an empty value counts as unset
    n = _strtoll(raw)
    if n is None:
        return f"Invalid value {raw} for {name}, using default {_INT_AT_INIT[name]}."
    return f"{name} set by environment to {n}."


def _p2p_lines() -> list[str]:
    """ncclGetLevel("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"): the disable flag first, then the level by name
    (case-sensitive) or old-style number; an unknown level is ignored without a word."""
    disable = os.environ.get("NCCL_P2P_DISABLE")
    if disable is not None and (_strtoll(disable) or 0) == 1:
        return ["NCCL_P2P_DISABLE set by environment to 1"]
    raw = os.environ.get("NCCL_P2P_LEVEL")
    if raw is None:
        return []
    level = raw if raw in _LEVELS else None
    if level is None and raw[:1] and raw[:1] in "0123456789":
        old = _strtoll(raw)
        level = _OLD_LEVELS[len(_OLD_LEVELS) - 1 if old is None else min(old, len(_OLD_LEVELS) - 1)]
    return [f"NCCL_P2P_LEVEL set by environment to {level}"] if level else []


def _env_lines(nranks: int) -> list[str]:
    lines: list[str] = []
    if "NCCL_P2P_LEVEL" not in _ECHOED_ONCE:
        _ECHOED_ONCE.add("NCCL_P2P_LEVEL")
        lines += _p2p_lines()
    for name in _INT_AT_INIT:
        if name in os.environ and name not in _ECHOED_ONCE:
            _ECHOED_ONCE.add(name)
            line = _int_line(name, os.environ[name])
            if line:
                lines.append(line)
    for name in _STRINGS_AT_INIT + (_STRINGS_MULTI_RANK if nranks > 1 else ()):
        if name in os.environ:
            lines.append(f"{name} set by environment to {os.environ[name]}")
    return lines


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
    seen = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    if os.environ.get("NCCL_DEBUG", "").strip().upper() not in ("INFO", "TRACE"):
        return seen
    host = hostname(cfg)
    prefix = f"{host}:{os.getpid()}:{threading.get_native_id()} [{cuda_dev}] NCCL INFO "
    lines = [f"NCCL version {cfg.get('nccl_version', '2.28.9+cuda13.0')}"]
    env_lines = _env_lines(nranks)  # NCCL reads them whatever it logs
    if _subsys_enabled("ENV"):
        lines += env_lines
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
