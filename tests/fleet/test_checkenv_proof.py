"""check-env never says "proven" for a value a worker does not have, end to end on a simulated TP 2 host running
SGLang 0.5.23 whose NCCL lines are printed the way NCCL 2.28 prints them.

Each test is one way a value could be called proven wrongly, and fails on the code before its fix: evidence that
belongs to another process, a precedence rule that differed between the launch and check-env, values NCCL
reformats, values NCCL ignores, variables NCCL reads only under conditions, and hints that named the wrong cause."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from tests.simhost.fleet import Fleet, SimHost
from tests.support import waiting
from tests.support.invoke_cli import derived_inventory, inv_host_json, inv_json, run_inv, sglang_pids

PCIE = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}


@pytest.fixture
def host(sim_host: SimHost) -> SimHost:
    sim_host.set_version("0.5.23")
    return sim_host


def _inventory(fleet: Fleet, tmp_path: Path, name: str = "inventory.yaml", **over: Any) -> Path:
    return derived_inventory(fleet, tmp_path, hosts={"sim1": over} if over else None, name=name)


def _record(host: SimHost) -> dict[str, Any]:
    return dict(json.loads(host.exec("cat ~/.specdeploy/current.json").stdout))


def _one(report: dict[str, Any]) -> dict[str, Any]:
    """The host's evaluation: `check-env --json` lists hosts (one shape for one host or many); a deploy's document
    carries its own host's evaluation under ``check_env``."""
    return dict(report["hosts"][0]) if "hosts" in report else report


def _rows(report: dict[str, Any], var: str | None = None) -> list[dict[str, Any]]:
    return [r for r in _one(report)["rows"] if var is None or r["var"] == var]


def _hints(report: dict[str, Any]) -> dict[str, str]:
    return {h["code"]: h["message"] for h in _one(report)["hints"]}


def _schedulers(host: SimHost, exclude: set[int] = frozenset()) -> dict[str, int]:  # type: ignore[assignment]
    return {c.split()[0]: p for p, c in sglang_pids(host) if c.startswith("sglang::scheduler") and p not in exclude}


# ---------------------------------------------------------------------------------------------------- point 1


def test_a_dead_deploys_nccl_lines_never_prove_a_hand_started_server(fleet: Fleet, host: SimHost,
                                                                    tmp_path: Path) -> None:
    """Deploy; the server dies outside the tool (the record stays); a server started by hand with every value
    wrong has schedulers with the PIDs the old ones had (as after a container restart): the recorded log's lines
    for those PIDs belong to the dead processes and prove nothing about the new ones."""
    inventory = _inventory(fleet, tmp_path)
    code, _, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    rec = _record(host)
    old = set(_schedulers(host).values())
    host.exec(f"kill -9 -- -{rec['pgid']}")
    deadline = waiting.deadline()
    while _schedulers(host) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _schedulers(host)

    # By hand, outside specdeploy: every NCCL value wrong, no SPT_NOENV, its own log.
    argv = list(rec["launch"]["argv"])
    wrong = {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Tree", "NCCL_P2P_LEVEL": "PHB", "NCCL_MAX_NCHANNELS": "2",
             "NCCL_BUFFSIZE": "1048576", "NCCL_NTHREADS": "64", "NCCL_DEBUG": "INFO"}
    env = " ".join(f"{k}={v}" for k, v in wrong.items())
    host.exec(f"cd /tmp; setsid nohup env {env} {shlex.join(argv)} >/tmp/hand.log 2>&1 </dev/null &")
    deadline = waiting.deadline()
    while len(_schedulers(host)) < 2:
        assert time.monotonic() < deadline, host.exec(["cat", "/tmp/hand.log"]).stdout
        time.sleep(0.1)
    new = _schedulers(host)
    assert not set(new.values()) & old
    # What the dead schedulers printed, had they had these PIDs: the recorded log holds their lines.
    lines = "".join(f"sim1:{pid}:{pid} [{i}] NCCL INFO {k} set by environment to {v}{'.' if v.isdigit() else ''}\n"
                    for i, pid in enumerate(new.values()) for k, v in PCIE.items())
    host.exec(f"printf %s {shlex.quote(lines)} >> {shlex.quote(rec['log_path'])}")

    code, report, _ = inv_json("check-env", inventory=inventory)
    assert code == 1 and report["ok"] is False
    assert not any(r["status"] == "proven" for r in report["hosts"][0]["rows"]), report["hosts"][0]["rows"]
    hints = _hints(report)
    assert "not_recorded_deploy" in hints and rec["deploy_id"] in hints["not_recorded_deploy"]
    # Present but unreadable (environ wiped, its NCCL log unknown): unconfirmed, never "missing".
    assert {r["status"] for r in report["hosts"][0]["rows"]} == {"unconfirmed"}
    # Nothing about it is taken from the stale record: its own launcher's flags, no recorded version.
    facts = report["hosts"][0]["facts"]
    assert facts["sglang_version"] is None and facts["launch_argv_source"] == "running launcher"
    assert facts["tp_size"] == 2


