"""``gather``: the agent's half of ``check-env`` (reads /proc, the server log, NCCL_DEBUG_FILE files, nvidia-smi).

It finds the launcher and its scheduler processes, reads what each one's NCCL and the specdeploy markers printed
(``nccllog``), their start environment, the host's GPUs and what SGLang itself sets (``sglangnccl``); ``evidence``
judges the result.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from .. import gpus, procs
from ..common import AgentError, EventSink, atomic_write, ensure_private_dir, flag_value
from . import interconnect, ncclused
from .nccllog import PidEvidence, Scan, own_markers
from .sglangnccl import argv_flags, custom_ar, sglang_nccl_rules

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import DebugFile, GatherRequest, GoneRank, LogRead, RankCensus, ScanKey, ScanState
    from .interconnect import GpuFacts

SCHEMA = 1
LOG_CAP_BYTES = 64 << 20
DEBUG_FILE_CAP_BYTES = 16 << 20
DEBUG_FILES_MAX = 256

# Which variables NCCL reads when, and how it parses and echoes them: fabfile/remote/evidence/ncclenv.py.
# Environment values we report from /proc (besides the expected ones); never the whole environment (secrets).
DIAG_VARS = ("SPT_NOENV", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "SGLANG_RUN_ID")

DRAFT_WORKER_NOTE = (
    "SGLang runs the EAGLE draft worker inside each scheduler process (it shares that process's "
    "environment and NCCL groups), so the scheduler rows cover the draft model too"
)

class Tail:
    """Where :func:`read_lines` stopped: ``at``, the file position after the last newline it read (every line
    before it is complete), and ``lines``, what followed it (a line still being written, or cut by the cap)."""

    __slots__ = ("at", "lines")

    def __init__(self) -> None:
        self.at = 0
        self.lines: list[str] = []


def read_lines(path: str, offset: int, cap: int, *, chunk: int = 1 << 20,
               tail: Tail | None = None) -> tuple[Iterator[str], LogRead]:
    """Decoded lines of ``path`` from ``offset``, at most ``cap`` bytes, streamed in ``chunk``-byte reads; a blank
    line comes as ``""``. With ``tail``, the lines after the last newline are left there instead of yielded.

    The info dict (``bytes_read``, ``capped``) and ``tail`` are complete once the iterator is exhausted.
    """
    info: LogRead = {
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
    info["exists"], info["size"] = True, size
    if offset > size:  # truncated or replaced since the deploy: what is there now is all we have
        info["rotated"] = True
        offset = 0

    def lines() -> Iterator[str]:
        with f:
            f.seek(offset)
            left = cap
            rest = b""
            while left > 0:
                data = f.read(min(chunk, left))
                if not data:
                    break
                left -= len(data)
                info["bytes_read"] += len(data)
                whole, nl, rest = (rest + data).rpartition(b"\n")
                if nl:
                    # The complete lines decoded at once (no UTF-8 sequence holds a newline byte), split also on
                    # '\r' (progress bars rewrite a line with it); headers are searched anywhere.
                    yield from whole.decode("utf-8", "replace").splitlines()
            if left <= 0 and f.read(1):
                info["capped"] = True
            last = rest.decode("utf-8", "replace").splitlines() if rest else []
            if tail is None:
                yield from last
            else:
                tail.at, tail.lines = offset + info["bytes_read"] - len(rest), last

    return lines(), info


# ----------------------------------------------------------------------------------------------------
# the server log's scan, carried over from one check-env to the next

# A log region this long since the last saved scan is worth saving the scan for: below it, reading the region
# again costs less than the save (a day of a busy server's log is tens of MiB; a fresh deploy's, tens of KiB).
SCAN_SAVE_MIN_BYTES = 1 << 20
# What is hashed on either side of a saved scan to tell that the log still holds what was scanned.
SCAN_WINDOW_BYTES = 4096


def _code_version() -> str:
    """The scan's own code: a saved scan is used only by the code that wrote it."""
    from ..patch import markers
    from . import nccllog

    h = hashlib.sha256()
    for module_file in (__file__, nccllog.__file__, markers.__file__):
        with open(str(module_file), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _window_sha(f: Any, start: int, end: int) -> str:
    f.seek(start)
    return hashlib.sha256(f.read(max(0, end - start))).hexdigest()


def _saved_scan(cache: str, key: ScanKey, path: str, offset: int) -> tuple[int, ScanState] | None:
    """(position, the scan's state) of the saved scan of this log region, when it is this region's and the log
    still holds the bytes it read (same file, not shorter, the same bytes at the start of the region and before
    the position); None otherwise."""
    try:
        with open(cache, "rb") as f:
            saved = json.loads(f.read())
        if not isinstance(saved, dict) or saved.get("key") != key:
            return None
        at = int(saved["at"])
        with open(path, "rb") as log:
            st = os.fstat(log.fileno())
            if [st.st_dev, st.st_ino] != saved["file"] or st.st_size < at or at < offset:
                return None
            head = _window_sha(log, offset, min(at, offset + SCAN_WINDOW_BYTES))
            before = _window_sha(log, max(offset, at - SCAN_WINDOW_BYTES), at)
        if [head, before] != saved["windows"]:
            return None
        state = saved["scan"]
        # written by ``_save_scan`` of this very code (the key holds its hash): Scan.state()'s shape
        return (at, cast("ScanState", state)) if isinstance(state, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none saved, or unreadable: the region is read whole


def _save_scan(cache: str, key: ScanKey, path: str, offset: int, at: int, scan: Scan) -> None:
    """Save the scan of the region up to ``at`` (after a newline); one saved scan per host: the current deploy's."""
    try:
        with open(path, "rb") as log:
            st = os.fstat(log.fileno())
            windows = [_window_sha(log, offset, min(at, offset + SCAN_WINDOW_BYTES)),
                       _window_sha(log, max(offset, at - SCAN_WINDOW_BYTES), at)]
        directory = os.path.dirname(cache)
        ensure_private_dir(directory, "the saved scans' directory")
        data = json.dumps({"key": key, "at": at, "file": [st.st_dev, st.st_ino], "windows": windows,
                           "scan": scan.state()}).encode()
        atomic_write(cache, data, 0o600)
        for name in os.listdir(directory):  # an older deploy's saved scan serves nothing any more
            if name.endswith(".json") and os.path.join(directory, name) != cache:
                os.unlink(os.path.join(directory, name))
    except (OSError, AgentError):
        pass  # not saved: the next check-env reads the region whole, as this one did


def scan_log(req: GatherRequest, scan: Scan, saved_scans: str | None = None) -> LogRead:
    """Feed the deploy's part of the server log to the scan; what was read (``read_lines``' info, as if the region
    was read whole).

    ``saved_scans``: a private directory where the scan of a long region is saved (a busy server writes tens of
    MiB a day, and check-env runs from cron): the next call, on the same log region with the same code, goes on
    from where the saved scan stopped, reading only what was written since. The scan is a fold over the lines in
    order, so going on from a saved state gives what a whole read gives; a log shorter than the saved position,
    replaced, or with other bytes at the start of the region or just before the position is read whole again."""
    log_path = req.get("log_path")
    log_offset = int(req.get("log_offset") or 0)
    cap = int(req.get("log_cap_bytes") or LOG_CAP_BYTES)
    if not log_path:
        return {"path": log_path, "exists": False}
    path = str(log_path)
    deploy_id = req.get("deploy_id")
    cache: str | None = None
    key: ScanKey | None = None
    start, done = log_offset, 0
    if saved_scans and deploy_id and str(deploy_id).replace("-", "").isalnum():
        cache = os.path.join(saved_scans, f"{deploy_id}.json")
        key = {"code": _code_version(), "path": path, "offset": log_offset, "cap": cap, "deploy_id": deploy_id}
        saved = _saved_scan(cache, key, path, log_offset)
        if saved is not None:
            start, state = saved
            done = start - log_offset
            scan.load_state(state)
    tail = Tail()
    lines, info = read_lines(path, start, cap - done, tail=tail)
    scan.feed_lines(lines, "log")
    if info["exists"] and not info["rotated"]:
        info["offset"], info["bytes_read"], info["cap_bytes"] = log_offset, info["bytes_read"] + done, cap
        if cache is not None and key is not None and tail.at - start >= SCAN_SAVE_MIN_BYTES:
            _save_scan(cache, key, path, log_offset, tail.at, scan)
    elif done:  # the saved scan's region is gone after all (replaced between the two opens): read it whole
        scan.clear()
        return scan_log(req, scan)
    scan.feed_lines(tail.lines, "log")
    return info


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


def _read_debug_files(scan: Scan, scheds: list[procs.ProcInfo], pattern: str) -> list[DebugFile]:
    """Feed each scheduler's NCCL_DEBUG_FILE files to the scan; a file older than its process is listed as stale."""
    debug_files: list[DebugFile] = []
    for p in scheds:
        started = _start_epoch(p.start_ticks)
        for path in _debug_file_paths(pattern, p.pid):
            entry: DebugFile = {"path": path, "pid": p.pid, "stale": False}
            try:
                mtime = os.path.getmtime(path)
            except OSError:
                continue
            if started is not None and mtime < started - 2.0:
                entry["stale"] = True  # an older process with the same pid wrote it
                debug_files.append(entry)
                continue
            lines, info = read_lines(path, 0, DEBUG_FILE_CAP_BYTES)
            scan.feed_lines(lines, f"debug_file:{path}")
            entry["bytes_read"], entry["capped"] = info["bytes_read"], info["capped"]
            debug_files.append(entry)
    return debug_files


def _scheduler_rows(scheds: list[procs.ProcInfo], scan: Scan, names: list[str]) -> list[dict[str, Any]]:
    """One evidence record per scheduler process: its environment, its NCCL lines and its own markers."""
    schedulers: list[dict[str, Any]] = []
    for p in scheds:
        st, vals, diag = _environ_view(p.pid, names)
        ev = scan.by_pid.get(p.pid) or PidEvidence()
        mine = own_markers(ev.markers, p.start_ticks, scan)
        schedulers.append(
            {
                "pid": p.pid,
                "ppid": p.ppid,
                "title": p.cmdline.split()[0],
                "label": procs.scheduler_label(p.cmdline),
                "rank": procs.scheduler_rank(p.cmdline),
                "start_ticks": p.start_ticks,
                "environ_status": st,
                "environ": vals,
                "environ_diag": diag,
                "nccl": ev.nccl_dict(),
                "markers": mine,
            }
        )
    return schedulers


def _model_config(argv: list[str] | None) -> dict[str, Any]:
    """The target model's config.json (hidden size, dtype) for the all-reduce sizes; {} when unreadable."""
    return ncclused.read_model_config(ncclused.model_path(argv))


def _facts(req: GatherRequest, found: dict[str, Any], launcher: dict[str, Any],
           schedulers: list[dict[str, Any]], scan: Scan, expected: dict[str, str],
           gpu_facts: GpuFacts | None, gpu_queries: gpus.Queries | None) -> dict[str, Any]:
    """What the judgement needs besides the processes: launch flags, GPUs, InfiniBand, what SGLang sets itself."""
    argv = req.get("launch_argv")
    argv_source = "record" if argv else None
    if not argv and launcher.get("identity") == "found_by_scan" and launcher.get("cmdline"):
        # not the recorded deploy: its own command line, never the stale record's
        argv, argv_source = str(launcher["cmdline"]).split(), "running launcher"
    flags = argv_flags(argv)
    gpu_info = gpu_facts if gpu_facts is not None else interconnect.read_gpu_facts(gpu_queries)
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
        "infiniband": interconnect.infiniband(),
        "sglang_version": req.get("sglang_version"),
        "gpus": gpu_info,
        "tp_size": flags["tp_size"],
        "launch_flags": {k: v for k, v in flags.items() if k != "tp_size"},
        "custom_all_reduce": custom_ar(flags, gpu_info, world, scan.custom_ar_disabled_line),
        "sglang_sets": rules,
        "model_shape": ncclused.model_shape(argv, _model_config(argv)),
        "flagged_expected_vars": flagged,
        "draft_worker": {
            "separate_processes": [{"pid": d.pid, "title": d.cmdline} for d in found["drafts"]],
            "note": DRAFT_WORKER_NOTE
            if not found["drafts"]
            else "separate draft process(es) found: they are not schedulers and are listed here only",
        },
        "gathered_at": time.time(),
    }
    return facts


def rank_census(req: GatherRequest, scheds: list[procs.ProcInfo], world: int | None) -> RankCensus:
    """How many ranks should run, how many do, and which are gone (sgl-project/sglang#6624: one scheduler dead,
    the rest alive and judged as if they were the whole server). The deploy's record lists its schedulers as they
    started (pid, title): one of them no longer under the launcher is gone, named by its pid. Without a record, a
    single node's TP size (the launch flags, else NCCL's ``nranks``) against the live TP ranks names the missing
    ranks without a pid."""
    live = {p.pid for p in scheds}
    recorded = [r for r in req.get("recorded_schedulers") or []
                if str(r.get("title") or "").startswith(procs.SCHEDULER_TITLE) and r.get("pid") is not None]
    if recorded:
        gone: list[GoneRank] = [{"pid": int(r["pid"]), "rank": procs.scheduler_rank(str(r["title"])),
                 "label": procs.scheduler_label(str(r["title"])), "title": r["title"]}
                for r in recorded if int(r["pid"]) not in live]
        return {"expected": len(recorded), "running": len(recorded) - len(gone), "gone": gone,
                "source": "the deploy's record of its schedulers, against the launcher's live children"}
    nnodes = flag_value(list(req.get("launch_argv") or []), "--nnodes")
    tp_only = all(set(procs.scheduler_ranks(p.cmdline) or {}) <= {"TP"} for p in scheds)
    if world and scheds and len(scheds) < world and tp_only and nnodes in (None, "1"):
        have = {procs.scheduler_rank(p.cmdline) for p in scheds}
        gone = [{"pid": None, "rank": r, "label": f"TP{r}", "title": None} for r in range(world) if r not in have]
        return {"expected": world, "running": len(scheds), "gone": gone,
                "source": "the TP size (launch flags, else NCCL's nranks) against the live schedulers"}
    return {"expected": len(scheds), "running": len(scheds), "gone": [], "source": "the live schedulers"}


def _launcher_and_schedulers(req: GatherRequest, names: list[str]) -> dict[str, Any]:
    """The processes (``_find_processes``), with the launcher's start environment read when it is alive."""
    launcher_pid = req.get("launcher_pid")
    launcher_ticks = req.get("launcher_start_ticks")
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
    return found


def _attribute(scan: Scan, launcher: dict[str, Any], scheds: list[procs.ProcInfo], log_info: LogRead) -> None:
    """The launcher's own NCCL lines and markers; the log's counts, with lines of pids that are neither."""
    sched_pids = {p.pid for p in scheds}
    lev = scan.by_pid.get(launcher["pid"]) if launcher["pid"] is not None else None
    launcher["nccl"] = (lev or PidEvidence()).nccl_dict()
    launcher["markers"] = own_markers(lev.markers, launcher.get("start_ticks"), scan) if lev else []
    unattributed = {
        str(pid): ev.lines + len(ev.markers)
        for pid, ev in scan.by_pid.items()
        if pid not in sched_pids and pid != launcher["pid"]
    }
    log_info["nccl_lines"], log_info["marker_lines"] = scan.nccl_lines, scan.marker_lines
    log_info["foreign_deploy_markers"] = scan.foreign_markers
    log_info["other_process_markers"] = scan.other_process_markers
    log_info["unattributed_pids"] = unattributed


def gather(req: GatherRequest, sink: EventSink, gpu_facts: GpuFacts | None = None,
           saved_scans: str | None = None, gpu_queries: gpus.Queries | None = None) -> dict[str, Any]:
    """Collect per-scheduler evidence for the expected NCCL variables. See the module docstring.

    ``gpu_facts``: the GPU listing and topology when the caller already read them (a deploy reads them while its
    server loads: ``prefetch``); read here otherwise. ``saved_scans``: where the log's scan is saved and taken up
    again (``scan_log``); ``gpu_queries``: that listing's query, started by the caller (the check_env verb's door)."""
    expected = req.get("expected") or {}
    if not isinstance(expected, dict):
        raise AgentError("bad_request", "expected must be a {VAR: value} object")
    expected = {str(k): str(v) for k, v in expected.items()}
    names = sorted(expected)
    # nvidia-smi runs while /proc and the log are read (its two queries are the longest part of a check-env call)
    if gpu_facts is None and gpu_queries is None:
        gpu_queries = interconnect.start_gpu_facts()

    sink.emit("progress", step="processes")
    found = _launcher_and_schedulers(req, names)
    launcher = found["launcher"]

    sink.emit("progress", step="log")
    scan = Scan(req.get("deploy_id"))
    log_info = scan_log(req, scan, saved_scans)

    debug_pattern = req.get("nccl_debug_file") or launcher.get("environ_diag", {}).get("NCCL_DEBUG_FILE")
    debug_files: list[DebugFile] = []
    scheds: list[procs.ProcInfo] = found["schedulers"]
    if debug_pattern:
        sink.emit("progress", step="nccl_debug_files")
        debug_files = _read_debug_files(scan, scheds, str(debug_pattern))

    sink.emit("progress", step="schedulers")
    schedulers = _scheduler_rows(scheds, scan, names)
    _attribute(scan, launcher, scheds, log_info)

    sink.emit("progress", step="facts")
    facts = _facts(req, found, launcher, schedulers, scan, expected, gpu_facts, gpu_queries)
    inits = [int(i["nranks"]) for s in schedulers for i in s["nccl"]["inits"]]
    census = rank_census(req, scheds, facts["tp_size"] or (max(inits) if inits else None))
    return {
        "schema": SCHEMA,
        "expected": expected,
        "discovery": found["discovery"],
        "launcher": launcher,
        "schedulers": schedulers,
        "ranks": census,
        "other_sglang_processes": [{"pid": o.pid, "title": o.cmdline.split()[0]} for o in found["others"]],
        "log": log_info,
        "nccl_debug_files": {"pattern": debug_pattern, "files": debug_files},
        "facts": facts,
    }


LAUNCH_DIAG = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "SPT_NOENV")


