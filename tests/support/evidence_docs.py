"""Evidence documents as the agent's `check_env` verb answers them (pure dicts), for the judge's tests: a scheduler's
environ, NCCL lines and markers (`sched`, `marker`) and the whole answer (`ev`)."""

from __future__ import annotations

from typing import Any


def sched(
    pid: int,
    tp: int,
    *,
    env_status: str = "ok",
    environ: dict[str, Any] | None = None,
    nccl_env: dict[str, list[str]] | None = None,
    nranks: int | None = 2,
    markers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    inits = [{"rank": tp, "nranks": nranks, "phase": "COMPLETE"}] if nranks and nccl_env is not None else []
    return {
        "pid": pid,
        "rank": tp,
        "label": f"TP{tp}",
        "title": f"sglang::scheduler_TP{tp}",
        "environ_status": env_status,
        "environ": environ or {},
        "nccl": {"env": nccl_env or {}, "inits": inits, "lines": len(nccl_env or {}) + len(inits)},
        "markers": markers or [],
    }


def ev(
    *scheds: dict[str, Any], launcher: dict[str, Any] | None = None, facts: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "schedulers": list(scheds),
        "launcher": launcher or {"pid": 1, "alive": True, "environ": {}, "markers": [], "nccl": {"env": {}}},
        "facts": facts or {},
        "log": {},
    }


def marker(
    pid: int, set_: dict[str, str] | None = None, kept: dict[str, str] | None = None, mode: str = "scheduler"
) -> dict[str, Any]:
    return {"mode": mode, "pid": pid, "set": set_ or {}, "kept": kept or {}}
