"""Simulated ``sglang.srt.entrypoints.http_server`` (TEST EQUIPMENT, not SGLang).

A stdlib ThreadingHTTPServer that opens the port only after every scheduler reported ready (as
uvicorn does in SGLang), with SGLang's endpoints and their version-dependent behaviour:
``/health`` (503 until warmup on 0.5.1+, then SGLang's one-token generate check that answers after a second; a bare
200 on 0.4.x), ``/ready`` (0.5.20+), ``/model_info``
and ``/server_info`` (0.5.6+) next to ``/get_model_info`` and ``/get_server_info``, ``/v1/models``,
``/generate``, ``/v1/completions``, ``/v1/chat/completions``, ``/ping``, ``/metrics``
(``--enable-metrics``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sglang._sim import runtime
from sglang._sim.generation import GenerateFailed, Generator
from sglang.srt.entrypoints import engine
from sglang.srt.server_args import ServerArgs


def uv_log(msg: str, level: str = "INFO") -> None:
    """uvicorn's line as SGLang configures it: ``[time] INFO:     message``."""
    runtime.write_all(2, f"[{runtime.now_stamp()}] {(level + ':').ljust(9)} {msg}\n".encode())



class ServerState:
    def __init__(self, server_args: ServerArgs, launched: engine.LaunchedEngine | None, cfg: dict[str, Any]):
        self.sa = server_args
        self.cfg = cfg
        self.ver = runtime.version()
        self.status = "Starting"
        self.start_time = time.time()
        self.launched = launched
        infos = launched.scheduler_infos if launched else []
        self.scheduler_info = infos[0] if infos else {}
        tp0_prefix = " TP0" if server_args.tp_size > 1 or self.ver < (0, 4, 6, 2) else ""  # see scheduler.py
        self.generator = Generator(server_args, cfg, infos, tp0_prefix)
        self.model_config = runtime.read_model_config(server_args.model_path)
        self.context_len = int(self.scheduler_info.get("context_len") or 131072)

    def health_generate(self) -> int:
        """The health-generate loop: send a one-token request, then each second (SGLang's fixed
        ``await asyncio.sleep(1)``, not scaled by time_scale) look whether any output arrived since; 200 at the first
        that did, 503 after SGLANG_HEALTH_CHECK_TIMEOUT (20 s) without one."""
        tic = time.time()
        if self.generator.scheduler_dead:
            # sglang#6624: the scheduler is gone and the health check still answers 200.
            time.sleep(1)
            return 200
        threading.Thread(target=self.generator.health_request, daemon=True).start()
        limit = int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
        while time.time() < tic + limit:
            time.sleep(1)
            if self.generator.last_receive_tstamp > tic:
                if self.ver >= (0, 4, 10, 2):
                    self.status = "Up"
                return 200
        if self.ver >= (0, 4, 10, 2):
            self.status = "UnHealthy"
        return 503

    # ---------------------------------------------------------------- payloads
    def model_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "model_path": self.sa.model_path,
            "tokenizer_path": self.sa.tokenizer_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.model_config.get("model_type"),
            "architectures": self.model_config.get("architectures"),
        }
        if self.ver >= (0, 5, 20):
            info.update(served_model_name=self.sa.served_model_name, load_format=self.sa.load_format,
                        reasoning_parser=self.sa.reasoning_parser, tool_call_parser=self.sa.tool_call_parser,
                        disaggregation_mode="null")
        return info

    def server_info(self) -> dict[str, Any]:
        g = self.generator
        internal: dict[str, Any] = {
            "last_gen_throughput": g.last_gen_throughput,
            "memory_usage": {"weight": 38.5, "kvcache": 27.3, "token_capacity": g.max_total_num_tokens},
        }
        avg = g.avg_spec_accept_length
        if avg is not None:
            internal["avg_spec_accept_length"] = avg
        info: dict[str, Any] = dataclasses.asdict(self.sa)
        if self.ver >= (0, 5, 14):
            # The field behind --cuda-graph-max-bs-decode (the old flag its alias, dest cuda_graph_max_bs_decode in
            # 0.5.16's server_args.py), so /server_info names it so; the simulator keeps one field for both.
            info["cuda_graph_max_bs_decode"] = info.pop("cuda_graph_max_bs")
        info.update(
            max_total_num_tokens=self.scheduler_info.get("max_total_num_tokens"),
            max_req_input_len=self.scheduler_info.get("max_req_input_len"),
            internal_states=[internal],
            version=runtime.version_str(),
        )
        if self.ver >= (0, 5, 20):
            info.update(startup_time=self.start_time, frontend="http")
        return info

    def models(self) -> dict[str, Any]:
        name = self.sa.served_model_name
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(self.start_time),
                    "owned_by": "sglang",
                    "root": name,
                    "parent": None,
                    "max_model_len": self.context_len,
                }
            ],
        }

    def metrics(self) -> str:
        g = self.generator
        labels = (
            f'model_name="{self.sa.served_model_name}",engine_type="unified",tp_rank="0",pp_rank="0"'
        )
        rows: list[tuple[str, str, str, float]] = [
            ("sglang:num_running_reqs", "gauge", "The number of running requests.", float(g.num_running)),
            ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", 0.0),
            ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", g.last_gen_throughput),
            ("sglang:token_usage", "gauge", "The token usage.", 0.0),
            ("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", 0.0),
        ]
        # Every release's metrics collector logs the speculative gauges whatever the server runs (the wheels'
        # collector: `_log_gauge(self.spec_accept_length, stats.spec_accept_length)`, its stats default 0.0): a
        # baseline server reports an accept length of 0 (seen on real 0.5.16 on the H200).
        rows.append(("sglang:spec_accept_length", "gauge",
                     "The average acceptance length of speculative decoding.", g.last_accept_length if g.spec else 0.0))
        rows.append(("sglang:spec_accept_rate", "gauge",
                     "The average acceptance rate of speculative decoding.", g.last_accept_rate if g.spec else 0.0))
        if runtime.version() >= (0, 5, 13):  # the wheels: the active tier's gauges from 0.5.13
            rows.append(("sglang:spec_num_steps", "gauge", "Currently active speculative_num_steps.",
                         float(g.steps) if g.spec else 0.0))
            rows.append(("sglang:spec_num_draft_tokens", "gauge",
                         "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
                         float(g.num_draft) if g.spec else 0.0))
        out: list[str] = []
        for name, kind, help_, value in rows:
            out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {float(value)}"]
        counters = [
            ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", g.prompt_tokens_total),
            ("sglang:generation_tokens_total", "Number of generation tokens processed.",
             g.generation_tokens_total),
            ("sglang:num_requests_total", "Number of requests processed.", g.num_requests_total),
        ]
        for name, help_, value in counters:
            out += [f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name}{{{labels}}} {float(value)}"]
        out += g.measure.metric_lines(labels)
        return "\n".join(out) + "\n"


