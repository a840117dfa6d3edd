"""Simulated ``sglang.srt.model_executor.model_runner`` (TEST EQUIPMENT).

Walks through SGLang's start-up phases with SGLang's log lines: torch.distributed/NCCL init (simulated
NCCL log lines from this process's real environment), weight load (registers the simulated GPU memory
in ``sim-state/gpu-procs``), KV cache, CUDA graph capture.  No GPU, no model math.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from sglang._sim import runtime
from sglang._sim.nccl import allreduce_sizes, emit_tuning, simulate_comm_init
from sglang.srt.model_loader.loader import DefaultModelLoader
from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)



def used_mib_on_gpu(gpu: int, exclude_pid: int | None = None) -> int:
    total = 0
    d = runtime.gpu_procs_dir()
    try:
        entries = list(d.glob("*.json"))
    except OSError:
        return 0
    for p in entries:
        try:
            e = json.loads(p.read_text())
            pid = int(e["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid == exclude_pid or int(e.get("gpu", -1)) != gpu:
            continue
        if not os.path.exists(f"/proc/{pid}"):
            continue
        total += int(e.get("used_mib", 0))
    return total


class ModelRunner:
    def __init__(
        self,
        server_args: ServerArgs,
        gpu_id: int,
        tp_rank: int,
        tp_size: int,
        cfg: dict[str, Any],
        nccl_port: int,
    ) -> None:
        self.server_args = server_args
        self.gpu_id = gpu_id
        self.tp_rank = tp_rank
        self.tp_size = tp_size
        self.cfg = cfg
        self.nccl_port = nccl_port
        self.total_gb = int(cfg["gpu_memory_mib"]) / 1024
        self.model_config = runtime.read_model_config(server_args.model_path)
        self.nccl_env: dict[str, str] = {}
        self.max_total_num_tokens = 0
        t = float(cfg.get("load_seconds", 0.3))
        self.phase_seconds = {"dist": 0.05 * t, "load": 0.8 * t, "kv": 0.05 * t, "graph": 0.1 * t}
        fail = cfg.get("fail") if int(cfg.get("fail_rank", 0)) == tp_rank else None
        self.fail = fail

        self.init_torch_distributed()
        self.load_model()
        self.init_memory_pool()
        if not server_args.disable_cuda_graph:
            self.init_device_graphs()

    def _sleep(self, phase: str) -> None:
        runtime.scaled_sleep(self.phase_seconds[phase], {"time_scale": self.cfg.get("time_scale", 1.0)})

    def init_torch_distributed(self) -> None:
        logger.info("Init torch distributed begin.")
        if self.gpu_id >= int(self.cfg["gpus"]):
            raise RuntimeError(
                "CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously reported at "
                "some other API call, so the stacktrace below might be incorrect.\nFor debugging consider "
                "passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
                "assertions.\n"
            )
        self._sleep("dist")
        if self.cfg.get("real_cuda"):
            # On a machine with GPUs: real GPU memory and a real NCCL communicator, so NCCL prints its own lines.
            from sglang._sim.cuda import real_comm_init

            self.nccl_env = real_comm_init(self.tp_rank, self.tp_size, self.gpu_id, self.nccl_port, self.cfg)
        elif self.tp_size > 1:
            self.nccl_env = simulate_comm_init(self.tp_rank, self.tp_size, self.gpu_id, self.cfg)
        # At TP 1 SGLang builds no NCCL communicator, so NCCL reads nothing and prints nothing: real 0.5.16 on an
        # H200 logged no NCCL line at all with NCCL_DEBUG=INFO (docs/real-sglang.md).
        logger.info("Init torch distributed ends. mem usage=0.56 GB")

    def load_model(self) -> None:
        others = used_mib_on_gpu(self.gpu_id, exclude_pid=os.getpid())
        avail = (int(self.cfg["gpu_memory_mib"]) - others) / 1024 - 0.56
        logger.info(f"Load weight begin. avail mem={avail:.2f} GB")
        if not self.cfg.get("real_cuda"):  # with real CUDA, the real nvidia-smi sees the memory itself
            runtime.register_gpu(self.gpu_id, int(self.cfg["per_gpu_memory_mib"]))
        if self.fail == "hang":
            runtime.sleep_forever()
        loader = DefaultModelLoader(self.server_args.model_path, self.cfg, self.gpu_id, self.tp_rank)
        free_mib = int(self.cfg["gpu_memory_mib"]) - others
        loader.load_model(self.phase_seconds["load"], free_mib)
        weights_gb = int(self.cfg["per_gpu_memory_mib"]) / 1024 * 0.55
        arch = (self.model_config.get("architectures") or ["DeepseekV3ForCausalLM"])[0]
        logger.info(
            f"Load weight end. type={arch}, dtype=torch.bfloat16, avail mem={avail - weights_gb:.2f} GB, "
            f"mem usage={weights_gb:.2f} GB."
        )
        if self.cfg.get("moe_kernel_config") == "default":
            logger.warning(
                "Using default MoE kernel config. Performance might be sub-optimal! Config file not found at %s, "
                "you can create them with https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/"
                "fused_moe_triton",
                f"{os.path.dirname(__file__)}/configs/triton_3_4_0/E=256,N=256,device_name="
                f"{str(self.cfg['gpu_name']).replace(' ', '_')}.json",
            )
        if self.server_args.speculative:
            draft = runtime.read_model_config(self.server_args.speculative_draft_model_path)
            darch = (draft.get("architectures") or ["LlamaForCausalLMEagle3"])[0]
            logger.info(f"Load weight begin. avail mem={avail - weights_gb:.2f} GB")
            logger.info(
                f"Load weight end. type={darch}, dtype=torch.bfloat16, "
                f"avail mem={avail - weights_gb - 1.9:.2f} GB, mem usage=1.90 GB."
            )

    def init_memory_pool(self) -> None:
        self._sleep("kv")
        kv_gb = int(self.cfg["per_gpu_memory_mib"]) / 1024 * 0.4
        self.max_total_num_tokens = int(kv_gb * 1024**3 / (2 * 70 * 1024))
        logger.info(
            f"KV Cache is allocated. #tokens: {self.max_total_num_tokens}, K size: {kv_gb / 2:.2f} GB, "
            f"V size: {kv_gb / 2:.2f} GB"
        )
        avail = (int(self.cfg["gpu_memory_mib"]) - int(self.cfg["per_gpu_memory_mib"])) / 1024
        logger.info(f"Memory pool end. avail mem={avail:.2f} GB")

    def init_device_graphs(self) -> None:
        avail = (int(self.cfg["gpu_memory_mib"]) - int(self.cfg["per_gpu_memory_mib"])) / 1024
        bs = self.server_args.cuda_graph_max_bs
        # 0.5.16 logs each capture by its role and phase (model_runner_components/cuda_graph_setup.py: "Capture
        # {capture_name} CUDA graph begin/end.", capture_name "target verify" under speculation, "target decode"
        # without); the releases before it, the older lines below.
        new_lines = runtime.version() >= (0, 5, 16)
        sa0 = self.server_args
        what = "target verify" if sa0.speculative_algorithm else "target decode"
        per_req = int(sa0.speculative_num_draft_tokens or 1) if sa0.speculative_algorithm else 1
        capture_bs = [1, 2, 4, 8, *range(16, int(bs or 8) + 1, 8)]
        if new_lines:
            logger.info(f"Capture {what} CUDA graph begin. backend=full, num_tokens_per_req={per_req}, "
                        f"bs={capture_bs}, avail mem={avail:.2f} GB")
        else:
            logger.info(f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail:.2f} GB")
        start = time.monotonic()
        self._sleep("graph")
        if not new_lines:
            logger.info(f"Capture cuda graph bs [1, 2, 4, 8, ..., {bs}]")
        if self.tp_rank == 0 and self.tp_size > 1 and not self.cfg.get("real_cuda"):
            # NCCL schedules each captured all-reduce once, at capture: its rank 0 logs the choice then, and never
            # for the replays. Decode (and the draft's steps) carry bs tokens, verify bs x draft tokens.
            sa = self.server_args
            draft = int(sa.speculative_num_draft_tokens or (int(sa.speculative_num_steps or 0) + 1)) \
                if sa.speculative else 0
            sizes = []
            for b in [1, 2, 4, 8, *range(16, int(bs or 8) + 1, 8)]:
                sizes += allreduce_sizes(self.model_config, b)
                if draft:
                    sizes += allreduce_sizes(self.model_config, b * draft)
            emit_tuning(os.getpid(), self.gpu_id, sizes, self.tp_size, self.cfg, os.environ)
        if new_lines:
            logger.info(f"Capture {what} CUDA graph end. elapsed={time.monotonic() - start:.2f} s, "
                        f"mem usage=0.85 GB, avail mem={avail - 0.85:.2f} GB.")
        else:
            logger.info(
                f"Capture cuda graph end. Time elapsed: {time.monotonic() - start:.2f} s. mem usage=0.85 GB. "
                f"avail mem={avail - 0.85:.2f} GB."
            )

    @property
    def context_len(self) -> int:
        if self.server_args.context_length:
            return int(self.server_args.context_length)
        return int(self.model_config.get("max_position_embeddings") or 131072)