def evidence_request(rec_or_req: Mapping[str, Any], *, deploy_id: str, log_path: str, log_offset: int, pid: int,
                     start_ticks: int | None, expected: dict[str, str]) -> GatherRequest:
    """What evidence.gather needs to judge the server of one deploy: its own log region, its launcher (pid and
    start time), its deploy id for the markers, and what it was launched with."""
    summary = rec_or_req.get("summary") or rec_or_req.get("launch") or {}
    env = summary.get("env") or {}
    patch = rec_or_req.get("patch") or {}
    return {"log_path": log_path, "log_offset": log_offset, "launcher_pid": pid, "launcher_start_ticks": start_ticks,
            "deploy_id": deploy_id, "expected": expected,
            "nccl_debug_file": (rec_or_req.get("verify") or {}).get("nccl_debug_file"),
            "sglang_version": rec_or_req.get("sglang_version"), "launch_argv": summary.get("argv"),
            "patch_mode": rec_or_req.get("patch_mode") or patch.get("mode") or "env",
            "nccl_debug": rec_or_req.get("nccl_debug"),
            "launch_env": {k: env[k] for k in LAUNCH_DIAG if k in env},
            # as the deploy found them once ready (a deploy's own check has none yet: every rank is judged live)
            "recorded_schedulers": list(rec_or_req.get("schedulers") or []),
            "server": {"recorded_deploy": deploy_id, "is_recorded_deploy": True}}
