"""Simulated ``sglang.srt.managers.scheduler`` (TEST EQUIPMENT, not SGLang).

Same file and function name as SGLang: ``run_scheduler_process`` is the spawn target of every TP rank.
Its signature ends with a line that is exactly ``):`` at column 0 and its body opens with SGLang
0.5.11+'s ``load_plugins()`` call, so SGLang source patches apply here unchanged.  Each scheduler sets
its title with the real ``setproctitle`` package (which blanks ``/proc/PID/environ`` unless
``SPT_NOENV=1``), dies with its launcher (PR_SET_PDEATHSIG), and "initialises NCCL" by printing NCCL's
``set by environment`` lines for the NCCL_* values it really holds.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import time
import traceback
from typing import Any, Optional

import setproctitle

from sglang._sim import runtime
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.server_args import PortArgs, ServerArgs

try:
    from sglang.srt.plugins import load_plugins
except ImportError:  # SGLang < 0.5.11 has no plugin system

    def load_plugins() -> None:
        return None


logger = logging.getLogger(__name__)


def get_exception_traceback() -> str:
    etype, value, tb = sys.exc_info()
    return "".join(traceback.format_exception(etype, value, tb))


class Scheduler:
    """Holds the simulated model runner; the event loop only waits (requests are timed by the launcher)."""

    def __init__(
        self,
        server_args: ServerArgs,
        port_args: PortArgs,
        gpu_id: int,
        tp_rank: int,
        moe_ep_rank: int,
        pp_rank: int,
        dp_rank: Optional[int],  # noqa: UP045 - SGLang's own spelling
    ) -> None:
        self.server_args = server_args
        self.tp_rank = tp_rank
        self.gpu_id = gpu_id
        self.cfg = runtime.load_config()
        self.tp_worker = TpModelWorker(server_args, gpu_id, tp_rank, port_args.nccl_port, self.cfg)
        runner = self.tp_worker.model_runner
        self.max_total_num_tokens = runner.max_total_num_tokens
        self.context_len = runner.context_len
        logger.info(
            f"max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size="
            f"{server_args.chunked_prefill_size}, max_prefill_tokens={server_args.max_prefill_tokens}, "
            f"max_running_requests={server_args.max_running_requests or 4096}, "
            f"context_len={self.context_len}, available_gpu_mem=23.65 GB"
        )

    def get_init_info(self) -> dict[str, Any]:
        return {
            "status": "ready",
            "pid": os.getpid(),
            "tp_rank": self.tp_rank,
            "gpu_id": self.tp_worker.model_runner.gpu_id,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_req_input_len": self.context_len - 1,
            "context_len": self.context_len,
            "nccl_env": dict(self.tp_worker.model_runner.nccl_env),
        }

    def run_event_loop(self) -> None:
        cfg = self.cfg
        # scheduler_dead_unnoticed: the same death, but the launcher never notices (no watchdog: sglang#6624)
        if cfg.get("fail") in ("scheduler_killed", "scheduler_dead_unnoticed") and \
                int(cfg.get("fail_rank", 0)) == self.tp_rank:
            trigger = cfg.get("fail_trigger_file")
            if trigger:
                # a test that must see the schedulers alive first says when, instead of racing a delay
                while not os.path.exists(str(trigger)):
                    time.sleep(0.02)
            else:
                runtime.scaled_sleep(float(cfg.get("fail_after_seconds", 0.3)), {"time_scale": 1.0})
            os.kill(os.getpid(), signal.SIGKILL)
        runtime.sleep_forever()


def _on_sigterm(signum: int, frame: Any) -> None:
    runtime.unregister_gpu()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def run_scheduler_process(
    server_args: ServerArgs,
    port_args: PortArgs,
    gpu_id: int,
    tp_rank: int,
    moe_ep_rank: int,
    pp_rank: int,
    dp_rank: Optional[int],  # noqa: UP045 - SGLang's own spelling
    pipe_writer,
):
    # Load plugins so hooks can override Scheduler and its dependencies.
    load_plugins()

    # Generate the logger prefix
    prefix = ""
    if dp_rank is None and "SGLANG_DP_RANK" in os.environ:
        dp_rank = int(os.environ["SGLANG_DP_RANK"])
    # The parts and their order changed: DP TP, TP always there (up to 0.4.6.post1), DP TP PP (0.4.6.post2-0.4.9.x),
    # DP TP EP PP (0.4.10-0.5.5), DP PP TP EP (0.5.5.post1+; SGLang's ATTN_CP and MOE_DP parts between PP and TP are
    # not simulated).
    ver = runtime.version()
    if dp_rank is not None:
        prefix += f" DP{dp_rank}"
    if ver >= (0, 5, 5, 1) and server_args.pp_size > 1:
        prefix += f" PP{pp_rank}"
    if server_args.tp_size > 1 or ver < (0, 4, 6, 2):
        prefix += f" TP{tp_rank}"
    if ver >= (0, 4, 10) and server_args.ep_size > 1:
        prefix += f" EP{moe_ep_rank}"
    if ver < (0, 5, 5, 1) and server_args.pp_size > 1:
        prefix += f" PP{pp_rank}"

    # Config the process
    setproctitle.setproctitle(f"sglang::scheduler{prefix.replace(' ', '_')}")
    faulthandler.enable()
    runtime.kill_itself_when_parent_died()
    parent_process = os.getppid()
    signal.signal(signal.SIGTERM, _on_sigterm)

    # Configure the logger
    runtime.configure_logger(prefix, server_args.log_level)

    # Create a scheduler and run the event loop
    try:
        scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
        pipe_writer.send(scheduler.get_init_info())
        scheduler.run_event_loop()
    except Exception:
        trace = get_exception_traceback()
        logger.error(f"Scheduler hit an exception: {trace}")
        runtime.unregister_gpu()
        os.kill(parent_process, signal.SIGQUIT)
        sys.exit(1)
