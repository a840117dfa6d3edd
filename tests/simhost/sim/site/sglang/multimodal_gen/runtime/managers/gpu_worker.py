"""Simulated ``sglang.multimodal_gen.runtime.managers.gpu_worker`` (TEST EQUIPMENT).

SGLang >= 0.5.5 ships a second ``def run_scheduler_process(`` here for its diffusion runtime; it is a
decoy for source patchers, which must target ``sglang/srt/managers/scheduler.py`` only.  Never called.
"""

from __future__ import annotations

from typing import Any


def run_scheduler_process(
    local_rank: int,
    rank: int,
    master_port: int,
    server_args: Any,
    pipe_writer: Any,
    task_pipe_r: Any = None,
    result_pipe_w: Any = None,
    task_pipes_to_slaves: Any = None,
    result_pipes_from_slaves: Any = None,
) -> None:
    raise RuntimeError("sgl_diffusion scheduler is not simulated (decoy for patchers)")
