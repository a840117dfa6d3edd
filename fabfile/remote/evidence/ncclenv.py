"""How NCCL (``NCCL_KNOWN``) reads and echoes its environment variables: the rules check-env judges evidence by.

Runs on the GPU host too (stdlib only, Python 3.9+). Learnt from NCCL's own source (``src/misc/param.cc``,
``src/include/param.h``, ``src/graph/paths.cc``, ``src/graph/tuning.cc``, ``src/transport/*``), not copied:

* Integer parameters (``NCCL_PARAM``) are read lazily, once per process, with C ``strtoll(str, NULL, 0)``
  (leading blanks, optional sign, ``0x`` hex, a leading ``0`` makes it octal, the longest valid prefix counts,
  no digits at all gives 0); NCCL then prints ``NAME set by environment to %lld.``: the parsed number and a dot.
  An out-of-range number is refused (``Invalid value ... using default``). An empty value counts as unset.
* ``NCCL_P2P_LEVEL`` (and ``NCCL_NET_GDR_LEVEL``) go through ``ncclGetLevel``: an exact, case-sensitive match
  of a path name (LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS), else, when the value starts with a digit,
  an old-style number (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS). NCCL prints the *name*; a value it cannot
  map (``sys``) is ignored without a word. ``NCCL_P2P_DISABLE=1`` wins over the level, which is then not read.
* ``NCCL_PROTO`` / ``NCCL_ALGO`` are read (and echoed verbatim) only when a communicator has two or more ranks.
* Many variables are read only on some paths (InfiniBand connections, network transport, CUDA graph capture,
  multi-node NVLink...): NCCL's silence about them proves nothing.

The verdicts built on this are in ``evidence.evaluate`` and in the README's check-env section.
"""

from __future__ import annotations

import re

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# The NCCL release whose source the tables below were read from (src/misc/param.cc, src/init.cc, ...): what the
# tool knows NCCL reads. Every sentence that says which NCCL it judges by names it from here (the version of the
# NCCL a host runs is read from its wheel: ``facts``).
NCCL_KNOWN = "2.28.9"
NCCL_KNOWN_SERIES = ".".join(NCCL_KNOWN.split(".")[:2])  # "2.28", as the sentences say it

