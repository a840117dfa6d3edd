"""GPUs as ``nvidia-smi`` reports them (the real query formats, see shared/reference/gpu-host-facts.md)."""

from __future__ import annotations

import subprocess
import time
from typing import TYPE_CHECKING, Any

from . import procs
from .common import AgentError, EventSink

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from .protocol import GpuApp, GpuInfo, GpusAnswer, GpuSnapshot, GpusRequest

GPU_FIELDS = "index,uuid,name,memory.used,memory.total"
APP_FIELDS = "pid,gpu_uuid,used_memory,process_name"


class Queries:
    """nvidia-smi queries started now, read later: each run costs tens of ms on a real host, so a caller starts them
    and does other work (scanning /proc, waiting for a process to exit) while they run."""

    def __init__(self, queries: list[list[str]], timeout: float = 15.0) -> None:
        self.timeout = timeout
        self.available = True
        self.running: list[tuple[list[str], subprocess.Popen[str]]] = []
        for args in queries:
            # Popen searches PATH as shutil.which would (the first executable nvidia-smi); asking it directly
            # spares every call the import of shutil (and with it bz2, lzma, zlib): a few ms on the host.
            try:
                proc = subprocess.Popen(["nvidia-smi", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, stdin=subprocess.DEVNULL)
            except (FileNotFoundError, PermissionError):  # none on PATH, or none executable: no nvidia-smi
                self.stop()  # (gone between two starts: none counts)
                self.available, self.running = False, []
                break
            self.running.append((args, proc))

    def stop(self) -> None:
        """End and reap every query still running (none once :meth:`outputs` read them): a caller that gives up
        before reading leaves no nvidia-smi behind the agent."""
        for _, proc in self.running:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    def outputs(self, strict: bool = True) -> list[str | None] | None:
        """Each query's output (None without nvidia-smi). ``strict``: a failing query raises AgentError; otherwise
        its output is None and the others still count. A query past ``timeout`` raises AgentError."""
        if not self.available:
            return None
        deadline = time.monotonic() + self.timeout
        outputs: list[str | None] = []
        for args, proc in self.running:
            try:
                out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stop()
                raise AgentError("gpu_query", f"nvidia-smi {' '.join(args)} did not answer within "
                                 f"{self.timeout:.0f} s", "the GPU driver may be wedged; check `nvidia-smi` on the "
                                 "host") from None
            if proc.returncode != 0:
                if strict:
                    raise AgentError("gpu_query", f"nvidia-smi {' '.join(args)} failed: {err.strip() or out.strip()}")
                outputs.append(None)
                continue
            outputs.append(out)
        return outputs


def smi_many(queries: list[list[str]], timeout: float = 15.0, strict: bool = True) -> list[str | None] | None:
    """Run several nvidia-smi queries at once; None without nvidia-smi (see :class:`Queries`)."""
    return Queries(queries, timeout).outputs(strict)


def _smi(args: list[str], timeout: float = 15.0) -> str | None:
    outs = smi_many([args], timeout)
    return None if outs is None else outs[0]


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.split(",")] for line in text.splitlines() if line.strip()]