# ---------------------------------------------------------------------------------------------------- point 2


def test_an_nccl_value_under_env_wins_in_the_launch_and_in_check_env(fleet: Fleet, host: SimHost,
                                                                     tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path, env={"NCCL_BUFFSIZE": "8388608"})
    code, plan, _ = inv_host_json("deploy", "--dry-run", inventory=inventory)
    assert code == 0
    assert plan["env"]["NCCL_BUFFSIZE"] == "8388608" and plan["nccl_expected"]["NCCL_BUFFSIZE"] == "8388608"
    assert any("NCCL_BUFFSIZE" in n and "16777216" in n for n in plan["nccl_notes"])
    code, doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, (err, doc.get("error"))
    rows = _rows(doc["check_env"], "NCCL_BUFFSIZE")
    assert rows and all(r["status"] == "proven" and r["observed"] == "8388608" for r in rows)
    code, report, _ = inv_json("check-env", inventory=inventory)
    assert code == 0 and report["ok"] is True


# ---------------------------------------------------------------------------------------------------- point 3


def test_values_nccl_reformats_are_compared_as_nccl_parses_them(fleet: Fleet, host: SimHost,
                                                                 tmp_path: Path) -> None:
    # "5" → SYS (old-style level), an unquoted YAML float, and "0100" (octal 64 to strtoll).
    inventory = _inventory(fleet, tmp_path, nccl_env={"NCCL_P2P_LEVEL": "5", "NCCL_BUFFSIZE": 16777216.0,
                                                      "NCCL_NTHREADS": "0100"})
    code, doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, (err, doc.get("error"))
    by_var = {r["var"]: r for r in doc["check_env"]["rows"] if r["label"] == "TP0"}
    assert by_var["NCCL_P2P_LEVEL"]["observed"] == "SYS" and by_var["NCCL_P2P_LEVEL"]["expected"] == "5"
    assert by_var["NCCL_BUFFSIZE"]["expected"] == "16777216.0" and by_var["NCCL_BUFFSIZE"]["observed"] == "16777216"
    assert by_var["NCCL_NTHREADS"]["observed"] == "64"
    assert all(r["status"] == "proven" and r["evidence"] == "nccl_log" for r in doc["check_env"]["rows"])


# ---------------------------------------------------------------------------------------------------- point 4


def test_a_value_nccl_ignores_is_refused_before_the_host_is_touched(fleet: Fleet, host: SimHost,
                                                                    tmp_path: Path) -> None:
    """NCCL ignores `sys` without a word (level names are case-sensitive): check-env could only find that after the
    model loaded (`evidence` still judges such a value unconfirmed, tests/unit/remote/evidence/test_evidence.py); the
    deploy refuses it first, naming NCCL's spelling, and starts nothing."""
    inventory = _inventory(fleet, tmp_path, nccl_env={"NCCL_P2P_LEVEL": "sys"})
    r = run_inv("deploy", "--steps", "2", inventory=inventory)
    assert r.returncode == 2, r.stderr
    assert "nccl_env.NCCL_P2P_LEVEL='sys' is not a level NCCL knows: write SYS" in r.stderr
    assert sglang_pids(host) == [] and "connect" not in r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------------- point 5


def test_a_variable_nccl_reads_only_over_infiniband_is_not_blamed_on_the_patch_mode(fleet: Fleet, host: SimHost,
                                                                                    tmp_path: Path) -> None:
    host.set_sim_config(strip_env_prefixes=["NCCL_"])
    inventory = _inventory(fleet, tmp_path, nccl_env={"NCCL_IB_TIMEOUT": "22"})
    code, doc, err = inv_host_json("deploy", "--steps", "2", "--patch-mode", "scheduler", inventory=inventory)
    assert code == 0, (err, doc.get("error"))
    rows = _rows(doc["check_env"], "NCCL_IB_TIMEOUT")
    assert rows and all(r["status"] == "proven" and r["evidence"] == "marker" for r in rows)
    assert all("InfiniBand" in r["note"] for r in rows)
    hints = _hints(doc["check_env"])
    assert "nccl_silent" not in hints and "ib_without_infiniband" in hints
    assert not any("--patch-mode scheduler" in m for m in hints.values())


# ---------------------------------------------------------------------------------------------------- point 6


def test_nccl_debug_warn_under_env_is_named_as_the_cause(fleet: Fleet, host: SimHost, tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path, env={"NCCL_DEBUG": "WARN"})
    code, doc, err = inv_host_json("deploy", "--steps", "2", "--patch-mode", "env", inventory=inventory)
    assert code == 0, (err, doc.get("error"))  # SPT_NOENV=1: the start environment proves every value
    code, report, _ = inv_json("check-env", inventory=inventory)
    assert code == 0
    msg = _hints(report)["no_nccl_debug"]
    assert "NCCL_DEBUG=WARN" in msg and "`env`" in msg


