"""Tests of the SGLang simulator (test equipment in tests/simhost/sim), run locally without SSH.

Each test installs the simulator into a fresh venv under tmp_path and starts it with subprocess in its
own process group; the ``sim`` fixture kills every group it started, even when the test fails.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.simhost.sim.install import write_config
from tests.support import waiting
from tests.support.sim import Sim, alive, group_gone, http


def wait_gone(pids: list[int], timeout: float = waiting.HANG_GUARD_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


# ----------------------------------------------------------------------------------------- install / layout


def test_install_layout_and_version_knobs(sim: Sim) -> None:
    sim.install("0.5.10")
    out = subprocess.run([sim.python, "-c", "import importlib.metadata as m, sglang, setproctitle;"
                          "print(m.version('sglang'), sglang.__version__)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0.5.10", "0.5.10"]
    sg = sim.site / "sglang"
    assert not (sg / "srt" / "plugins").exists()
    decoy = (sg / "multimodal_gen" / "runtime" / "managers" / "gpu_worker.py").read_text()
    assert re.search(r"^def run_scheduler_process\(", decoy, re.M)

    engine = (sg / "srt" / "entrypoints" / "engine.py").read_text().splitlines()
    assert engine.count("def _set_envs_and_config(server_args: ServerArgs):") == 1
    assert engine.count('    mp.set_start_method("spawn", force=True)') == 1
    i = engine.index("def _set_envs_and_config(server_args: ServerArgs):")
    j = engine.index('    mp.set_start_method("spawn", force=True)')
    body = [ln for ln in engine[i + 1 : j] if ln.strip()]
    assert all(ln.startswith("    ") for ln in body)
    after = [ln for ln in engine[j + 1 :] if ln.strip()]
    assert not after or not after[0].startswith(" ")  # the mp line is the function's last line

    sched = (sg / "srt" / "managers" / "scheduler.py").read_text().splitlines()
    d = next(n for n, ln in enumerate(sched) if re.match(r"^def run_scheduler_process\(", ln))
    close = next(n for n in range(d, len(sched)) if re.match(r"^\)\s*:\s*$", sched[n]))
    assert sched[close] == "):"
    assert sched[close + 1] == "    # Load plugins so hooks can override Scheduler and its dependencies."
    assert sched[close + 2] == "    load_plugins()"

    smi = (sim.bin / "nvidia-smi").read_text().splitlines()[0]
    assert smi == f"#!{sim.python}"
    assert (sim.prefix / "sim-state" / "gpu-procs").is_dir()

    sim.install("0.5.11")
    assert (sim.site / "sglang" / "srt" / "plugins" / "__init__.py").exists()
    assert len(list(sim.site.glob("sglang-*.dist-info"))) == 1
    sim.install("0.4.9")
    assert not (sim.site / "sglang" / "multimodal_gen").exists()


def test_unknown_flag_rejected_like_argparse(sim: Sim) -> None:
    sim.install("0.5.7")
    p = sim.launch("--foo")
    assert p.wait(timeout=10) == 2
    assert "launch_server.py: error: unrecognized arguments: --foo" in sim.text()
    sim.install("0.5.16")   # as real 0.5.16 printed it on an H200
    p = sim.launch("--foo")
    assert p.wait(timeout=10) == 2
    assert "sglang serve: error: unrecognized arguments: --foo" in sim.text()


# ----------------------------------------------------------------------------------------- processes


def test_titles_environ_health_and_pdeathsig(sim: Sim) -> None:
    # slow warmup (prefill of the warmup request) so /health's 503 phase is observable
    sim.install("0.5.7", prefill_ms_base=1200)
    launcher = sim.launch(extra_env={"SIM_MARKER": "m1"})
    codes: list[int] = []
    deadline = waiting.deadline()
    while time.monotonic() < deadline:
        try:
            code, _ = http(sim.url("/health"), timeout=2)
        except OSError:
            time.sleep(0.05)
            continue
        codes.append(code)
        if code == 200:
            break
        time.sleep(0.05)
    assert codes[0] == 503 and codes[-1] == 200, codes
    sim.wait_log("The server is fired up and ready to roll!")

    titles = sim.schedulers(launcher)
    assert {"sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"} <= set(titles)
    assert "sglang.launch_server" in Path(f"/proc/{launcher.pid}/cmdline").read_bytes().decode()
    env0 = Path(f"/proc/{titles['sglang::scheduler_TP0']}/environ").read_bytes()
    assert b"SIM_MARKER" not in env0 and env0.strip(b"\0") == b""

    pids = list(titles.values())
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait(timeout=5)
    assert wait_gone(pids), "schedulers survived their launcher"
    assert group_gone(launcher.pid)


def test_spt_noenv_keeps_environ_and_tp1_title(sim: Sim) -> None:
    sim.install("0.5.7")
    launcher = sim.launch(tp=1, extra_env={"SIM_MARKER": "m2", "SPT_NOENV": "1"})
    sim.wait_log("fired up", proc=launcher)
    titles = sim.schedulers(launcher)
    assert "sglang::scheduler" in titles
    env = Path(f"/proc/{titles['sglang::scheduler']}/environ").read_bytes().split(b"\0")
    assert b"SIM_MARKER=m2" in env


def test_sigterm_shuts_down_and_unregisters(sim: Sim) -> None:
    sim.install("0.5.7")
    launcher = sim.launch()
    sim.wait_log("fired up", proc=launcher)
    assert len(list((sim.prefix / "sim-state" / "gpu-procs").glob("*.json"))) == 2
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=10) == 0
    assert "Rank" not in sim.text()
    assert list((sim.prefix / "sim-state" / "gpu-procs").glob("*.json")) == []


# ----------------------------------------------------------------------------------------- NCCL


def _nccl_lines(text: str, pid: int) -> list[str]:
    return [ln for ln in text.splitlines() if re.match(rf"^simtest:{pid}:\d+ \[\d\] NCCL INFO ", ln)]


def test_nccl_lines_reflect_process_env(sim: Sim) -> None:
    sim.install("0.5.7", strip_env_prefixes=["NCCL_NTHREADS"])
    engine = sim.site / "sglang" / "srt" / "entrypoints" / "engine.py"
    src = engine.read_text()
    anchor = '    mp.set_start_method("spawn", force=True)'
    engine.write_text(src.replace(anchor, '    os.environ["NCCL_MAX_NCHANNELS"] = "16"\n' + anchor))
    launcher = sim.launch(extra_env={"NCCL_DEBUG": "info", "NCCL_PROTO": "LL", "NCCL_BUFFSIZE": "4194304",
                                     "NCCL_NTHREADS": "512", "NCCL_P2P_LEVEL": "PHB"})
    text = sim.wait_log("fired up", proc=launcher)
    titles = sim.schedulers(launcher)
    for rank in (0, 1):
        pid = titles[f"sglang::scheduler_TP{rank}"]
        lines = _nccl_lines(text, pid)
        body = [ln.split("NCCL INFO ", 1)[1] for ln in lines]
        assert body[0] == "NCCL version 2.28.9+cuda13.0"
        assert "NCCL_PROTO set by environment to LL" in body
        assert "NCCL_P2P_LEVEL set by environment to PHB" in body
        assert "NCCL_BUFFSIZE set by environment to 4194304." in body
        assert "NCCL_MAX_NCHANNELS set by environment to 16." in body  # set in-process by the patch
        assert "NCCL_CUMEM_ENABLE set by environment to 0." in body  # SGLang's own write
        assert not any("NCCL_NTHREADS" in b for b in body)  # stripped by the launch path
        assert re.search(rf"ncclCommInitRankConfig comm 0x[0-9a-f]+ rank {rank} nranks 2 cudaDev {rank} .*"
                         r"- Init START$", "\n".join(body), re.M)
        assert body[-1].endswith("- Init COMPLETE")


def test_nccl_lines_are_printed_the_way_nccl_2_28_parses_the_values(sim: Sim) -> None:
    """NCCL echoes what it parsed, not what was written: strtoll integers plus a dot, ncclGetLevel names, and
    nothing for a level it cannot map or a variable it does not read on this path (NCCL's param.cc, paths.cc)."""
    sim.install("0.5.23")
    launcher = sim.launch(extra_env={"NCCL_DEBUG": "INFO", "NCCL_BUFFSIZE": "16777216.0", "NCCL_NTHREADS": "010",
                                     "NCCL_MAX_NCHANNELS": "0x10", "NCCL_MIN_NCHANNELS": "99999999999999999999",
                                     "NCCL_P2P_LEVEL": "5", "NCCL_IB_TIMEOUT": "22", "NCCL_PROTO": "LL"})
    text = sim.wait_log("fired up", proc=launcher)
    pid = sim.schedulers(launcher)["sglang::scheduler_TP0"]
    body = [ln.split("NCCL INFO ", 1)[1] for ln in _nccl_lines(text, pid)]
    assert "NCCL_BUFFSIZE set by environment to 16777216." in body
    assert "NCCL_NTHREADS set by environment to 8." in body  # octal, as strtoll(…, 0) reads it
    assert "NCCL_MAX_NCHANNELS set by environment to 16." in body
    assert "Invalid value 99999999999999999999 for NCCL_MIN_NCHANNELS, using default -2." in body
    assert "NCCL_P2P_LEVEL set by environment to SYS" in body  # old-style level 5, printed by name
    assert "NCCL_PROTO set by environment to LL" in body
    assert not any("NCCL_IB_TIMEOUT" in b for b in body)  # read only over InfiniBand connections
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=10) == 0
    launcher = sim.launch(extra_env={"NCCL_DEBUG": "INFO", "NCCL_P2P_LEVEL": "sys", "NCCL_BUFFSIZE": "1"})
    text = sim.wait_log("fired up", proc=launcher)
    pid = sim.schedulers(launcher)["sglang::scheduler_TP0"]
    body = [ln.split("NCCL INFO ", 1)[1] for ln in _nccl_lines(text, pid)]
    assert "NCCL_BUFFSIZE set by environment to 1." in body
    assert not any("NCCL_P2P_LEVEL" in b for b in body)  # case-sensitive names: "sys" is ignored silently


