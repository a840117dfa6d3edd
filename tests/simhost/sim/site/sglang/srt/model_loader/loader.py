"""Simulated ``sglang.srt.model_loader.loader`` (TEST EQUIPMENT): pretends to read checkpoint shards.

Failure injection ("load_traceback", "cuda_oom") raises from here so the traceback a scheduler logs
looks like one from a real weight load.
"""

from __future__ import annotations

import logging
import time
from typing import Any

logger = logging.getLogger(__name__)


class SafetensorError(Exception):
    """Stand-in for safetensors' Rust error type."""


SafetensorError.__module__ = "safetensors_rust"


class OutOfMemoryError(RuntimeError):
    """Stand-in for torch.OutOfMemoryError (printed as ``torch.OutOfMemoryError``)."""


OutOfMemoryError.__module__ = "torch"


NUM_SHARDS = 64


def _progress_line(done: int, total: int, elapsed: float) -> str:
    pct = int(100 * done / total)
    rate = done / elapsed if elapsed > 0 else 0.0
    remaining = (total - done) / rate if rate > 0 else 0.0

    def mmss(s: float) -> str:
        return f"{int(s) // 60:02d}:{int(s) % 60:02d}"

    rate_s = f"{rate:.2f}it/s" if done else "?it/s"
    return (
        f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {done}/{total} "
        f"[{mmss(elapsed)}<{mmss(remaining) if done else '?'}, {rate_s}]"
    )


def _safetensors_load_file(filename: str) -> None:
    raise SafetensorError("Error while deserializing header: MetadataIncompleteBuffer")


def _allocate_tensor(nbytes: int, gpu_id: int, total_mib: int, free_mib: int) -> None:
    gib = 1024**3
    raise OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {nbytes / gib:.2f} GiB. GPU {gpu_id} has a total capacity "
        f"of {total_mib / 1024:.2f} GiB of which {max(free_mib, 0) / 1024:.2f} GiB is free. Including "
        f"non-PyTorch memory, this process has {(total_mib - max(free_mib, 0)) / 1024:.2f} GiB memory in "
        "use. Of the allocated memory "
        f"{(total_mib - max(free_mib, 0)) / 1024 - 1.02:.2f} GiB is allocated by PyTorch, and 1.02 GiB is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


class DefaultModelLoader:
    def __init__(self, model_path: str, cfg: dict[str, Any], gpu_id: int, tp_rank: int) -> None:
        self.model_path = model_path
        self.cfg = cfg
        self.gpu_id = gpu_id
        self.tp_rank = tp_rank

    def load_model(self, seconds: float, free_mib: int) -> None:
        cfg = self.cfg
        fail = cfg.get("fail") if int(cfg.get("fail_rank", 0)) == self.tp_rank else None
        need_mib = int(cfg["per_gpu_memory_mib"])
        slow = fail == "slow_load"
        start = time.monotonic()
        logger.info(_progress_line(0, NUM_SHARDS, 0.0))
        steps = max(1, min(NUM_SHARDS, int(seconds / 1.0))) if slow else 1
        for i in range(1, steps + 1):
            time.sleep(seconds * float(cfg.get("time_scale", 1.0)) / steps / (2 if fail else 1))
            if fail == "load_traceback" and i == steps:
                _safetensors_load_file(f"{self.model_path}/model-00017-of-000{NUM_SHARDS}.safetensors")
            if fail == "cuda_oom" and i == steps:
                _allocate_tensor(2 * 1024**3, self.gpu_id, int(cfg["gpu_memory_mib"]), min(free_mib, 1075))
            if need_mib > free_mib:
                _allocate_tensor(need_mib * 1024**2 // 2, self.gpu_id, int(cfg["gpu_memory_mib"]), free_mib)
            if slow or i == steps:
                done = NUM_SHARDS * i // steps
                logger.info(_progress_line(done, NUM_SHARDS, time.monotonic() - start))
