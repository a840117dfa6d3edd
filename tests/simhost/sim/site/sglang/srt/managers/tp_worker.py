"""Simulated ``sglang.srt.managers.tp_worker`` (TEST EQUIPMENT)."""

from __future__ import annotations

from typing import Any

from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.server_args import ServerArgs


class TpModelWorker:
    def __init__(
        self, server_args: ServerArgs, gpu_id: int, tp_rank: int, nccl_port: int, cfg: dict[str, Any]
    ) -> None:
        tp_size_per_node = server_args.tp_size
        self.model_runner = ModelRunner(
            server_args=server_args,
            gpu_id=gpu_id,
            tp_rank=tp_rank,
            tp_size=tp_size_per_node,
            cfg=cfg,
            nccl_port=nccl_port,
        )
