"""check-env evidence: NCCL/marker parsing on the real line formats, evaluate() per status and hint, and
gather() against real processes (spawned children titled like SGLang schedulers, with and without
SPT_NOENV=1)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from fabfile.present import checkenv_report
from fabfile.remote import procs
from fabfile.remote.common import EventSink
from fabfile.remote.evidence import judge as evidence
from fabfile.remote.patch import markers
from fabfile.results.hosts import evaluation_code, evaluation_document
from tests.support import waiting
from tests.support.evidence_docs import ev, marker, sched

# ----------------------------------------------------------------------------------------------------
# parser: lines exactly as the H200 printed them (shared/reference/gpu-host-facts.md, section 2)

REAL = """\
vm:444:444 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:444:444 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS
vm:444:444 [0] NCCL INFO NCCL_MAX_NCHANNELS set by environment to 16.
vm:444:444 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 16777216.
vm:444:444 [0] NCCL INFO NCCL_NTHREADS set by environment to 512.
vm:444:444 [0] NCCL INFO ncclCommInitRankConfig comm 0x25cc7e90 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 \
commId 0x… - Init START
vm:444:444 [0] NCCL INFO ncclCommInitRankConfig comm 0x25cc7e90 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 \
commId 0x… - Init COMPLETE
"""


def test_real_lines_parse_with_trailing_period_stripped() -> None:
    recs = [evidence.parse_nccl_line(line) for line in REAL.splitlines()]
    assert all(r is not None and r["pid"] == 444 and r["host"] == "vm" for r in recs)
    assert recs[0] is not None and recs[0]["kind"] == "version" and recs[0]["version"] == "2.28.9+cuda13.0"
    env = {r["var"]: r["value"] for r in recs if r and r["kind"] == "env"}
    assert env == {
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    }
    done = recs[-1]
    assert done is not None and done["kind"] == "init"
    assert (done["rank"], done["nranks"], done["phase"]) == (0, 1, "COMPLETE")
    assert recs[-2] is not None and recs[-2]["phase"] == "START"


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("vm:9:9 [0] NCCL INFO NCCL_PROTO set by environment to LL", "LL"),
        ("vm:9:9 [0] NCCL INFO NCCL_PROTO set by environment to LL128", "LL128"),
        ("vm:9:9 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 4194304.", "4194304"),
        ("vm:9:9 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 4194304", "4194304"),
        ("vm:9:9 [0] NCCL INFO NCCL_ALGO set by environment to allreduce:tree", "allreduce:tree"),
        ("vm:9:9 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS   ", "SYS"),
        ("vm:9:9 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to -1.", "-1"),
    ],
)
def test_values_keep_strings_and_strip_only_the_numeric_period(line: str, value: str) -> None:
    rec = evidence.parse_nccl_line(line)
    assert rec is not None and rec["kind"] == "env" and rec["value"] == value and rec["pid"] == 9


@pytest.mark.parametrize(
    "prefix",
    [
        "[2026-11-29 10:00:00 TP0] ",
        "[2026-11-29 10:00:00.123 DP0 TP1] ",
        "Nov 29 10:00:00 gpu-host sglang[777]: ",
        "2026-11-29T10:00:00.000+00:00 ",
        "\x1b[32m",
    ],
)
def test_prefixes_never_change_the_pid(prefix: str) -> None:
    rec = evidence.parse_nccl_line(
        prefix + "gpu-node-01.cluster:1234:1250 [3] NCCL INFO NCCL_PROTO set by environment to LL"
    )
    assert rec is not None
    assert (rec["pid"], rec["tid"], rec["dev"], rec["host"]) == (1234, 1250, "3", "gpu-node-01.cluster")
    assert rec["value"] == "LL"


def test_interleaved_lines_are_split_per_pid() -> None:
    line = (
        "vm:444:444 [0] NCCL INFO NCCL_PROTO set by "
        "vm:445:445 [1] NCCL INFO NCCL_BUFFSIZE set by environment "
        "to 16777216."
    )
    recs = evidence.parse_nccl_records(line)
    assert [r["pid"] for r in recs] == [444, 445]
    assert recs[0]["kind"] == "other"  # truncated by the other pid's header: no value for 444
    assert recs[1]["kind"] == "env" and recs[1]["value"] == "16777216"
    first = evidence.parse_nccl_line(line)
    assert first is not None and first["pid"] == 445
    # two complete records glued on one line
    glued = (
        "vm:1:1 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS "
        "vm:2:2 [1] NCCL INFO NCCL_P2P_LEVEL set by environment to PHB"
    )
    assert [(r["pid"], r.get("value")) for r in evidence.parse_nccl_records(glued)] == [
        (1, "SYS"),
        (2, "PHB"),
    ]


def test_warn_and_non_nccl_lines() -> None:
    warn = evidence.parse_nccl_line(
        "\nvm:444:460 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect "
        "to 10.0.0.2<4321> failed : Connection refused"
    )
    assert warn is not None and warn["kind"] == "warn" and warn["pid"] == 444
    assert "Connection refused" in warn["message"]
    assert evidence.parse_nccl_line("[2026-11-29 10:00:00 TP0] Load weight end. NCCL_PROTO=LL") is None
    assert evidence.parse_nccl_line("vm:444:444 [0] NCCL INFO Channel 00/02 : 0 1") is None
    # no host:pid:tid prefix: not an NCCL line, and no crash on it
    assert evidence.parse_nccl_line("10:00:00 [0] NCCL INFO x") is None


def test_marker_parser_matches_the_patch_format() -> None:
    line = (
        '[2026-11-29 10:00:00 TP0] [specdeploy] nccl-env mode=scheduler pid=1234 set={"NCCL_PROTO": "LL"} '
        'kept={"NCCL_ALGO": "Tree"}'
    )
    mk = markers.parse_marker(line)
    assert mk == {
        "mode": "scheduler",
        "hash": "",
        "pid": 1234,
        "deploy": None,
        "set": {"NCCL_PROTO": "LL"},
        "kept": {"NCCL_ALGO": "Tree"},
    }
    rich_form = "[specdeploy] nccl-env mode=engine hash=0123456789ab pid=7 deploy=d1 set={} kept={}"
    assert markers.parse_marker(rich_form)["deploy"] == "d1"  # type: ignore[index]
    assert markers.parse_marker("[specdeploy] nccl-env mode=x pid=1 set={broken kept={}") is None


def test_topology_parse() -> None:
    nv = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-15\nGPU1\tNV18\t X \t0-15\n"
    pcie = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPHB\tSYS\nGPU1\tPHB\t X \tSYS\nGPU2\tSYS\tSYS\t X \n"
    assert evidence.parse_topology(nv) == "nvlink"
    assert evidence.parse_topology(pcie) == "pcie"
    assert evidence.parse_topology("GPU0\t X \t0-15\n") == "single"
    assert evidence.parse_topology("garbage") == "unknown"


def test_nvlink_status_parse() -> None:
    """``nvidia-smi nvlink -s`` as drivers print it (a tab and a space before each link): the names as ``-L``
    gives them, and the interconnect as ``topo -m`` would say it."""
    from fabfile.remote.evidence.interconnect import parse_nvlink

    up = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde)\n\t Link 0: 26.562 GB/s\n"
          "\t Link 1: <inactive>\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-39ac7bce-e3d6-b426-008e-fa47897c72d5)\n"
          "\t Link 0: 26.562 GB/s\n")
    assert parse_nvlink(up) == (["NVIDIA H100 80GB HBM3"] * 2, "nvlink")
    down = "GPU 0: NVIDIA L40S (UUID: GPU-a)\n\t Link 0: <inactive>\nGPU 1: NVIDIA L40S (UUID: GPU-b)\n"
    assert parse_nvlink(down) == (["NVIDIA L40S"] * 2, "pcie")
    assert parse_nvlink("GPU 0: NVIDIA GH200 480GB (UUID: GPU-c)\n\t Link 0: 26.562 GB/s\n") == \
        (["NVIDIA GH200 480GB"], "single")
    assert parse_nvlink("") is None and parse_nvlink("NVML: Unable to retrieve NVLink information\n") is None


def test_sglang_rules_per_version() -> None:
    def overriding(version: str | None, argv: list[str]) -> set[str]:
        flags = evidence.argv_flags(argv)
        return {
            r["var"]
            for r in evidence.sglang_nccl_rules(version, flags)
            if r["action"] == "overrides" and r["applies"]
        }

    assert overriding("0.4.9", ["--tp", "8"]) == {"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"}
    assert overriding("0.5.3.post3", ["--tp", "8"]) == {"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"}
    assert overriding("0.5.7", ["--tp", "8"]) == set()
    assert overriding("0.5.7", ["--tp", "8", "--enable-deterministic-inference"]) >= {"NCCL_ALGO"}
    assert overriding("0.5.23", ["--tp", "2", "--enable-deterministic-inference"]) >= {
        "NCCL_ALGO", "NCCL_MAX_NCHANNELS"}
    assert overriding("0.5.23", ["--enable-symm-mem"]) == {"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"}


def test_sglang_rules_boundaries_from_the_wheels() -> None:
    """The version boundaries come from the table derived from the wheels (each of these
    was wrong when the rules were written by hand)."""
    det = evidence.argv_flags(["--tp", "2", "--enable-deterministic-inference"])

    def rules(version: str, flags: dict[str, object] | None = None) -> list[dict[str, object]]:
        return evidence.sglang_nccl_rules(version, flags or evidence.argv_flags(["--tp", "2"]))

    def variables(version: str, flags: dict[str, object] | None = None) -> set[object]:
        return {r["var"] for r in rules(version, flags)}

    assert "NCCL_GRAPH_MIXING_SUPPORT" in variables("0.5.15.post1")
    assert "NCCL_GRAPH_MIXING_SUPPORT" not in variables("0.5.14")
    assert {"NCCL_MNNVL_ENABLE"} <= variables("0.5.18") and "NCCL_MNNVL_ENABLE" not in variables("0.5.16")
    assert any(r["var"] == "NCCL_CUMEM_ENABLE" and r["action"] == "sets_if_unset" and r["value"] == "1"
               and "mnnvl" in str(r["condition"]) for r in rules("0.5.18"))
    on = {r["var"]: r["value"] for r in rules("0.5.16", det) if r["action"] == "overrides" and r["applies"]}
    assert on == {"NCCL_ALGO": "allreduce:tree"}  # 0.5.16: NCCL_ALGO only
    on = {r["var"]: r["value"] for r in rules("0.5.18", det) if r["action"] == "overrides" and r["applies"]}
    assert on == {"NCCL_ALGO": "allreduce:tree", "NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "8"}
    assert not any(r["var"] == "NCCL_MIN_NCHANNELS" for r in rules("0.5.8", det))
    assert any(r["var"] == "NCCL_ALGO" and r["value"] == "allreduce:tree" for r in rules("0.5.23", det))
    assert "NCCL_GRAPH_REGISTER" in variables("0.5.20") and "NCCL_GRAPH_REGISTER" not in variables("0.5.19")
    # a release between two that were read gets the facts of the lower one, and says so
    cond = next(r["condition"] for r in rules("0.5.16.post2") if r["var"] == "NCCL_CUMEM_ENABLE")
    assert "SGLang 0.5.16 (as read for 0.5.16.post2)" in str(cond)
    cond = next(r["condition"] for r in rules("0.5.20rc1") if r["var"] == "NCCL_CUMEM_ENABLE")
    assert "SGLang 0.5.20 (as read for 0.5.20rc1)" in str(cond)  # a pre-release has its release's facts


def test_custom_all_reduce_rules() -> None:
    pcie = {"interconnect": "pcie"}
    f = evidence.argv_flags
    assert evidence.custom_ar(f(["--tp", "8"]), pcie, 8, None)["enabled"] is False
    assert evidence.custom_ar(f(["--tp", "2"]), pcie, 2, None)["enabled"] is True
    assert (
        evidence.custom_ar(f(["--tp", "2", "--disable-custom-all-reduce"]), pcie, 2, None)["enabled"]
        is False
    )
    log = "CustomAllreduce is disabled because it's not supported on more than two PCIe-only GPUs."
    assert evidence.custom_ar(f([]), {"interconnect": "unknown"}, None, log)["enabled"] is False
    assert evidence.custom_ar(f([]), {"interconnect": "unknown"}, None, None)["enabled"] is None


# ----------------------------------------------------------------------------------------------------
# evaluate(): pure dicts


def row(result: dict[str, Any], pid: int, var: str) -> dict[str, Any]:
    return next(r for r in result["rows"] if r["pid"] == pid and r["var"] == var)


def codes(result: dict[str, Any]) -> set[str]:
    return {h["code"] for h in result["hints"]}


EXP = {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"}


def test_all_proven_by_nccl_log() -> None:
    nccl = {"NCCL_PROTO": ["LL"], "NCCL_BUFFSIZE": ["16777216"]}
    res = evidence.evaluate(ev(sched(10, 0, nccl_env=nccl), sched(11, 1, nccl_env=nccl)), EXP)
    assert res["ok"] is True and res["summary"]["proven"] == 4
    assert all(r["evidence"] == "nccl_log" for r in res["rows"])
    assert evaluation_code(res) == 0


def test_nccl_log_beats_weaker_sources_and_different_names_each_source() -> None:
    s = sched(
        10,
        0,
        environ={"NCCL_PROTO": "Simple"},
        nccl_env={"NCCL_PROTO": ["LL"], "NCCL_BUFFSIZE": ["1"]},
        markers=[marker(10, {"NCCL_BUFFSIZE": "16777216"})],
    )
    res = evidence.evaluate(ev(s), EXP)
    proto = row(res, 10, "NCCL_PROTO")
    assert proto["status"] == "proven" and "environ says Simple" in proto["note"]
    buf = row(res, 10, "NCCL_BUFFSIZE")
    assert buf["status"] == "different" and buf["observed"] == "1" and buf["evidence"] == "nccl_log"
    assert "nccl_log=1" in buf["note"] and "marker=16777216" in buf["note"]
    assert "overridden" in codes(res) and res["ok"] is False


def test_marker_and_environ_are_evidence_without_nccl_debug() -> None:
    s = sched(
        10,
        0,
        environ={"NCCL_BUFFSIZE": "16777216"},
        nccl_env=None,
        markers=[marker(10, {"NCCL_PROTO": "LL"})],
    )
    res = evidence.evaluate(ev(s), EXP)
    assert row(res, 10, "NCCL_PROTO")["evidence"] == "marker"
    assert row(res, 10, "NCCL_BUFFSIZE")["evidence"] == "environ"
    assert res["ok"] is True
    hint = next(h for h in res["hints"] if h["code"] == "no_nccl_debug")
    assert "NCCL_DEBUG=INFO was not on" in hint["message"] and hint["severity"] == "info"


def test_wiped_environ_and_nothing_else_is_unconfirmed_not_missing() -> None:
    """Nothing can show the value either way: the values may be there, so not "missing"."""
    res = evidence.evaluate(ev(sched(10, 0, env_status="wiped", nccl_env=None)), EXP)
    assert {r["status"] for r in res["rows"]} == {"unconfirmed"}
    assert {"environ_wiped", "no_nccl_debug"} <= codes(res)
    msg = next(h["message"] for h in res["hints"] if h["code"] == "environ_wiped")
    assert "SPT_NOENV=1" in msg and "cannot be seen" in msg
    assert evaluation_code(res) == 1


def test_launcher_only_means_the_launch_path_stripped_it() -> None:
    launcher = {
        "pid": 1,
        "alive": True,
        "environ": {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"},
        "markers": [],
        "nccl": {"env": {}},
    }
    res = evidence.evaluate(ev(sched(10, 0, environ={"PATH": "/bin"}), launcher=launcher), EXP)
    assert {r["status"] for r in res["rows"]} == {"launcher_only"}
    assert row(res, 10, "NCCL_PROTO")["sources"]["launcher"] == "LL"
    msg = next(h["message"] for h in res["hints"] if h["code"] == "env_stripped")
    assert "--patch-mode scheduler" in msg and "0.5.11" in msg


def test_engine_marker_in_launcher_is_never_worker_proof() -> None:
    launcher = {
        "pid": 1,
        "alive": True,
        "environ": {},
        "nccl": {"env": {}},
        "markers": [marker(1, {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"}, mode="engine")],
    }
    res = evidence.evaluate(ev(sched(10, 0, env_status="wiped"), launcher=launcher), EXP)
    # workers' environ is blind: the values may be fine, but nothing in the worker shows them
    assert {r["status"] for r in res["rows"]} == {"unconfirmed"} and res["ok"] is False
    assert "environ_wiped" in codes(res) and "launcher has" in row(res, 10, "NCCL_PROTO")["note"]


def test_missing_everywhere() -> None:
    res = evidence.evaluate(ev(sched(10, 0, environ={"PATH": "/bin"})), EXP)
    assert {r["status"] for r in res["rows"]} == {"missing"} and "never_set" in codes(res)


def test_single_rank_proto_from_marker_suffices_and_is_noted() -> None:
    s = sched(
        10,
        0,
        nccl_env={"NCCL_BUFFSIZE": ["16777216"]},
        nranks=1,
        markers=[marker(10, {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"})],
    )
    res = evidence.evaluate(ev(s), EXP)
    proto = row(res, 10, "NCCL_PROTO")
    assert proto["status"] == "proven" and proto["evidence"] == "marker" and "single rank" in proto["note"]
    assert res["single_rank"] is True and res["ok"] is True


def test_multi_rank_marker_but_nccl_silent_is_unconfirmed() -> None:
    # The seed's failure: the patch set the value in-process, but after NCCL had read its environment.
    s = sched(
        10,
        0,
        nccl_env={"NCCL_PROTO": ["LL"]},
        nranks=8,
        markers=[marker(10, {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"})],
    )
    res = evidence.evaluate(ev(s), EXP)
    buf = row(res, 10, "NCCL_BUFFSIZE")
    assert buf["status"] == "unconfirmed" and buf["evidence"] == "marker"
    assert "nccl_silent" in codes(res) and res["ok"] is False


def test_operator_value_kept() -> None:
    s = sched(
        10,
        0,
        markers=[marker(10, {"NCCL_BUFFSIZE": "16777216"}, kept={"NCCL_PROTO": "Simple"})],
        nccl_env={"NCCL_PROTO": ["Simple"], "NCCL_BUFFSIZE": ["16777216"]},
    )
    res = evidence.evaluate(ev(s), EXP)
    assert row(res, 10, "NCCL_PROTO")["status"] == "different"
    assert "operator value was kept" in next(
        h["message"] for h in res["hints"] if h["code"] == "operator_value_kept"
    )


def test_sglang_override_is_named() -> None:
    flags = evidence.argv_flags(["--tp", "8"])
    facts = {
        "sglang_version": "0.5.3",
        "sglang_sets": evidence.sglang_nccl_rules("0.5.3", flags),
        "flagged_expected_vars": ["NCCL_CUMEM_ENABLE"],
    }
    s = sched(10, 0, nccl_env={"NCCL_CUMEM_ENABLE": ["0"]})
    res = evidence.evaluate(ev(s, facts=facts), {"NCCL_CUMEM_ENABLE": "1"})
    # Issue 39: SGLang 0.5.3 assigns it unconditionally, so the row says who did it, not "different".
    got = row(res, 10, "NCCL_CUMEM_ENABLE")
    assert got["status"] == "sglang_overrides" and res["summary"]["sglang_overrides"] == 1
    assert "SGLang sets NCCL_CUMEM_ENABLE=0 itself" in got["note"]
    buf = io.StringIO()
    checkenv_report.render_matrix(res, facts, Console(file=buf, width=200, color_system=None))
    assert "NCCL_CUMEM_ENABLE: overridden by SGLang, expected 1, observed 0" in buf.getvalue()
    msg = next(h["message"] for h in res["hints"] if h["code"] == "sglang_overrides_NCCL_CUMEM_ENABLE")
    assert "SGLang itself sets NCCL_CUMEM_ENABLE on this version" in msg
    assert "sglang_touches_NCCL_CUMEM_ENABLE" in codes(res)


def test_no_server() -> None:
    launcher = {"pid": 4242, "alive": False, "identity": "gone", "environ": {}, "markers": [], "nccl": {}}
    res = evidence.evaluate(ev(launcher=launcher), EXP)
    assert res["ok"] is False and res["rows"] == []
    msg = next(h["message"] for h in res["hints"] if h["code"] == "no_server")
    assert "no running server found" in msg and "4242" in msg


def test_report_renders_and_serialises() -> None:
    nccl = {"NCCL_PROTO": ["LL"], "NCCL_BUFFSIZE": ["16777216"]}
    res = evidence.evaluate(ev(sched(10, 0, nccl_env=nccl), sched(11, 1, env_status="wiped")), EXP)
    facts = {
        "sglang_version": "0.5.7",
        "gpus": {"count": 2, "names": ["NVIDIA H200"] * 2, "interconnect": "pcie"},
        "custom_all_reduce": {"enabled": True, "reasons": ["TP 2 [pcie]"]},
        "draft_worker": {"note": evidence.DRAFT_WORKER_NOTE},
    }
    buf = io.StringIO()
    checkenv_report.render_table(res, facts, Console(file=buf, width=200, color_system=None))
    out = buf.getvalue()
    assert "TP0" in out and "TP1" in out and "NCCL log" in out and "proven" in out and "unconfirmed" in out
    assert "NOT PROVEN" in out and "SPT_NOENV=1" in out and "TP 2 [pcie]" in out
    js = evaluation_document(res, facts)
    assert json.loads(json.dumps(js))["ok"] is False and len(js["rows"]) == 4
    assert evaluation_code(res) == 1


# ----------------------------------------------------------------------------------------------------
# gather(): real processes

FAKE_SERVER = textwrap.dedent('''
    """A stand-in for `sglang.launch_server`: 2 schedulers started as SGLang does (mp spawn, setproctitle)."""
    import json, multiprocessing as mp, os, sys, threading, time

    def emit(log, text):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def scheduler(tp, log, ready_dir):
        import setproctitle
        setproctitle.setproctitle(f"sglang::scheduler_TP{tp}")
        # what the scheduler patch does: set values inside the worker, before NCCL init
        set_vals = {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"}
        os.environ.update(set_vals)
        emit(log, f"[2026-11-29 10:00:00 TP{tp}] [specdeploy] nccl-env mode=scheduler pid={os.getpid()} "
                  f"set={json.dumps(set_vals, sort_keys=True)} kept={{}}\\n")
        # what NCCL prints at comm init with NCCL_DEBUG=INFO (to NCCL_DEBUG_FILE when set)
        sink = os.environ.get("NCCL_DEBUG_FILE")
        target = sink.replace("%h", "vm").replace("%p", str(os.getpid())) if sink else log
        head = f"vm:{os.getpid()}:{threading.get_native_id()} [{tp}] NCCL INFO "
        lines = ["NCCL version 2.28.9+cuda13.0"]
        for k in sorted(os.environ):
            if k.startswith("NCCL_") and k not in ("NCCL_DEBUG", "NCCL_DEBUG_FILE"):
                v = os.environ[k]
                lines.append(f"{k} set by environment to {v}{'.' if v.isdigit() else ''}")
        lines.append(f"ncclCommInitRankConfig comm 0x1 rank {tp} nranks 2 cudaDev {tp} - Init COMPLETE")
        emit(target, "".join(head + ln + "\\n" for ln in lines))
        open(os.path.join(ready_dir, str(os.getpid())), "w").close()
        time.sleep(120)

    if __name__ == "__main__":
        log, ready_dir = sys.argv[1], sys.argv[2]
        # a launch path that strips the environment (like the simulator's strip_env_prefixes / sudo env_reset)
        os.environ.pop("NCCL_NTHREADS", None)
        emit(log, "vm:999999:999999 [0] NCCL INFO NCCL_PROTO set by environment to Simple\\n")  # someone else
        ctx = mp.get_context("spawn")
        kids = [ctx.Process(target=scheduler, args=(tp, log, ready_dir)) for tp in (0, 1)]
        for k in kids:
            k.start()
        time.sleep(120)
''')

EXPECTED = {"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216", "NCCL_P2P_LEVEL": "SYS", "NCCL_NTHREADS": "512"}


class FakeServer:
    def __init__(self, tmp: Path, spt_noenv: bool, debug_file: bool) -> None:
        self.tmp = tmp
        self.spt_noenv = spt_noenv
        self.pids: list[int] = []
        self.log = tmp / "server.log"
        self.ready = tmp / "ready"
        self.ready.mkdir()
        script = tmp / "fake_server.py"
        script.write_text(FAKE_SERVER)
        self.log.write_bytes(b"old deploy: vm:1:1 [0] NCCL INFO NCCL_PROTO set by environment to Simple\n")
        self.offset = self.log.stat().st_size
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SPT_"))}
        env.update(NCCL_P2P_LEVEL="SYS", NCCL_DEBUG="INFO", NCCL_NTHREADS="512")
        if spt_noenv:
            env["SPT_NOENV"] = "1"
        self.debug_pattern = str(tmp / "nccl.%h.%p.log") if debug_file else None
        if self.debug_pattern:
            env["NCCL_DEBUG_FILE"] = self.debug_pattern
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(self.log), str(self.ready)],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout: float = waiting.HANG_GUARD_S) -> list[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = sorted(int(p.name) for p in self.ready.iterdir())
            if len(pids) == 2:
                return pids
            assert self.proc.poll() is None, "fake server died"
            time.sleep(0.05)
        raise AssertionError("fake schedulers did not come up")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def fake_server(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    spt_noenv, debug_file = request.param
    srv = FakeServer(tmp_path, spt_noenv, debug_file)
    try:
        srv.pids = srv.wait_ready()
        yield srv
    finally:
        srv.kill()


def _gather(srv: FakeServer, **over: Any) -> dict[str, Any]:
    info = procs.stat(srv.proc.pid)
    assert info is not None
    req = {
        "log_path": str(srv.log),
        "log_offset": srv.offset,
        "launcher_pid": srv.proc.pid,
        "launcher_start_ticks": info.start_ticks,
        "expected": EXPECTED,
        "nccl_debug_file": srv.debug_pattern,
        "sglang_version": "0.5.7",
        "launch_argv": ["--tp-size", "2"],
    }
    req.update(over)
    return evidence.gather(req, EventSink())


@pytest.mark.parametrize(
    "fake_server",
    [(False, False), (True, False), (True, True)],
    indirect=True,
    ids=["no-SPT_NOENV", "SPT_NOENV", "SPT_NOENV+NCCL_DEBUG_FILE"],
)
def test_gather_attributes_values_per_pid(
    fake_server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = fake_server
    spt = srv.spt_noenv
    res = _gather(srv)
    scheds = res["schedulers"]
    assert sorted(s["pid"] for s in scheds) == srv.pids
    assert [s["label"] for s in scheds] == ["TP0", "TP1"] and [s["rank"] for s in scheds] == [0, 1]
    assert res["discovery"] == "launcher_descendants"
    for s in scheds:
        assert s["title"] == f"sglang::scheduler_TP{s['rank']}"
        if spt:
            assert s["environ_status"] == "ok"
            # inherited values are visible; the ones set in-process are not, and the stripped one is gone
            assert s["environ"]["NCCL_P2P_LEVEL"] == "SYS"
            assert s["environ"]["NCCL_PROTO"] is None and s["environ"]["NCCL_BUFFSIZE"] is None
            assert s["environ"]["NCCL_NTHREADS"] is None
        else:
            assert s["environ_status"] == "wiped" and s["environ"] == {}
        # NCCL's own lines carry the in-process values, for this pid only
        assert s["nccl"]["env"]["NCCL_PROTO"] == ["LL"]
        assert s["nccl"]["env"]["NCCL_BUFFSIZE"] == ["16777216"]
        assert s["nccl"]["env"]["NCCL_P2P_LEVEL"] == ["SYS"]
        assert "NCCL_NTHREADS" not in s["nccl"]["env"]
        assert s["nccl"]["inits"] == [{"rank": s["rank"], "nranks": 2, "phase": "COMPLETE"}]
        assert [m["pid"] for m in s["markers"]] == [s["pid"]]
        src = s["nccl"]["sources"]
        assert (
            (src[0].startswith("debug_file:") and str(s["pid"]) in src[0])
            if srv.debug_pattern
            else src == ["log"]
        )
    launcher = res["launcher"]
    assert launcher["identity"] == "ok" and launcher["environ_status"] == "ok"
    assert launcher["environ"]["NCCL_NTHREADS"] == "512"  # start-time env: the strip happened in-process
    assert res["log"]["unattributed_pids"] == {"999999": 1}  # the old deploy's pid 1 is before the offset
    assert res["facts"]["draft_worker"]["note"] == evidence.DRAFT_WORKER_NOTE
    assert res["facts"]["tp_size"] == 2
    json.dumps(res)

    out = evidence.evaluate(res, EXPECTED)
    for s in scheds:
        for var in ("NCCL_PROTO", "NCCL_BUFFSIZE", "NCCL_P2P_LEVEL"):
            r = row(out, s["pid"], var)
            assert (r["status"], r["evidence"]) == ("proven", "nccl_log"), r
        assert row(out, s["pid"], "NCCL_NTHREADS")["status"] == "launcher_only"
    assert out["ok"] is False
    # NCCL echoed its environment in both workers without NCCL_NTHREADS: absent, even where environ is wiped
    assert "env_stripped" in codes(out) and "environ_wiped" not in codes(out)
    capsys.readouterr()


@pytest.mark.parametrize("fake_server", [(True, False)], indirect=True, ids=["SPT_NOENV"])
def test_gather_host_scan_and_gone_launcher(fake_server: FakeServer) -> None:
    srv = fake_server
    res = _gather(srv, launcher_pid=None, launcher_start_ticks=None)
    assert res["discovery"] == "host_scan"
    assert set(srv.pids) <= {s["pid"] for s in res["schedulers"]}
    reused = _gather(srv, launcher_start_ticks=1)
    assert reused["launcher"]["identity"] == "pid_reused" and reused["schedulers"] == []
    out = evidence.evaluate(reused, EXPECTED)
    assert "no_server" in codes(out) and out["ok"] is False


def test_log_cap_and_rotation_are_reported(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    log = tmp_path / "server.log"
    line = "vm:4242:4242 [0] NCCL INFO NCCL_PROTO set by environment to LL\n"
    log.write_text(line * 1000 + "vm:4343:4343 [0] NCCL INFO NCCL_PROTO set by environment to LL\n")
    base = {"log_path": str(log), "launcher_pid": dead.pid, "expected": EXPECTED}
    capped = evidence.gather({**base, "log_offset": 0, "log_cap_bytes": len(line) * 10 + 5}, EventSink())
    assert capped["log"]["capped"] is True and capped["log"]["bytes_read"] == len(line) * 10 + 5
    assert capped["log"]["unattributed_pids"] == {"4242": 10}  # the partial 11th line has no complete header
    assert capped["launcher"]["identity"] == "gone" and capped["schedulers"] == []
    out = evidence.evaluate(capped, EXPECTED)
    assert {"no_server", "log_capped"} <= codes(out)
    rotated = evidence.gather({**base, "log_offset": 10**9}, EventSink())
    assert rotated["log"]["rotated"] is True and rotated["log"]["capped"] is False
    assert rotated["log"]["unattributed_pids"] == {"4242": 1000, "4343": 1}
    assert "log_rotated" in codes(evidence.evaluate(rotated, EXPECTED))


def test_wiped_environ_but_nccl_echo_shows_the_var_absent() -> None:
    launcher = {"pid": 1, "alive": True, "environ": {"NCCL_BUFFSIZE": "16777216"}, "markers": [], "nccl": {}}
    s = sched(10, 0, env_status="wiped", nccl_env={"NCCL_PROTO": ["LL"]}, nranks=2)
    res = evidence.evaluate(ev(s, launcher=launcher), EXP)
    assert row(res, 10, "NCCL_PROTO")["status"] == "proven"
    assert row(res, 10, "NCCL_BUFFSIZE")["status"] == "launcher_only"
    assert "env_stripped" in codes(res) and "environ_wiped" not in codes(res)


# ----------------------------------------------------------------------------------------------------
# NCCL's own parsing and reading rules (fabfile/remote/evidence/ncclenv.py, learnt from NCCL 2.28's source)

NCCL_OTHERS = {"NCCL_PROTO": ["LL"], "NCCL_ALGO": ["Ring"], "NCCL_MAX_NCHANNELS": ["16"],
               "NCCL_BUFFSIZE": ["16777216"], "NCCL_NTHREADS": ["512"], "NCCL_CUMEM_ENABLE": ["0"],
               "NCCL_NVLS_ENABLE": ["0"]}


def test_values_are_compared_the_way_nccl_parses_them() -> None:
    nccl = {"NCCL_P2P_LEVEL": ["SYS"], "NCCL_BUFFSIZE": ["16777216"], "NCCL_NTHREADS": ["8"]}
    exp = {"NCCL_P2P_LEVEL": "5", "NCCL_BUFFSIZE": "16777216.0", "NCCL_NTHREADS": "010"}
    res = evidence.evaluate(ev(sched(10, 0, nccl_env=nccl)), exp)
    assert {r["status"] for r in res["rows"]} == {"proven"}, res["rows"]
    # and what differs to NCCL still differs
    res = evidence.evaluate(ev(sched(10, 0, nccl_env=nccl)), {"NCCL_P2P_LEVEL": "PHB", "NCCL_NTHREADS": "10"})
    assert {r["status"] for r in res["rows"]} == {"different"}


def test_nccl_refusing_a_value_is_parsed_and_reported() -> None:
    line = "vm:9:9 [0] NCCL INFO Invalid value 99999999999999999999 for NCCL_BUFFSIZE, using default -2."
    rec = evidence.parse_nccl_line(line)
    assert rec is not None and rec["kind"] == "invalid" and rec["var"] == "NCCL_BUFFSIZE"
    s = sched(10, 0, nccl_env={"NCCL_PROTO": ["LL"]})
    s["nccl"]["invalid"] = {"NCCL_BUFFSIZE": "99999999999999999999"}
    res = evidence.evaluate(ev(s), EXP)
    assert row(res, 10, "NCCL_BUFFSIZE")["status"] == "different"
    assert "refused" in row(res, 10, "NCCL_BUFFSIZE")["note"]


def test_a_value_nccl_ignores_is_unconfirmed_even_where_environ_and_marker_hold_it() -> None:
    s = sched(10, 0, nccl_env=NCCL_OTHERS, environ={"NCCL_P2P_LEVEL": "sys"},
              markers=[marker(10, {"NCCL_P2P_LEVEL": "sys"})])
    res = evidence.evaluate(ev(s), {"NCCL_P2P_LEVEL": "sys", "NCCL_PROTO": "LL"})
    lvl = row(res, 10, "NCCL_P2P_LEVEL")
    assert lvl["status"] == "unconfirmed" and res["ok"] is False
    assert "case-sensitively" in next(h["message"] for h in res["hints"] if h["code"] == "nccl_ignores_value")


def test_silence_about_a_variable_nccl_always_echoes_is_unconfirmed_from_environ_too() -> None:
    # NCCL echoed 7 variables in this process but not NCCL_NTHREADS, which it reads at every init.
    others = {k: v for k, v in NCCL_OTHERS.items() if k != "NCCL_NTHREADS"}
    s = sched(10, 0, nccl_env=others, environ={"NCCL_NTHREADS": "512"})
    res = evidence.evaluate(ev(s), {"NCCL_NTHREADS": "512"})
    assert row(res, 10, "NCCL_NTHREADS")["status"] == "unconfirmed"


def test_a_variable_read_only_over_infiniband_is_proven_by_its_marker_without_blaming_the_mode() -> None:
    s = sched(10, 0, nccl_env=NCCL_OTHERS, markers=[marker(10, {"NCCL_IB_TIMEOUT": "22"})])
    facts = {"patch_mode": "scheduler", "infiniband": []}
    res = evidence.evaluate(ev(s, facts=facts), {"NCCL_IB_TIMEOUT": "22"})
    ib = row(res, 10, "NCCL_IB_TIMEOUT")
    assert (ib["status"], ib["evidence"]) == ("proven", "marker") and res["ok"] is True
    assert "InfiniBand" in ib["note"] and "nccl_silent" not in codes(res)
    assert not any("--patch-mode scheduler" in h["message"] for h in res["hints"])


def test_advice_never_names_the_patch_mode_in_use() -> None:
    launcher = {"pid": 1, "alive": True, "environ": {"NCCL_PROTO": "LL"}, "markers": [], "nccl": {}}
    res = evidence.evaluate(ev(sched(10, 0, environ={"PATH": "/bin"}), launcher=launcher,
                               facts={"patch_mode": "scheduler"}), {"NCCL_PROTO": "LL"})
    msg = next(h["message"] for h in res["hints"] if h["code"] == "env_stripped")
    assert "use --patch-mode scheduler" not in msg and "scheduler patch is in use" in msg


def _titled_children(tmp: Path, titles: list[str]) -> subprocess.Popen[bytes]:
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        kids = [subprocess.Popen([sys.executable, "-c",
                 "import setproctitle, time; setproctitle.setproctitle(%r); time.sleep(60)" % t])
                for t in {titles!r}]
        time.sleep(60)
    """)
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


