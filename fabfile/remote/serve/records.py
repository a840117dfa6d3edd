"""Deploy records on the host: ``STATE/deploys/<id>.json`` per deploy, ``STATE/current.json`` for the latest."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from ..common import EventSink, atomic_write, ensure_private_dir, expand

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import (
        CancelAnswer,
        CancelRequest,
        DeployRecord,
        DeploySummary,
        Ended,
        RecordsAnswer,
        RecordsRequest,
    )


def _dir(state_dir: str) -> str:
    d = os.path.join(state_dir, "deploys")
    ensure_private_dir(d)
    return d


def write(state_dir: str, record: Mapping[str, Any], make_current: bool = True) -> str:
    path = os.path.join(_dir(state_dir), f"{record['deploy_id']}.json")
    data = json.dumps(record, indent=2, sort_keys=True).encode()
    atomic_write(path, data, 0o600)
    if make_current:
        atomic_write(os.path.join(state_dir, "current.json"), data, 0o600)
    return path


def _read_record(path: str) -> DeployRecord | None:
    """What ``write`` wrote there: a deploy's record; None for a missing, torn or foreign file (a JSON list in
    ``deploys/`` made `inv deploys` fail with the agent's traceback)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return cast("DeployRecord", data)  # the JSON object ``write`` wrote


def current(state_dir: str) -> DeployRecord | None:
    return _read_record(os.path.join(state_dir, "current.json"))


def load(state_dir: str, deploy_id: str) -> DeployRecord | None:
    return _read_record(os.path.join(state_dir, "deploys", f"{deploy_id}.json"))


def cancel_path(state_dir: str, deploy_id: str) -> str:
    return os.path.join(_dir(state_dir), f"{deploy_id}.cancel")


def script_copy_path(state_dir: str, deploy_id: str) -> str:
    return os.path.join(_dir(state_dir), f"{deploy_id}.sh")


def journal_path(state_dir: str, deploy_id: str) -> str:
    return os.path.join(_dir(state_dir), f"{deploy_id}.events")


def read(req: RecordsRequest, sink: EventSink) -> RecordsAnswer:
    """The ``records`` verb: the current deploy record and the one it replaced (what a rollback would put back);
    with ``ids`` (`inv diff`), those records too (None for an id this host has no record of)."""
    state_dir = expand(req["state_dir"])
    cur = current(state_dir)
    prev = cur.get("previous") if cur else None
    prev_id = prev.get("deploy_id") if prev else None
    full_prev = load(state_dir, prev_id) if prev_id else None
    out: RecordsAnswer = {"current": cur, "previous": full_prev}
    if req.get("history"):
        out["history"] = history(state_dir)
    if req.get("ids"):
        out["loaded"] = {str(i): load(state_dir, str(i)) if str(i).replace("-", "").isalnum() else None
                         for i in req["ids"]}
    return out


HISTORY_MAX = 200  # `inv deploys` lists the newest this many (each record is a few KiB; the host keeps them all)


def ended_of(rec: Mapping[str, Any]) -> Ended:
    """How a deploy ended: ``ready``, ``failed``, ``cancelled``, ``replaced`` (a later deploy stopped its server),
    ``stopped`` (`inv stop`) or ``unfinished`` (still starting, or its agent died). Records written before the
    ``ended`` key existed are read from their status and error."""
    was = rec.get("ended")
    # A record's own ``ended``, written by this module (``mark_ended``, the deploy): its shape is ours.
    ended = cast("Ended", dict(was)) if isinstance(was, dict) else None
    if not ended:
        status = rec.get("status")
        if status == "failed":
            kind = (rec.get("error") or {}).get("kind")
            ended = {"kind": "cancelled" if kind == "cancelled" else "failed"}
        elif rec.get("ready_at") or status in ("running", "stopped", "adopted"):
            ended = {"kind": "ready", "at": rec.get("ready_at")}
        else:
            ended = {"kind": "unfinished"}
    if ended.get("kind") == "ready" and rec.get("status") == "stopped":
        ended = {"kind": "stopped", "at": rec.get("stopped_at"), "after": "ready"}
    return ended


