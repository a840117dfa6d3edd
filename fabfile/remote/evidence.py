"""Evidence that NCCL tuning variables reached every SGLang scheduler process (behind ``check-env``).

Runs on the GPU host (stdlib only). Three kinds of evidence, strongest first:

* ``nccl_log``: NCCL itself printed ``host:pid:tid [dev] NCCL INFO NCCL_X set by environment to VALUE``
  for that pid (needs ``NCCL_DEBUG=INFO``; read from the server log and from ``NCCL_DEBUG_FILE`` files).
  This is the proof that NCCL took the value, including values a patch or plugin set inside the process.
* ``marker``: the specdeploy patch/plugin code printed its
  ``[specdeploy] nccl-env ... pid=N set={..} kept={..}`` line from inside that very process.
* ``environ``: ``/proc/PID/environ``, the environment the process was *started* with. Blind to anything set
  in-process, and wiped to NULs by setproctitle unless ``SPT_NOENV=1`` was in the launch environment.

Launcher evidence is collected and reported separately and is never proof for a worker: the launch path
may strip the environment between the launcher and its spawned schedulers.

``gather`` is the agent verb (reads /proc, the log, nvidia-smi); ``evaluate`` is pure and importable by the
client.
"""

from __future__ import annotations

import glob
import os
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any

from . import gpus, ncclenv, procs, sglang_env_facts, versions
from .common import AgentError, EventSink
from .markers import parse_marker

SCHEMA = 1
LOG_CAP_BYTES = 64 << 20
DEBUG_FILE_CAP_BYTES = 16 << 20
DEBUG_FILES_MAX = 256
SMI_TIMEOUT_S = 10.0

# Which variables NCCL reads when, and how it parses and echoes them: fabfile/remote/ncclenv.py.
# Environment values we report from /proc (besides the expected ones); never the whole environment (secrets).
DIAG_VARS = ("SPT_NOENV", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "SGLANG_RUN_ID")

DRAFT_WORKER_NOTE = (
    "SGLang runs the EAGLE draft worker inside each scheduler process (it shares that process's "
    "environment and NCCL groups), so the scheduler rows cover the draft model too"
)

# ----------------------------------------------------------------------------------------------------
# NCCL lines

# host:pid:tid [dev] (optional "file:line" for WARN, "time file:line" for TRACE) NCCL LEVEL message
# The host cannot contain ':' so the pid is always the number right before ":tid [dev]": a log prefix
# (timestamps, "[2026-11-29 10:00:00 TP0]", "sglang[777]:") can never be taken for it.
_NCCL_HEAD_RE = re.compile(
    r"(?P<host>[A-Za-z0-9_.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>[^\]\s]*)\](?: \S+){0,2}? "
    r"NCCL (?P<level>INFO|WARN|TRACE|ABORT) ?"
)
_ENV_RE = re.compile(r"^(?P<var>NCCL_[A-Z0-9_]+) set by environment to (?P<value>.*?)\s*$")
# NCCL refused an integer it could not parse (out of range) and kept its default.
_INVALID_RE = re.compile(
    r"^Invalid value (?P<value>.*) for (?P<var>NCCL_[A-Z0-9_]+), using default (?P<default>-?\d+)\.?\s*$"
)
_VERSION_RE = re.compile(r"^NCCL version (?P<version>\S+)")
_INIT_RE = re.compile(r"\brank (?P<rank>\d+) nranks (?P<nranks>\d+)\b.*\bInit (?P<phase>START|COMPLETE)\b")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_INT_DOT_RE = re.compile(r"^[+-]?\d+\.$")
_CUSTOM_AR_OFF_RE = re.compile(r"custom ?all-?reduce is disabled", re.IGNORECASE)


def _clean_value(raw: str) -> str:
    """NCCL prints integer parameters as ``%ld.``: drop that period; keep strings (``LL``, ``SYS``) as-is."""
    v = raw.strip()
    if _INT_DOT_RE.match(v):
        return v[:-1]
    return v


def parse_nccl_records(line: str) -> list[dict[str, Any]]:
    """Every NCCL record on one physical line (interleaved output can put two on a line), in order.

    Each record: ``{"kind": "env"|"version"|"init"|"warn"|"other", "host", "pid", "tid", "dev", "level",
    "message"}``
    plus ``var``/``value`` (env), ``version`` (version), ``rank``/``nranks``/``phase`` (init). A message runs
    until the next NCCL header on the same line, so text from another pid is never attributed to this one.
    """
    if "\x1b" in line:  # colour codes from a log viewer or a wrapper
        line = _ANSI_RE.sub("", line)
    heads = list(_NCCL_HEAD_RE.finditer(line))
    out: list[dict[str, Any]] = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(line)
        msg = line[m.end() : end].strip()
        rec: dict[str, Any] = {
            "kind": "other",
            "host": m.group("host"),
            "pid": int(m.group("pid")),
            "tid": int(m.group("tid")),
            "dev": m.group("dev"),
            "level": m.group("level"),
            "message": msg,
        }
        if rec["level"] in ("WARN", "ABORT"):
            rec["kind"] = "warn"
        else:
            em = _ENV_RE.match(msg)
            vm = _VERSION_RE.match(msg)
            im = _INIT_RE.search(msg)
            bad = _INVALID_RE.match(msg)
            if bad:
                rec.update(kind="invalid", var=bad.group("var"), value=bad.group("value"),
                           default=bad.group("default"))
            elif em:
                value = _clean_value(em.group("value"))
                if value:
                    rec.update(kind="env", var=em.group("var"), value=value)
            elif vm:
                rec.update(kind="version", version=vm.group("version"))
            elif im:
                rec.update(
                    kind="init",
                    rank=int(im.group("rank")),
                    nranks=int(im.group("nranks")),
                    phase=im.group("phase"),
                )
        out.append(rec)
    return out


def parse_nccl_line(line: str) -> dict[str, Any] | None:
    """The first recognised NCCL record on ``line`` (env / version / init / warn), or None.

    ``vm:444:444 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.`` →
    ``{"kind": "env", "pid": 444, "var": "NCCL_BUFFSIZE", "value": "16777216", ...}``.
    """
    for rec in parse_nccl_records(line):
        if rec["kind"] != "other":
            return rec
    return None



