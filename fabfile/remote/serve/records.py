"""Deploy records on the host: ``STATE/deploys/<id>.json`` per deploy, ``STATE/current.json`` for the latest."""

from __future__ import annotations

import json
import os
from typing import Any

from ..common import atomic_write, ensure_private_dir


def _dir(state_dir: str) -> str:
    d = os.path.join(state_dir, "deploys")
    ensure_private_dir(d)
    return d


def write(state_dir: str, record: dict[str, Any], make_current: bool = True) -> str:
    path = os.path.join(_dir(state_dir), f"{record['deploy_id']}.json")
    data = json.dumps(record, indent=2, sort_keys=True).encode()
    atomic_write(path, data, 0o600)
    if make_current:
        atomic_write(os.path.join(state_dir, "current.json"), data, 0o600)
    return path


def current(state_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(state_dir, "current.json"), encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
            return data
    except (OSError, ValueError):
        return None


def load(state_dir: str, deploy_id: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(state_dir, "deploys", f"{deploy_id}.json"), encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
            return data
    except (OSError, ValueError):
        return None


def cancel_path(state_dir: str, deploy_id: str) -> str:
    return os.path.join(_dir(state_dir), f"{deploy_id}.cancel")


def script_copy_path(state_dir: str, deploy_id: str) -> str:
    return os.path.join(_dir(state_dir), f"{deploy_id}.sh")


def history(state_dir: str, limit: int = 20) -> list[dict[str, Any]]:
    d = _dir(state_dir)
    out = []
    for name in sorted(os.listdir(d), reverse=True):
        if name.endswith(".json"):
            try:
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                continue
    out.sort(key=lambda r: r.get("started_at", ""), reverse=True)
    return out[:limit]


def journal_path(state_dir: str, deploy_id: str) -> str:
    return os.path.join(_dir(state_dir), f"{deploy_id}.events")