@pytest.mark.parametrize(("version", "cumem"), [("0.5.3", "0."), ("0.5.5", "1.")])
def test_sglang_env_writes_by_version(sim: Sim, version: str, cumem: str) -> None:
    sim.install(version)
    launcher = sim.launch("--enable-deterministic-inference",
                          extra_env={"NCCL_DEBUG": "INFO", "NCCL_CUMEM_ENABLE": "1", "NCCL_ALGO": "Ring"})
    text = sim.wait_log("fired up", proc=launcher)
    pid = sim.schedulers(launcher)["sglang::scheduler_TP0"]
    body = [ln.split("NCCL INFO ", 1)[1] for ln in _nccl_lines(text, pid)]
    assert f"NCCL_CUMEM_ENABLE set by environment to {cumem}" in body  # 0.5.5+ respects the user's value
    assert "NCCL_ALGO set by environment to allreduce:tree" in body  # deterministic inference overrides
    env = Path(f"/proc/{launcher.pid}/environ").read_bytes().split(b"\0")
    assert not any(e.startswith(b"SGLANG_RUN_ID=") for e in env)  # set in-process only


def test_nccl_tp1_no_proto_and_debug_file_and_plugin(sim: Sim) -> None:
    sim.install("0.5.12")
    pkg = sim.site / "simtest_nccl_plugin.py"
    pkg.write_text("import os, sys\n\ndef apply():\n    os.environ['NCCL_ALGO'] = 'Ring'\n"
                   "    os.environ['NCCL_NTHREADS'] = '256'\n"
                   "    print(f'[simtest-plugin] pid={os.getpid()}', file=sys.stderr, flush=True)\n")
    dist = sim.site / "simtest_nccl_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: simtest-nccl-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[sglang.srt.plugins]\nnccl_env = simtest_nccl_plugin:apply\n")
    debug_file = sim.root / "nccl.%h.%p.log"
    launcher = sim.launch(tp=2, extra_env={"NCCL_DEBUG": "INFO", "NCCL_PROTO": "LL",
                                           "NCCL_DEBUG_FILE": str(debug_file)})
    text = sim.wait_log("fired up", proc=launcher)
    pid = sim.schedulers(launcher)["sglang::scheduler_TP0"]
    assert f"[simtest-plugin] pid={pid}" in text  # plugin ran in the scheduler
    assert f"[simtest-plugin] pid={launcher.pid}" in text  # and in the launcher
    assert _nccl_lines(text, pid) == []  # went to NCCL_DEBUG_FILE
    body = (sim.root / f"nccl.simtest.{pid}.log").read_text()
    assert "NCCL_NTHREADS set by environment to 256." in body
    assert "NCCL_PROTO set by environment to LL" in body
    assert "rank 0 nranks 2 cudaDev 0" in body