@pytest.mark.parametrize(("titles", "labels", "ranks"), [
    (["sglang::scheduler_TP10", "sglang::scheduler_TP2", "sglang::scheduler_TP0"], ["TP0", "TP2", "TP10"],
     [0, 2, 10]),
    (["sglang::scheduler_PP1", "sglang::scheduler_PP0"], ["PP0", "PP1"], [None, None]),
    (["sglang::scheduler_DP1_TP0", "sglang::scheduler_DP0_TP1", "sglang::scheduler_DP0_TP0"],
     ["DP0_TP0", "DP0_TP1", "DP1_TP0"], [0, 1, 0]),
])
def test_scheduler_rows_sort_by_rank_numbers(tmp_path: Path, titles: list[str], labels: list[str],
                                             ranks: list[int | None]) -> None:
    parent = _titled_children(tmp_path, titles)
    try:
        deadline = waiting.deadline()
        while True:
            info = procs.stat(parent.pid)
            assert info is not None
            got = evidence.gather({"launcher_pid": parent.pid, "launcher_start_ticks": info.start_ticks,
                                   "expected": {"NCCL_PROTO": "LL"}}, EventSink())
            if len(got["schedulers"]) == len(titles) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert [s["label"] for s in got["schedulers"]] == labels
        assert [s["rank"] for s in got["schedulers"]] == ranks
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)


