"""check-env's scan of the server log (issue 42): read in chunks with the complete lines decoded at once, the custom
all-reduce line searched cheaply, and a long region's scan saved so the next check-env reads only what was written
since. Each shortcut must give exactly what the plain line-by-line scan gives: these tests compare the two on
seeded random logs (blank lines, '\\r', broken UTF-8, interleaved pids, a line still being written)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from fabfile.remote.evidence import gather
from fabfile.remote.evidence.nccllog import Scan

DEPLOY = "20261204T192022-3ab5ca"


def nccl(pid: int, msg: str) -> str:
    return f"vm:{pid}:{pid} [0] NCCL INFO {msg}"


def random_log(rng: random.Random, lines: int, pids: tuple[int, ...] = (101, 102, 103)) -> bytes:
    """A server log as SGLang and NCCL write it, with what breaks naive readers mixed in."""
    out: list[bytes] = []
    for i in range(lines):
        pid = rng.choice(pids)
        kind = rng.random()
        if kind < 0.15:
            var, val = rng.choice([("NCCL_PROTO", "LL"), ("NCCL_ALGO", "Ring"), ("NCCL_BUFFSIZE", "16777216.")])
            text = nccl(pid, f"{var} set by environment to {val}")
        elif kind < 0.25:
            text = nccl(pid, f"AllReduce: {rng.choice([1024, 14336, 65536])} Bytes -> Algo Ring proto LL "
                             "channel{Lo..Hi}={0..1}")
        elif kind < 0.28:
            text = nccl(pid, f"ncclCommInitRankConfig comm 0x1 rank {pid % 8} nranks 8 cudaDev 0 - Init COMPLETE")
        elif kind < 0.32:
            text = (f"[specdeploy] nccl-env mode=scheduler hash=0123456789ab pid={pid} deploy={DEPLOY} "
                    'set={"NCCL_PROTO": "LL"} kept={}')
        elif kind < 0.33:
            text = rng.choice(["Custom AllReduce is disabled because more than two PCIe GPUs",
                               "custom all-reduce IS DISABLED", "all-reduce is enabled"])
        elif kind < 0.38:
            text = ""
        else:
            text = f"[2026-12-04 19:26:{i % 60:02d} TP0] Decode batch. #running-req: {rng.randint(1, 48)}"
        raw = text.encode()
        if rng.random() < 0.03:
            raw += rng.choice([b"\r", b"\r progress 50%", b"\xe2\x82", b"\xff\xfe"])
        out.append(raw)
    return b"\n".join(out) + rng.choice([b"\n", b"", b"vm:101:101 [0] NCCL INFO NCCL_PR"])


def line_by_line(data: bytes, start: int = 0) -> dict[str, Any]:
    """The plain scan: each line decoded on its own and fed on its own."""
    scan = Scan(DEPLOY)
    for raw in data[start:].split(b"\n"):
        for line in raw.decode("utf-8", "replace").splitlines():
            scan.feed(line, "log")
    return scan.state()


@pytest.mark.parametrize("seed", range(8))
def test_the_chunked_read_and_the_batched_search_scan_what_a_line_by_line_read_scans(tmp_path: Path,
                                                                                    seed: int) -> None:
    rng = random.Random(seed)
    data = random_log(rng, 400)
    log = tmp_path / "server.log"
    log.write_bytes(data)
    for chunk in (1, 5, 64, 1 << 20):
        scan = Scan(DEPLOY)
        lines, info = gather.read_lines(str(log), 0, len(data) + 10, chunk=chunk)
        scan.feed_lines(lines, "log")
        assert scan.state() == line_by_line(data), chunk
        assert info["bytes_read"] == len(data) and info["capped"] is False


def test_the_custom_all_reduce_line_is_the_first_one_whatever_its_case() -> None:
    lines = ["x"] * 700 + ["Custom ALLREDUCE is Disabled: more than two PCIe GPUs"] + ["custom allreduce is disabled"]
    scan = Scan(DEPLOY)
    scan.feed_lines(iter(lines), "log")
    assert scan.custom_ar_disabled_line == "Custom ALLREDUCE is Disabled: more than two PCIe GPUs"
    quiet = Scan(DEPLOY)
    quiet.feed_lines(iter(["custom allreduce is enabled", "disabled: nothing"]), "log")
    assert quiet.custom_ar_disabled_line is None


def scan_of(log: Path, saved: Path | None, offset: int = 0, deploy: str = DEPLOY,
            cap: int = 64 << 20) -> tuple[dict[str, Any], dict[str, Any]]:
    scan = Scan(deploy)
    info = gather.scan_log({"log_path": str(log), "log_offset": offset, "log_cap_bytes": cap, "deploy_id": deploy},
                           scan, None if saved is None else str(saved))
    return info, scan.state()


def long_log(rng: random.Random) -> bytes:
    """A region long enough to be saved: NCCL's start-up lines, then a busy server's decode lines."""
    head = random_log(rng, 300).rstrip(b"\n") + b"\n"
    filler = b"".join(b"[2026-12-04 19:26:32 TP0] Decode batch. #running-req: %d, #token: 45123\n" % i
                      for i in range(gather.SCAN_SAVE_MIN_BYTES // 60))
    return head + filler


def test_a_saved_scan_goes_on_from_where_it_stopped_and_gives_what_a_whole_read_gives(tmp_path: Path) -> None:
    rng = random.Random(42)
    log, saved = tmp_path / "server.log", tmp_path / "state" / "scans"
    saved.parent.mkdir()
    half = nccl(104, "NCCL_ALGO set by environment to Tree").encode()
    first = b"=== an earlier deploy ===\n" + long_log(rng) + half[:-3]  # saved with a line half written
    offset = len(b"=== an earlier deploy ===\n")
    log.write_bytes(first)
    assert scan_of(log, saved, offset) == scan_of(log, None, offset)
    assert os.listdir(saved) == [f"{DEPLOY}.json"]
    assert oct(os.stat(saved / f"{DEPLOY}.json").st_mode & 0o777) == "0o600"
    for round_ in range(3):  # the server goes on writing, a line half written at the end
        with log.open("ab") as f:
            f.write((half[-3:] + b"\n" if round_ == 0 else b"") + random_log(rng, 200 + 100 * round_))
        assert scan_of(log, saved, offset) == scan_of(log, None, offset), round_
    # What was scanned before is not read again: a line changed in the middle of the saved region (the server
    # never does that) shows in a whole read only.
    data = log.read_bytes()
    at = data.index(b"Decode batch. #running-req: 1000,")
    changed = nccl(999, "NCCL_PROTO set by environment to LL").encode()
    log.write_bytes(data[:at] + changed + data[at + len(changed):])
    with_saved, whole = scan_of(log, saved, offset), scan_of(log, None, offset)
    assert 999 in {pid for pid, _ in whole[1]["by_pid"]}
    assert 999 not in {pid for pid, _ in with_saved[1]["by_pid"]}


@pytest.mark.parametrize("change", ["truncated", "replaced", "start_rewritten", "other_deploy", "other_offset",
                                    "capped"])
def test_a_saved_scan_that_no_longer_fits_the_log_is_not_used(tmp_path: Path, change: str) -> None:
    rng = random.Random(7)
    log, saved = tmp_path / "server.log", tmp_path / "state" / "scans"
    saved.parent.mkdir()
    log.write_bytes(long_log(rng))
    scan_of(log, saved)
    assert os.listdir(saved) == [f"{DEPLOY}.json"]
    data = log.read_bytes()
    kw: dict[str, Any] = {}
    if change == "truncated":
        log.write_bytes(data[: len(data) // 2])
    elif change == "replaced":
        os.unlink(log)
        log.write_bytes(random_log(rng, 300) + data[len(data) // 3:])
    elif change == "start_rewritten":
        log.write_bytes(nccl(555, "NCCL_ALGO set by environment to Tree").encode() + b"\n" + data)
    elif change == "other_deploy":
        kw = {"deploy": "20261205T000000-aaaaaa"}
    elif change == "other_offset":
        kw = {"offset": 10}
    else:
        kw = {"cap": len(data) // 2}
    assert scan_of(log, saved, **kw) == scan_of(log, None, **kw)