def test_tp1_creates_no_nccl_communicator(sim: Sim) -> None:
    # Real SGLang 0.5.16 at TP 1 on an H200, NCCL_DEBUG=INFO: not one NCCL line (no communicator is built).
    sim.install("0.5.16")
    launcher = sim.launch(tp=1, extra_env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV",
                                           "NCCL_NTHREADS": "512"})
    text = sim.wait_log("fired up", proc=launcher)
    assert "NCCL INFO" not in text


def test_no_nccl_lines_without_debug_and_plugin_allowlist(sim: Sim) -> None:
    sim.install("0.5.12")
    (sim.site / "simtest_p.py").write_text("import sys\ndef apply():\n    print('PLUGIN-RAN', file=sys.stderr)\n")
    dist = sim.site / "simtest_p-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: simtest-p\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[sglang.srt.plugins]\np = simtest_p:apply\n")
    launcher = sim.launch(extra_env={"NCCL_PROTO": "LL", "SGLANG_PLUGINS": "other"})
    text = sim.wait_log("fired up", proc=launcher)
    assert "NCCL INFO" not in text
    assert "PLUGIN-RAN" not in text


# ----------------------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    ("version", "health_before", "ready", "model_info"),
    [("0.4.9", 200, 404, 404), ("0.5.5", 503, 404, 404), ("0.5.20", 503, 200, 200)],
)
def test_endpoints_by_version(sim: Sim, version: str, health_before: int, ready: int, model_info: int) -> None:
    sim.install(version, prefill_ms_base=800)
    launcher = sim.launch(tp=1)
    sim.wait_log("Uvicorn running on", proc=launcher)
    assert http(sim.url("/health"))[0] == health_before
    if version == "0.5.20":
        assert http(sim.url("/ready"))[0] == 503
    sim.wait_log("fired up", proc=launcher)
    assert http(sim.url("/health"))[0] == 200
    assert http(sim.url("/ready"))[0] == ready
    assert http(sim.url("/model_info"))[0] == model_info
    code, body = http(sim.url("/get_server_info"))
    assert code == 200 and json.loads(body)["version"] == version
    assert http(sim.url("/v1/models"))[0] == 200