def test_a_marker_from_an_older_process_with_the_same_pid_is_not_evidence(tmp_path: Path) -> None:
    """Markers carry the process start time: one printed by an earlier holder of the pid never counts."""
    parent = _titled_children(tmp_path, ["sglang::scheduler_TP0"])
    try:
        deadline = waiting.deadline()
        while True:
            kids = [p for p in procs.descendants(parent.pid) if p.cmdline.startswith("sglang::scheduler")]
            if kids or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        kid = kids[0]
        log = tmp_path / "server.log"
        log.write_text(
            f'[specdeploy] nccl-env mode=scheduler hash=x pid={kid.pid} start={kid.start_ticks - 1} deploy=d1 '
            'set={"NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "16777216"} kept={}\n'
            f'[specdeploy] nccl-env mode=scheduler hash=x pid={kid.pid} start={kid.start_ticks} deploy=d1 '
            'set={"NCCL_PROTO": "Simple"} kept={}\n')
        info = procs.stat(parent.pid)
        assert info is not None
        got = evidence.gather({"launcher_pid": parent.pid, "launcher_start_ticks": info.start_ticks,
                               "log_path": str(log), "deploy_id": "d1", "expected": EXP}, EventSink())
        (s,) = got["schedulers"]
        assert [m["set"] for m in s["markers"]] == [{"NCCL_PROTO": "Simple"}]
        assert got["log"]["other_process_markers"] == 1
        res = evidence.evaluate(got, EXP)
        assert row(res, kid.pid, "NCCL_PROTO")["status"] == "different"
        assert row(res, kid.pid, "NCCL_BUFFSIZE")["status"] != "proven"
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)


