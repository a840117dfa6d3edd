"""What links this host's GPUs, for check-env's facts: the GPUs and their interconnect as ``nvidia-smi`` reports it
(NVLink, PCIe, one GPU), and the InfiniBand devices. Moved out of ``gather`` (processes and files) as its own
job; read once per ``gather``.
"""

from __future__ import annotations

import os
import re
from typing import TypedDict

from .. import gpus
from ..common import AgentError

SMI_TIMEOUT_S = 10.0


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


class GpuFacts(TypedDict):
    """The host's GPUs as check-env reads them: how many, their names, the link between them, and from where."""

    count: int | None  # None: nvidia-smi missing or failed
    names: list[str]
    interconnect: str  # nvlink | pcie | single | unknown | ... (``parse_topology``)
    source: str


# ``nvidia-smi nvlink -s``: per GPU a header line as ``-L`` prints it, then one line per NVLink link, its speed when
# it is up ("\t Link 0: 26.562 GB/s") or ``<inactive>``; a GPU without NVLink has no speed line.
NVLINK_QUERY = ["nvlink", "-s"]
GPU_LINE = re.compile(r"^GPU \d+: (.*?)(?: \(UUID: [^)]*\))?\s*$")
ACTIVE_LINK = re.compile(r"^\s+Link \d+: \d+(?:\.\d+)? [GM]B/s\s*$")


def start_gpu_facts() -> gpus.Queries:
    """Start the query now (each nvidia-smi run costs tens of milliseconds on a real host): the caller reads /proc
    and the log while it runs and collects it with :func:`read_gpu_facts`. One query, ``nvlink -s``, names the GPUs
    and says whether any NVLink is up, which is what ``-L`` and ``topo -m`` told together (:func:`parse_nvlink`)."""
    return gpus.Queries([NVLINK_QUERY], timeout=SMI_TIMEOUT_S)


def parse_nvlink(text: str) -> tuple[list[str], str] | None:
    """(the GPUs' names, the interconnect) from ``nvidia-smi nvlink -s``; None when it lists no GPU (a driver
    without the query, or one that prints nothing for GPUs without NVLink). The interconnect reads as
    :func:`parse_topology` reads ``topo -m``: ``single`` for one GPU, ``nvlink`` when any GPU has a link up (a
    ``topo -m`` cell ``NV#``: a bonded set of NVLinks to a peer or an NVSwitch), ``pcie`` otherwise."""
    names = [m.group(1) for m in map(GPU_LINE.match, text.splitlines()) if m]
    if not names:
        return None
    if len(names) == 1:
        return names, "single"
    return names, "nvlink" if any(ACTIVE_LINK.match(ln) for ln in text.splitlines()) else "pcie"


def read_gpu_facts(started: gpus.Queries | None) -> GpuFacts:
    """The GPUs and their interconnect from the query :func:`start_gpu_facts` started; where it named no GPU,
    from ``-L`` and ``topo -m`` as before (two more runs, on such hosts only)."""
    out = _outputs(started)
    parsed = parse_nvlink(out[0]) if out and out[0] else None
    if parsed is not None:
        names, inter = parsed
        return {"count": len(names), "names": names, "interconnect": inter, "source": "nvidia-smi nvlink -s"}
    outs = _outputs(gpus.Queries([["-L"], ["topo", "-m"]], timeout=SMI_TIMEOUT_S)) if out is not None else None
    listing, topo = (outs[0], outs[1]) if outs else (None, None)
    if listing is None:
        return {
            "count": None,
            "names": [],
            "interconnect": "unknown",
            "source": "nvidia-smi missing or failed",
        }
    names = [m.group(1) for m in map(GPU_LINE.match, listing.splitlines()) if m]
    inter = parse_topology(topo) if topo else "unknown"
    if inter == "unknown" and len(names) == 1:
        inter = "single"
    return {
        "count": len(names),
        "names": names,
        "interconnect": inter,
        "source": "nvidia-smi -L" + (" + topo -m" if topo else " (topo -m unavailable)"),
    }


def _outputs(started: gpus.Queries | None) -> list[str | None] | None:
    """Each query's output (None for one that failed); None without nvidia-smi, or when it did not answer."""
    try:
        return started.outputs(strict=False) if started is not None else None
    except AgentError:
        return None


def gpu_facts() -> GpuFacts:
    """The query started and read at once."""
    return read_gpu_facts(start_gpu_facts())


def infiniband() -> list[str] | None:
    """InfiniBand devices of this host (``/sys/class/infiniband``); [] when none, None when it cannot tell."""
    try:
        return sorted(os.listdir("/sys/class/infiniband"))
    except FileNotFoundError:
        return []
    except OSError:
        return None
