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


def _subsys_enabled(name: str, env: Any = None) -> bool:
    spec = (os.environ if env is None else env).get("NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV")
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


# ---------------------------------------------------------------------------------------------- the tuner
# What NCCL 2.28's tuner does for an all-reduce, in the small (src/graph/tuning.cc, src/enqueue.cc): it estimates
# latency + bytes / bandwidth for every enabled (algorithm, protocol) and takes the fastest. LL moves 4 bytes of
# data per 8-byte store (about half the bandwidth, the lowest latency), Simple the opposite, LL128 in between
# (about 95 % of the bandwidth) and enabled by default only over NVLink-class paths. NCCL_PROTO / NCCL_ALGO limit
# the choice (parseList: ';'-separated, an optional collective prefix, '^' to exclude, names without case).
# Bandwidths and latencies below are the simulator's, of the order NCCL's tables give for one node.
_PROTOS = ("LL", "LL128", "Simple")
_ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
_BW_GBPS = {"pcie": 20.0, "nvlink": 300.0}  # Simple's bus bandwidth per path
_PROTO_BW = {"LL": 0.5, "LL128": 0.95, "Simple": 1.0}
_PROTO_LAT_US = {"LL": 6.0, "LL128": 9.0, "Simple": 25.0}
_ALGO_FACTOR = {"Ring": 1.0, "Tree": 1.15}  # a single-node tree is a chain: a little slower than the ring


def _enabled(var: str, names: tuple[str, ...], env: Any) -> set[str] | None:
    """The AllReduce entries of ``var`` (None: unset, everything NCCL enables by default)."""
    raw = env.get(var)
    if raw is None:
        return None
    enabled = set(names)
    for entry in (e for e in raw.split(";") if e):
        prefix, sep, items = entry.partition(":")
        if not sep or not items:
            prefix, items = "", entry
        if prefix and prefix.lower() != "allreduce":
            continue
        invert = items.startswith("^")
        chosen = {n for n in names for it in (items[1:] if invert else items).split(",") if it.lower() == n.lower()}
        enabled = set(names) - chosen if invert else chosen
    return enabled


def allreduce_us(nbytes: int, algo: str, proto: str, nranks: int, path: str) -> float:
    """Simulated time of one all-reduce of ``nbytes`` (a ring moves 2 (n-1)/n of the data)."""
    bw = _BW_GBPS.get(path, _BW_GBPS["pcie"]) * _PROTO_BW[proto] * 1e3 / _ALGO_FACTOR.get(algo, 1.0)  # bytes/us
    traffic = 2.0 * (nranks - 1) / max(nranks, 1) * nbytes
    return _PROTO_LAT_US[proto] * max(nranks - 1, 1) ** 0.5 + traffic / bw


def choose(nbytes: int, nranks: int, cfg: dict[str, Any], env: Any) -> tuple[str, str]:
    """(algorithm, protocol) NCCL's tuner picks for one all-reduce, under this process's NCCL_ALGO/NCCL_PROTO and
    a tuner plugin (``NCCL_TUNER_PLUGIN`` set: ``nccl_tuner_plugin_choice`` {"min_bytes", "algo", "proto"} wins
    over the cost table, as a real plugin may)."""
    path = str(cfg.get("interconnect", "pcie")).lower()
    protos = _enabled("NCCL_PROTO", _PROTOS, env)
    algos = _enabled("NCCL_ALGO", _ALGOS, env)
    plugin = cfg.get("nccl_tuner_plugin_choice") or {}
    if env.get("NCCL_TUNER_PLUGIN") and plugin and nbytes >= int(plugin.get("min_bytes", 0)):
        return str(plugin.get("algo", "Ring")), str(plugin.get("proto", "Simple"))
    proto_set = protos if protos is not None else {"LL", "Simple"} | ({"LL128"} if path == "nvlink" else set())
    algo_set = (algos if algos is not None else {"Ring", "Tree"}) & set(_ALGO_FACTOR)
    best = min(((allreduce_us(nbytes, a, p, nranks, path), a, p) for a in sorted(algo_set) for p in sorted(proto_set)),
               default=(0.0, "Ring", "Simple"))
    return best[1], best[2]


def tuning_lines(sizes: list[int], nranks: int, cfg: dict[str, Any], env: Any) -> list[str]:
    """NCCL 2.28's TUNING line for each all-reduce size (``AllReduce: N Bytes -> Algo X proto Y channel{Lo..Hi}=
    {a..b}``); empty unless NCCL_DEBUG=INFO|TRACE and TUNING is in NCCL_DEBUG_SUBSYS (NCCL's default INIT,
    BOOTSTRAP,ENV leaves it out)."""
    if env.get("NCCL_DEBUG", "").strip().upper() not in ("INFO", "TRACE") or not _subsys_enabled("TUNING", env):
        return []
    out = []
    for n in sizes:
        algo, proto = choose(n, nranks, cfg, env)
        hi = max(0, min(_strtoll(env.get("NCCL_MAX_CTAS") or env.get("NCCL_MAX_NCHANNELS") or "2") or 2,
                        1 + n // (512 << 10)) - 1)
        out.append(f"AllReduce: {n} Bytes -> Algo {algo} proto {proto} channel{{Lo..Hi}}={{0..{hi}}}")
    return out


def emit_tuning(pid: int, cuda_dev: int, sizes: list[int], nranks: int, cfg: dict[str, Any], env: Any) -> None:
    """Write the TUNING lines as rank 0's process ``pid`` would, with ``env`` the NCCL_* values that process's
    NCCL read (its prefix; its NCCL_DEBUG_FILE when set)."""
    lines = tuning_lines(sizes, nranks, cfg, env)
    if not lines:
        return
    host = hostname(cfg)
    prefix = f"{host}:{pid}:{pid} [{cuda_dev}] NCCL INFO "
    path = env.get("NCCL_DEBUG_FILE")
    fd = 1  # NCCL's default sink is stdout, which the launch sends to the server log
    if path:
        try:
            fd = os.open(path.replace("%h", host).replace("%p", str(pid)), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                         0o644)
        except OSError:
            fd = 1
    try:
        write_all(fd, "".join(prefix + line + "\n" for line in lines).encode())
    finally:
        if fd != 1:
            os.close(fd)


def allreduce_sizes(model_config: dict[str, Any], tokens: int) -> list[int]:
    """The all-reduces of one forward of ``tokens`` tokens: two per layer (attention and MLP outputs), each
    hidden × tokens × 2 bytes (bf16); a config without them reads as Kimi K2.5's hidden 7168 and 2 layers."""
    hidden = int(model_config.get("hidden_size") or 7168)
    layers = int(model_config.get("num_hidden_layers") or 2)
    return [hidden * tokens * 2] * (2 * layers)
