"""Simulated ``sglang.srt.entrypoints.engine`` (TEST EQUIPMENT, not SGLang).

``_set_envs_and_config(server_args: ServerArgs)`` has SGLang's exact one-line signature, does the
version's environment writes in the launcher process, and ends with SGLang's
``mp.set_start_method("spawn", ...)`` line, so engine patches anchor here as on a real host.
``_launch_subprocesses`` spawns one scheduler per TP rank plus the detokenizer and waits for them.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import random
import signal
import sys
import threading
import time
from multiprocessing.connection import wait as mp_wait
from typing import Any

from sglang._sim import runtime
from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
from sglang.srt.managers.scheduler import run_scheduler_process
from sglang.srt.server_args import PortArgs, ServerArgs

logger = logging.getLogger(__name__)

_sigquit_received = threading.Event()
_rendezvous_sockets: list[Any] = []  # multi-node: kept open for the server's life (NCCL's sockets)
_shutting_down = threading.Event()


def kill_process_tree(include_parent: bool = True, exit_code: int = 1, graceful: bool = False) -> None:
    """Kill the launcher's children (schedulers, detokenizer); optionally exit the launcher."""
    _shutting_down.set()
    children = mp.active_children()
    if graceful:
        for p in children:
            if p.pid:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 1.0
        for p in children:
            p.join(max(0.0, deadline - time.monotonic()))
    for p in mp.active_children():
        if p.pid:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except OSError:
                pass
    for p in children:
        p.join(1.0)
    if include_parent:
        os._exit(exit_code)


def launch_phase_sigquit_handler(signum: int, frame: Any) -> None:
    logger.error("Received sigquit from a child process. It usually means the child failed.")
    _sigquit_received.set()
    # Normally the dead child is noticed by the waiter first; make sure the tree goes down anyway.
    t = threading.Timer(3.0, kill_process_tree)
    t.daemon = True
    t.start()