# ----------------------------------------------------------------------------------------------------
# reading logs


class _PidEvidence:
    """NCCL records and markers collected for one pid across the log and the NCCL_DEBUG_FILE files."""

    def __init__(self) -> None:
        self.env: dict[str, list[str]] = {}
        self.invalid: dict[str, str] = {}
        self.version: str | None = None
        self.inits: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.lines = 0
        self.sources: list[str] = []
        self.markers: list[dict[str, Any]] = []

    def add_nccl(self, rec: dict[str, Any], source: str) -> None:
        self.lines += 1
        if source not in self.sources:
            self.sources.append(source)
        kind = rec["kind"]
        if kind == "env":
            vals = self.env.setdefault(rec["var"], [])
            if rec["value"] not in vals:
                vals.append(rec["value"])
        elif kind == "invalid":
            self.invalid[rec["var"]] = rec["value"]
        elif kind == "version":
            self.version = rec["version"]
        elif kind == "init":
            item = {"rank": rec["rank"], "nranks": rec["nranks"], "phase": rec["phase"]}
            if item not in self.inits:
                self.inits.append(item)
        elif kind == "warn" and len(self.warnings) < 20:
            self.warnings.append(rec["message"][:300])

    def nccl_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "invalid": self.invalid,
            "version": self.version,
            "inits": self.inits,
            "warnings": self.warnings,
            "lines": self.lines,
            "sources": self.sources,
        }


class _Scan:
    def __init__(self, deploy_id: str | None) -> None:
        self.by_pid: dict[int, _PidEvidence] = {}
        self.deploy_id = deploy_id
        self.nccl_lines = 0
        self.marker_lines = 0
        self.foreign_markers = 0
        self.other_process_markers = 0
        self.custom_ar_disabled_line: str | None = None

    def pid(self, pid: int) -> _PidEvidence:
        ev = self.by_pid.get(pid)
        if ev is None:
            ev = self.by_pid[pid] = _PidEvidence()
        return ev

    def feed(self, line: str, source: str) -> None:
        if "NCCL" in line:
            for rec in parse_nccl_records(line):
                self.nccl_lines += 1
                self.pid(rec["pid"]).add_nccl(rec, source)
        if "[specdeploy] nccl-env" in line:
            mk = parse_marker(line)
            if mk is not None:
                if self.deploy_id and mk["deploy"] and mk["deploy"] != self.deploy_id:
                    self.foreign_markers += 1
                else:
                    self.marker_lines += 1
                    self.pid(mk["pid"]).markers.append(mk)
        if self.custom_ar_disabled_line is None and _CUSTOM_AR_OFF_RE.search(line):
            self.custom_ar_disabled_line = line.strip()[:300]


def _own_markers(markers: list[dict[str, Any]], start_ticks: int | None, scan: _Scan) -> list[dict[str, Any]]:
    """The markers printed by this very process: same pid (already) and, where the marker says, same start time."""
    if start_ticks is None:
        return list(markers)
    own = [m for m in markers if m.get("start") is None or m["start"] == start_ticks]
    scan.other_process_markers += len(markers) - len(own)
    return own


def _read_lines(path: str, offset: int, cap: int) -> tuple[Iterator[str], dict[str, Any]]:
    """Decoded lines of ``path`` from ``offset``, at most ``cap`` bytes, streamed in 1 MiB chunks.

    The info dict (``bytes_read``, ``capped``) is complete once the iterator is exhausted.
    """
    info: dict[str, Any] = {
        "path": path,
        "exists": False,
        "size": None,
        "offset": offset,
        "bytes_read": 0,
        "capped": False,
        "cap_bytes": cap,
        "rotated": False,
        "error": None,
    }
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed by the generator)
    except FileNotFoundError:
        return iter(()), info
    except OSError as e:
        info["error"] = str(e)
        return iter(()), info
    size = os.fstat(f.fileno()).st_size
    info.update(exists=True, size=size)
    if offset > size:  # truncated or replaced since the deploy: what is there now is all we have
        info["rotated"] = True
        offset = 0

    def lines() -> Iterator[str]:
        with f:
            f.seek(offset)
            left = cap
            rest = b""
            while left > 0:
                chunk = f.read(min(1 << 20, left))
                if not chunk:
                    break
                left -= len(chunk)
                info["bytes_read"] += len(chunk)
                parts = (rest + chunk).split(b"\n")
                rest = parts.pop()
                for raw in parts:
                    # also split on '\r' (progress bars rewrite a line with it); headers are searched anywhere
                    yield from raw.decode("utf-8", "replace").splitlines()
            if left <= 0 and f.read(1):
                info["capped"] = True
            if rest:
                yield from rest.decode("utf-8", "replace").splitlines()

    return lines(), info


# ----------------------------------------------------------------------------------------------------
# processes


