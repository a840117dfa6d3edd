"""One sample of a running server for ``inv watch``: tok/s, accept length, running and queued requests, health.

From ``/metrics`` when the server has ``--enable-metrics`` (``sglang:gen_throughput``, ``sglang:spec_accept_length``,
``sglang:num_running_reqs``, ``sglang:num_queue_reqs``), else from SGLang's last ``Decode batch`` line of the
current deploy's part of its log, with its age (SGLang prints one every ``--decode-log-interval`` forwards while it
decodes; an idle server prints none, so an old line says "idle", not "slow"). Bounded: one HTTP GET of at most
1 MiB, a log read of at most the last 256 KiB, the readiness probe with the version's own bound.
"""

from __future__ import annotations

import http.client
import time
from typing import TYPE_CHECKING, Any

from .. import procs
from ..common import EventSink, expand
from ..serve import health, records
from . import metrics

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import StateRequest, WatchAnswer


def _get_metrics(listen: str, port: int, timeout: float = 3.0) -> str | None:
    target = "127.0.0.1" if listen in ("0.0.0.0", "::", "") else listen
    conn = http.client.HTTPConnection(target, port, timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read(1 << 20)
        if resp.status != 200:
            return None
        return body.decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _queue_from(text: str) -> float | None:
    for labels, value in metrics.parse_prometheus(text).get("sglang:num_queue_reqs", []):
        if labels.get("tp_rank", "0") == "0":
            return value
    return None


def sample(state_dir: str, last_decode: Any) -> WatchAnswer:
    """``last_decode(log_path, offset)`` is the status verb's reader of the last Decode line (shared, so both
    read the log the same bounded way)."""
    rec = records.current(state_dir)
    out: WatchAnswer = {"time": time.time(), "running": False}
    if not rec or not rec.get("pid") or not procs.alive(int(rec["pid"]), rec.get("start_ticks")):
        return out
    out.update({"running": True, "config_name": rec.get("config_name"), "deploy_id": rec.get("deploy_id"),
                "sglang_version": rec.get("sglang_version")})
    out["health"] = health.recorded_health(rec)
    text = _get_metrics(str(rec["listen"]), int(rec["port"])) if metrics.served(rec) else None
    prom = metrics.spec_from_prometheus(text) if text else {}
    dec = last_decode(rec["log_path"], int(rec.get("log_offset") or 0))
    out["window_forwards"] = metrics.decode_log_interval(rec)  # what one figure covers: one Decode line's window
    if prom:
        # A gauge carries no time of its own, but SGLang sets these gauges in the same call that writes the
        # Decode batch line (the wheels' scheduler metrics reporter: `logger.info(msg)` then
        # `self.stats.gen_throughput = self.last_gen_throughput` and `log_stats`): the line's time is the
        # gauge's. Read at 0 s old, an idle server's gauge would pass for a fresh figure.
        out.update({"source": "metrics", "tok_s": prom.get("gen_throughput"), "accept_len": prom.get("accept_len"),
                    "running_req": prom.get("running_req"), "queue_req": _queue_from(text or ""),
                    "age_s": (dec or {}).get("age_s"),
                    "age_of": "gauge (set with the last Decode batch line)" if dec else
                    "gauge (no Decode batch line dates it)"})
    elif dec:
        out.update({"source": "log", "tok_s": dec.get("gen_throughput"), "accept_len": dec.get("accept_len"),
                    "running_req": dec.get("running_req"), "queue_req": dec.get("queue_req"),
                    "age_s": dec.get("age_s"), "age_of": "the last Decode batch line"})
    else:
        out.update({"source": "log (no Decode batch line yet)", "tok_s": None, "accept_len": None,
                    "running_req": None, "queue_req": None, "age_s": None, "age_of": None})
    # ``tok_s`` kept for scripts; ``gen_tok_s`` names it: SGLang's decode-window throughput, not a bench's output tok/s
    out["gen_tok_s"] = out.get("tok_s")
    return out


def watch(req: StateRequest, sink: EventSink) -> WatchAnswer:
    """The ``watch`` verb: one sample, reading the log's Decode lines the way ``status`` does."""
    from ..serve import hoststatus

    return sample(expand(req["state_dir"]), hoststatus.last_decode)
