"""The gates after readiness (fabfile/remote/serve/gates.py): one real generation against a stdlib HTTP server that
answers ``POST /generate`` as told (well, empty, an error, never), and the accept-length verdict."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from fabfile.remote.common import AgentError
from fabfile.remote.serve import gates


class _Generate(http.server.BaseHTTPRequestHandler):
    reply: ClassVar[dict[str, Any]] = {}  # each fixture's subclass has its own
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if self.reply.get("hang"):
            self.reply["hang"].wait(10)  # released by the fixture's teardown
            return
        raw = json.dumps(self.reply.get("json")).encode()
        self.send_response(int(self.reply.get("status", 200)))
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def served() -> Iterator[tuple[int, dict[str, Any], list[dict[str, Any]]]]:
    reply: dict[str, Any] = {}
    seen: list[dict[str, Any]] = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("G", (_Generate,), {"reply": reply, "seen": seen}))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], reply, seen
    finally:
        if reply.get("hang"):
            reply["hang"].set()
        httpd.shutdown()
        httpd.server_close()


def test_a_real_generation_with_tokens_passes_and_carries_the_api_key(
        served: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    port, reply, seen = served
    reply["json"] = {"text": "hi", "meta_info": {"completion_tokens": gates.FIRST_TOKENS}}
    got = gates.first_request("0.0.0.0", port, "k3y", 5.0)
    assert got["completion_tokens"] == gates.FIRST_TOKENS and got["timeout_s"] == 5.0
    assert seen[0]["path"] == "/generate" and seen[0]["auth"] == "Bearer k3y"
    assert seen[0]["body"]["input_ids"] == gates.PROMPT_IDS  # token ids: a --skip-tokenizer-init server takes it


@pytest.mark.parametrize(("reply", "words"), [
    ({"json": {"text": "", "meta_info": {"completion_tokens": 0}}}, "came back empty"),
    ({"status": 500, "json": {"error": "scheduler is dead"}}, "failed: POST http://127.0.0.1:"),
    ({"json": ["not", "an", "object"]}, "the answer is not a JSON object"),
])
def test_a_ready_server_that_cannot_serve_fails_the_gate(
        served: tuple[int, dict[str, Any], list[dict[str, Any]]], reply: dict[str, Any], words: str) -> None:
    port, answer, _ = served
    answer.update(reply)
    with pytest.raises(AgentError) as e:
        gates.first_request("127.0.0.1", port, None, 5.0)
    assert e.value.kind == "generate_failed" and words in e.value.message


def test_a_request_that_hangs_is_bounded_by_the_gates_timeout(
        served: tuple[int, dict[str, Any], list[dict[str, Any]]]) -> None:
    port, reply, _ = served
    reply["hang"] = threading.Event()
    with pytest.raises(AgentError) as e:
        gates.first_request("127.0.0.1", port, None, 0.3)
    assert e.value.kind == "generate_failed" and "a real request hung" in e.value.message
    assert e.value.details.get("timed_out") is True


def test_the_accept_length_is_judged_against_the_gate() -> None:
    meta = {"accept_len": 1.03, "verify_ct": 124, "completion_tokens": 128}
    burst: dict[str, Any] = {"requests": 4, "meta": meta}
    with pytest.raises(AgentError) as e:
        gates.judge_accept(burst, 1.1)
    assert e.value.kind == "accept_gate" and "accept length 1.03 over 4 requests" in e.value.message
    ok = gates.judge_accept({**burst, "meta": {**meta, "accept_len": 3.2}}, 1.1)
    assert ok["accept_length"] == 3.2 and ok["source"] == "meta_info completion_tokens / spec_verify_ct"
    with pytest.raises(AgentError, match="the server is not speculating"):
        gates.judge_accept({"requests": 4, "meta": {"accept_len": 1.0}}, 1.1)