def test_nccl_debug_stripped_by_the_launch_path_names_the_launcher_not_nccl_debug() -> None:
    """NCCL_DEBUG=INFO was on in the launcher and its workers lack it: the hint names the launcher that stripped
    it, never "NCCL_DEBUG=INFO was not on … deploy with nccl_debug" (it was on: deploying with it again changes
    nothing)."""
    s = sched(10, 0, environ={"NCCL_BUFFSIZE": "16777216"}, nccl_env=None,
              markers=[marker(10, {"NCCL_PROTO": "LL"})])
    s["environ_diag"] = {"NCCL_DEBUG": None}  # as gather reads it: every diagnostic name, None when absent
    launcher = {"pid": 7, "alive": True, "environ_status": "ok", "environ": {}, "markers": [], "nccl": {"env": {}},
                "environ_diag": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"},
                "cmdline": "python3 -m sglang.launch_server --api-key sk-hidden --port 8000"}
    res = evidence.evaluate(ev(s, launcher=launcher, facts={"nccl_debug": True}), EXP)
    msg = next(h["message"] for h in res["hints"] if h["code"] == "no_nccl_debug")
    assert "was not on" not in msg and "deploy with nccl_debug" not in msg, msg
    assert "NCCL_DEBUG=INFO was on in the launcher (pid 7, `python3 -m sglang.launch_server`)" in msg, msg
    assert "stripped" in msg and "sk-hidden" not in msg, msg
