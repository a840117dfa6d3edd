"""Simulated ``python -m sglang_router.launch_router`` (TEST EQUIPMENT, not the real sglang-router).

Why a stand-in remains: the real router (the ``sglang-router`` wheel, a Rust gateway) is installed with pip from the
package index, and tests/fleet/test_real_router.py does that and runs it; the tests that only need a router process on a
host (test_multihost, test_fleet_state, and a machine without network) use this one. It does not take workers in and
out at run time (``POST /workers``, ``DELETE /workers/{id}``), so rolling deploys behind a router are tested against
the real one only. This speaks the part of its protocol that specdeploy and an
operator rely on: ``--worker-urls URL ...``, ``--host``, ``--port``, ``--policy``; ``GET /health`` (200 while at
least one worker answers its /health), ``GET /list_workers`` / ``/workers``, and ``POST /generate`` (plus the OpenAI
routes) forwarded to the workers round-robin, skipping a worker that does not answer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} INFO sglang_router: {msg}\n")
    sys.stderr.flush()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="launch_router")
    ap.add_argument("--worker-urls", nargs="+", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--policy", default="cache_aware",
                    choices=["random", "round_robin", "cache_aware", "power_of_two"])
    args, _unknown = ap.parse_known_args(argv)
    workers = [u.rstrip("/") for u in args.worker_urls]
    turn = itertools.cycle(range(len(workers)))
    lock = threading.Lock()
    served: dict[str, int] = {w: 0 for w in workers}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *a: Any) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate", "/liveness", "/readiness"):
                ok = any(_healthy(w) for w in workers)
                self._send(200 if ok else 503, b"")
            elif path == "/list_workers":
                self._send(200, json.dumps({"urls": workers}).encode())
            elif path == "/workers":
                items = [{"url": w, "model_id": "unknown", "worker_type": "regular", "is_healthy": _healthy(w),
                          "load": 0, "served": served[w]} for w in workers]
                self._send(200, json.dumps({"workers": items, "total": len(items)}).encode())
            else:
                self._send(404, b'{"detail":"Not Found"}')

        def do_POST(self) -> None:
            n = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(n) if n else b""
            for _ in range(len(workers)):
                with lock:
                    w = workers[next(turn)]
                req = urllib.request.Request(w + self.path, data=body,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=600) as r:
                        data = r.read()
                        with lock:
                            served[w] += 1
                        self._send(r.status, data)
                        return
                except urllib.error.HTTPError as e:
                    self._send(e.code, e.read())
                    return
                except (urllib.error.URLError, OSError) as e:
                    log(f"worker {w} failed: {e}; trying the next one")
            self._send(503, b'{"error":"no worker available"}')

    class Server(ThreadingHTTPServer):
        daemon_threads = True

    httpd = Server((args.host, args.port), Handler)
    log(f"router on http://{args.host}:{args.port} policy {args.policy}, workers: {', '.join(workers)}")
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