def test_generate_spec_metrics_and_decode_lines(sim: Sim) -> None:
    sim.install("0.5.12", time_scale=0.2)
    launcher = sim.launch("--decode-log-interval", "5", "--enable-metrics", "--served-model-name", "kimi",
                          spec=True)
    sim.wait_log("fired up", proc=launcher)
    code, body = http(sim.url("/generate"), {"text": "hello " * 40, "sampling_params": {"max_new_tokens": 60}})
    assert code == 200
    meta = json.loads(body)["meta_info"]
    assert meta["completion_tokens"] == 60 and meta["prompt_tokens"] > 0
    assert meta["spec_verify_ct"] > 0
    assert 1.0 <= meta["spec_accept_length"] <= 4.0
    info = json.loads(http(sim.url("/server_info"))[1])
    assert info["served_model_name"] == "kimi"
    assert info["speculative_num_draft_tokens"] == 4
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1.0
    lines = [ln for ln in sim.text().splitlines() if "Decode batch" in ln]
    assert lines
    m = re.search(r"^\[\S+ \S+ TP0\] Decode batch, #running-req: 1, #token: \d+, token usage: [\d.]+, "
                  r"accept len: ([\d.]+), accept rate: ([\d.]+), cuda graph: True, "
                  r"gen throughput \(token/s\): [\d.]+, #queue-req: 0$", lines[0])
    assert m, lines[0]
    al, rate = float(m.group(1)), float(m.group(2))
    assert abs(rate - (al - 1) / 3) < 0.011
    code, body = http(sim.url("/generate"), {"text": "hi", "stream": True, "sampling_params": {"max_new_tokens": 8}})
    events = [ln[6:] for ln in body.decode().splitlines() if ln.startswith("data: ")]
    assert code == 200 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["meta_info"]["completion_tokens"] == 8 and chunks[-1]["meta_info"]["spec_verify_ct"] > 0
    assert all("completion_tokens" in c["meta_info"] for c in chunks)
    metrics = http(sim.url("/metrics"))[1].decode()
    assert re.search(r'^sglang:spec_accept_length\{model_name="kimi",.*tp_rank="0".*\} [\d.]+$', metrics, re.M)
    assert re.search(r"^sglang:gen_throughput\{.*\} [\d.]+$", metrics, re.M)