def _boot_time() -> float | None:
    try:
        with open(f"{procs.PROC}/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _start_epoch(start_ticks: int) -> float | None:
    bt = _boot_time()
    if bt is None:
        return None
    return bt + start_ticks / float(os.sysconf("SC_CLK_TCK"))


def _environ_view(pid: int, names: Iterable[str]) -> tuple[str, dict[str, str | None], dict[str, str | None]]:
    """(status, expected-var values, diagnostic-var values) from /proc/PID/environ; never the whole env."""
    env = procs.read_environ(pid)
    if env is None:
        return "unreadable", {}, {}
    if not env:
        return "wiped", {}, {}
    return "ok", {n: env.get(n) for n in names}, {n: env.get(n) for n in DIAG_VARS}


def _label(title: str) -> str:
    """``sglang::scheduler_DP0_TP1`` → ``DP0_TP1``; ``sglang::scheduler`` → ``TP0``."""
    ranks = procs.scheduler_ranks(title) or {}
    return "_".join(f"{k}{v}" for k, v in ranks.items()) or "TP0"


def _find_processes(launcher_pid: int | None, launcher_ticks: int | None) -> dict[str, Any]:
    all_p = procs.all_procs()
    launcher: dict[str, Any] = {"pid": launcher_pid, "alive": False, "identity": "unknown", "cmdline": None}
    pool: list[procs.ProcInfo]
    if launcher_pid is not None:
        info = next((p for p in all_p if p.pid == launcher_pid), None)
        if info is None or info.state in ("Z", "X"):
            launcher["identity"] = "gone"
            pool = []
        elif launcher_ticks is not None and info.start_ticks != launcher_ticks:
            launcher["identity"] = "pid_reused"
            pool = []
        else:
            launcher.update(alive=True, identity="ok", cmdline=info.cmdline, start_ticks=info.start_ticks)
            pool = procs.descendants(launcher_pid, all_p)
        discovery = "launcher_descendants"
    else:
        pool = all_p
        discovery = "host_scan"
    live = [p for p in pool if p.state not in ("Z", "X")]
    scheds = sorted(
        (p for p in live if p.cmdline.startswith("sglang::scheduler")),
        key=lambda p: (procs.scheduler_sort_key(p.cmdline), p.pid),
    )
    if launcher_pid is None and scheds:
        # Found by a host scan: the schedulers' common parent, when it is an SGLang launcher, is this server's.
        parents = {p.ppid for p in scheds}
        parent = procs.stat(parents.pop()) if len(parents) == 1 else None
        if parent is not None and procs.is_sglang_launcher(parent.cmdline):
            launcher.update(pid=parent.pid, alive=True, identity="found_by_scan", cmdline=parent.cmdline,
                            start_ticks=parent.start_ticks)
    drafts = [
        p
        for p in live
        if p.cmdline.startswith("sglang::")
        and "draft" in p.cmdline.lower()
        and not p.cmdline.startswith("sglang::scheduler")
    ]
    others = [p for p in live if procs.is_sglang_title(p.cmdline) and p not in scheds and p not in drafts]
    return {
        "launcher": launcher,
        "discovery": discovery,
        "schedulers": scheds,
        "drafts": drafts,
        "others": others,
    }


# ----------------------------------------------------------------------------------------------------
# host facts


def parse_topology(text: str) -> str:
    """``nvlink`` if a GPU↔GPU cell of ``nvidia-smi topo -m`` is ``NV#``; ``pcie`` otherwise; ``unknown``."""
    gpu_rows = [ln.split() for ln in text.splitlines() if re.match(r"^\s*GPU\d+\s", ln)]
    if not gpu_rows:
        return "unknown"
    n = len(gpu_rows)
    for row in gpu_rows:
        if any(re.fullmatch(r"NV\d+", cell) for cell in row[1 : n + 1]):
            return "nvlink"
    return "pcie" if n > 1 else "single"


def _gpu_facts() -> dict[str, Any]:
    # Both queries at once: each nvidia-smi run costs tens of milliseconds on a real host.
    try:
        outs = gpus.smi_many([["-L"], ["topo", "-m"]], timeout=SMI_TIMEOUT_S, strict=False)
    except AgentError:
        outs = None
    listing, topo = (outs[0], outs[1]) if outs else (None, None)
    if listing is None:
        return {
            "count": None,
            "names": [],
            "interconnect": "unknown",
            "source": "nvidia-smi missing or failed",
        }
    names = []
    for ln in listing.splitlines():
        m = re.match(r"^GPU \d+: (.*?)(?: \(UUID: [^)]*\))?\s*$", ln)
        if m:
            names.append(m.group(1))
    inter = parse_topology(topo) if topo else "unknown"
    if inter == "unknown" and len(names) == 1:
        inter = "single"
    return {
        "count": len(names),
        "names": names,
        "interconnect": inter,
        "source": "nvidia-smi -L" + (" + topo -m" if topo else " (topo -m unavailable)"),
    }


def _argv_flags(argv: list[str] | None) -> dict[str, Any]:
    argv = list(argv or [])
    flags: dict[str, Any] = {"known": bool(argv), "tp_size": None}

    def has(name: str) -> bool:
        return any(a == name or a.startswith(name + "=") for a in argv)

    for key, name in (
        ("disable_custom_all_reduce", "--disable-custom-all-reduce"),
        ("deterministic", "--enable-deterministic-inference"),
        ("symm_mem", "--enable-symm-mem"),
        ("nccl_nvls", "--enable-nccl-nvls"),
    ):
        flags[key] = has(name)
    for i, a in enumerate(argv):
        for name in ("--tp-size", "--tp", "--tensor-parallel-size"):
            val = None
            if a == name and i + 1 < len(argv):
                val = argv[i + 1]
            elif a.startswith(name + "="):
                val = a.split("=", 1)[1]
            if val is not None and val.isdigit():
                flags["tp_size"] = int(val)
    return flags


def _facts_version_key(version: str) -> tuple[int, int, int, int]:
    """The agent's one version reading (:func:`versions.feature_key`); (-1, 0, 0, 0) for a string that is none."""
    try:
        return versions.feature_key(version)
    except ValueError:
        return (-1, 0, 0, 0)


_FLAG_NAMES = {"symm_mem": "--enable-symm-mem", "nccl_nvls": "--enable-nccl-nvls"}


def sglang_env_facts_for(version: str | None) -> tuple[str | None, list[dict[str, Any]]]:
    """The NCCL writes of the newest release read from the wheels that is not newer than ``version``
    (``sglang_env_facts.NCCL_WRITES``, generated by ``python -m tests.contract --write``)."""
    if not version or _facts_version_key(version)[0] < 0:
        return None, []
    want = _facts_version_key(version)
    known = sorted(sglang_env_facts.NCCL_WRITES, key=_facts_version_key)
    below = [k for k in known if _facts_version_key(k) <= want]
    if not below:
        return None, []
    return below[-1], sglang_env_facts.NCCL_WRITES[below[-1]]


def sglang_nccl_rules(version: str | None, flags: dict[str, Any]) -> list[dict[str, Any]]:
    """The NCCL variables this SGLang version itself sets, from the table derived from the release wheels.

    Each: ``{"var", "action": "overrides"|"sets_if_unset", "value", "condition", "applies": bool|None}``;
    ``overrides`` replaces an operator value, ``sets_if_unset`` only fills a gap (it matters when the launch
    path stripped the operator's value). ``applies`` is None when the version, the launch flags or a condition
    the flags do not decide (multi-node MNNVL, --dcp-size, an MoE backend) are unknown.
    """
    known_argv = bool(flags.get("known"))

    def flag(name: str) -> bool | None:
        if not known_argv:
            return None
        if name == "tp>1":
            tp = flags.get("tp_size")
            return None if tp is None else int(tp) > 1
        key = {"symm_mem": "symm_mem", "nccl_nvls": "nccl_nvls", "deterministic": "deterministic"}.get(name)
        return bool(flags.get(key)) if key else None

    def atom(a: str) -> bool | None:
        v = flag(a.lstrip("!"))
        return v if v is None or not a.startswith("!") else not v

    def all_of(vals: list[bool | None]) -> bool | None:
        if any(v is False for v in vals):
            return False
        return None if any(v is None for v in vals) else True

    def any_of(vals: list[bool | None]) -> bool | None:
        if any(v is True for v in vals):
            return True
        return None if any(v is None for v in vals) else False

    read, writes = sglang_env_facts_for(version)
    rules: list[dict[str, Any]] = []
    if read is None:
        for var in ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"):
            rules.append({"var": var, "action": "overrides", "value": "0", "applies": None,
                          "condition": f"SGLang {version or '(version unknown)'}: not in the table read from "
                                       "the release wheels; 0.4.x-0.5.4 set it unconditionally, later only if "
                                       "unset (or with --enable-symm-mem/--enable-nccl-nvls)"})
        return rules
    for w in writes:
        base = all_of([atom(a) for a in w["requires"]] + [None] * bool(w["other"]))
        value = w["value"]
        if value is None and w["value_flags"]:
            v = any_of([flag(f) for f in w["value_flags"]])
            value = None if v is None else str(int(v))
        where = f"SGLang {read}{'' if read == version else f' (as read for {version})'}: {w['where']}"
        when = " and ".join(w["when"])
        cond = f"{where}{f' if {when}' if when else ''}"
        if w["unset_or"] is not None:
            rules.append({"var": w["var"], "action": "sets_if_unset", "value": value, "applies": base,
                          "condition": cond + " (fills the variable when unset)"})
            over = all_of([base, any_of([atom(a) if not a.startswith("?") else None for a in w["unset_or"]])])
            rules.append({"var": w["var"], "action": "overrides", "value": value, "applies": over,
                          "condition": cond + " (replaces an operator value with " + " or ".join(
                              _FLAG_NAMES.get(a, a.lstrip("?")) for a in w["unset_or"]) + ")"})
        else:
            rules.append({"var": w["var"], "action": w["action"], "value": value, "applies": base,
                          "condition": cond})
    return rules


def _custom_ar(
    flags: dict[str, Any], gpus: dict[str, Any], world: int | None, log_line: str | None
) -> dict[str, Any]:
    reasons: list[str] = []
    enabled: bool | None = None
    if flags.get("disable_custom_all_reduce"):
        enabled = False
        reasons.append("launched with --disable-custom-all-reduce")
    if flags.get("deterministic"):
        enabled = False
        reasons.append("--enable-deterministic-inference disables it")
    if log_line:
        enabled = False
        reasons.append(f"log: {log_line}")
    if world is not None and world > 2 and gpus.get("interconnect") == "pcie":
        enabled = False
        reasons.append(f"SGLang turns it off for more than two PCIe-only GPUs (TP {world})")
    if world == 1:
        enabled = False
        reasons.append("TP 1: no all-reduce at all")
    if (
        enabled is None
        and flags.get("known")
        and world is not None
        and gpus.get("interconnect") in ("nvlink", "pcie")
    ):
        enabled = True
        reasons.append(
            f"TP {world} on {gpus['interconnect']} and nothing disabled it: small decode all-reduces "
            "bypass NCCL, so NCCL tuning matters less"
        )
    return {"enabled": enabled, "reasons": reasons}


def _infiniband() -> list[str] | None:
    """InfiniBand devices of this host (``/sys/class/infiniband``); [] when none, None when it cannot tell."""
    try:
        return sorted(os.listdir("/sys/class/infiniband"))
    except FileNotFoundError:
        return []
    except OSError:
        return None


# ----------------------------------------------------------------------------------------------------
# NCCL_DEBUG_FILE


def _debug_file_paths(pattern: str, pid: int) -> list[str]:
    """Files NCCL wrote for ``pid`` under ``pattern`` (%h any host, %p this pid, %% a percent sign)."""
    if not os.path.isabs(pattern):
        try:
            pattern = os.path.join(os.readlink(f"{procs.PROC}/{pid}/cwd"), pattern)
        except OSError:
            return []
    parts = re.split(r"(%[hp%])", pattern)
    glob_pat = "".join(
        "*" if p == "%h" else str(pid) if p == "%p" else "%" if p == "%%" else glob.escape(p) for p in parts
    )
    return sorted(glob.glob(glob_pat))[:DEBUG_FILES_MAX]


# ----------------------------------------------------------------------------------------------------
# the verb


def gather(req: dict[str, Any], sink: EventSink) -> dict[str, Any]:
    """Collect per-scheduler evidence for the expected NCCL variables. See the module docstring."""
    expected = req.get("expected") or {}
    if not isinstance(expected, dict):
        raise AgentError("bad_request", "expected must be a {VAR: value} object")
    expected = {str(k): str(v) for k, v in expected.items()}
    log_path = req.get("log_path")
    log_offset = int(req.get("log_offset") or 0)
    launcher_pid = req.get("launcher_pid")
    launcher_ticks = req.get("launcher_start_ticks")
    names = sorted(expected)

    sink.emit("progress", step="processes")
    found = _find_processes(
        int(launcher_pid) if launcher_pid is not None else None,
        int(launcher_ticks) if launcher_ticks is not None else None,
    )
    launcher = found["launcher"]
    if launcher["alive"]:
        st, vals, diag = _environ_view(launcher["pid"], names)
        launcher.update(environ_status=st, environ=vals, environ_diag=diag)
    else:
        launcher.update(
            environ_status="unreadable" if launcher_pid is not None else None, environ={}, environ_diag={}
        )

    sink.emit("progress", step="log")
    scan = _Scan(req.get("deploy_id"))
    log_info: dict[str, Any] = {"path": log_path, "exists": False}
    if log_path:
        lines, log_info = _read_lines(
            str(log_path), log_offset, int(req.get("log_cap_bytes") or LOG_CAP_BYTES)
        )
        for line in lines:
            scan.feed(line, "log")

    debug_pattern = req.get("nccl_debug_file") or launcher.get("environ_diag", {}).get("NCCL_DEBUG_FILE")
    debug_files: list[dict[str, Any]] = []
    scheds: list[procs.ProcInfo] = found["schedulers"]
    if debug_pattern:
        sink.emit("progress", step="nccl_debug_files")
        for p in scheds:
            started = _start_epoch(p.start_ticks)
            for path in _debug_file_paths(str(debug_pattern), p.pid):
                entry: dict[str, Any] = {"path": path, "pid": p.pid, "stale": False}
                try:
                    mtime = os.path.getmtime(path)
                except OSError:
                    continue
                if started is not None and mtime < started - 2.0:
                    entry["stale"] = True  # an older process with the same pid wrote it
                    debug_files.append(entry)
                    continue
                lines, info = _read_lines(path, 0, DEBUG_FILE_CAP_BYTES)
                for line in lines:
                    scan.feed(line, f"debug_file:{path}")
                entry.update(bytes_read=info["bytes_read"], capped=info["capped"])
                debug_files.append(entry)

    sink.emit("progress", step="schedulers")
    sched_pids = {p.pid for p in scheds}
    schedulers: list[dict[str, Any]] = []
    for p in scheds:
        st, vals, diag = _environ_view(p.pid, names)
        ev = scan.by_pid.get(p.pid) or _PidEvidence()
        own_markers = _own_markers(ev.markers, p.start_ticks, scan)
        schedulers.append(
            {
                "pid": p.pid,
                "ppid": p.ppid,
                "title": p.cmdline.split()[0],
                "label": _label(p.cmdline),
                "rank": procs.scheduler_rank(p.cmdline),
                "start_ticks": p.start_ticks,
                "environ_status": st,
                "environ": vals,
                "environ_diag": diag,
                "nccl": ev.nccl_dict(),
                "markers": own_markers,
            }
        )
    lev = scan.by_pid.get(launcher["pid"]) if launcher["pid"] is not None else None
    launcher["nccl"] = (lev or _PidEvidence()).nccl_dict()
    launcher["markers"] = _own_markers(lev.markers, launcher.get("start_ticks"), scan) if lev else []
    unattributed = {
        str(pid): ev.lines + len(ev.markers)
        for pid, ev in scan.by_pid.items()
        if pid not in sched_pids and pid != launcher["pid"]
    }
    log_info.update(
        nccl_lines=scan.nccl_lines,
        marker_lines=scan.marker_lines,
        foreign_deploy_markers=scan.foreign_markers,
        other_process_markers=scan.other_process_markers,
        unattributed_pids=unattributed,
    )

    sink.emit("progress", step="facts")
    argv = req.get("launch_argv")
    argv_source = "record" if argv else None
    if not argv and launcher.get("identity") == "found_by_scan" and launcher.get("cmdline"):
        # not the recorded deploy: its own command line, never the stale record's
        argv, argv_source = str(launcher["cmdline"]).split(), "running launcher"
    flags = _argv_flags(argv)
    gpus = _gpu_facts()
    nranks = [i["nranks"] for s in schedulers for i in s["nccl"]["inits"]]
    world = flags["tp_size"] or (max(nranks) if nranks else None) or (len(schedulers) or None)
    rules = sglang_nccl_rules(req.get("sglang_version"), flags)
    flagged = sorted({r["var"] for r in rules if r["var"] in expected and r["applies"] is not False})
    facts = {
        "server": req.get("server") or {},
        "patch_mode": req.get("patch_mode"),
        "nccl_debug": req.get("nccl_debug"),
        "launch_env": req.get("launch_env") or {},
        "launch_argv_source": argv_source,
        "infiniband": _infiniband(),
        "sglang_version": req.get("sglang_version"),
        "gpus": gpus,
        "tp_size": flags["tp_size"],
        "launch_flags": {k: v for k, v in flags.items() if k != "tp_size"},
        "custom_all_reduce": _custom_ar(flags, gpus, world, scan.custom_ar_disabled_line),
        "sglang_sets": rules,
        "flagged_expected_vars": flagged,
        "draft_worker": {
            "separate_processes": [{"pid": d.pid, "title": d.cmdline} for d in found["drafts"]],
            "note": DRAFT_WORKER_NOTE
            if not found["drafts"]
            else "separate draft process(es) found: they are not schedulers and are listed here only",
        },
        "gathered_at": time.time(),
    }
    return {
        "schema": SCHEMA,
        "expected": expected,
        "discovery": found["discovery"],
        "launcher": launcher,
        "schedulers": schedulers,
        "other_sglang_processes": [{"pid": o.pid, "title": o.cmdline.split()[0]} for o in found["others"]],
        "log": log_info,
        "nccl_debug_files": {"pattern": debug_pattern, "files": debug_files},
        "facts": facts,
    }


# ----------------------------------------------------------------------------------------------------
# evaluation (pure)

STATUSES = ("proven", "different", "unconfirmed", "missing", "launcher_only")
SOURCES = ("nccl_log", "marker", "environ")
# Patch modes that set the values inside each scheduler process (engine sets them in the launcher only).
IN_PROCESS_MODES = ("scheduler", "plugin", "sitecustomize")


def _marker_value(markers: list[dict[str, Any]], var: str) -> tuple[str | None, str | None]:
    """(value, "set"|"kept") from the last marker of a process that mentions ``var``."""
    for mk in reversed(markers):
        if var in mk.get("set", {}):
            return str(mk["set"][var]), "set"
        if var in mk.get("kept", {}):
            return str(mk["kept"][var]), "kept"
    return None, None


def _hint(
    hints: dict[str, dict[str, Any]],
    code: str,
    message: str,
    severity: str = "error",
    var: str | None = None,
    pid: int | None = None,
) -> None:
    h = hints.setdefault(
        code, {"code": code, "severity": severity, "message": message, "vars": [], "pids": []}
    )
    if var is not None and var not in h["vars"]:
        h["vars"].append(var)
    if pid is not None and pid not in h["pids"]:
        h["pids"].append(pid)


def _mode_advice(mode: str | None) -> str:
    """How to get values into the workers, never the patch mode already in use."""
    if mode in IN_PROCESS_MODES:
        return (
            f"the {mode} patch is in use but printed no marker in these workers: check `inv patch-status` "
            "(SGLang reinstalled since the patch?) and deploy again to re-apply it"
        )
    used = f" (this deploy used --patch-mode {mode})" if mode else ""
    return "use --patch-mode scheduler (or plugin on SGLang >= 0.5.11) to set them inside each worker" + used


def _diag(evidence: dict[str, Any], name: str) -> tuple[str | None, str]:
    """A logging/diagnostic variable's value as the processes saw it (schedulers, launcher) or as launched."""
    for s in evidence.get("schedulers") or []:
        if s.get("environ_status") == "ok":
            return (s.get("environ_diag") or {}).get(name), "the workers' environment"
    launcher = evidence.get("launcher") or {}
    if launcher.get("environ_status") == "ok":
        return (launcher.get("environ_diag") or {}).get(name), "the launcher's environment"
    launch_env = (evidence.get("facts") or {}).get("launch_env") or {}
    if name in launch_env:
        return launch_env.get(name), "the recorded launch environment"
    return None, "unknown"


def _no_nccl_debug_message(evidence: dict[str, Any]) -> str:
    """Why NCCL said nothing about its environment, as precisely as the evidence allows."""
    facts = evidence.get("facts") or {}
    debug, where = _diag(evidence, "NCCL_DEBUG")
    subsys, _ = _diag(evidence, "NCCL_DEBUG_SUBSYS")
    if debug is not None and debug.strip().upper() not in ("INFO", "TRACE"):
        why = f"NCCL_DEBUG={debug} in {where} keeps NCCL from saying what it read"
        if facts.get("nccl_debug"):
            why += " (the inventory's `env` sets it, and `env` wins over nccl_debug: remove it there)"
        return why
    if debug is not None and subsys:
        items = [x.strip().upper() for x in subsys.split(",") if x.strip()]
        excluded = bool(items) and items[0].startswith("^")
        names = {items[0][1:], *items[1:]} if excluded else set(items)
        if ("ENV" in names) == excluded and "ALL" not in names:
            return f"NCCL_DEBUG_SUBSYS={subsys} in {where} leaves out ENV, so NCCL does not echo its variables"
    if debug is not None:
        return (
            "NCCL_DEBUG=INFO was on but NCCL printed nothing for these processes (not initialised yet, or "
            "NCCL_DEBUG_FILE sends it elsewhere)"
        )
    if facts.get("nccl_debug") is False:
        return (
            "NCCL_DEBUG=INFO was not on (nccl_debug is false for this host), so only weaker evidence exists "
            "(markers, start environment); set nccl_debug: true to let NCCL say what it read"
        )
    return (
        "NCCL_DEBUG=INFO was not on, so only weaker evidence exists (markers, start environment); deploy with "
        "nccl_debug to let NCCL say what it read"
    )


def _blind_message(evidence: dict[str, Any], env_status: str | None) -> tuple[str, str]:
    """(code, message) for workers whose start environment cannot be read."""
    if env_status == "unreadable":
        return (
            "environ_unreadable",
            "/proc/PID/environ of the workers is unreadable: run check-env as the server's user, or deploy "
            "with nccl_debug so NCCL says what it read",
        )
    spt, where = _diag({"launcher": evidence.get("launcher"), "facts": evidence.get("facts")}, "SPT_NOENV")
    if spt == "1":
        return (
            "environ_wiped",
            f"SPT_NOENV=1 was in {where}, yet the workers' environ is wiped by setproctitle: the launch path "
            "dropped it before the workers started; the values may be there but cannot be seen: deploy with "
            "nccl_debug so NCCL says what it read",
        )
    return (
        "environ_wiped",
        "the workers' environ is wiped by setproctitle (SPT_NOENV=1 was not in their environment); the "
        "values may be there but cannot be seen: launch with SPT_NOENV=1 or NCCL_DEBUG=INFO",
    )


def evaluate(evidence: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """One row per (scheduler process, expected variable); overall ``ok``; hints naming the likely cause.

    Row: ``{"pid", "rank", "label", "title", "var", "expected", "observed", "evidence", "status", "sources",
    "note"}`` with ``status`` one of ``STATUSES`` and ``evidence`` one of ``SOURCES`` (None when nothing was
    seen). The rules (README, check-env): NCCL's own echo decides when there is one; values are compared the
    way NCCL parses them (ncclenv); ``unconfirmed`` where the worker may hold the value but nothing shows NCCL
    took it (NCCL echoed other variables in that process but not this one it always echoes, NCCL ignores the
    value, the worker's environment cannot be read); ``missing``/``launcher_only`` only where evidence shows
    the worker lacks it.
    """
    expected = {str(k): str(v) for k, v in expected.items()}
    schedulers: list[dict[str, Any]] = list(evidence.get("schedulers") or [])
    launcher: dict[str, Any] = evidence.get("launcher") or {}
    facts: dict[str, Any] = evidence.get("facts") or {}
    server: dict[str, Any] = facts.get("server") or {}
    mode = facts.get("patch_mode")
    all_rules = list(facts.get("sglang_sets") or [])
    hints: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []

    inits = [i for s in schedulers for i in (s.get("nccl") or {}).get("inits") or []]
    if inits:
        nranks: int | None = max(int(i["nranks"]) for i in inits)
        nranks_source = "nccl_log"
    elif facts.get("tp_size"):
        nranks, nranks_source = int(facts["tp_size"]), "launch_argv"
    elif schedulers:
        nranks, nranks_source = len(schedulers), "scheduler_count"
    else:
        nranks, nranks_source = None, "unknown"
    single_rank = nranks == 1
    any_nccl = any((s.get("nccl") or {}).get("lines") for s in schedulers)

    if not schedulers:
        why = "no running server found"
        if launcher.get("pid") is not None and launcher.get("identity") in ("gone", "pid_reused"):
            why += (
                f" (the recorded launcher pid {launcher['pid']} is {launcher['identity'].replace('_', ' ')})"
            )
        elif launcher.get("alive"):
            why += f" (launcher pid {launcher['pid']} runs but has no sglang::scheduler children yet)"
        _hint(hints, "no_server", why + ": deploy, or wait for the server to come up, then check again")
    not_recorded = bool(schedulers) and server.get("is_recorded_deploy") is False
    if not_recorded:
        _hint(
            hints,
            "not_recorded_deploy",
            f"the running server is not the recorded deploy {server.get('recorded_deploy') or ''}"
            f" ({server.get('why') or 'its launcher is gone'}): it was started outside specdeploy, so the "
            "recorded log and record say nothing about it; only its own processes are read, and its verdict "
            "cannot stand for the deploy: deploy again, or stop it",
        )

    l_env = launcher.get("environ") or {}
    l_nccl = (launcher.get("nccl") or {}).get("env") or {}
    l_markers = launcher.get("markers") or []

    for s in schedulers:
        nccl = s.get("nccl") or {}
        nccl_env: dict[str, list[str]] = nccl.get("env") or {}
        invalid: dict[str, str] = nccl.get("invalid") or {}
        env_status = s.get("environ_status")
        env_vals = s.get("environ") or {}
        markers = s.get("markers") or []
        pid = s.get("pid")
        echoed_here = bool(nccl_env) or bool(invalid)  # NCCL echoed its environment in this very process
        for var in sorted(expected):
            exp = expected[var]
            exp_read = ncclenv.reading(var, exp)
            when, condition = ncclenv.read_when(var)
            nccl_vals = nccl_env.get(var) or []
            nccl_val = nccl_vals[-1] if nccl_vals else None
            mk_val, mk_how = _marker_value(markers, var)
            env_val = env_vals.get(var) if env_status == "ok" else None
            sources = {"nccl_log": nccl_val, "marker": mk_val, "environ": env_val}
            lmk, _ = _marker_value(l_markers, var)
            launcher_val = (l_nccl.get(var) or [None])[-1] or lmk or l_env.get(var)
            notes: list[str] = []
            if len(nccl_vals) > 1:
                notes.append(f"NCCL reported several values in this process: {', '.join(nccl_vals)}")
            p2p_off = var == "NCCL_P2P_LEVEL" and any(
                ncclenv.strtoll(v) == 1 for v in nccl_env.get("NCCL_P2P_DISABLE") or []
            )
            would_echo = (
                echoed_here
                and not p2p_off
                and (when == "init" or (when == "multi_rank" and nranks is not None and nranks > 1))
            )
            weaker = next((src for src in ("marker", "environ") if sources[src] is not None), None)
            status: str
            strongest: str | None
            observed: str | None

            if var in invalid:
                strongest, observed, status = "nccl_log", invalid[var], "different"
                notes.append(f"NCCL refused {invalid[var]!r} (out of range) and kept its default")
            elif nccl_val is not None:
                strongest, observed = "nccl_log", nccl_val
                status = "proven" if ncclenv.same(var, nccl_val, exp) else "different"
            elif weaker is not None:
                strongest, observed = weaker, sources[weaker]
                if not ncclenv.same(var, observed, exp) and not (exp_read["value"] is None and observed == exp):
                    status = "different"
                    if would_echo:
                        notes.append(f"NCCL logged its environment in this process but never {var}")
                elif exp_read["value"] is None:
                    status = "unconfirmed"
                    notes.append(f"NCCL ignores this value: {exp_read['why']}")
                    _hint(
                        hints,
                        "nccl_ignores_value",
                        f"NCCL ignores the value asked for {var}: {exp_read['why']}; fix it in the inventory",
                        var=var,
                        pid=pid,
                    )
                elif would_echo:
                    status = "unconfirmed"
                    notes.append(
                        f"NCCL logged its environment in this process but never {var}, which it echoes at every "
                        + ("init" if when == "init" else "init with two or more ranks")
                    )
                    if strongest == "marker" and mode not in IN_PROCESS_MODES:
                        why = (
                            "they were set after NCCL had read its environment (patch too late): "
                            + _mode_advice(mode)
                        )
                    else:
                        why = (
                            "the process held them at start or from the patch, yet NCCL never read them: "
                            "something removed or reset them inside the process before NCCL initialised "
                            "(see facts.sglang_sets)"
                        )
                    _hint(hints, "nccl_silent", "NCCL logged its environment but not these variables: " + why,
                          var=var, pid=pid)
                elif when == "unknown":
                    status = "unconfirmed"
                    notes.append(str(condition))
                    _hint(
                        hints,
                        "not_an_nccl_variable",
                        "NCCL 2.28 reads no variable by this name, so nothing can show it took effect: "
                        "check the spelling",
                        severity="warning",
                        var=var,
                        pid=pid,
                    )
                else:
                    status = "proven"
                    if when == "multi_rank" and single_rank:
                        notes.append(
                            f"single rank: NCCL prints nothing for {var} with nranks 1, so the {strongest} suffices"
                        )
                    elif when == "conditional" and echoed_here:
                        notes.append(f"{condition}: its silence proves nothing; the {strongest} shows the value")
                    elif p2p_off:
                        notes.append("NCCL_P2P_DISABLE=1 wins over NCCL_P2P_LEVEL, which NCCL then never reads")
                    if var.startswith("NCCL_IB_") and facts.get("infiniband") == []:
                        notes.append("this host has no InfiniBand device: NCCL never reads it here")
                        _hint(
                            hints,
                            "ib_without_infiniband",
                            "these variables only matter over InfiniBand, and this host has no InfiniBand "
                            "device: they are set but have no effect here",
                            severity="info",
                            var=var,
                        )
            else:
                strongest, observed = None, None
                absent_shown = would_echo or env_status == "ok"
                if absent_shown:
                    status = "launcher_only" if launcher_val is not None else "missing"
                    if would_echo:
                        notes.append(f"NCCL logged its environment in this process without {var}")
                    if status == "launcher_only":
                        _hint(
                            hints,
                            "env_stripped",
                            "the launch path strips the environment before the workers start: " + _mode_advice(mode),
                            var=var,
                            pid=pid,
                        )
                    else:
                        _hint(
                            hints,
                            "never_set",
                            "the variable reached neither the launcher nor the workers: check the host's "
                            "nccl_env / nccl_preset and the launch script",
                            var=var,
                            pid=pid,
                        )
                else:
                    status = "unconfirmed"
                    if env_status == "wiped":
                        notes.append("environ wiped by setproctitle")
                    elif env_status == "unreadable":
                        notes.append("environ unreadable (permissions)")
                    if when == "multi_rank" and single_rank and echoed_here:
                        notes.append(f"NCCL prints nothing for {var} with a single rank")
                    elif when in ("conditional", "unknown") and echoed_here:
                        notes.append(str(condition))
                    elif not echoed_here:
                        notes.append("NCCL did not echo its environment in this process")
                    if launcher_val is not None:
                        notes.append(f"the launcher has {launcher_val}; nothing shows whether the worker does")
                    code, message = _blind_message(evidence, env_status)
                    _hint(hints, code, message, var=var, pid=pid)

            if status == "proven":
                for src in SOURCES:
                    if sources[src] is not None and not ncclenv.same(var, sources[src], exp):
                        notes.append(f"{src} says {sources[src]} (superseded by {strongest})")
            if status == "different":
                said = ", ".join(f"{src}={sources[src]}" for src in SOURCES if sources[src] is not None)
                notes.append(f"expected {exp}; {said}" if said else f"expected {exp}")
                if var in invalid:
                    pass
                elif mk_how == "kept" and mk_val is not None and ncclenv.same(var, mk_val, observed):
                    _hint(
                        hints,
                        "operator_value_kept",
                        "an operator value was kept (patch without force): remove it from the launch "
                        "environment or patch with force",
                        var=var,
                        pid=pid,
                    )
                else:
                    _blame(hints, all_rules, var, pid, facts)
            rows.append(
                {
                    "pid": pid,
                    "rank": s.get("rank"),
                    "label": s.get("label"),
                    "title": s.get("title"),
                    "var": var,
                    "expected": exp,
                    "observed": observed,
                    "evidence": strongest,
                    "status": status,
                    "sources": {**sources, "launcher": launcher_val},
                    "environ_status": env_status,
                    "note": "; ".join(notes),
                }
            )

    if schedulers and not any_nccl:
        sev = "info" if all(r["status"] == "proven" for r in rows) else "warning"
        _hint(hints, "no_nccl_debug", _no_nccl_debug_message(evidence), severity=sev)
    log = evidence.get("log") or {}
    if log.get("capped"):
        _hint(
            hints,
            "log_capped",
            f"only the first {log.get('cap_bytes')} bytes of the log after the deploy offset were read",
            severity="info",
        )
    if log.get("rotated"):
        _hint(
            hints,
            "log_rotated",
            "the log is shorter than the deploy's offset (rotated or truncated): read from its start",
            severity="warning",
        )
    for var in facts.get("flagged_expected_vars") or []:
        if var in expected:
            _hint(
                hints,
                f"sglang_touches_{var}",
                f"SGLang {facts.get('sglang_version') or '(unknown version)'} "
                f"sets {var} itself in some cases: see facts.sglang_sets",
                severity="info",
                var=var,
            )
    changed = evidence.get("inventory_differs") or {}
    if changed:
        parts = [f"{k}: {v.get('record')!s} → {v.get('inventory')!s}" for k, v in sorted(changed.items())]
        _hint(
            hints,
            "inventory_changed",
            "the inventory now asks for other values than the running deploy was started with ("
            + "; ".join(parts)
            + "): check-env judges the running deploy against its record; deploy again to apply the inventory",
            severity="info",
        )
    car = facts.get("custom_all_reduce") or {}
    if car.get("enabled"):
        _hint(
            hints,
            "custom_all_reduce_on",
            "custom all-reduce is on: most small decode all-reduces bypass NCCL, "
            "so NCCL tuning matters less (add --disable-custom-all-reduce to make NCCL carry them)",
            severity="info",
        )

    if not expected:
        _hint(
            hints, "nothing_expected", "no expected NCCL variables were given, so there is nothing to prove"
        )
    summary = {st: sum(1 for r in rows if r["status"] == st) for st in STATUSES}
    ok = bool(schedulers) and bool(rows) and all(r["status"] == "proven" for r in rows) and not not_recorded
    order = {"error": 0, "warning": 1, "info": 2}
    return {
        "ok": ok,
        "rows": rows,
        "summary": summary,
        "nranks": nranks,
        "nranks_source": nranks_source,
        "single_rank": single_rank,
        "schedulers": len(schedulers),
        "recorded_deploy": not not_recorded,
        "hints": sorted(hints.values(), key=lambda h: (order.get(h["severity"], 3), h["code"])),
    }


def _blame(
    hints: dict[str, dict[str, Any]], rules: list[dict[str, Any]], var: str, pid: Any, facts: dict[str, Any]
) -> None:
    """The likeliest cause of a different value: SGLang's own env writes (only those known to apply are
    stated as fact), else the usual suspects."""
    order = ((True, "overrides"), (True, "sets_if_unset"), (None, "overrides"), (None, "sets_if_unset"))
    for applies, action in order:
        hit = next(
            (r for r in rules if r["var"] == var and r["action"] == action and r.get("applies") is applies), None
        )
        if hit is None:
            continue
        if applies is True and action == "overrides":
            msg = (
                f"something overrides it: SGLang itself sets {var} on this version ({hit['condition']}); patch "
                "with --patch-mode scheduler so the value is set inside each worker"
            )
        elif applies is True:
            msg = (
                f"SGLang fills in {var} when it is unset ({hit['condition']}): the operator value never reached "
                "the launcher, or the launch path stripped it"
            )
        else:
            if not facts.get("sglang_version"):
                unknown = "the SGLang version is unknown"
            elif not (facts.get("launch_flags") or {}).get("known"):
                unknown = "the launch flags are unknown"
            else:
                unknown = "its condition is not decided by the launch flags"
            msg = (
                f"SGLang may set {var} itself ({hit['condition']}), but {unknown}, so whether it did cannot be "
                "told; other causes: the launch environment, ~/.nccl.conf, /etc/nccl.conf"
            )
        code = f"sglang_{'overrides' if action == 'overrides' else 'default'}_{var}" + ("" if applies else "_maybe")
        _hint(hints, code, msg, var=var, pid=pid)
        return
    _hint(
        hints,
        "overridden",
        "something overrides it: the launch environment, ~/.nccl.conf, /etc/nccl.conf or NCCL_CONF_FILE, or an "
        "operator value kept by the patch",
        var=var,
        pid=pid,
    )
