"""Real GPU work for the simulator's schedulers (TEST EQUIPMENT), used on a machine that has GPUs.

With ``"real_cuda": true`` in the simulator config, each scheduler does what SGLang's does before serving: takes
GPU memory on its device (so the real ``nvidia-smi`` lists it) and creates a real NCCL communicator through
torch.distributed, running one all-reduce. NCCL itself then prints its ``NCCL INFO ... set by environment to ...``
lines (with ``NCCL_DEBUG=INFO``) for the values this process really holds: the evidence check-env parses on a
real host. Everything else (weights, model math) stays simulated.
"""

from __future__ import annotations

import os
from typing import Any

_KEEP: list[Any] = []  # tensors and the process group live as long as the scheduler


def real_comm_init(rank: int, nranks: int, gpu_id: int, nccl_port: int, cfg: dict[str, Any]) -> dict[str, str]:
    import torch
    import torch.distributed as dist

    ndev = torch.cuda.device_count()
    if ndev == 0:
        raise RuntimeError("real_cuda is set but torch sees no CUDA device")
    device = gpu_id % ndev
    torch.cuda.set_device(device)
    mib = int(cfg.get("per_gpu_memory_mib", 2048))
    _KEEP.append(torch.empty(mib * (1 << 20), dtype=torch.uint8, device=f"cuda:{device}"))
    if nranks == 1:
        return {}   # SGLang at TP 1 creates no NCCL communicator (real 0.5.16 printed no NCCL line)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{nccl_port}", rank=rank, world_size=nranks,
                            device_id=torch.device(f"cuda:{device}"))
    t = torch.ones(1024, device=f"cuda:{device}") * (rank + 1)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    expected = nranks * (nranks + 1) / 2
    if float(t[0].item()) != expected:
        raise RuntimeError(f"all-reduce gave {float(t[0].item())}, expected {expected}")
    _KEEP.append(t)
    return {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