# Every NCCL_PARAM of NCCL_KNOWN (integer parameters: echoed as "%lld." when read).
INT_PARAMS = frozenset(
    "NCCL_" + n
    for n in """
    ALLOC_P2P_NET_LL_BUFFERS BUFFSIZE CGA_CLUSTER_SIZE CHECK_POINTERS CHUNK_SIZE COLLNET_ENABLE
    COLLNET_NODE_THRESHOLD COMM_BLOCKING COMM_SHRINK_SHARE_RESOURCES COMM_SPLIT_SHARE_RESOURCES
    CONNECT_ROUND_MAX_PEERS CREATE_THREAD_CONTEXT CROSS_NIC CTA_POLICY CUMEM_ENABLE CUMEM_HOST_ENABLE
    DMABUF_ENABLE GDRCOPY_ENABLE GDRCOPY_FIFO_ENABLE GDRCOPY_FLUSH_ENABLE GDRCOPY_SYNC_ENABLE GDR_FLUSH_DISABLE
    GIN_COUNTER_POOL_SIZE GIN_ENABLE GIN_ERROR_QUERY_SEC GIN_GDAKI_NIC_HANDLER GIN_GDAKI_QP_DEPTH GIN_NCONTEXTS
    GIN_PROXY_QUEUE_SIZE GIN_SIGNAL_POOL_SIZE GIN_TYPE GRAPH_DUMP_FILE_RANK GRAPH_HELPER_DISABLE
    GRAPH_MIXING_SUPPORT GRAPH_REGISTER GROUP_CUDA_STREAM IB_ADAPTIVE_ROUTING IB_AR_THRESHOLD IB_DATA_DIRECT
    IB_DISABLE IB_ECE_ENABLE IB_FIFO_TC IB_GID_INDEX IB_MERGE_NICS IB_MERGE_VFS IB_MQP_RETRY_ALL IB_MQP_RETRY_CNT
    IB_MQP_RETRY_SLEEP_MSEC IB_PCI_RELAXED_ORDERING IB_PKEY IB_QPS_PER_CONNECTION IB_RETRY_CNT
    IB_RETURN_ASYNC_EVENTS IB_ROCE_VERSION_NUM IB_ROUTABLE_FLID_GID_INDEX IB_SL IB_SPLIT_DATA_ON_QPS IB_TC
    IB_TIMEOUT IB_USE_INLINE IB_WARN_RAIL_LOCAL IGNORE_CPU_AFFINITY IGNORE_DISABLED_P2P
    L1_SHARED_MEMORY_CARVEOUT LAUNCH_ORDER_IMPLICIT LAUNCH_RACE_FATAL LEGACY_CUDA_REGISTER LL128_BUFFSIZE
    LL128_C2C LL128_NTHREADS LL_BUFFSIZE LOCAL_REGISTER MAX_CTAS MAX_NCHANNELS MAX_NRINGS MAX_P2P_NCHANNELS
    MEM_SYNC_DOMAIN MIN_CTAS MIN_NCHANNELS MIN_NRINGS MIN_P2P_NCHANNELS MNNVL_CLIQUE_ID MNNVL_ENABLE
    MNNVL_RAIL_PER_HOST MNNVL_SCATTER_NETS_ENABLE MNNVL_UUID NCHANNELS_PER_NET_PEER NET_DISABLE_INTRA
    NET_FORCE_FLUSH NET_GDR_C2C NET_GDR_READ NET_OPTIONAL_RECV_COMPLETION NET_OVERHEAD NET_PLUGIN_REF_COUNT
    NET_SHARED_BUFFERS NET_SHARED_COMMS NSOCKS_PERTHREAD NTHREADS NVB_DISABLE NVB_PRECONNECT
    NVLINK_UTIL_CENTRIC_SCHED_ENABLE NVLSTREE_MAX_CHUNKSIZE NVLS_CHUNKSIZE NVLS_ENABLE NVLS_NCHANNELS
    NVTX_DISABLE OOB_NET_ENABLE P2P_DIRECT_DISABLE P2P_LL_THRESHOLD P2P_NET_CHUNKSIZE P2P_NVL_CHUNKSIZE
    P2P_PCI_CHUNKSIZE P2P_PXN_LEVEL P2P_READ_ENABLE P2P_SCHEDULE_GROUP_SIZE P2P_USE_CUDA_MEMCPY PAT_ENABLE
    PROGRESS_APPENDOP_FREQ PROXY_APPEND_BATCH_SIZE PROXY_DUMP_SIGNAL PXN_C2C PXN_DISABLE RAS_ENABLE
    RAS_TIMEOUT_FACTOR REPORT_CONNECT_PROGRESS RUNTIME_CONNECT SET_CPU_STACK_SIZE SET_STACK_SIZE SET_THREAD_NAME
    SHM_DISABLE SHM_LOCALITY SHM_MEMCPY_MODE SHM_USE_CUDA_MEMCPY SINGLE_PROC_MEM_REG_ENABLE SOCKET_INLINE
    SOCKET_MIN_TASKSIZE SOCKET_NTHREADS SOCKET_RCVBUF SOCKET_RETRY_CNT SOCKET_RETRY_SLEEP_MSEC
    SOCKET_SNDBUF SYM_CTAS TOPO_DUMP_FILE_RANK UID_STAGGER_RATE UID_STAGGER_THRESHOLD UNPACK_DOUBLE_NCHANNELS
    WIN_ENABLE WIN_STRIDE WORK_ARGS_BYTES WORK_FIFO_BYTES
    """.split()  # noqa: SIM905 (a word list reads better than 150 quoted strings)
)
# Read with ncclGetLevel: printed as a path name.
LEVEL_VARS = frozenset({"NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"})
LEVEL_NAMES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
# String variables NCCL echoes verbatim ("set by environment to %s") when it reads them.
STRING_VARS = frozenset(
    {
        "NCCL_PROTO", "NCCL_ALGO", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_COMM_ID", "NCCL_TOPO_FILE",
        "NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_FILE", "NCCL_GRAPH_DUMP_FILE", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN",
        "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN", "NCCL_HOSTID", "NCCL_LAUNCH_MODE", "NCCL_THREAD_THRESHOLDS",
        "NCCL_NETDEVS_POLICY", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE",
    }
)
# Read by NCCL's logger, never echoed with "set by environment".
LOGGING_VARS = frozenset(
    {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_FORMAT",
     "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_WARN_ENABLE_DEBUG_INFO"}
)
# Not NCCL parameters at all (container images set them; NCCL_CONF_FILE is read before the logger exists).
NOT_PARAMS = frozenset({"NCCL_VERSION", "NCCL_HOME", "NCCL_CONF_FILE"})

