"""SGLang's router (``python -m sglang_router.launch_router``) on a host: start it detached in front of the worker
URLs the client found healthy, judge it ready by its ``/health``, record it in ``STATE/routers/<name>.json``.

One router per name per host; starting it again replaces the recorded one (TERM, grace, KILL, confirmed gone).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from .. import procs, versions
from ..common import AgentError, EventSink, atomic_write, ensure_private_dir, expand
from . import health, server

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import (
        RouterRecord,
        RouterStartAnswer,
        RouterStartRequest,
        RouterStatus,
        RouterStopAnswer,
        RouterStopRequest,
        RouterWorker,
        RouterWorkerAnswer,
        RouterWorkerRequest,
    )


def _dir(state_dir: str) -> str:
    d = os.path.join(state_dir, "routers")
    ensure_private_dir(d)
    return d


def _path(state_dir: str, name: str) -> str:
    # The client validates names too; a name is never a path (no '/', no '..') on the host either.
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or ".." in name:
        raise AgentError("bad_request", f"router name {name!r} is not a plain name")
    return os.path.join(_dir(state_dir), f"{name}.json")


def load(state_dir: str, name: str) -> RouterRecord | None:
    try:
        with open(_path(state_dir, name), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    # Written by ``start`` alone (a record that is no object is no router's).
    return cast("RouterRecord", data) if isinstance(data, dict) else None


def all_records(state_dir: str) -> list[RouterRecord]:
    if not os.path.isdir(os.path.join(state_dir, "routers")):
        return []
    out = []
    for n in sorted(os.listdir(os.path.join(state_dir, "routers"))):
        if n.endswith(".json"):
            rec = load(state_dir, n[:-5])
            if rec:
                out.append(rec)
    return out


def is_running(rec: RouterRecord) -> bool:
    return bool(rec.get("pid")) and procs.alive(int(rec["pid"]), rec.get("start_ticks"))


_running = is_running


def stop(state_dir: str, name: str, grace: float) -> RouterStopAnswer:
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


def start(state_dir: str, req: RouterStartRequest) -> RouterStartAnswer:
    name = req["name"]
    # Refuse an unsafe log or working directory before the running router is touched (server.start checks again).
    ensure_private_dir(os.path.dirname(req["log_path"]), "log_dir")
    ensure_private_dir(req["cwd"], "the working directory")
    stopped = stop(state_dir, name, float(req.get("grace", 5)))
    ensure_private_dir(os.path.dirname(req["script"]), "state_dir")
    header = f"=== specdeploy router {name} started {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ==="
    started = server.start(req["script"], req["log_path"], req["cwd"], header)
    started_t = time.monotonic()
    rec: RouterRecord = {"name": name, "pid": started["pid"], "start_ticks": started["start_ticks"],
                           "listen": req["listen"], "port": req["port"], "workers": req["workers"],
                           "policy": req.get("policy"), "log_path": req["log_path"], "status": "starting",
                           "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": req.get("argv")}
    atomic_write(_path(state_dir, name), json.dumps(rec, indent=2).encode(), 0o600)
    try:
        server.wait_ready(pid=started["pid"], start_ticks=started["start_ticks"], log_path=req["log_path"],
                          log_offset=started["log_offset"], listen=req["listen"], port=int(req["port"]),
                          ready_path=versions.ROUTER_HEALTH_PATH, ready_s=float(req.get("ready_s", 60)),
                          stall_s=float(req.get("ready_s", 60)), on_lines=lambda lines: None)
        listed = _wait_listed(rec, {str(u).rstrip("/") for u in req["workers"]},
                              started_t + float(req.get("ready_s", 60)))
    except AgentError as e:
        leader = procs.stat(started["pid"])
        victims = ([leader] if leader else []) + procs.descendants(started["pid"])
        procs.terminate([v for v in victims if v is not None], 3.0)
        rec["status"] = "failed"
        atomic_write(_path(state_dir, name), json.dumps(rec, indent=2).encode(), 0o600)
        raise AgentError("router_failed", e.message if e.kind == "router_failed" else
                         f"the router did not become healthy: {e.message}", e.hint, **e.details) from None
    rec["status"], rec["ready_after_s"] = "running", round(time.monotonic() - started_t, 3)
    rec["workers_listed"] = listed is not None
    atomic_write(_path(state_dir, name), json.dumps(rec, indent=2).encode(), 0o600)
    return {"record": rec, "replaced": stopped["stopped"]}


def _wait_listed(rec: RouterRecord, wanted: set[str], deadline: float) -> dict[str, Mapping[str, object]] | None:
    """sglang-router 0.3 answers /health at once and adds its --worker-urls in the background (each after that
    worker's /health, /server_info and /model_info): it routes only once it lists them, so wait for that too.
    A router without ``GET /workers`` (older ones) is taken at its /health."""
    while True:
        listed = _listed(rec)
        if listed is None or wanted <= set(listed):
            return listed
        if time.monotonic() > deadline:
            missing = ", ".join(sorted(wanted - set(listed)))
            raise AgentError("router_failed", f"the router runs but has not taken worker(s) {missing}",
                             "see the router's log on its host: a worker must answer /health, /server_info and "
                             "/model_info")
        time.sleep(0.2)


def _get_json(listen: str, port: int, path: str, timeout: float = 2.0) -> Any | None:
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


def _split_url(url: str) -> tuple[str, int] | None:
    from urllib.parse import urlsplit

    try:
        u = urlsplit(url)
        return (u.hostname or "", int(u.port or 80)) if u.hostname else None
    except ValueError:
        return None


def live_workers(rec: RouterRecord) -> tuple[str, list[RouterWorker]]:
    """The router's worker set as the router itself reports it now, and each worker's ``/health`` probed from the
    router's host (what the router can reach), instead of the list recorded when it started.

    sglang-router answers ``GET /workers`` (``{"workers": [{"url", "is_healthy", ...}], ...}``) in current
    releases and ``GET /list_workers`` (``{"urls": [...]}``) in all of them; both are tried.
    """
    listen, port = str(rec.get("listen")), int(rec["port"])
    source = "router"
    said: dict[str, bool | None] = {}
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
    items: list[RouterWorker] = []
    for url, router_healthy in said.items():
        where = _split_url(url)
        # A worker's /health runs a one-token generation on current SGLang (over a second): same bound as above.
        code = health.probe(where[0], where[1], versions.ROUTER_HEALTH_PATH, 5.0) if where else None
        items.append({"url": url, "health": code, "router_says_healthy": router_healthy})
    return source, items


def status(state_dir: str) -> list[RouterStatus]:
    out: list[RouterStatus] = []
    for rec in all_records(state_dir):
        running = _running(rec)
        # ``.get``: a record written by an older agent may lack a key.
        item: RouterStatus = {
            "name": rec.get("name"), "pid": rec.get("pid"), "listen": rec.get("listen"), "port": rec.get("port"),
            "policy": rec.get("policy"), "status": rec.get("status"), "started_at": rec.get("started_at"),
            "log_path": rec.get("log_path"), "workers_at_start": rec.get("workers"), "running": running,
            "health": health.probe(rec["listen"], int(rec["port"]), versions.ROUTER_HEALTH_PATH, 5.0)
            if running else None,
            "workers": []}
        if running:
            item["workers_source"], item["workers"] = live_workers(rec)
        out.append(item)
    return out


# -- draining a replica for a rolling deploy -------------------------------------------------------------------------
# sglang-router 0.3.x (the `smg` gateway inside it) manages workers at run time with ``DELETE /workers/{id}`` and
# ``POST /workers {"url": ...}`` (both answer 202 and act in the background); the older ``/remove_worker`` and
# ``/add_worker`` answer 404 there. Both are tried, newest first. Without this, the real router keeps sending to a
# replica a rolling deploy restarts, marks it broken and does not take it back before its next health check
# (60 s by default): measured, 49 of 240 requests of a client load failed during a rolling restart of 4 replicas.


def _request(listen: str, port: int, method: str, path: str, body: dict[str, Any] | None = None,
             timeout: float = 5.0) -> tuple[int | None, Any]:
    import http.client

    target = "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen
    conn = http.client.HTTPConnection(target, port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        raw = resp.read(1 << 20)
        try:
            doc = json.loads(raw.decode("utf-8", "replace")) if raw else None
        except ValueError:
            doc = None
        return resp.status, doc
    except (OSError, http.client.HTTPException):
        return None, None
    finally:
        conn.close()


def _listed(rec: RouterRecord) -> dict[str, Mapping[str, object]] | None:
    """url -> the router's own entry for it, or None when the router does not answer ``GET /workers``."""
    code, doc = _request(str(rec["listen"]), int(rec["port"]), "GET", "/workers")
    if code != 200 or not isinstance(doc, dict) or not isinstance(doc.get("workers"), list):
        return None
    return {str(w["url"]).rstrip("/"): w for w in doc["workers"] if isinstance(w, dict) and w.get("url")}


def _running_router(state_dir: str, name: str) -> RouterRecord:
    rec = load(state_dir, name)
    if not rec or not _running(rec):
        raise AgentError("not_running", f"router {name} is not running on this host",
                         "start it with `inv deploy-router`")
    return rec


def remove_worker(state_dir: str, name: str, url: str, drain_s: float,
                  wait_s: float = 15.0) -> RouterWorkerAnswer:
    """Take ``url`` out of the router, wait (bounded) until the router no longer lists it, then give the requests
    it already sent there ``drain_s`` to finish (ending early when the replica reports nothing running)."""
    rec = _running_router(state_dir, name)
    listen, port = str(rec["listen"]), int(rec["port"])
    url = url.rstrip("/")
    listed = _listed(rec)
    if listed is None:
        raise AgentError("router_failed", f"router {name} does not answer GET /workers",
                         "this router cannot take a replica out: is it sglang-router 0.3 or later?")
    entry = listed.get(url)
    if entry is None:
        return {"removed": False, "why": "not in the router's worker list"}
    from urllib.parse import quote

    code, _ = _request(listen, port, "DELETE", f"/workers/{quote(str(entry.get('id') or url), safe='')}")
    if code not in (200, 202, 204):
        code, _ = _request(listen, port, "POST", f"/remove_worker?url={quote(url, safe='')}")
    if code not in (200, 202, 204):
        raise AgentError("router_failed", f"router {name} refused to remove worker {url} (HTTP {code})",
                         "see the router's log on its host")
    deadline = time.monotonic() + wait_s
    while True:
        now = _listed(rec)
        if now is not None and url not in now:
            break
        if time.monotonic() > deadline:
            raise AgentError("router_failed", f"router {name} still lists worker {url} {wait_s:g} s after removing "
                             "it", "see the router's log on its host")
        time.sleep(0.1)
    t0 = time.monotonic()
    where = _split_url(url)
    while where and time.monotonic() - t0 < drain_s:
        if _idle(where[0], where[1]):
            break
        time.sleep(0.2)
    return {"removed": True, "drained_s": round(time.monotonic() - t0, 3)}


def _idle(host: str, port: int) -> bool:
    """True when the replica's ``/metrics`` (with --enable-metrics) says no request runs or waits; False when it
    says some do or cannot say (then the drain waits its whole bound)."""
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=2.0)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        text = resp.read(1 << 20).decode("utf-8", "replace")
        if resp.status != 200:
            return False
    except (OSError, http.client.HTTPException):
        return True  # nothing answers: nothing runs there
    finally:
        conn.close()
    seen = 0
    for line in text.splitlines():
        if line.startswith(("sglang:num_running_reqs", "sglang:num_queue_reqs")):
            seen += 1
            try:
                if float(line.rsplit(" ", 1)[1]) > 0:
                    return False
            except (IndexError, ValueError):
                return False
    return seen > 0