def test_decode_line_format_057_and_topk_rule(sim: Sim) -> None:
    sim.install("0.5.7", time_scale=0.2)
    launcher = sim.launch("--decode-log-interval", "3", "--speculative-num-draft-tokens", "6", spec=True, tp=1)
    text = sim.wait_log("fired up", proc=launcher)
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in text
    http(sim.url("/generate"), {"input_ids": list(range(30)), "sampling_params": {"max_new_tokens": 40}})
    line = next(ln for ln in sim.text().splitlines() if "Decode batch" in ln)
    assert line.endswith(", #queue-req: 0, ")
    m = re.search(r"accept len: ([\d.]+), accept rate: ([\d.]+)", line)
    assert m and abs(float(m.group(2)) - float(m.group(1)) / 4) < 0.011
    assert line.startswith("[") and "TP0" not in line  # tp=1: no rank in the prefix


def test_default_spec_params_058(sim: Sim) -> None:
    sim.install("0.5.8")
    launcher = sim.launch("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                          str(sim.draft), tp=1)
    sim.wait_log("fired up", proc=launcher)
    info = json.loads(http(sim.url("/get_server_info"))[1])
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == (3, 1, 4)


# ----------------------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("version", "fail", "expect"),
    [
        ("0.5.7", "load_traceback", r"Rank 0 scheduler is dead\. Please check if there are relevant logs\."),
        ("0.5.12", "cuda_oom", r"Rank 0 scheduler died during initialization \(exit code: 1\)"),
    ],
)
def test_fail_in_load(sim: Sim, version: str, fail: str, expect: str) -> None:
    sim.install(version, fail=fail)
    launcher = sim.launch()
    assert launcher.wait(timeout=15) != 0
    text = sim.text()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in text
    if fail == "cuda_oom":
        assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in text
    assert re.search(expect, text)
    assert "fired up" not in text
    assert group_gone(launcher.pid), "children survived the failed launcher"


def test_fail_hang(sim: Sim) -> None:
    sim.install("0.5.7", fail="hang")
    launcher = sim.launch()
    text = sim.wait_log(r"\[\S+ \S+ TP0\] Load weight begin", proc=launcher)
    time.sleep(1.0)
    text = sim.text()
    assert launcher.poll() is None
    tp0 = [ln for ln in text.splitlines() if " TP0] " in ln]
    assert "Load weight begin" in tp0[-1] or "Loading safetensors" in tp0[-1]
    assert "Uvicorn running" not in text
    with pytest.raises(OSError):
        http(sim.url("/health"), timeout=1)
    assert "sglang::scheduler_TP0" in sim.schedulers(launcher)


