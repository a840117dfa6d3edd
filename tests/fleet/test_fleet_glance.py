"""Issue 40, points 5 and 6, on two simulated hosts: `inv diff --host sim1,sim2` compares the two hosts' running
configurations (it refused: "records from different hosts"); `inv status --verbose` shows each host's launch (argv
and environment, as recorded, secrets masked), one line each, never wrapped; `inv profile` on a server deployed
without SGLang's device timer says so before its load (the record knows; it said so after the load). In a pipe
beside a terminal and on the terminal, at 80 and 200 columns."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, run_inv
from tests.support.terminal import WIDTHS, run_on_terminal

FAST = {"time_scale": 0.5, "load_seconds": 0.1}


def test_two_hosts_drift_is_shown_by_diff_and_status_verbose(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                             tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path, hosts={"sim2": {"sglang_args": ["--mem-fraction-static", "0.88"],
                                                             "nccl_env": {"NCCL_PROTO": "LL,Simple"},
                                                             "env": {"HF_TOKEN": "hf_secret_never_shown"}}})
    for h in ("sim1", "sim2"):
        sim_hosts[h].set_sim_config(**FAST)
    r = run_inv("deploy", "--host", "sim1,sim2", "--steps", "3", "--strategy", "parallel", inventory=inv, timeout=180)
    assert r.returncode == 0, r.stderr
    try:
        r = run_inv("diff", "--host", "sim1,sim2", "--json", inventory=inv)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        got = {d["what"]: (d["a"], d["b"]) for d in doc["differences"]}
        assert doc["hosts"] == ["sim1", "sim2"]
        assert got["argv --mem-fraction-static"] == ("(absent)", "0.88")
        assert got["env NCCL_PROTO"] == ("LL", "LL,Simple")
        assert "hf_secret_never_shown" not in r.stdout
        for columns in WIDTHS:
            code, piped, _ = run_on_terminal("diff", "--host", "sim1,sim2", columns=columns, inventory=inv,
                                             stdout_tty=False)
            assert code == 0 and piped.splitlines()[0].startswith("sim1 deploy "), piped
            assert re.search(r"argv --mem-fraction-static\s+sim1: \(absent\)\n\s+sim2: 0\.88", piped), piped
            for on_terminal in (True, False):
                code, shown, _ = run_on_terminal("status", "--host", "sim1,sim2", "--verbose", columns=columns,
                                                 inventory=inv, stdout_tty=on_terminal)
                assert code == 0, shown
                flat = shown.replace("\n", "") if on_terminal else shown  # the terminal folds, nothing else does
                assert re.search(r"sim2: launch \(deploy [0-9T-]+[0-9a-f]+\): \S*python3 -m sglang.launch_server "
                                 r".*--mem-fraction-static[= ]0\.88", flat), shown
                assert "hf_secret_never_shown" not in shown
                if not on_terminal:
                    env = next(ln for ln in shown.splitlines() if ln.startswith("sim1: env ("))
                    assert "NCCL_PROTO=LL" in env  # one line, whole
    finally:
        run_inv("stop", "--host", "sim1,sim2", inventory=inv)


def test_profile_without_the_device_timer_says_so_before_the_load(fleet: Fleet, sim_host: SimHost,
                                                                  tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path)
    sim_host.set_sim_config(**FAST)
    assert run_inv("deploy", "--steps", "3", "--no-measure", inventory=inv).returncode == 0
    try:
        for columns in WIDTHS:
            code, piped, shown = run_on_terminal("profile", "--num-prompts", "4", "--output-len", "16", columns=columns,
                                                 inventory=inv, stdout_tty=False)
            assert code == 0, shown
            flat = re.sub(r"\s+", " ", shown)
            said = "this server was deployed without SGLang's device timer (its deploy record"
            assert said in flat, shown
            # before the load's own progress (its requests) on the terminal, and the table on stdout
            assert flat.index(said) < flat.find("requests") or "requests" not in flat, shown
            assert "no device timer" in piped
    finally:
        run_inv("stop", inventory=inv)


def test_check_env_across_hosts_is_one_table_with_details_for_the_failing_host(fleet: Fleet,
                                                                                sim_hosts: dict[str, SimHost],
                                                                                tmp_path: Path) -> None:
    """Issue 40, point 4: `check-env --host all` printed every host's matrix and facts (~40 lines each), the one
    that failed among them. The failing host's details only, then one table across hosts (ranks proven, verdict,
    worst hint)."""
    inv = derived_inventory(fleet, tmp_path)
    for h in ("sim1", "sim2"):
        sim_hosts[h].set_sim_config(**FAST)
    sim_hosts["sim2"].set_sim_config(strip_env_prefixes=["NCCL_"])  # env mode cannot reach the schedulers there
    r = run_inv("deploy", "--host", "sim1,sim2", "--steps", "2", "--patch-mode", "env", "--no-verify",
                "--strategy", "parallel", inventory=inv, timeout=180)
    assert r.returncode == 0, r.stderr
    try:
        for columns in WIDTHS:
            for on_terminal in (True, False):
                code, shown, _ = run_on_terminal("check-env", "--host", "sim1,sim2", columns=columns,
                                                 inventory=inv, stdout_tty=on_terminal)
                assert code == 1, shown  # sim2 is not proven
                table = [ln for ln in shown.splitlines() if ln.startswith("│ sim")]
                assert re.search(r"│ sim1 │\s+2/2 │ proven\s+│ info custom all-reduce", table[0]), shown
                assert re.search(r"│ sim2 │\s+0/2 │ not proven │ error the launch path strips", table[1]), shown
                assert "ranks proven" in shown and "worst hint" in shown
                # the details: sim2's matrix and facts, not sim1's
                assert shown.count("NCCL environment per scheduler process") == 1, shown
                assert re.search(r"^sim2$", shown, re.M) and not re.search(r"^sim1$", shown, re.M), shown
                assert shown.count("Host facts") == 1 and "NOT PROVEN" in shown
        code, shown, _ = run_on_terminal("check-env", "--host", "sim1,sim2", "--verbose", columns=80, inventory=inv,
                                         stdout_tty=False)
        assert code == 1 and shown.count("Host facts") == 2, shown  # --verbose: every host's
    finally:
        run_inv("stop", "--host", "sim1,sim2", inventory=inv)


def test_a_fleet_deployed_profiled_explained_and_benched_at_once(fleet: Fleet, sim_hosts: dict[str, SimHost],
                                                                 tmp_path: Path) -> None:
    """Issue 40, points 5 and 6, on two 8-rank hosts: a multi-host deploy prints each host's address and tunnel line
    (a rollout printed none), `profile` takes several hosts, `explain` reuses the profile just taken of the same
    deploy and says so (it loaded the server again), `--fresh` measures anew, and `bench --host` of both ends with
    one table across them. At 80 and 200 columns, in a pipe beside a terminal and on it."""
    inv = derived_inventory(fleet, tmp_path, hosts={h: {"tp": 8, "gpus": 8} for h in ("sim1", "sim2")})
    for h in ("sim1", "sim2"):
        sim_hosts[h].set_sim_config(**FAST)
    load = ("--num-prompts", "4", "--output-len", "16")
    try:
        for columns in WIDTHS:
            code, piped, shown = run_on_terminal("deploy", "--host", "sim1,sim2", "--steps", "3", "--measure",
                                                 "--strategy", "parallel", columns=columns, inventory=inv,
                                                 stdout_tty=False, timeout=180)
            assert code == 0, shown
            tunnels = [ln for ln in piped.splitlines() if "ssh -F" in ln]
            assert [t.split(":")[0].strip() for t in tunnels] == ["sim1", "sim2"], piped
            assert "-L 8000:127.0.0.1:8000 sim1  then http://127.0.0.1:8000" in tunnels[0]
            assert "-L 8001:127.0.0.1:8000 sim2  then http://127.0.0.1:8001" in tunnels[1]  # both open at once
            assert all(re.search(r"deploy id: \d{8}T\d{6}-[0-9a-f]{6} ", t) for t in tunnels), tunnels
            for on_terminal in (True, False):
                code, out, _ = run_on_terminal("profile", "--host", "sim1,sim2", *load, columns=columns,
                                               inventory=inv, stdout_tty=on_terminal)
                assert code == 0, out
                heads = re.findall(r"^(sim\d) config eagle3-s3-k1-d4 \(SGLang [\d.]+, deploy (\S+)\)", out, re.M)
                assert [h for h, _ in heads] == ["sim1", "sim2"], out
                assert out.count("ranks 0–7 agree within") == 2, out
                # the profile just taken is reused: no load, and the sentence says whose and how old
                code, out, err = run_on_terminal("explain", "--host", "sim1,sim2", *load[:2], columns=columns,
                                                 inventory=inv, stdout_tty=on_terminal)
                assert code == 0, out
                flat = re.sub(r"\s+", " ", out)
                for host, deploy in heads:
                    assert re.search(rf"{host}: reusing the profile of deploy {deploy} measured \d+ s ago \[tool\] "
                                     rf"\(runs/{host}/profiles/p\S+\.json; --fresh measures again\)", flat), out
                assert "requests" not in err and flat.count("verdict:") == 2, (out, err)
            code, out, _ = run_on_terminal("explain", "--fresh", *load[:2], columns=columns, inventory=inv,
                                           stdout_tty=False)
            assert code == 0 and "reusing" not in out and "verdict:" in out, out
            code, out, _ = run_on_terminal("bench", "--host", "sim1,sim2", *load, columns=columns, inventory=inv,
                                           stdout_tty=False)
            assert code == 0, out
            side = out[out.index("hosts side by side"):]
            assert re.search(r"│ sim1 │ eagle3-s3-k1-d4 │ [\d.]+ +│ +[\d.]+ │", side), side  # one row a host
            assert re.search(r"│ sim2 │ eagle3-s3-k1-d4 │", side) and "the load client on each host [tool]" in side
    finally:
        run_inv("stop", "--host", "sim1,sim2", inventory=inv)