def _estimate_tokens(text: Any) -> int:
    if isinstance(text, list):
        return max(1, sum(len(str(t)) for t in text) // 4)
    return max(1, len(str(text or "")) // 4)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    state: ServerState  # set on the subclass

    # ---------------------------------------------------------------- plumbing
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _access_log(self, code: int) -> None:
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        host, port = self.client_address[:2]
        uv_log(f'{host}:{port} - "{self.command} {self.path} HTTP/1.1" {code} {phrase}')

    def _send(self, code: int, body: Any = None, ctype: str = "application/json") -> None:
        if body is None:
            data = b""
        elif isinstance(body, (bytes, str)):
            data = body.encode() if isinstance(body, str) else body
        else:
            data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._access_log(code)

    def _json_body(self) -> Any:
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        return json.loads(raw)

    def _authorized(self, path: str) -> bool:
        key = self.state.sa.api_key
        if not key or path.startswith("/health") or path in ("/metrics", "/ping", "/ready"):
            return True
        return self.headers.get("authorization", "") == f"Bearer {key}"

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            self._send(401, {"error": "Unauthorized"})
            return
        st = self.state
        ver = st.ver
        gets = {
            "/health": self._health,
            "/health_generate": self._health,
            "/ping": lambda: self._send(200, None),
            "/get_model_info": lambda: self._send(200, st.model_info()),
            "/get_server_info": lambda: self._send(200, st.server_info()),
            "/v1/models": lambda: self._send(200, st.models()),
        }
        if ver >= (0, 5, 6):
            gets["/model_info"] = lambda: self._send(200, st.model_info())
            gets["/server_info"] = lambda: self._send(200, st.server_info())
        if ver >= (0, 5, 20):
            gets["/ready"] = lambda: self._send(200 if st.status == "Up" else 503, None)
        if st.sa.enable_metrics:
            gets["/metrics"] = lambda: self._send(200, st.metrics(), "text/plain; version=0.0.4; charset=utf-8")
        gets["/start_profile"] = lambda: self._profile(start=True)
        gets["/stop_profile"] = lambda: self._profile(start=False)
        posts = {
            "/start_profile": lambda: self._profile(start=True),
            "/stop_profile": lambda: self._profile(start=False),
            "/generate": self._generate,
            "/v1/completions": lambda: self._openai(chat=False),
            "/v1/chat/completions": lambda: self._openai(chat=True),
        }
        if method == "PUT":  # SGLang serves /generate with methods=["POST", "PUT"]
            posts = {"/generate": self._generate}
        table = gets if method in ("GET", "HEAD") else posts
        other = posts if method in ("GET", "HEAD") else gets
        if path in table:
            try:
                table[path]()
            except GenerateFailed as e:  # raised before any byte of the answer was sent (streams answer in-band)
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": {"message": str(e)}})
        elif path in other or (path == "/generate" and method == "GET"):
            self._send(405, {"detail": "Method Not Allowed"})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    # ---------------------------------------------------------------- endpoints
    def _health(self) -> None:
        """SGLang's ``/health`` and ``/health_generate`` as each release has them (http_server.py of the wheels).

        Up to 0.4.10.post1: ``/health`` is a bare 200; ``/health_generate`` runs the generate check below.
        0.4.10.post2+: both routes are one handler: 503 while Starting; on 0.5.6+ ``/health`` is a bare 200 when
        SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is off (default on); on 0.5.19+ SGLANG_DIAG_BYPASS_HEALTH_GENERATE
        answers 200 at once; otherwise the generate check, so a healthy server answers after a little over a second.
        """
        st = self.state
        path = self.path.split("?", 1)[0]
        if st.ver < (0, 4, 10, 2):
            if path == "/health":
                self._send(200, None)
                return
        else:
            if st.status == "Starting":
                self._send(503, None)
                return
            if st.ver >= (0, 5, 19) and _env_bool("SGLANG_DIAG_BYPASS_HEALTH_GENERATE", False):
                self._send(200, None)
                return
            if st.ver >= (0, 5, 6) and path == "/health" and \
                    not _env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True):
                self._send(200, None)
                return
        self._send(st.health_generate(), None)

    def _profile(self, start: bool) -> None:
        """``/start_profile`` (body: ``ProfileReqInput`` to 0.5.15, ``ProfileReq`` from 0.5.16; ``detailed_annotations``
        from 0.5.23) and ``/stop_profile``. SGLang's tokenizer manager raises RuntimeError(message) when the scheduler
        refuses: FastAPI answers a bare 500 and uvicorn logs the traceback."""
        m = self.state.generator.measure
        if start:
            try:
                body = self._json_body() if self.command == "POST" else {}
            except ValueError:
                body = None
            if not isinstance(body, dict):
                self._send(422, {"detail": [{"type": "dict_type", "loc": ["body"], "msg": "Input should be a valid "
                                             "dictionary or object to extract fields from"}]})
                return
            for key in ("num_steps", "start_step"):
                if body.get(key) is not None and not isinstance(body.get(key), int):
                    self._send(422, {"detail": [{"type": "int_parsing", "loc": ["body", key],
                                                 "msg": "Input should be a valid integer"}]})
                    return
            if self.state.ver < (0, 5, 16):
                body.pop("profile_id", None)  # ProfileReqInput has no profile_id: SGLang picks time.time()
            error = m.start(body)
        else:
            error = m.stop()
        if error:
            uv_log("Exception in ASGI application", "ERROR")
            runtime.write_all(2, f"Traceback (most recent call last):\nRuntimeError: {error}\n".encode())
            self._send(500, "Internal Server Error", "text/plain; charset=utf-8")
            return
        self._send(200, "Start profiling.\n" if start else "Stop profiling. This will take some time.\n",
                   "text/plain; charset=utf-8")

    def _generate(self) -> None:
        try:
            req = self._json_body()
        except ValueError:
            self._send(400, {"error": {"message": "invalid JSON"}})
            return
        sp = req.get("sampling_params") or {}
        max_new = int(sp.get("max_new_tokens", 128) if isinstance(sp, dict) else 128)
        if req.get("input_ids") is not None:
            ids = req["input_ids"]
            prompt_tokens = len(ids[0]) if ids and isinstance(ids[0], list) else len(ids)
        else:
            prompt_tokens = _estimate_tokens(req.get("text"))
        if req.get("stream"):
            self._stream(lambda on_chunk: self.state.generator.generate(prompt_tokens, max_new, on_chunk),
                         lambda text, n, meta: {"text": text, "meta_info": meta or {
                             "prompt_tokens": prompt_tokens, "completion_tokens": n, "cached_tokens": 0,
                             "finish_reason": None}})
            return
        batch = isinstance(req.get("text"), list)
        n_req = len(req["text"]) if batch else 1
        results = [self.state.generator.generate(prompt_tokens, max_new) for _ in range(n_req)]
        self._send(200, results if batch else results[0])

    def _openai(self, chat: bool) -> None:
        try:
            req = self._json_body()
        except ValueError:
            self._send(400, {"error": {"message": "invalid JSON"}})
            return
        max_new = int(req.get("max_tokens") or req.get("max_completion_tokens") or 128)
        prompt = req.get("messages") if chat else req.get("prompt")
        prompt_tokens = _estimate_tokens(json.dumps(prompt) if chat else prompt)
        model = req.get("model") or self.state.sa.served_model_name
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def choice(text: str, final: bool, delta: bool) -> dict[str, Any]:
            c: dict[str, Any] = {"index": 0, "finish_reason": "length" if final else None}
            if chat:
                c["delta" if delta else "message"] = {"role": "assistant", "content": text}
            else:
                c["text"] = text
            return c

        if req.get("stream"):
            prev = {"text": ""}

            def chunk(text: str, n: int, meta: dict[str, Any] | None) -> dict[str, Any]:
                new, prev["text"] = text[len(prev["text"]):], text
                return {"id": "cmpl-sim", "object": obj + (".chunk" if chat else ""), "created": created,
                        "model": model, "choices": [choice(new, meta is not None, True)]}

            self._stream(lambda on_chunk: self.state.generator.generate(prompt_tokens, max_new, on_chunk), chunk)
            return
        res = self.state.generator.generate(prompt_tokens, max_new)
        meta = res["meta_info"]
        self._send(200, {
            "id": "cmpl-" + meta["id"], "object": obj, "created": created, "model": model,
            "choices": [choice(res["text"], True, False)],
            "usage": {"prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"],
                      "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"]},
        })

    def _stream(self, run: Any, make: Any) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        acc = {"text": ""}

        def on_chunk(new: str, n: int) -> None:
            acc["text"] += new
            data = make(acc["text"], n, None)
            self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            self.wfile.flush()

        try:
            res = run(on_chunk)
            final = make(res["text"], res["meta_info"]["completion_tokens"], res["meta_info"])
            if "meta_info" in final:
                final["meta_info"] = res["meta_info"]
            self.wfile.write(b"data: " + json.dumps(final).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except GenerateFailed as e:
            # SGLang's stream_results: the error as one data chunk, then [DONE]
            try:
                self.wfile.write(b"data: " + json.dumps({"error": {"message": str(e)}}).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
        except (BrokenPipeError, ConnectionResetError):
            pass
        self._access_log(200)


def _env_bool(name: str, default: bool) -> bool:
    """SGLang's EnvBool: true/1/yes/y and false/0/no/n, any case; anything else is an error there."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.lower()
    if value in ("true", "1", "yes", "y"):
        return True
    if value in ("false", "0", "no", "n"):
        return False
    raise ValueError(f'"{value}" is not a valid boolean value')


AFTER_READY_FAULTS = ("generate_error", "generate_hang", "scheduler_dead_health_ok")


def _warmup(state: ServerState, url: str) -> None:
    sa = state.sa
    if not sa.skip_server_warmup:
        info_path = "/model_info" if state.ver >= (0, 5, 6) else "/get_model_info"
        headers = {"Authorization": f"Bearer {sa.api_key}"} if sa.api_key else {}
        try:
            req = urllib.request.Request(url + info_path, headers=headers)
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
            body = json.dumps({"text": "The capital city of France is",
                               "sampling_params": {"temperature": 0, "max_new_tokens": 8}}).encode()
            req = urllib.request.Request(url + "/generate", data=body,
                                         headers={"Content-Type": "application/json", **headers})
            with urllib.request.urlopen(req, timeout=600) as r:
                r.read()
        except Exception as e:  # pragma: no cover - mirrors SGLang's warmup failure path
            runtime.write_all(2, f"[{runtime.now_stamp()}] Initialization failed. warmup error: {e}\n".encode())
            engine.kill_process_tree(include_parent=True, exit_code=1)
    state.status = "Up"
    if state.cfg.get("fail") in AFTER_READY_FAULTS:
        state.generator.fault = state.cfg["fail"]
    runtime.write_all(2, f"[{runtime.now_stamp()}] The server is fired up and ready to roll!\n".encode())


def _bind(sa: ServerArgs, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    family = socket.AF_INET6 if ":" in sa.host else socket.AF_INET

    class Server(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True
        request_queue_size = 128

    return Server((sa.host, sa.port), handler)


class StubHealthHandler(BaseHTTPRequestHandler):
    """What a multi-node rank >= 1 serves on --port: SGLang's dummy health server (200 on /ping, /health and
    /health_generate; nothing else: only node rank 0 serves the API)."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        code = 200 if path in ("/ping", "/health", "/health_generate") else 404
        body = b"" if code == 200 else b'{"detail":"Not Found"}'
        self.send_response(code)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET


def launch_server(server_args: ServerArgs) -> None:
    cfg = runtime.load_config()
    launched = engine._launch_subprocesses(server_args)
    state = ServerState(server_args, launched, cfg)
    handler: type[BaseHTTPRequestHandler] = type("SimHandler", (Handler,), {"state": state})
    if server_args.node_rank > 0:
        handler = StubHealthHandler
    uv_log(f"Started server process [{os.getpid()}]")
    uv_log("Waiting for application startup.")
    uv_log("Application startup complete.")
    try:
        httpd = _bind(server_args, handler)
    except OSError as e:
        uv_log(f"[Errno {e.errno}] error while attempting to bind on address "
               f"('{server_args.host}', {server_args.port}): {e.strerror.lower() if e.strerror else e}",
               level="ERROR")
        uv_log("Waiting for application shutdown.")   # then SGLang tears its schedulers down (real 0.5.16)
        engine.kill_process_tree(include_parent=True, exit_code=1)
        return
    uv_log(f"Uvicorn running on http://{server_args.host}:{server_args.port} (Press CTRL+C to quit)")

    stop = threading.Event()

    def on_term(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    # Those faults are a launcher that does not notice a dead rank (sglang#6624: one rank dead, the rest alive).
    if cfg.get("fail") not in ("scheduler_dead_health_ok", "scheduler_dead_unnoticed"):
        launched.start_watchdog(engine.scheduler_died_after_ready)
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()

    if server_args.node_rank == 0:
        host = "127.0.0.1" if server_args.host in ("0.0.0.0", "", "localhost") else server_args.host
        if ":" in host:
            host = f"[{host if host != '::' else '::1'}]"
        threading.Thread(target=_warmup, args=(state, f"http://{host}:{server_args.port}"),
                         name="warmup", daemon=True).start()
    else:
        state.status = "Up"

    while not stop.wait(1.0):
        pass
    uv_log("Shutting down")
    httpd.shutdown()
    uv_log("Waiting for application shutdown.")
    uv_log("Application shutdown complete.")
    uv_log(f"Finished server process [{os.getpid()}]")
    engine.kill_process_tree(include_parent=False, graceful=True)
    sys.exit(0)