def mark_ended(state_dir: str, deploy_id: str, kind: str, *, by: str | None = None,
                by_client: str | None = None) -> None:
    """Record how an earlier deploy ended (``replaced``: a later deploy stopped its server); best effort: the
    record only describes it, and a full disk must not fail the deploy that replaces it."""
    rec = load(state_dir, deploy_id)
    if rec is None:
        return
    ended: Ended = {"kind": kind, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if by is not None:
        ended["by"], ended["by_client"] = by, by_client
    was = rec.get("ended")
    if was and was.get("kind"):
        ended["after"] = was["kind"]
    data = dict(rec, ended=ended)
    cur = current(state_dir)
    try:
        write(state_dir, data, make_current=bool(cur and cur.get("deploy_id") == deploy_id))
    except OSError:
        pass


def summary(rec: Mapping[str, Any]) -> DeploySummary:
    """One line of `inv deploys`: which deploy, what it ran, when, by whom, how it ended."""
    prev = rec.get("previous") or {}
    return {"deploy_id": str(rec.get("deploy_id")), "config_name": rec.get("config_name"),
            "patch_mode": rec.get("patch_mode"), "sglang_version": rec.get("sglang_version"),
            "plan_hash": rec.get("plan_hash"), "started_at": rec.get("started_at"), "client": rec.get("client"),
            "ended": ended_of(rec), "previous": prev.get("deploy_id"), "rollback_of": rec.get("rollback_of"),
            "redeployable": bool(rec.get("request") and rec.get("script_copy"))}


def history(state_dir: str) -> list[DeploySummary]:
    """Every recorded deploy of this host, newest first (by start time, then file time: ids are random)."""
    d = os.path.join(state_dir, "deploys")
    try:
        names = [n for n in os.listdir(d) if n.endswith(".json")]
    except OSError:
        return []
    found: list[tuple[str, float, DeploySummary]] = []
    for n in names:
        rec = load(state_dir, n[:-len(".json")])
        if rec is None or not rec.get("deploy_id"):
            continue
        try:
            mtime = os.path.getmtime(os.path.join(d, n))
        except OSError:
            mtime = 0.0
        found.append((str(rec.get("started_at") or ""), mtime, summary(rec)))
    found.sort(key=lambda x: (x[0], x[1]), reverse=True)
    return [x[2] for x in found[:HISTORY_MAX]]


def cancel(req: CancelRequest, sink: EventSink) -> CancelAnswer:
    """The ``cancel`` verb: ask a running deploy to give up and tear its new server down (`inv cancel`, or another
    cluster rank failed).

    ``deploy_id`` omitted: the deploy holding the host's lock now. With ``wait_s``, wait (bounded) until that deploy
    has let go of the host and report how it ended, from its record.
    """
    from .lock import DeployLock

    state_dir = expand(req["state_dir"])
    deploy_id = req.get("deploy_id")
    holder = DeployLock(state_dir).live_holder() if os.path.isdir(state_dir) else None
    if not deploy_id:
        if holder is None or not holder.get("journal"):
            return {"cancelled": None, "holder": holder}  # no deploy in progress (maybe a stop): nothing to cancel
        deploy_id = str(holder["deploy_id"])
    atomic_write(cancel_path(state_dir, deploy_id), str(req.get("reason", "")).encode(), 0o600)
    out: CancelAnswer = {"cancelled": deploy_id, "step": (holder or {}).get("step")}
    until = time.monotonic() + float(req.get("wait_s") or 0)
    while time.monotonic() < until:
        now = DeployLock(state_dir).live_holder()
        if now is None or now.get("deploy_id") != deploy_id:
            rec = load(state_dir, deploy_id)
            out["ended"] = True
            out["status"], out["error"] = (rec.get("status"), rec.get("error")) if rec else (None, None)
            return out
        time.sleep(0.1)
    out["ended"] = False
    return out


def expected_of(req: Mapping[str, Any]) -> dict[str, str] | None:
    """The NCCL values a deploy request asked for (older requests carried them only when verifying)."""
    exp = req.get("expected")
    if exp is None:
        exp = (req.get("verify") or {}).get("expected")
    return dict(exp) if isinstance(exp, dict) else None