def test_fail_port_in_use(sim: Sim) -> None:
    # The knob: one of SGLang's internal ports (dist-init, ZMQ, NCCL) is taken; PortArgs says so before any work.
    sim.install("0.5.7", fail="port_in_use")
    launcher = sim.launch()
    assert launcher.wait(timeout=10) == 1
    assert "Port is already in use. dist_init_port=" in sim.text()
    assert "Init torch distributed" not in sim.text()

    # The HTTP port taken: as real 0.5.16 on an H200 did, SGLang starts its schedulers first and only uvicorn's bind
    # fails, then everything is torn down (no release checks the HTTP port early).
    sim.install("0.5.7")
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        p = subprocess.run([sim.python, "-m", "sglang.launch_server", "--model-path", str(sim.model),
                            "--port", str(port)], capture_output=True, text=True, timeout=60,
                           env=sim.env(), start_new_session=True)
    assert p.returncode == 1
    assert "Port is already in use" not in p.stderr
    assert "Application startup complete." in p.stderr
    assert f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): " \
           "address already in use" in p.stderr, p.stderr[-2000:]


@pytest.mark.parametrize("version", ["0.5.7", "0.5.12"])
def test_fail_scheduler_killed(sim: Sim, version: str) -> None:
    trigger = sim.prefix / "kill-rank-1"
    sim.install(version, fail="scheduler_killed", fail_rank=1, fail_trigger_file=str(trigger))
    launcher = sim.launch()
    sim.wait_log("fired up", proc=launcher)
    # rank 1 dies only when the trigger exists: its title is read while it lives, however slow the machine
    titles = sim.schedulers(launcher)
    trigger.touch()
    assert launcher.wait(timeout=waiting.HANG_GUARD_S) != 0
    text = sim.text()
    if version == "0.5.7":
        assert "Rank 1 scheduler is dead. Please check if there are relevant logs." in text
        assert "Exit code: -9" in text
    else:
        assert "Received sigquit from a child process" in text
        # SGLang's SubprocessWatchdog names the dead scheduler by its place and pid (0.5.12+)
        assert re.search(r"Subprocess scheduler_1 \(pid=\d+\) crashed with exit code -9\. Triggering SIGQUIT", text)
    assert len(titles) == 3
    assert group_gone(launcher.pid), "children survived the failed launcher"


def test_fail_slow_load_progress(sim: Sim) -> None:
    sim.install("0.5.7", fail="slow_load", load_seconds=2.5)
    launcher = sim.launch(tp=1)
    text = sim.wait_log("fired up", proc=launcher)
    progress = re.findall(r"Loading safetensors checkpoint shards: +(\d+)% Completed", text)
    assert len(progress) >= 3 and progress[-1] == "100"


def test_too_few_gpus_fails_like_cuda(sim: Sim) -> None:
    sim.install("0.5.7", gpus=1)
    launcher = sim.launch(tp=2)
    assert launcher.wait(timeout=15) != 0
    assert "RuntimeError: CUDA error: invalid device ordinal" in sim.text()


# ----------------------------------------------------------------------------------------- nvidia-smi