def test_stripped_spt_noenv_without_nccl_debug_is_unconfirmed_with_the_true_cause(fleet: Fleet, host: SimHost,
                                                                                   tmp_path: Path) -> None:
    host.set_sim_config(strip_env_prefixes=["SPT_"])
    inventory = _inventory(fleet, tmp_path, nccl_debug=False)
    code, _, _ = inv_host_json("deploy", "--steps", "2", "--patch-mode", "env", "--no-verify", inventory=inventory)
    assert code == 0
    code, report, _ = inv_json("check-env", inventory=inventory)
    assert code == 1
    # The values did reach the workers (only SPT_NOENV was stripped): nothing shows they did not.
    assert {r["status"] for r in report["hosts"][0]["rows"]} == {"unconfirmed"}
    hints = _hints(report)
    assert "SPT_NOENV=1 was in" in hints["environ_wiped"] and "dropped it" in hints["environ_wiped"]
    assert "nccl_debug is false" in hints["no_nccl_debug"]
    assert "env_stripped" not in hints


def test_nccl_debug_stripped_by_the_launch_path_names_the_launcher(fleet: Fleet, host: SimHost,
                                                                   tmp_path: Path) -> None:
    """nccl_debug on and a launch path that strips NCCL_*: the hint said "NCCL_DEBUG=INFO was not on … deploy with
    nccl_debug", which it was; it names the launcher that had it and the stripping instead."""
    host.set_sim_config(strip_env_prefixes=["NCCL_"])
    inventory = _inventory(fleet, tmp_path, nccl_debug=True)
    code, _, _ = inv_host_json("deploy", "--steps", "2", "--patch-mode", "env", "--no-verify", inventory=inventory)
    assert code == 0
    code, report, _ = inv_json("check-env", inventory=inventory)
    msg = _hints(report)["no_nccl_debug"]
    assert "was not on" not in msg and "deploy with nccl_debug" not in msg, msg
    assert "NCCL_DEBUG=INFO was on in the launcher (pid " in msg and "stripped it" in msg, msg


def test_check_env_judges_the_running_deploy_by_its_record_not_an_edited_inventory(fleet: Fleet, host: SimHost,
                                                                                   tmp_path: Path) -> None:
    inventory = _inventory(fleet, tmp_path)
    code, _, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    edited = _inventory(fleet, tmp_path, name="edited.yaml", nccl_env={"NCCL_BUFFSIZE": "4194304"})
    code, report, _ = inv_json("check-env", inventory=edited)
    assert code == 0 and report["ok"] is True
    assert all(r["expected"] == "16777216" for r in _rows(report, "NCCL_BUFFSIZE"))
    assert "4194304" in _hints(report)["inventory_changed"]


def test_a_failed_verify_step_is_never_printed_with_a_tick(fleet: Fleet, host: SimHost, tmp_path: Path) -> None:
    host.set_sim_config(strip_env_prefixes=["NCCL_"])  # env mode cannot reach the workers here
    inventory = _inventory(fleet, tmp_path)
    r = run_inv("deploy", "--steps", "2", "--patch-mode", "env", inventory=inventory)
    assert r.returncode == 1
    text = r.stdout + r.stderr
    line = next(ln for ln in text.splitlines() if "verify env" in ln)
    assert "✓" not in line and "✗" in line, line


# ------------------------------------------------------------------------------------- issue 36: one rank gone


@pytest.mark.parametrize("dead", [3, 0])
def test_one_rank_gone_with_the_rest_alive_is_never_proven(fleet: Fleet, host: SimHost, tmp_path: Path,
                                                           dead: int) -> None:
    """sgl-project/sglang#6624: one scheduler dies and the launcher never notices; the others run, and their rows
    alone were "every expected variable proven in every rank". With TP0 gone, NCCL's TUNING lines (logged on rank 0
    only) are missing although TUNING was on: no advice to turn it on."""
    trigger = "/tmp/kill-one-rank"
    host.set_sim_config(fail="scheduler_dead_unnoticed", fail_rank=dead, fail_trigger_file=trigger)
    inventory = _inventory(fleet, tmp_path, tp=4, env={"NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"})
    code, _, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    pid = _schedulers(host)[f"sglang::scheduler_TP{dead}"]
    host.exec(["touch", trigger])
    deadline = waiting.deadline()
    while pid in _schedulers(host).values():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert len(_schedulers(host)) == 3  # the rest alive, the launcher too

    code, report, _ = inv_json("check-env", inventory=inventory)
    assert code == 1 and report["ok"] is False
    one = _one(report)
    assert one["ranks"]["verdict"] == f"TP{dead} (pid {pid}) is gone: 3 of 4 ranks run", one["ranks"]
    assert "rank_gone" in _hints(report)
    used_note = str(one["used"].get("note") or "")
    assert "add TUNING" not in used_note, used_note
    if dead == 0:
        assert f"TP0 (pid {pid}), the rank NCCL logs its TUNING lines on, is gone" in used_note
    text = run_inv("check-env", inventory=inventory)
    assert text.returncode == 1
    assert f"NOT PROVEN: TP{dead} (pid {pid}) is gone: 3 of 4 ranks run" in text.stdout, text.stdout
    assert "every expected variable is proven" not in text.stdout