# Read at every communicator init, whatever the rank count: NCCL echoes them in every process that inits NCCL.
READ_AT_INIT = frozenset(
    {
        "NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE", "NCCL_NTHREADS", "NCCL_LL128_NTHREADS",
        "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS", "NCCL_CUMEM_ENABLE",
        "NCCL_NVLS_ENABLE", "NCCL_P2P_LEVEL", "NCCL_SOCKET_IFNAME",
    }
)
# Read at every init of a communicator with two or more ranks (NCCL skips tuning for one rank).
READ_AT_MULTI_RANK_INIT = frozenset({"NCCL_PROTO", "NCCL_ALGO"})

# Read only on some paths: (prefix or name, condition). The first match wins.
_CONDITIONS: tuple[tuple[str, str], ...] = (
    ("NCCL_IB_", "only over InfiniBand connections (network traffic between nodes on an IB fabric)"),
    ("NCCL_NET_GDR_LEVEL", "only for network (inter-node) transport with GPU Direct RDMA"),
    ("NCCL_NET_", "only for network (inter-node) transport"),
    ("NCCL_CROSS_NIC", "only when NCCL searches network paths (inter-node)"),
    ("NCCL_NCHANNELS_PER_NET_PEER", "only for network (inter-node) transport"),
    ("NCCL_SOCKET_NTHREADS", "only for the socket network transport (inter-node without IB)"),
    ("NCCL_NSOCKS_PERTHREAD", "only for the socket network transport (inter-node without IB)"),
    ("NCCL_P2P_NET_CHUNKSIZE", "only for communicators spanning nodes"),
    ("NCCL_P2P_NVL_CHUNKSIZE", "only for all-NVLink single-node communicators"),
    ("NCCL_P2P_PCI_CHUNKSIZE", "only for single-node communicators that are not all-NVLink"),
    ("NCCL_SHM_", "only when two ranks on one node cannot use P2P"),
    ("NCCL_P2P_DISABLE", "NCCL prints it only when it is 1"),
    ("NCCL_GRAPH_", "only when SGLang captures a CUDA graph with NCCL in it"),
    ("NCCL_MNNVL_", "only on multi-node NVLink systems"),
    ("NCCL_COLLNET_", "only with CollNet (SHARP) networks"),
    ("NCCL_GDRCOPY_", "only when GDRCopy is in use"),
    ("NCCL_GIN_", "only with GPU-initiated networking"),
)


def strtoll(text: str) -> int | None:
    """C ``strtoll(text, NULL, 0)`` as NCCL calls it; None where it sets errno (out of range)."""
    s = text.lstrip(" \t\n\v\f\r")
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s[:2].lower() == "0x" and s[2:3] and s[2:3] in "0123456789abcdefABCDEF":
        base, digits_ok, s = 16, "0123456789abcdefABCDEF", s[2:]
    elif s[:1] == "0":
        base, digits_ok = 8, "01234567"
    else:
        base, digits_ok = 10, "0123456789"
    n = 0
    while n < len(s) and s[n] in digits_ok:
        n += 1
    value = sign * int(s[:n], base) if n else 0
    if value > INT64_MAX or value < INT64_MIN:
        return None
    return value