def test_nvidia_smi_formats_and_holders(sim: Sim) -> None:
    sim.install("0.5.7", gpus=4, gpu_memory_mib=143771)
    q = "--query-gpu=index,uuid,name,memory.used,memory.total"
    r = sim.smi(q, "--format=csv,noheader,nounits")
    assert r.returncode == 0
    rows = [ln.split(", ") for ln in r.stdout.splitlines()]
    assert len(rows) == 4 and rows[0][0] == "0" and rows[0][2] == "NVIDIA H200" and rows[0][3:] == ["0", "143771"]
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", rows[1][1])
    assert sim.smi(q, "--format=csv,noheader,nounits").stdout == r.stdout  # stable uuids
    r = sim.smi("--query-gpu=memory.total,index", "--format=csv")
    assert r.stdout.splitlines()[0] == "memory.total [MiB], index"
    assert r.stdout.splitlines()[1] == "143771 MiB, 0"
    apps = "--query-compute-apps=pid,gpu_uuid,used_memory,process_name"
    r = sim.smi(apps, "--format=csv,noheader,nounits")
    assert r.returncode == 0 and r.stdout == ""
    lines = sim.smi("-L").stdout.splitlines()
    assert lines[2] == f"GPU 2: NVIDIA H200 (UUID: {rows[2][1]})"

    holder = sim.spawn([sim.python, "-m", "simgpu_holder", "--gpu", "1", "--mib", "2000"],
                       stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().startswith(b"simgpu_holder pid=")
    r = sim.smi(apps, "--format=csv,noheader,nounits")
    assert r.stdout.strip() == f"{holder.pid}, {rows[1][1]}, 2000, {sim.python}"
    r = sim.smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader")
    assert r.stdout.strip() == f"{holder.pid}, {sim.python}, 2000 MiB"
    used = sim.smi("--query-gpu=index,memory.used", "--format=csv,noheader,nounits").stdout.splitlines()
    assert used[1] == "1, 2000" and used[0] == "0, 0"
    os.kill(holder.pid, signal.SIGTERM)  # ignored by default
    time.sleep(0.2)
    assert holder.poll() is None
    assert str(holder.pid) in sim.smi(apps, "--format=csv,noheader").stdout
    assert "simgpu_holder" not in sim.smi().stdout  # plain table lists the python path
    assert f"{holder.pid}" in sim.smi().stdout
    os.kill(holder.pid, signal.SIGKILL)
    time.sleep(0.2)  # now a zombie (not reaped yet): not reported
    assert sim.smi(apps, "--format=csv,noheader").stdout == ""
    holder.wait()
    assert sim.smi("--query-gpu=memory.used", "--format=csv,noheader,nounits").stdout.split() == ["0"] * 4

    topo = sim.smi("topo", "-m").stdout
    assert "SYS" in topo and "NV18" not in topo and topo.splitlines()[0].split("\t")[1:3] == ["GPU0", "GPU1"]
    bad = sim.smi("--query-gpu=bogus", "--format=csv")
    assert bad.returncode != 0 and 'Field "bogus" is not a valid field to query.' in bad.stdout
    assert sim.smi("--bogus").returncode != 0
    assert "Link" not in sim.smi("nvlink", "-s").stdout
    write_config(sim.prefix, {"gpus": 2, "interconnect": "nvlink"})
    assert "NV18" in sim.smi("topo", "-m").stdout
    links = sim.smi("nvlink", "-s").stdout.splitlines()
    assert links[0].startswith("GPU 0: ") and links[1] == "\t Link 0: 26.562 GB/s" and len(links) == 2 * 19


def test_nvidia_smi_shows_scheduler_titles(sim: Sim) -> None:
    sim.install("0.5.7", per_gpu_memory_mib=70000)
    launcher = sim.launch()
    sim.wait_log("fired up", proc=launcher)
    titles = sim.schedulers(launcher)
    r = sim.smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
    got = sorted(r.stdout.splitlines())
    want = sorted(f"{titles[f'sglang::scheduler_TP{i}']}, sglang::scheduler_TP{i}, 70000" for i in (0, 1))
    assert got == want


def test_foreign_holder_causes_oom(sim: Sim) -> None:
    sim.install("0.5.7", gpus=1, gpu_memory_mib=80000, per_gpu_memory_mib=70000)
    holder = sim.spawn([sim.python, "-m", "simgpu_holder", "--gpu", "0", "--mib", "20000"],
                       stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline()
    launcher = sim.launch(tp=1)
    assert launcher.wait(timeout=15) != 0
    assert "torch.OutOfMemoryError: CUDA out of memory." in sim.text()


# ----------------------------------------------------------------------------------------- after-ready faults


def _gen(sim: Sim, tokens: int = 8, timeout: float = 3) -> tuple[int, bytes]:
    try:
        return http(sim.url("/generate"), {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": tokens}},
                    timeout=timeout)
    except (TimeoutError, OSError):
        return 0, b"timed out"


@pytest.mark.parametrize("fault", ["generate_error", "generate_hang", "scheduler_dead_health_ok"])
def test_after_ready_faults_pass_health_and_fail_generation(sim: Sim, fault: str) -> None:
    """Readiness passes (the warmup too, as on the servers of sglang#6624/#22779), real requests do not."""
    sim.install("0.5.16", fail=fault)
    launcher = sim.launch()
    sim.wait_log("fired up", proc=launcher)
    assert http(sim.url("/health"), timeout=30)[0] == 200
    schedulers = sim.schedulers(launcher)
    code, body = _gen(sim)
    if fault == "generate_error":
        assert code == 500 and b"error" in body
    else:
        assert code == 0  # no answer: the request hangs
    if fault == "scheduler_dead_health_ok":
        # the scheduler is gone, the launcher did not notice, and /health still says 200 (sglang#6624)
        assert wait_gone([schedulers["sglang::scheduler_TP0"]])
        assert launcher.poll() is None
    assert http(sim.url("/health"), timeout=30)[0] == 200


def test_acceptance_per_configuration_can_be_stuck_at_1(sim: Sim) -> None:
    sim.install("0.5.16", accept_prob_by_config={"3,1,4": [0.0]}, accept_prob=[0.9])
    launcher = sim.launch(spec=True)
    sim.wait_log("fired up", proc=launcher)
    assert _gen(sim, tokens=32, timeout=10)[0] == 200
    _, body = _gen(sim, tokens=32, timeout=10)
    meta = json.loads(body)["meta_info"]
    assert meta["spec_verify_ct"] == 31 and meta["spec_num_correct_drafts"] == 0  # the prefill gave token 1


@pytest.mark.parametrize("version", ["0.5.12", "0.5.16"])
def test_device_timer_and_profiler_follow_the_release(sim: Sim, version: str, tmp_path: Path) -> None:
    """CUDA graphs off: 0.5.12 times an eager verify as `extend` and has no verify-call counter nor draft spans;
    0.5.16 has `target_verify`, the counter and the `draft`/`draft_extend` spans. Timer and trace, read by the
    tool's own parsers, agree on what both measure."""
    from fabfile.remote.measure import devicetimer, trace

    sim.install(version, time_scale=0.5)
    launcher = sim.launch("--enable-metrics", "--disable-cuda-graph", spec=True, tp=2,
                          extra_env={"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"})
    sim.wait_log("fired up", proc=launcher)
    before = devicetimer.snapshot(http(sim.url("/metrics"))[1].decode())
    out = tmp_path / "traces"
    assert http(sim.url("/start_profile"), {"output_dir": str(out), "num_steps": 6})[0] == 200
    code, _body = http(sim.url("/start_profile"), {"output_dir": str(out)})
    assert code == 500 and "Profiling is already in progress" in sim.text()
    meta = json.loads(http(sim.url("/generate"), {"text": "hello " * 20,
                                                  "sampling_params": {"max_new_tokens": 40}})[1])["meta_info"]
    after = devicetimer.snapshot(http(sim.url("/metrics"))[1].decode())
    d = devicetimer.delta(before, after)
    files = sorted(out.glob("*-TP-*.trace.json.gz"))
    assert [f.name.split("-TP-")[1] for f in files] == ["0.trace.json.gz", "1.trace.json.gz"]
    assert set(d["seconds"]) == {0, 1} and not d["graph_passes"]
    t = devicetimer.anatomy(d, 0, version=version, cuda_graph=False, speculative=True, steps=3, draft_tokens=4,
                            concurrency=1, meta_verify_ct=meta["spec_verify_ct"])
    s = trace.summarize(trace.load(str(files[0])))
    a = trace.anatomy(s, rank=0, steps=3, draft_tokens=4)
    assert a["kernels"]["verify"]["launch"] == "eager" and a["kernels"]["verify"]["allreduce_calls"] == 4
    assert a["draft_step"]["ms"] == pytest.approx(t["draft_step"]["ms"], rel=0.1)
    if version == "0.5.12":
        assert set(after["seconds"][0]) == {"decode", "extend"} and after["verify_calls"] is None
        assert "verify" not in t and "draft" not in s["phases"]
    else:
        assert set(after["seconds"][0]) == {"decode", "extend", "target_verify"} and after["verify_calls"]
        assert a["verify"]["ms"] == pytest.approx(t["verify"]["ms"], rel=0.1)
        assert "draft" in s["phases"] and "draft_extend" in s["phases"]
    assert http(sim.url("/stop_profile"), {})[0] == 500  # it stopped by itself after num_steps
