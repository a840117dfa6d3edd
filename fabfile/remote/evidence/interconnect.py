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


def start_gpu_facts() -> gpus.Queries:
    """Start both nvidia-smi queries now (each run costs tens of milliseconds on a real host): the caller reads
    /proc and the log while they run and collects them with :func:`read_gpu_facts`."""
    return gpus.Queries([["-L"], ["topo", "-m"]], timeout=SMI_TIMEOUT_S)


def read_gpu_facts(started: gpus.Queries | None) -> GpuFacts:
    """The GPUs and their interconnect from the queries :func:`start_gpu_facts` started."""
    try:
        outs = started.outputs(strict=False) if started is not None else None
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


def gpu_facts() -> GpuFacts:
    """Both queries at once, read at once."""
    return read_gpu_facts(start_gpu_facts())


def infiniband() -> list[str] | None:
    """InfiniBand devices of this host (``/sys/class/infiniband``); [] when none, None when it cannot tell."""
    try:
        return sorted(os.listdir("/sys/class/infiniband"))
    except FileNotFoundError:
        return []
    except OSError:
        return None