def start_snapshot(with_apps: bool = True) -> Queries:
    """The queries of :func:`snapshot`, started now; :func:`read_snapshot` reads them."""
    queries = [[f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits"]]
    if with_apps:
        queries.append([f"--query-compute-apps={APP_FIELDS}", "--format=csv,noheader,nounits"])
    return Queries(queries)


def snapshot(with_apps: bool = True) -> GpuSnapshot:
    """GPUs and the processes holding them; ``available`` is False when the host has no nvidia-smi."""
    return read_snapshot(start_snapshot(with_apps))


def read_snapshot(started: Queries) -> GpuSnapshot:
    outs = started.outputs()
    if outs is None:
        return {"available": False, "gpus": [], "apps": []}
    gpus_out = outs[0] or ""
    gpus: list[GpuInfo] = []
    for r in _rows(gpus_out):
        if len(r) < 5:
            continue
        gpus.append({"index": int(r[0]), "uuid": r[1], "name": r[2], "used_mib": _num(r[3]),
                     "total_mib": _num(r[4])})
    by_uuid = {g["uuid"]: g["index"] for g in gpus}
    apps_out = (outs[1] or "") if len(outs) > 1 else ""
    apps: list[GpuApp] = []
    for r in _rows(apps_out):
        if len(r) < 4 or not r[0].isdigit():
            continue
        pid = int(r[0])
        # nvidia-smi names the process by its executable; /proc gives the live title (sglang::scheduler_TP0).
        cmd = procs.read_cmdline(pid) or r[3]
        apps.append({"pid": pid, "gpu": by_uuid.get(r[1], -1), "gpu_uuid": r[1], "used_mib": _num(r[2]),
                     "process_name": r[3], "cmdline": cmd})
    return {"available": True, "gpus": gpus, "apps": apps}


def _num(s: str) -> int:
    try:
        return int(float(s.split()[0]))
    except (ValueError, IndexError):
        return 0


def topology() -> str | None:
    try:
        return _smi(["topo", "-m"])
    except AgentError:
        return None


def wait_clean(targets: list[int], idle_mib: int, timeout: float, samples: int = 2,
               interval: float = 0.02) -> dict[str, Any]:
    """The GPU-clean gate: no compute process on the target GPUs and memory back to idle, ``samples`` times in a row.

    Two samples: the gate runs after the stop step has confirmed every stale process gone, and a real H200 lists no
    process and shows its memory back at idle the moment the holder exits (shared/reference/gpu-host-facts.md §3),
    so the first clean sample is the proof and the second, a moment later, that nothing took the GPUs back. Each
    sample is two nvidia-smi runs (tens of ms on a real host), which is why there are not more.
    Bounded by ``timeout``; on failure the error names the PID and command line that still hold a GPU.
    """
    deadline = time.monotonic() + timeout
    clean_in_a_row = 0
    last: GpuSnapshot
    started = time.monotonic()
    while True:
        last = snapshot()
        if not last["available"]:
            raise AgentError("gpu_busy", "nvidia-smi is not on the host's PATH, so the GPUs cannot be checked",
                             "install the NVIDIA driver utilities or fix PATH for non-interactive SSH sessions")
        holders = [a for a in last["apps"] if a["gpu"] in targets]
        dirty = [g for g in last["gpus"] if g["index"] in targets and g["used_mib"] > idle_mib]
        if not holders and not dirty:
            clean_in_a_row += 1
            if clean_in_a_row >= samples:
                return {"gpus": [g for g in last["gpus"] if g["index"] in targets], "samples": samples,
                        "waited_s": round(time.monotonic() - started, 3)}
        else:
            clean_in_a_row = 0
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    holders = [a for a in last["apps"] if a["gpu"] in targets]
    if holders:
        h = holders[0]
        more = f" (and {len(holders) - 1} more)" if len(holders) > 1 else ""
        raise AgentError("gpu_busy", f"GPU {h['gpu']} is still held by PID {h['pid']} ({h['cmdline']}), "
                         f"{h['used_mib']} MiB{more}, after {timeout:.0f} s",
                         f"stop it (kill -9 {h['pid']}) or raise timeouts.gpu_clean", holders=holders)
    g = next(g for g in last["gpus"] if g["index"] in targets and g["used_mib"] > idle_mib)
    raise AgentError("gpu_busy", f"GPU {g['index']} shows {g['used_mib']} MiB used with no process listed, "
                     f"above the idle limit of {idle_mib} MiB, after {timeout:.0f} s",
                     "a process in another container may hold it; raise gpu_idle_mib if this is the idle level",
                     gpus=last["gpus"])


def report(req: GpusRequest, sink: EventSink) -> GpusAnswer:
    """The ``gpus`` verb: the GPUs and their holders, with ``topology`` the links between them."""
    snap = snapshot()
    out: GpusAnswer = {"available": snap["available"], "gpus": snap["gpus"], "apps": snap["apps"]}
    if req.get("topology"):
        out["topology"] = topology()
    return out