def level_name(text: str) -> str | None:
    """The path name ``ncclGetLevel`` makes of ``text``, or None when NCCL ignores it."""
    if text in LEVEL_NAMES:
        return text
    if text and text[0] in "0123456789":
        old = strtoll(text)  # NCCL: strtol(str, NULL, 0), clamped to the last old level
        index = len(_OLD_LEVELS) - 1 if old is None else min(old, len(_OLD_LEVELS) - 1)
        return _OLD_LEVELS[index]
    return None


def kind(var: str) -> str:
    """``int``, ``level``, ``string``, ``logging``, ``not_param`` or ``unknown`` (not a variable NCCL
    ``NCCL_KNOWN`` reads)."""
    if var in LEVEL_VARS:
        return "level"
    if var in INT_PARAMS:
        return "int"
    if var in STRING_VARS:
        return "string"
    if var in LOGGING_VARS:
        return "logging"
    if var in NOT_PARAMS:
        return "not_param"
    return "unknown"


def reading(var: str, raw: str) -> dict[str, str | None]:
    """What NCCL makes of ``var=raw``: ``{"value": canonical or None, "printed": echo text or None, "why": ...}``.

    ``value`` None means NCCL ignores the value (keeps its default); ``printed`` is what follows
    "set by environment to " in its log, None when it prints nothing for this value.
    """
    k = kind(var)
    if raw == "" and k in ("int", "level"):
        return {"value": None, "printed": None, "why": "an empty value counts as unset"}
    if k == "int":
        n = strtoll(raw)
        if n is None:
            return {"value": None, "printed": None, "why": f"{raw!r} is out of range for a 64-bit integer"}
        return {"value": str(n), "printed": f"{n}.", "why": None}
    if k == "level":
        name = level_name(raw)
        if name is None:
            return {
                "value": None,
                "printed": None,
                "why": f"{raw!r} is not a level NCCL knows: it matches {', '.join(LEVEL_NAMES)} case-sensitively, "
                "or a number",
            }
        return {"value": name, "printed": name, "why": None}
    return {"value": raw, "printed": raw, "why": None}


_NUMERIC_RE = re.compile(r"^\s*[+-]?(?:0[xX][0-9a-fA-F]+|\d+)(?:\.0*)?\s*$")


def same(var: str, a: str | None, b: str | None) -> bool:
    """Whether NCCL ends up with the same value from ``a`` and ``b`` (either may be a log echo like ``16777216.``)."""
    if a is None or b is None:
        return False
    k = kind(var)
    if k in ("int", "level"):
        ra, rb = reading(var, a)["value"], reading(var, b)["value"]
        return ra is not None and ra == rb
    if a == b:
        return True
    if k == "unknown" and _NUMERIC_RE.match(a) and _NUMERIC_RE.match(b):
        return strtoll(a) == strtoll(b)
    return False


def read_when(var: str) -> tuple[str, str | None]:
    """When NCCL reads (and so echoes) ``var``: ``("init", None)``, ``("multi_rank", None)``,
    ``("conditional", why)``, ``("never", why)`` or ``("unknown", why)``."""
    if var in READ_AT_INIT:
        return "init", None
    if var in READ_AT_MULTI_RANK_INIT:
        return "multi_rank", None
    if var in LOGGING_VARS:
        return "never", "NCCL reads it for its own logging and never echoes it"
    if var in NOT_PARAMS:
        return "never", "not an NCCL parameter"
    for prefix, why in _CONDITIONS:
        if var.startswith(prefix):
            return "conditional", f"NCCL reads {var} {why}" if not why.startswith("NCCL ") else why
    if kind(var) == "unknown":
        return "unknown", f"{var} is not a variable NCCL {NCCL_KNOWN_SERIES} reads (check the spelling)"
    return "conditional", f"NCCL reads {var} only on some code paths, not at every communicator init"


