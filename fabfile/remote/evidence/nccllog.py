"""Reading a server log line by line: NCCL's own lines and the specdeploy markers, gathered per pid.

Part of ``check-env``'s evidence (see ``judge``): this module only parses text; ``gather`` reads the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..patch.markers import parse_marker

if TYPE_CHECKING:  # the shapes are annotations only (verbs.py)
    from ..protocol import Marker, NcclInit, NcclRecord, PidNccl, PidState, ScanState, Tuning, TuningSize

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
# NCCL_DEBUG_SUBSYS=TUNING (read in NCCL's src/enqueue.cc, src/scheduler/symmetric_sched.cc, tags v2.18-v2.28):
# the choice NCCL's tuner made, printed at INFO by rank 0 of each communicator only, once per collective task as
# it is scheduled into a kernel plan (ncclLaunchPrepare): so once per eager call, and once per captured call
# under CUDA-graph capture (a graph replay never runs NCCL's host code, so replays print nothing).
#   2.24+       "AllReduce: 14336 Bytes -> Algo Ring proto LL channel{Lo..Hi}={0..1}"   (names)
#   2.23        "AllReduce: 14336 Bytes -> Algo 1 proto 0 time 12.500000"              (numbers)
#   2.20-2.22   "14336 Bytes -> Algo 1 proto 0 time 12.500000"                         (numbers, no function)
#   2.18-2.19   nothing at INFO (the line is a TRACE one, in debug builds only)
#   2.28 symmetric kernels: "AllReduce [Symmetric]: 14336 Bytes -> Kernel <name> nchannels 4 ..." (no algo/proto)
_TUNING_RE = re.compile(
    r"^(?:(?P<func>[A-Za-z]+)(?P<sym> \[Symmetric\])?: )?(?P<bytes>\d+) Bytes -> "
    r"(?:Algo (?P<algo>\S+) proto (?P<proto>\S+)(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\})?"
    r"|Kernel (?P<kernel>\S+))"
)
# The numbers the older lines print, in NCCL's own order (src/init.cc: ncclAlgoStr, ncclProtoStr).
_ALGO_IDS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
_PROTO_IDS = ("LL", "LL128", "Simple")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_INT_DOT_RE = re.compile(r"^[+-]?\d+\.$")
_CUSTOM_AR_OFF_RE = re.compile(r"custom ?all-?reduce is disabled", re.IGNORECASE)


def _clean_value(raw: str) -> str:
    """NCCL prints integer parameters as ``%ld.``: drop that period; keep strings (``LL``, ``SYS``) as-is."""
    v = raw.strip()
    if _INT_DOT_RE.match(v):
        return v[:-1]
    return v


def _by_id(text: str, names: tuple[str, ...]) -> str:
    """``1`` → ``Ring`` for the lines of NCCL < 2.24, which print the index; a name stays a name."""
    return names[int(text)] if text.isdigit() and int(text) < len(names) else text


def parse_tuning(msg: str) -> Tuning | None:
    """A TUNING choice line's fields: ``func`` (None before 2.23: all-reduce is then the likely one), ``bytes``,
    ``algo``/``proto`` (names, numbers mapped), ``channels`` ("lo..hi" or None), ``kernel`` (symmetric)."""
    m = _TUNING_RE.match(msg)
    if not m:
        return None
    symmetric = bool(m.group("sym")) or m.group("kernel") is not None
    return {
        "func": m.group("func"),
        "bytes": int(m.group("bytes")),
        "algo": "Symmetric" if symmetric else _by_id(m.group("algo"), _ALGO_IDS),
        "proto": None if symmetric else _by_id(m.group("proto"), _PROTO_IDS),
        "channels": f"{m.group('lo')}..{m.group('hi')}" if m.group("lo") is not None else None,
        "kernel": m.group("kernel"),
    }


def parse_nccl_records(line: str) -> list[NcclRecord]:
    """Every NCCL record on one physical line (interleaved output can put two on a line), in order.

    Each record: ``{"kind": "env"|"version"|"init"|"warn"|"other", "host", "pid", "tid", "dev", "level",
    "message"}``
    plus ``var``/``value`` (env), ``version`` (version), ``rank``/``nranks``/``phase`` (init). A message runs
    until the next NCCL header on the same line, so text from another pid is never attributed to this one.
    """
    if "\x1b" in line:  # colour codes from a log viewer or a wrapper
        line = _ANSI_RE.sub("", line)
    heads = list(_NCCL_HEAD_RE.finditer(line))
    out: list[NcclRecord] = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(line)
        msg = line[m.end() : end].strip()
        rec: NcclRecord = {
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
            tuning = parse_tuning(msg) if "Bytes -> " in msg else None
            if tuning:
                rec["kind"] = "tuning"
                rec["func"], rec["bytes"], rec["algo"] = tuning["func"], tuning["bytes"], tuning["algo"]
                rec["proto"], rec["channels"], rec["kernel"] = tuning["proto"], tuning["channels"], tuning["kernel"]
            elif bad:
                rec["kind"], rec["var"], rec["value"] = "invalid", bad.group("var"), bad.group("value")
                rec["default"] = bad.group("default")
            elif em:
                value = _clean_value(em.group("value"))
                if value:
                    rec["kind"], rec["var"], rec["value"] = "env", em.group("var"), value
            elif vm:
                rec["kind"], rec["version"] = "version", vm.group("version")
            elif im:
                rec["kind"], rec["phase"] = "init", im.group("phase")
                rec["rank"], rec["nranks"] = int(im.group("rank")), int(im.group("nranks"))
        out.append(rec)
    return out


def parse_nccl_line(line: str) -> NcclRecord | None:
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


# Distinct (function, size) TUNING entries kept per process: decode, verify and prefill at every captured batch
# size fit many times over; a long-serving log of eager prefills of every prompt length does not need to.
TUNING_SIZES_MAX = 512


class PidEvidence:
    """NCCL records and markers collected for one pid across the log and the NCCL_DEBUG_FILE files."""

    def __init__(self) -> None:
        self.env: dict[str, list[str]] = {}
        self.invalid: dict[str, str] = {}
        self.version: str | None = None
        self.inits: list[NcclInit] = []
        self.warnings: list[str] = []
        self.lines = 0
        self.sources: list[str] = []
        self.markers: list[Marker] = []
        # TUNING choices by (function, bytes): each distinct (algo, proto) with how often it was logged
        self.tuning: dict[str, TuningSize] = {}
        self.tuning_lines = 0
        self.tuning_capped = False

    def add_tuning(self, rec: NcclRecord) -> None:
        """Count one choice; at most TUNING_SIZES_MAX distinct sizes are kept (the rest are counted only)."""
        self.tuning_lines += 1
        key = f"{rec['func'] or 'AllReduce?'}:{rec['bytes']}"
        entry = self.tuning.get(key)
        if entry is None:
            if len(self.tuning) >= TUNING_SIZES_MAX:
                self.tuning_capped = True
                return
            entry = self.tuning[key] = {"func": rec["func"], "bytes": rec["bytes"], "choices": []}
        for c in entry["choices"]:
            if c["algo"] == rec["algo"] and c["proto"] == rec["proto"]:
                c["count"] += 1
                break
        else:
            entry["choices"].append({"algo": rec["algo"], "proto": rec["proto"], "channels": rec["channels"],
                                     "count": 1})

    def add_nccl(self, rec: NcclRecord, source: str) -> None:
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
            item: NcclInit = {"rank": rec["rank"], "nranks": rec["nranks"], "phase": rec["phase"]}
            if item not in self.inits:
                self.inits.append(item)
        elif kind == "tuning":
            self.add_tuning(rec)
        elif kind == "warn" and len(self.warnings) < 20:
            self.warnings.append(rec["message"][:300])

    def state(self) -> PidState:
        """What a saved scan holds of this pid (``gather.scan_log``): every field, as JSON."""
        return {"env": self.env, "invalid": self.invalid, "version": self.version, "inits": self.inits,
                "warnings": self.warnings, "lines": self.lines, "sources": self.sources, "markers": self.markers,
                "tuning": self.tuning, "tuning_lines": self.tuning_lines, "tuning_capped": self.tuning_capped}

    @classmethod
    def from_state(cls, state: PidState) -> PidEvidence:
        ev = cls()
        ev.env, ev.invalid, ev.version, ev.inits = state["env"], state["invalid"], state["version"], state["inits"]
        ev.warnings, ev.lines, ev.sources, ev.markers = (state["warnings"], state["lines"], state["sources"],
                                                         state["markers"])
        ev.tuning, ev.tuning_lines, ev.tuning_capped = state["tuning"], state["tuning_lines"], state["tuning_capped"]
        return ev

    def nccl_dict(self) -> PidNccl:
        return {
            "env": self.env,
            "invalid": self.invalid,
            "version": self.version,
            "inits": self.inits,
            "warnings": self.warnings,
            "lines": self.lines,
            "sources": self.sources,
            "tuning": list(self.tuning.values()),
            "tuning_lines": self.tuning_lines,
            "tuning_capped": self.tuning_capped,
        }


class Scan:
    def __init__(self, deploy_id: str | None) -> None:
        self.deploy_id = deploy_id
        self.clear()

    def clear(self) -> None:
        """Back to no line read."""
        self.by_pid: dict[int, PidEvidence] = {}
        self.nccl_lines = 0
        self.marker_lines = 0
        self.foreign_markers = 0
        self.other_process_markers = 0
        self.custom_ar_disabled_line: str | None = None

    def state(self) -> ScanState:
        """Everything the lines fed so far left, as JSON: :meth:`load_state` of it goes on as if they were fed again
        (``other_process_markers`` is counted after the scan, by ``own_markers``)."""
        return {"by_pid": [(pid, ev.state()) for pid, ev in self.by_pid.items()], "nccl_lines": self.nccl_lines,
                "marker_lines": self.marker_lines, "foreign_markers": self.foreign_markers,
                "custom_ar_disabled_line": self.custom_ar_disabled_line}

    def load_state(self, state: ScanState) -> None:
        self.clear()
        self.by_pid = {int(pid): PidEvidence.from_state(ev) for pid, ev in state["by_pid"]}
        self.nccl_lines, self.marker_lines = state["nccl_lines"], state["marker_lines"]
        self.foreign_markers, self.custom_ar_disabled_line = state["foreign_markers"], state["custom_ar_disabled_line"]

    def pid(self, pid: int) -> PidEvidence:
        ev = self.by_pid.get(pid)
        if ev is None:
            ev = self.by_pid[pid] = PidEvidence()
        return ev

    def feed(self, line: str, source: str) -> None:
        self._feed_records(line, source)
        if self.custom_ar_disabled_line is None and _CUSTOM_AR_OFF_RE.search(line):
            self.custom_ar_disabled_line = line.strip()[:300]

    def feed_lines(self, lines: Iterable[str], source: str) -> None:
        """:meth:`feed` for each line, the custom all-reduce search made cheap: that search (case-insensitive) on
        every line was two thirds of a long log's scan, so a batch of lines is first checked for ``abled`` in any
        case, which every match holds (only ASCII letters match a, b, l, e, d case-insensitively), and searched
        line by line only then: the same first line is kept."""
        batch: list[str] = []
        for line in lines:
            self._feed_records(line, source)
            if self.custom_ar_disabled_line is None:
                batch.append(line)
                if len(batch) >= 512:
                    self._custom_ar(batch)
                    batch = []
        self._custom_ar(batch)

    def _custom_ar(self, batch: list[str]) -> None:
        if self.custom_ar_disabled_line is None and "abled" in "\n".join(batch).lower():
            first = next((line for line in batch if _CUSTOM_AR_OFF_RE.search(line)), None)
            if first is not None:
                self.custom_ar_disabled_line = first.strip()[:300]

    def _feed_records(self, line: str, source: str) -> None:
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


def own_markers(markers: list[Marker], start_ticks: int | None, scan: Scan) -> list[Marker]:
    """The markers printed by this very process: same pid (already) and, where the marker says, same start time."""
    if start_ticks is None:
        return list(markers)
    own = [m for m in markers if m.get("start") is None or m["start"] == start_ticks]
    scan.other_process_markers += len(markers) - len(own)
    return own