def _set_envs_and_config(server_args: ServerArgs):
    # Set global environments (each release's writes: docs/sglang-contract.md, checked against the wheels)
    # Post releases move these too (0.4.10.post2, 0.5.4.post1-post3, 0.5.5.post3): `python -m tools.contract --all`.
    ver = runtime.version()
    if ver < (0, 5, 5, 3):
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    symm, nvls = server_args.enable_symm_mem, server_args.enable_nccl_nvls
    if ver >= (0, 5, 4, 3):
        if "NCCL_CUMEM_ENABLE" not in os.environ or symm:
            os.environ["NCCL_CUMEM_ENABLE"] = str(int(symm))
        if "NCCL_NVLS_ENABLE" not in os.environ or nvls or symm:
            os.environ["NCCL_NVLS_ENABLE"] = str(int(nvls or symm))
        if ver >= (0, 5, 15) and (
            "NCCL_GRAPH_MIXING_SUPPORT" not in os.environ or symm
        ) and getattr(server_args, "dcp_size", 1) > 1:
            os.environ["NCCL_GRAPH_MIXING_SUPPORT"] = "0"
    else:
        if ver < (0, 4, 10, 2):
            os.environ["NCCL_CUMEM_ENABLE"] = "0"
        elif ver < (0, 5, 4, 2) or "NCCL_CUMEM_ENABLE" not in os.environ:
            os.environ["NCCL_CUMEM_ENABLE"] = str(int(symm))
        if ver < (0, 4, 10, 2) or not symm:
            os.environ["NCCL_NVLS_ENABLE"] = str(int(nvls))
    if ver < (0, 5, 1):
        os.environ["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1"
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8" if ver >= (0, 5, 4, 1) else "4"
    if ver < (0, 5, 19):
        os.environ["CUDA_MODULE_LOADING"] = "AUTO"
    if (ver >= (0, 5, 2) and os.environ.get("TRTLLM_ENABLE_PDL", "1") != "0") or (0, 5, 1) <= ver < (0, 5, 2):
        os.environ["TRTLLM_ENABLE_PDL"] = "1"
    if ver >= (0, 5, 3):
        if os.environ.get("CUTE_DSL_LOG_LEVEL") is None:
            os.environ["CUTE_DSL_LOG_LEVEL"] = "30"
        if os.environ.get("CUTE_DSL_LOG_TO_CONSOLE") is None:
            os.environ["CUTE_DSL_LOG_TO_CONSOLE"] = "1"
    if ver >= (0, 5, 1):
        os.environ["SGLANG_RUN_ID"] = f"sglang-run-{time.time()}-{random.randint(0, 100000000)}"

    # (--enable-deterministic-inference's NCCL writes happen earlier, in ServerArgs post-processing.)

    # Set prometheus env vars
    if server_args.enable_metrics:
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", f"/tmp/sglang-sim-prometheus-{os.getpid()}")

    # Register the signal handler.
    # The child processes will send SIGQUIT to this process when any error happens
    signal.signal(signal.SIGQUIT, launch_phase_sigquit_handler)

    # Set mp start method
    mp.set_start_method("spawn", force=True)


def _scheduler_died_error(rank: int, proc: Any) -> RuntimeError:
    proc.join(timeout=10)
    return RuntimeError(
        f"Rank {rank} scheduler died during initialization (exit code: {proc.exitcode}). "
        "If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. "
        "Run `dmesg -T | grep -i oom` to check."
    )


def _died_during_init(rank: int, proc: Any) -> None:
    if runtime.version() >= (0, 5, 10):
        raise _scheduler_died_error(rank, proc)
    logger.error(f"Rank {rank} scheduler is dead. Please check if there are relevant logs.")
    proc.join()
    logger.error(f"Exit code: {proc.exitcode}")
    raise EOFError


def _wait_for_scheduler_ready(readers: list[Any], procs: list[Any]) -> list[dict[str, Any]]:
    infos: list[dict[str, Any] | None] = [None] * len(readers)
    pending = set(range(len(readers)))
    at_eof: set[int] = set()  # pipe closed but process not reaped yet: wait on its sentinel only
    while pending:
        waitables = [readers[i] for i in pending - at_eof] + [procs[i].sentinel for i in pending]
        ready = mp_wait(waitables)
        for i in sorted(pending):
            if readers[i] in ready or procs[i].sentinel in ready:
                got = False
                try:
                    if readers[i].poll():
                        infos[i] = readers[i].recv()
                        got = True
                except (EOFError, OSError):
                    at_eof.add(i)
                if got:
                    pending.discard(i)
                    info = infos[i]
                    if not info or info.get("status") != "ready":
                        logger.error("Initialization failed. Please see the error messages above.")
                        kill_process_tree(include_parent=True, exit_code=1)
                elif not procs[i].is_alive():
                    _died_during_init(i, procs[i])
    return [i for i in infos if i is not None]


class LaunchedEngine:
    def __init__(self, server_args: ServerArgs, procs: list[Any], infos: list[dict[str, Any]], ranks: list[int]):
        self.server_args = server_args
        self.scheduler_procs = procs
        self.scheduler_infos = infos
        self.ranks = ranks

    def start_watchdog(self, on_death: Any) -> None:
        def watch() -> None:
            sentinels = {p.sentinel: (rank, p) for rank, p in zip(self.ranks, self.scheduler_procs, strict=True)}
            ready = mp_wait(list(sentinels))
            if _shutting_down.is_set():
                return
            rank, proc = sentinels[ready[0]]
            proc.join(1.0)
            if not _shutting_down.is_set():
                on_death(rank, proc, self.scheduler_procs.index(proc))

        threading.Thread(target=watch, name="scheduler-watchdog", daemon=True).start()


class Engine:
    """SGLang 0.5.11+ launches from ``Engine._launch_subprocesses`` (a classmethod), which loads the plugins."""

    @classmethod
    def _launch_subprocesses(cls, server_args: ServerArgs) -> LaunchedEngine:
        from sglang.srt.plugins import load_plugins

        load_plugins()
        return _launch(server_args)


def _launch_subprocesses(server_args: ServerArgs) -> LaunchedEngine:
    """The launch entry point: ``Engine._launch_subprocesses`` from 0.5.11, a module function before."""
    if runtime.version() >= (0, 5, 11):
        return Engine._launch_subprocesses(server_args)
    return _launch(server_args)


def _launch(server_args: ServerArgs) -> LaunchedEngine:
    # Set up environment and multiprocessing
    _set_envs_and_config(server_args)

    port_args = PortArgs.init_new(server_args)
    nnodes = max(1, server_args.nnodes)
    if nnodes > 1:
        from sglang._sim import rendezvous

        def on_lost(peer: str) -> None:
            if _shutting_down.is_set():
                return
            runtime.write_all(2, (f"{runtime.hostname()}:{os.getpid()}:{os.getpid()} [0] NCCL WARN socket.c: "
                                  f"Connection closed by remote peer ({peer})\n").encode())
            logger.error(f"Lost {peer}; the distributed group is broken. Exiting.")
            kill_process_tree(include_parent=True, exit_code=1)

        global _rendezvous_sockets
        _rendezvous_sockets = rendezvous.join(server_args.dist_init_addr or "127.0.0.1:29500", nnodes,
                                              server_args.node_rank, on_lost)
    tp_size_per_node = max(1, server_args.tp_size // nnodes)
    tp_rank_range = range(
        tp_size_per_node * server_args.node_rank, tp_size_per_node * (server_args.node_rank + 1)
    )
    scheduler_procs = []
    scheduler_pipe_readers = []
    ranks = []
    for tp_rank in tp_rank_range:
        reader, writer = mp.Pipe(duplex=False)
        gpu_id = server_args.base_gpu_id + (tp_rank % tp_size_per_node) * server_args.gpu_id_step
        moe_ep_rank = tp_rank // max(1, server_args.tp_size // server_args.ep_size)
        proc = mp.Process(
            target=run_scheduler_process,
            args=(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, 0, None, writer),
        )
        proc.start()
        writer.close()
        scheduler_procs.append(proc)
        scheduler_pipe_readers.append(reader)
        ranks.append(tp_rank)

    if server_args.node_rank == 0:
        detoken_proc = mp.Process(target=run_detokenizer_process, args=(server_args, port_args))
        detoken_proc.start()

    infos = _wait_for_scheduler_ready(scheduler_pipe_readers, scheduler_procs)
    return LaunchedEngine(server_args, scheduler_procs, infos, ranks)


def scheduler_died_after_ready(rank: int, proc: Any, index: int) -> None:
    if runtime.version() >= (0, 5, 12):
        # SGLang's SubprocessWatchdog (sglang/srt/utils/watchdog.py, in the 0.5.12 wheel, not in 0.5.9's): it names
        # the process by its place in the launcher's list (``scheduler_{i}``, i from 0 on every node) and its pid,
        # then SIGQUITs the launcher.
        logger.error(f"Subprocess scheduler_{index} (pid={proc.pid}) crashed with exit code {proc.exitcode}. "
                     "Triggering SIGQUIT for cleanup...")
    if runtime.version() >= (0, 5, 10):
        if not _sigquit_received.is_set():
            logger.error("Received sigquit from a child process. It usually means the child failed.")
    else:
        logger.error(f"Rank {rank} scheduler is dead. Please check if there are relevant logs.")
        logger.error(f"Exit code: {proc.exitcode}")
    kill_process_tree(include_parent=True, exit_code=1)


def flush_std_streams() -> None:
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (OSError, ValueError):
            pass