def add_worker(state_dir: str, name: str, url: str, wait_s: float = 30.0) -> RouterWorkerAnswer:
    """Put ``url`` back into the router and wait (bounded) until the router lists it healthy."""
    rec = _running_router(state_dir, name)
    listen, port = str(rec["listen"]), int(rec["port"])
    url = url.rstrip("/")
    listed = _listed(rec) or {}
    if url not in listed:
        code, _ = _request(listen, port, "POST", "/workers", {"url": url})
        if code not in (200, 201, 202):
            from urllib.parse import quote

            code, _ = _request(listen, port, "POST", f"/add_worker?url={quote(url, safe='')}")
        if code not in (200, 201, 202):
            raise AgentError("router_failed", f"router {name} refused to add worker {url} (HTTP {code})",
                             "see the router's log on its host")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        entry = (_listed(rec) or {}).get(url)
        if entry is not None and entry.get("is_healthy", True) is not False:
            return {"added": True}
        time.sleep(0.2)
    raise AgentError("router_failed", f"router {name} did not take worker {url} back within {wait_s:g} s",
                     "the replica may not answer the router's checks (/health, /server_info); see the router's log")


# --- the verbs ------------------------------------------------------------------------------------------------
def start_verb(req: RouterStartRequest, sink: EventSink) -> RouterStartAnswer:
    """``router_start``: (re)start a router from its script, ready once it answers and lists its workers."""
    full: RouterStartRequest = {**req, "cwd": expand(req["cwd"]), "script": expand(req["script"]),
                                "log_path": expand(req["log_path"])}
    return start(expand(req["state_dir"]), full)


def stop_verb(req: RouterStopRequest, sink: EventSink) -> RouterStopAnswer:
    return stop(expand(req["state_dir"]), req["name"], float(req.get("grace", 5)))


def worker_verb(req: RouterWorkerRequest, sink: EventSink) -> RouterWorkerAnswer:
    """``router_worker``: take a replica out of a router before its server restarts, or put it back once it
    answers again."""
    state_dir = expand(req["state_dir"])
    if req.get("action") == "remove":
        return remove_worker(state_dir, req["name"], req["url"], float(req.get("drain_s", 5)))
    return add_worker(state_dir, req["name"], req["url"], float(req.get("wait_s", 30)))