# ----------------------------------------------------------------------------------------------------
# NCCL_PROTO / NCCL_ALGO: which protocols and algorithms a value leaves NCCL's tuner (src/graph/tuning.cc,
# parseList). Read, not copied: entries are separated by ';'; only the first may lack a function prefix
# (``allreduce:``, case-insensitive, NCCL >= 2.24; before that the value is a bare list); a list starting with
# '^' disables what it names and enables the rest, else it enables only what it names; names are matched
# case-insensitively and an unknown name makes the communicator's init fail (``ncclInvalidUsage``), so the
# server would not start. A prefixed entry replaces that function's list only. An explicit LL128 is used
# even where NCCL would not enable it by default (LL128 is on by default only over NVLink-class paths).

FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
SELECTION_VARS = {"NCCL_PROTO": PROTOCOLS, "NCCL_ALGO": ALGORITHMS}
# The first NCCL release whose parseList takes per-collective entries (``allreduce:^LL``).
PER_COLLECTIVE_SINCE = (2, 24)
PER_COLLECTIVE_SINCE_TEXT = ".".join(map(str, PER_COLLECTIVE_SINCE))  # "2.24", as the sentences say it


class SelectionError(ValueError):
    """A NCCL_PROTO / NCCL_ALGO value NCCL refuses (its init fails): the message names what is wrong."""


def selection(var: str, value: str, nccl: tuple[int, int] | None = None) -> dict[str, frozenset[str]]:
    """What ``var=value`` leaves enabled per function, as NCCL's parseList reads it: ``{func: {names}}``.

    ``nccl``: the NCCL release (major, minor) when known: per-collective entries need ``PER_COLLECTIVE_SINCE``. Raises
    :class:`SelectionError` for a value NCCL refuses."""
    names = SELECTION_VARS[var]
    enabled: dict[str, set[str]] = {f: set(names) for f in FUNCS}
    entries = value.split(";")
    for i, entry in enumerate(entries):
        if entry == "" and i > 0:
            continue  # strtok skips empty tokens
        prefix, sep, items = entry.partition(":")
        if not sep or not items.strip(":"):  # "allreduce:" reads as the bare list "allreduce", as strtok does
            entry = prefix
            prefix, items = "", entry
            if i > 0:
                raise SelectionError(f"{var}={value!r}: every entry after the first needs a collective prefix "
                                     "(allreduce:...)")
        elif nccl is not None and nccl < PER_COLLECTIVE_SINCE:
            raise SelectionError(f"{var}={value!r}: per-collective entries (allreduce:...) need NCCL "
                                 f"{PER_COLLECTIVE_SINCE_TEXT} or later; this host has {nccl[0]}.{nccl[1]}")
        funcs = [f for f in FUNCS if not prefix or f.lower() == prefix.lower()]
        if not funcs:
            raise SelectionError(f"{var}={value!r}: {prefix!r} is not a collective NCCL knows "
                                 f"({', '.join(FUNCS)})")
        invert = items.startswith("^")
        chosen: set[str] = set()
        for item in (items[1:] if invert else items).split(","):
            if item == "":
                continue
            match = next((n for n in names if n.lower() == item.lower()), None)
            if match is None:
                raise SelectionError(f"{var}={value!r}: {item!r} is not a name NCCL knows ({', '.join(names)})")
            chosen.add(match)
        for f in funcs:
            enabled[f] = set(names) - chosen if invert else chosen
    return {f: frozenset(v) for f, v in enabled.items()}


def nccl_release(version: str | None) -> tuple[int, int] | None:
    """``2.28.9+cuda13.0`` → (2, 28); None when it is not an NCCL version."""
    m = re.match(r"^\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None
