"""Process facts the stop logic relies on, checked against real processes on this machine."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from fabfile.remote import procs
from tests.support import waiting

# The main thread leaves (pthread_exit) while another thread keeps running: the thread-group leader shows "Z"
# although the process is alive, as a CUDA process does for a second after SIGKILL on a real GPU host.
ZOMBIE_LEADER = """
import ctypes, threading, time
threading.Thread(target=lambda: time.sleep(60)).start()
print("ready", flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


def _wait_state(pid: int, state: str) -> None:
    deadline = waiting.deadline()
    while (procs.stat(pid) or procs.ProcInfo(0, 0, 0, "?", 0, "")).state != state:
        assert time.monotonic() < deadline, f"pid {pid} never reached state {state}"
        time.sleep(0.01)


def test_a_zombie_leader_with_running_threads_is_alive_until_they_end() -> None:
    p = subprocess.Popen([sys.executable, "-c", ZOMBIE_LEADER], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        _wait_state(p.pid, "Z")
        info = procs.stat(p.pid)
        assert info is not None
        assert procs.alive(p.pid, info.start_ticks) is True
        p.send_signal(signal.SIGKILL)
        deadline = waiting.deadline()
        while procs.alive(p.pid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert procs.wait_gone({p.pid: info.start_ticks}, 1.0) == []
    finally:
        p.kill()
        p.wait()


def test_a_plain_zombie_is_gone_and_a_reused_pid_is_not_the_same_process() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    info = None
    deadline = waiting.deadline()
    while info is None or info.state != "Z":
        info = procs.stat(p.pid)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert procs.alive(p.pid) is False
    p.wait()
    me = procs.stat(procs.os.getpid())
    assert me is not None
    assert procs.alive(me.pid, me.start_ticks) is True
    assert procs.alive(me.pid, me.start_ticks + 1) is False


def test_scheduler_rank_from_titles() -> None:
    assert procs.scheduler_rank("sglang::scheduler_TP3") == 3
    assert procs.scheduler_rank("sglang::scheduler") == 0
    assert procs.scheduler_rank("sglang::scheduler_DP1_TP2") == 2
    assert procs.scheduler_rank("sglang::detokenizer") is None


def test_scheduler_titles_sort_numerically_and_name_every_rank() -> None:
    """Titles as SGLang 0.5.x writes them (scheduler.py: DP, PP, ATTN_CP, MOE_DP, TP, EP parts)."""
    titles = ["sglang::scheduler_TP10", "sglang::scheduler_TP2", "sglang::scheduler_TP1"]
    assert sorted(titles, key=procs.scheduler_sort_key) == [
        "sglang::scheduler_TP1", "sglang::scheduler_TP2", "sglang::scheduler_TP10"]
    # PP-only titles (tp_size 1): not all "rank 0"; their order and label come from the PP rank
    assert procs.scheduler_rank("sglang::scheduler_PP1") is None
    assert procs.scheduler_ranks("sglang::scheduler_PP1") == {"PP": 1}
    assert sorted(["sglang::scheduler_PP1", "sglang::scheduler_PP0"], key=procs.scheduler_sort_key)[0].endswith("PP0")
    # MOE_DP and ATTN_CP are not DP/CP ranks of their own
    full = procs.scheduler_ranks("sglang::scheduler_DP1_PP0_ATTN_CP1_MOE_DP0_TP3_EP2")
    assert full == {"DP": 1, "PP": 0, "ATTN_CP": 1, "MOE_DP": 0, "TP": 3, "EP": 2}
    assert procs.scheduler_rank("sglang::scheduler_DP1_PP0_ATTN_CP1_MOE_DP0_TP3_EP2") == 3


def test_processes_in_another_pid_namespace_are_not_ours_by_name() -> None:
    """A server in another container must not be stopped just because its title says sglang::."""
    # --kill-child: killing unshare kills the namespace's first process too (without it, the titled process
    # outlived the test by its whole sleep, an orphan of PID 1 writing into pytest's capture file).
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, "-c",
                          "import setproctitle, time; setproctitle.setproctitle('sglang::scheduler_TP0'); "
                          "time.sleep(30)"])
    try:
        deadline = waiting.deadline()
        inner = []
        while not inner:
            inner = [q for q in procs.all_procs() if q.cmdline == "sglang::scheduler_TP0"
                     and not procs.same_pid_namespace(q.pid)]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert procs.same_pid_namespace(procs.os.getpid())
        from fabfile.remote.serve import stop

        found = stop.find_stale("/nonexistent-state", [], include_gpu_holders=False)
        assert inner[0].pid not in found.targets
    finally:
        p.kill()
        p.wait()


def test_fatal_log_lines_and_benign_nccl_warnings() -> None:
    from fabfile.remote.serve.server import classify

    fatal = [
        "vm:1:1 [0] NCCL WARN Cuda failure 'out of memory'",
        "sim2:9:9 [0] NCCL WARN socket.c: Connection closed by remote peer (10.77.0.1<41234>)",
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error",
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "Port is already in use.",
        "Traceback (most recent call last):",
        "[2026-01-01 10:00:00] Rank 1 scheduler is dead. Please check if there are relevant logs.",
    ]
    benign = [
        "vm:1:1 [0] NCCL WARN Could not find real path of /sys/class/pci_bus/0000:00/../../0000:00:04.0",
        "vm:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL",
        "[2026-01-01 10:00:00 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16",
    ]
    assert all(classify(line) for line in fatal), [line for line in fatal if not classify(line)]
    assert not any(classify(line) for line in benign), [line for line in benign if classify(line)]


def test_a_command_line_is_one_printable_line_without_its_secrets() -> None:
    # Any user's process may carry a newline or a terminal escape in its argv; what the agent reports of it
    # (a GPU holder, a held port, a stopped process) is read by a person on a terminal.
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "two\nlines", "\x1b]0;owned\x07",
                          "--api-key", "sk-hidden-42"])
    try:
        deadline = waiting.deadline()
        while "--api-key" not in procs.read_cmdline(p.pid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        text = procs.read_cmdline(p.pid)
    finally:
        p.kill()
        p.wait()
    assert text.isprintable()
    assert "two\\nlines" in text and "\\x1b]0;owned\\x07" in text
    assert text.endswith("--api-key ***") and "sk-hidden-42" not in text
