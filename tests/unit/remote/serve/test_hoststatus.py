"""The ``status`` verb (fabfile/remote/serve/hoststatus.py) over a real state folder, a real child process as the
recorded server and a stdlib HTTP server as its health endpoint: running or not by the record's pid and start
time, health probed at the deploy's endpoint, a process stopped by a signal reported without spending the probe's
bound, and the last Decode figures of this deploy's part of the log only."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabfile.remote import procs
from fabfile.remote.common import EventSink
from fabfile.remote.serve import hoststatus, records

DECODE = ("[2026-12-03 08:00:00] Decode batch. #running-req: 1, #token: 90, token usage: 0.00, accept len: 3.10, "
          "gen throughput (token/s): 210.5, #queue-req: 0,")


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/ready" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def server() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()


def _record(state: str, p: subprocess.Popen[bytes], port: int, log: Path, **fields: object) -> None:
    st = procs.stat(p.pid)
    records.write(state, {"deploy_id": "d1", "pid": p.pid, "start_ticks": st.start_ticks if st else None,
                          "listen": "127.0.0.1", "port": port, "sglang_version": "0.5.23", "log_path": str(log),
                          "request": {"summary": {"env": {}}}, **fields})


def test_nothing_recorded_is_nothing_running(tmp_path: Path) -> None:
    got = hoststatus.status({"state_dir": str(tmp_path / "state")}, EventSink())
    assert got["record"] is None and got["running"] is False and got["deploy_in_progress"] is None


def test_a_running_server_is_probed_at_its_endpoint_with_its_own_decode_figures(
        tmp_path: Path, server: subprocess.Popen[bytes], port: int) -> None:
    state = str(tmp_path / "state")
    log = tmp_path / "server.log"
    old = DECODE.replace("accept len: 3.10", "accept len: 1.00")
    log.write_text(old + "\n")  # the server before this one, in the same file
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write(DECODE + "\n")
    _record(state, server, port, log, log_offset=offset)
    got = hoststatus.status({"state_dir": state}, EventSink())
    assert got["running"] is True and got.get("process_state") != "T"
    health = got.get("health") or {}
    assert health.get("path") == "/ready" and health.get("status") == 200
    decode = got.get("last_decode") or {}
    assert decode.get("accept_len") == 3.10


def test_a_server_stopped_by_a_signal_is_reported_without_a_probe(
        tmp_path: Path, server: subprocess.Popen[bytes], port: int) -> None:
    state = str(tmp_path / "state")
    _record(state, server, port, tmp_path / "server.log")
    os.kill(server.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10  # the signal is delivered a moment later: /proc says when
        while getattr(procs.stat(server.pid), "state", None) != "T":
            assert time.monotonic() < deadline, "SIGSTOP never showed in /proc"
            time.sleep(0.01)
        got = hoststatus.status({"state_dir": state}, EventSink())
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert got["running"] is True and got.get("process_state") == "T"
    health = got.get("health") or {}
    assert health.get("status") is None and health.get("latency_s") is None and health.get("path") == "/ready"


def test_a_record_whose_process_is_gone_is_not_running(tmp_path: Path, port: int) -> None:
    state = str(tmp_path / "state")
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    records.write(state, {"deploy_id": "d1", "pid": p.pid, "start_ticks": 1, "listen": "127.0.0.1", "port": port})
    got = hoststatus.status({"state_dir": state}, EventSink())
    assert got["record"] is not None and got["running"] is False and "health" not in got
