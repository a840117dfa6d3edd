"""Runtime helpers of the SGLang simulator (TEST EQUIPMENT, not SGLang).

Everything here locates the simulator's state through ``sys.prefix`` (the venv the simulator runs
in), never through an install-time path: inside a simulated host the venv is seen at another path.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "gpus": 8,
    "gpu_name": "NVIDIA H200",
    "gpu_memory_mib": 143771,
    "interconnect": "pcie",
    "hostname": None,  # None: socket.gethostname()
    "load_seconds": 0.3,
    "per_gpu_memory_mib": 70000,
    "fail": None,
    "fail_rank": 0,
    "fail_after_seconds": 0.3,  # scheduler_killed: delay after ready before the SIGKILL
    "strip_env_prefixes": [],
    # ServerArgs fields the server runs with whatever its command line says, e.g. {"disable_overlap_schedule": true}
    # (what a launcher wrapper or a release that overrides a flag does: 0.5.9 turns overlap off under speculation)
    "server_args_override": {},
    "decode_log_interval": 40,  # used when --decode-log-interval is not given
    # cost model of /generate (milliseconds of simulated GPU time)
    "decode_ms": 12.2,
    "verify_ms_base": 14.2,
    "verify_ms_per_token": 1.5,
    "draft_ms_per_step": 1.5,
    # growth with the batch (requests decoding together), per request beyond the first: a decode step, a draft
    # step, and each verified draft token; at one request in flight the costs above hold unchanged
    "decode_ms_per_seq": 0.1,
    "draft_ms_per_seq": 0.02,
    "verify_ms_per_batch_token": 0.12,
    "prefill_ms_base": 5.0,
    "prefill_ms_per_token": 0.02,
    "accept_prob": [0.8, 0.6, 0.45, 0.3, 0.2],
    "time_scale": 1.0,
    "seed": 42,
    # multiplicative factors on the verify/decode cost when the TP0 scheduler held NCCL_X=value at its
    # communicator init, e.g. {"NCCL_PROTO=LL": 0.9}; lets a benchmark see an NCCL preset's effect.
    "nccl_cost_factors": {},
    # with NCCL_TUNER_PLUGIN set: {"min_bytes", "algo", "proto"}, the choice a plugin forces for large all-reduces
    "nccl_tuner_plugin_choice": None,
    # all-reduces per forward (2 per layer: 122 for a 61-layer model); with it, every forward pays NCCL's time for
    # its message size on this path (_sim/nccl.py), so NCCL_PROTO/NCCL_ALGO move decode, verify and TTFT by size
    "nccl_allreduces_per_forward": 0,
    "nccl_draft_allreduces_per_step": 2,
    "nccl_version": "2.28.9+cuda13.0",
    "cost_profile": None,  # a key of COST_PROFILES: its costs, under this host's own keys
    "accept_wrong_every": 0,  # P > 0: the partial draft's deterministic acceptance (generation.py)
    # "default": no tuned fused-MoE config for this GPU and shape, so every rank logs SGLang's "Using default MoE
    # kernel config" warning after loading the weights (fused_moe_triton_config.py, every release read)
    "moe_kernel_config": "tuned",
}


# Named cost profiles (``cost_profile`` in a host's config; its own keys still override). "7b-h200": the real
# 0.5.16 run of a Llama-2-7B-shaped target on one H200 with CUDA graphs on, the whole grid at concurrency 1
# (docs/real-sglang.md, 2026-12-03; tests/data/real-0.5.16-h200/7b-p3-grid-sweep.json, which
# tests/unit/bench/test_sim_cost_profile.py holds these figures to): decode 4.45 ms, verify 5.15 ms at 2 tokens to
# 5.21 at 8 (1.16-1.17x a decode step), draft 0.175 ms per forward, draft-extend 0.21 ms; GPU-bound, the host side
# 2 % of the cycle. With the kit's partial draft (wrong every 3 slots) the accept length is 3 from steps 2 up.
COST_PROFILES: dict[str, dict[str, Any]] = {
    "7b-h200": {"decode_ms": 4.45, "verify_ms_base": 5.13, "verify_ms_per_token": 0.01, "draft_ms_per_step": 0.175,
                "draft_extend_ms": 0.21, "decode_ms_per_seq": 0.02, "draft_ms_per_seq": 0.005,
                "verify_ms_per_batch_token": 0.01, "accept_wrong_every": 3},
}


def state_dir() -> Path:
    return Path(sys.prefix) / "sim-state"


def gpu_procs_dir() -> Path:
    return state_dir() / "gpu-procs"


def load_config() -> dict[str, Any]:
    cfg = dict(DEFAULTS)
    path = state_dir() / "config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    if isinstance(data, dict):
        cfg.update(COST_PROFILES.get(str(data.get("cost_profile") or ""), {}))
        cfg.update({k: v for k, v in data.items() if v is not None or k == "fail"})
    return cfg


def hostname(cfg: dict[str, Any] | None = None) -> str:
    cfg = cfg if cfg is not None else load_config()
    return str(cfg.get("hostname") or socket.gethostname())


def parse_version(text: str) -> tuple[int, ...]:
    """'0.5.6.post1' -> (0, 5, 6, 1); '0.5.7' -> (0, 5, 7, 0); '0.5.11rc1' -> (0, 5, 11, 0)."""
    parts = [int(x) for x in re.findall(r"\d+", text.split("post")[0])[:3]]
    while len(parts) < 3:
        parts.append(0)
    post = re.search(r"post(\d+)", text)
    parts.append(int(post.group(1)) if post else 0)
    return tuple(parts)


def version() -> tuple[int, ...]:
    from sglang.version import __version__

    return parse_version(__version__)


def version_str() -> str:
    from sglang.version import __version__

    return __version__


# ---------------------------------------------------------------- logging (atomic, one write per record)


class AtomicStderrHandler(logging.Handler):
    """Writes each record with one os.write so lines of concurrent processes never interleave."""

    def __init__(self, fd: int = 2) -> None:
        super().__init__()
        self.fd = fd

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + "\n").encode("utf-8", "replace")
            write_all(self.fd, data)
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)


def write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        data = data[n:]


def configure_logger(prefix: str = "", level: str = "info") -> None:
    """SGLang's format: ``[%Y-%m-%d %H:%M:%S{prefix}] message``."""
    fmt = f"[%(asctime)s{prefix}] %(message)s"
    handler = AtomicStderrHandler()
    handler.setFormatter(logging.Formatter(fmt, datefmt="%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))


def now_stamp() -> str:
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


# ---------------------------------------------------------------- processes and GPU holders


def proc_starttime(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def register_gpu(gpu: int, used_mib: int, name: str | None = None) -> Path:
    pid = os.getpid()
    d = gpu_procs_dir()
    d.mkdir(parents=True, exist_ok=True)
    entry = {
        "pid": pid,
        "gpu": int(gpu),
        "used_mib": int(used_mib),
        "name": name or sys.executable,
        "starttime": proc_starttime(pid),
    }
    path = d / f"{pid}.json"
    tmp = d / f".{pid}.json.tmp"
    tmp.write_text(json.dumps(entry))
    os.replace(tmp, path)
    return path


def unregister_gpu(pid: int | None = None) -> None:
    with contextlib.suppress(OSError):
        (gpu_procs_dir() / f"{pid or os.getpid()}.json").unlink()


def kill_itself_when_parent_died() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL), as SGLang's utils does."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except OSError:  # pragma: no cover
        pass


def sleep_forever() -> None:
    ev = threading.Event()
    while True:
        ev.wait(3600)


def scaled_sleep(seconds: float, cfg: dict[str, Any]) -> None:
    t = seconds * float(cfg.get("time_scale", 1.0))
    if t > 0:
        time.sleep(t)


def read_model_config(path: str | None) -> dict[str, Any]:
    """A model directory's config.json as a dict ({} when absent or unreadable), as SGLang reads it."""
    if not path:
        return {}
    try:
        with open(os.path.join(path, "config.json")) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
