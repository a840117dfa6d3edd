"""SGLang's router (``python -m sglang_router.launch_router``) on a host: start it detached in front of the worker
URLs the client found healthy, judge it ready by its ``/health``, record it in ``STATE/routers/<name>.json``.

One router per name per host; starting it again replaces the recorded one (TERM, grace, KILL, confirmed gone).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from . import procs, server
from .common import AgentError, atomic_write, ensure_private_dir


def _dir(state_dir: str) -> str:
    d = os.path.join(state_dir, "routers")
    ensure_private_dir(d)
    return d


def _path(state_dir: str, name: str) -> str:
    # The client validates names too; a name is never a path (no '/', no '..') on the host either.
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or ".." in name:
        raise AgentError("bad_request", f"router name {name!r} is not a plain name")
    return os.path.join(_dir(state_dir), f"{name}.json")


def load(state_dir: str, name: str) -> Optional[Dict[str, Any]]:
    try:
        with open(_path(state_dir, name), encoding="utf-8") as f:
            data: Dict[str, Any] = json.load(f)
            return data
    except (OSError, ValueError):
        return None


def all_records(state_dir: str) -> List[Dict[str, Any]]:
    if not os.path.isdir(os.path.join(state_dir, "routers")):
        return []
    out = []
    for n in sorted(os.listdir(os.path.join(state_dir, "routers"))):
        if n.endswith(".json"):
            rec = load(state_dir, n[:-5])
            if rec:
                out.append(rec)
    return out


def is_running(rec: Dict[str, Any]) -> bool:
    return bool(rec.get("pid")) and procs.alive(int(rec["pid"]), rec.get("start_ticks"))


_running = is_running


def stop(state_dir: str, name: str, grace: float) -> Dict[str, Any]:
    rec = load(state_dir, name)
    if not rec or not _running(rec):
        return {"stopped": []}
    leader = procs.stat(int(rec["pid"]))
    victims = ([leader] if leader else []) + procs.descendants(int(rec["pid"]))
    down = procs.terminate([v for v in victims if v is not None], grace)
    if down["survivors"]:
        raise AgentError("router_failed", f"the old router (pid {rec['pid']}) survived SIGKILL",
                         "the host may need attention")
    rec["status"] = "stopped"
    atomic_write(_path(state_dir, name), json.dumps(rec, indent=2).encode(), 0o600)
    return {"stopped": [d["pid"] for k in ("terminated", "killed") for d in down[k]]}


def start(state_dir: str, req: Dict[str, Any]) -> Dict[str, Any]:
    name = req["name"]
    # Refuse an unsafe log or working directory before the running router is touched (server.start checks again).
    ensure_private_dir(os.path.dirname(req["log_path"]), "log_dir")
    ensure_private_dir(req["cwd"], "the working directory")
    stopped = stop(state_dir, name, float(req.get("grace", 5)))
    ensure_private_dir(os.path.dirname(req["script"]), "state_dir")
    header = f"=== specdeploy router {name} started {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ==="
    started = server.start(req["script"], req["log_path"], req["cwd"], header)
    rec: Dict[str, Any] = {"name": name, "pid": started["pid"], "start_ticks": started["start_ticks"],
                           "listen": req["listen"], "port": req["port"], "workers": req["workers"],
                           "policy": req.get("policy"), "log_path": req["log_path"], "status": "starting",
                           "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": req.get("argv")}
    atomic_write(_path(state_dir, name), json.dumps(rec, indent=2).encode(), 0o600)
    try:
        ready = server.wait_ready(pid=started["pid"], start_ticks=started["start_ticks"], log_path=req["log_path"],
                                  log_offset=started["log_offset"], listen=req["listen"], port=int(req["port"]),
                                  sglang_version="0", ready_s=float(req.get("ready_s", 60)),
                                  stall_s=float(req.get("ready_s", 60)), on_lines=lambda lines: None,
                                  ready_path="/health")
    except AgentError as e:
        leader = procs.stat(started["pid"])
        victims = ([leader] if leader else []) + procs.descendants(started["pid"])
        procs.terminate([v for v in victims if v is not None], 3.0)
        rec["status"] = "failed"
        atomic_write(_path(state_dir, name), json.dumps(rec, indent=2).encode(), 0o600)
        raise AgentError("router_failed", f"the router did not become healthy: {e.message}", e.hint,
                         **e.details) from None
    rec.update(status="running", ready_after_s=ready["ready_after_s"])
    atomic_write(_path(state_dir, name), json.dumps(rec, indent=2).encode(), 0o600)
    return {"record": rec, "replaced": stopped["stopped"]}


def _get_json(listen: str, port: int, path: str, timeout: float = 2.0) -> Optional[Any]:
    """``GET path`` on the router → its JSON body, or None (no answer, not 200, not JSON)."""
    import http.client

    target = "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen
    conn = http.client.HTTPConnection(target, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read(1 << 20)
        if resp.status != 200:
            return None
        return json.loads(body.decode("utf-8", "replace"))
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _split_url(url: str) -> Optional[Tuple[str, int]]:
    from urllib.parse import urlsplit

    try:
        u = urlsplit(url)
        return (u.hostname or "", int(u.port or 80)) if u.hostname else None
    except ValueError:
        return None


def live_workers(rec: Dict[str, Any]) -> Dict[str, Any]:
    """The router's worker set as the router itself reports it now, and each worker's ``/health`` probed from the
    router's host (what the router can reach), instead of the list recorded when it started.

    sglang-router answers ``GET /workers`` (``{"workers": [{"url", "is_healthy", ...}], ...}``) in current
    releases and ``GET /list_workers`` (``{"urls": [...]}``) in all of them; both are tried.
    """
    listen, port = str(rec.get("listen")), int(rec["port"])
    source = "router"
    said: Dict[str, Optional[bool]] = {}
    doc = _get_json(listen, port, "/workers")
    if isinstance(doc, dict) and isinstance(doc.get("workers"), list):
        for w in doc["workers"]:
            if isinstance(w, dict) and w.get("url"):
                healthy = w.get("is_healthy")
                said[str(w["url"])] = healthy if isinstance(healthy, bool) else None
    else:
        doc = _get_json(listen, port, "/list_workers")
        if isinstance(doc, dict) and isinstance(doc.get("urls"), list):
            said = {str(u): None for u in doc["urls"]}
        else:
            source = "record (the router did not list its workers)"
            said = {str(u): None for u in rec.get("workers") or []}
    items = []
    for url, router_healthy in said.items():
        where = _split_url(url)
        # A worker's /health runs a one-token generation on current SGLang (over a second): same bound as above.
        code = server.probe(where[0], where[1], "/health", 5.0) if where else None
        items.append({"url": url, "health": code, "router_says_healthy": router_healthy})
    return {"source": source, "workers": items}


def status(state_dir: str) -> List[Dict[str, Any]]:
    out = []
    for rec in all_records(state_dir):
        running = _running(rec)
        item = {k: rec.get(k) for k in ("name", "pid", "listen", "port", "policy", "status", "started_at",
                                        "log_path")}
        item["workers_at_start"] = rec.get("workers")
        item["running"] = running
        item["health"] = server.probe(rec["listen"], int(rec["port"]), "/health", 5.0) if running else None
        if running:
            live = live_workers(rec)
            item["workers"] = live["workers"]
            item["workers_source"] = live["source"]
        else:
            item["workers"] = []
        out.append(item)
    return out
