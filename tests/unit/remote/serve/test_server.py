"""Waiting for a server to be ready (fabfile/remote/serve/server.py), against real parts in one process: a child
process as the launcher, its log file, and a stdlib HTTP server as its health endpoint. Ready is the endpoint's 200;
a fatal log line, the launcher's death or a cancelled deploy end the wait at once, each in its own words."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from fabfile.remote import procs, versions
from fabfile.remote.common import AgentError
from fabfile.remote.serve import health, server


class _Health(http.server.BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, int]] = {}  # each fixture's subclass has its own

    def do_GET(self) -> None:
        self.send_response(self.answers.get(self.path, 404))
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[tuple[int, dict[str, int]]]:
    answers: dict[str, int] = {}
    handler = type("Health", (_Health,), {"answers": answers})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], answers
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def launcher() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def _wait(p: subprocess.Popen[bytes], log: Path, port: int, path: str, **kw: object) -> dict[str, object]:
    ticks = procs.stat(p.pid)
    args: dict[str, object] = {"pid": p.pid, "start_ticks": ticks.start_ticks if ticks else None,
                               "log_path": str(log), "log_offset": 0, "listen": "127.0.0.1", "port": port,
                               "ready_path": path, "ready_s": 30.0, "stall_s": 30.0,
                               "on_lines": lambda lines: None, "interval": 0.02, **kw}
    return server.wait_ready(**args)  # type: ignore[arg-type]


def test_ready_is_the_endpoints_200_and_the_answer_says_which_endpoint(
        tmp_path: Path, endpoint: tuple[int, dict[str, int]], launcher: subprocess.Popen[bytes]) -> None:
    port, answers = endpoint
    log = tmp_path / "server.log"
    log.write_text(f"loading\n{server.READY_LINE}\n")
    answers["/ready"] = 200
    got = _wait(launcher, log, port, "/ready")
    assert got["ready_path"] == "/ready" and got["fired_up_line"] is True
    assert got["log_offset"] == log.stat().st_size and got["sglang_warnings"] == []


def test_a_fatal_log_line_ends_the_wait_with_sglangs_own_error_line(
        tmp_path: Path, endpoint: tuple[int, dict[str, int]], launcher: subprocess.Popen[bytes]) -> None:
    port, _ = endpoint  # never 200: only the log can end the wait
    log = tmp_path / "server.log"
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    with pytest.raises(AgentError) as e:
        _wait(launcher, log, port, "/ready")
    assert e.value.kind == "fatal_log" and "CUDA out of memory. Tried to allocate 2.00 GiB" in e.value.message


def test_a_port_taken_during_the_model_load_is_said_with_uvicorns_line(
        tmp_path: Path, endpoint: tuple[int, dict[str, int]], launcher: subprocess.Popen[bytes]) -> None:
    # The deploy checks the port before the launch (serve/port.py); one taken during the load is still found, by
    # uvicorn's own line, as real 0.5.16 logs it (H200, 2026-12-04).
    port, _ = endpoint
    log = tmp_path / "server.log"
    log.write_text("[2026-12-04 21:20:31] INFO:     Application startup complete.\n"
                   "[2026-12-04 21:20:31] ERROR:    [Errno 98] error while attempting to bind on address "
                   "('127.0.0.1', 30000): address already in use\n")
    with pytest.raises(AgentError) as e:
        _wait(launcher, log, port, "/ready")
    assert e.value.kind == "fatal_log" and e.value.message.startswith("the server's port is already in use")
    assert "[Errno 98]" in e.value.message and "change `port` in the inventory" in e.value.hint


def test_the_launchers_death_ends_the_wait_with_its_exit_status(
        tmp_path: Path, endpoint: tuple[int, dict[str, int]]) -> None:
    port, _ = endpoint
    log = tmp_path / "server.log"
    log.write_text("starting\n")
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    try:
        with pytest.raises(AgentError) as e:
            _wait(p, log, port, "/ready")
    finally:
        p.wait()
    assert e.value.kind == "process_died" and "(status 3)" in e.value.message


def test_a_cancelled_deploy_ends_the_wait_with_the_reason(
        tmp_path: Path, endpoint: tuple[int, dict[str, int]], launcher: subprocess.Popen[bytes]) -> None:
    port, _ = endpoint
    log = tmp_path / "server.log"
    log.write_text("")
    with pytest.raises(AgentError) as e:
        _wait(launcher, log, port, "/ready", cancelled=lambda: "rank 1 failed")
    assert e.value.kind == "cancelled" and "rank 1 failed" in e.value.message


def test_the_recorded_servers_health_is_probed_at_its_deploys_endpoint(
        endpoint: tuple[int, dict[str, int]]) -> None:
    """`status` and `watch` read one probe: a multi-node rank >= 1 is asked /health (its stub health server),
    rank 0 the version's own endpoint."""
    port, answers = endpoint
    answers.update({"/health": 200, "/ready": 503})
    rec = {"sglang_version": "0.5.23", "listen": "0.0.0.0", "port": port, "request": {"node": {"rank": 1}}}
    got = health.recorded_health(rec)
    assert got["path"] == "/health" and got["status"] == 200 and got["timeout_s"] == health.probe_timeout_s("/health")
    got = health.recorded_health({**rec, "request": {}})
    assert got["path"] == versions.readiness_path("0.5.23") == "/ready" and got["status"] == 503


def test_the_log_follower_reads_whole_lines_and_starts_over_on_a_truncated_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes("a\nb caf\xc3".encode("latin-1"))  # a line, then half of one (a UTF-8 sequence cut in two)
    f = server.LogFollower(str(log), 0)
    assert f.read_lines() == ["a"]
    with log.open("ab") as out:
        out.write(b"\xa9\n")
    assert f.read_lines() == ["b café"]
    log.write_text("fresh\n")  # rotated: shorter than where the follower was
    assert f.read_lines() == ["fresh"]
