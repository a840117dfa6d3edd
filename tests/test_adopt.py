"""Issue 17: from the seed's hand-typed launch line to the tool. The shipped inventory renders the seed's server,
`inv adopt` turns a pasted line or a running server into an entry that renders the same command, and the first
deploy after an adopt replaces the hand-started server (found through the adoption record)."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest
import yaml

from fabfile.commands import adopt
from fabfile.inventory import hosts as inventory
from fabfile.plan.deploy_plan import Options, build
from tests.invoke_cli import ROOT, derived_inventory, run_inv, sglang_pids
from tests.simhost.fleet import Fleet, SimHost
from tests.support import waiting
from tests.support.cli import run_cli

# The seed's launch line (shared/seeds/003_8dc9714cd6a2bd1c.txt, message 4764), exactly as typed over ssh.
SEED_SSH_LINE = (
    "ssh root@10.1.230.174 'NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_P2P_LEVEL=SYS NCCL_MAX_NCHANNELS=16 "
    "NCCL_BUFFSIZE=16777216 NCCL_NTHREADS=512 EAGLE3_PROFILE=1 SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 nohup "
    "/root/ml-env/bin/python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --trust-remote-code "
    "--tp-size 8 --mem-fraction-static 0.88 --host 0.0.0.0 --port 8000 --num-continuous-decode-steps 4 "
    "--disable-custom-all-reduce --speculative-algorithm EAGLE3 --speculative-draft-model-path "
    "/data/eagle3/output_100k_sglang/4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
    "--speculative-num-steps 3 > /data/eagle3/synth_100k/logs/sglang_eagle3_nccl_3step.log 2>&1 &' "
    "&& echo \"EAGLE3 3-step + NCCL starting...\"")
TOOL_ENV = {"SPT_NOENV", "PYTHONUNBUFFERED", "PYTHONSAFEPATH", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS",
            "SPECDEPLOY_DEPLOY_ID", "SGLANG_TORCH_PROFILER_DIR"}  # the profiler's private directory (issue 26)


def _same_server(seed: adopt.Launch, plan_argv: list[str], plan_env: dict[str, str]) -> None:
    """Every flag and value of the seed, and every variable, in what the plan runs; extras only the tool's."""
    assert plan_argv[0] == seed.python and plan_argv[1:3] == ["-m", "sglang.launch_server"]
    want_managed, want_rest = adopt.split_flags(seed.args)
    got_managed, got_rest = adopt.split_flags(plan_argv[3:])
    assert got_managed == want_managed
    assert got_rest == want_rest  # verbatim, in order
    for k, v in seed.env.items():
        assert plan_env.get(k) == v, k
    assert set(plan_env) - set(seed.env) <= TOOL_ENV


def test_the_seed_line_parses_through_ssh_nohup_redirections_and_background() -> None:
    seed = adopt.parse_command(SEED_SSH_LINE)
    assert seed.python == "/root/ml-env/bin/python3"
    assert seed.log_path == "/data/eagle3/synth_100k/logs/sglang_eagle3_nccl_3step.log"
    assert seed.env["EAGLE3_PROFILE"] == "1" and seed.env["NCCL_BUFFSIZE"] == "16777216" and len(seed.env) == 8
    assert seed.args[-2:] == ["--speculative-num-steps", "3"]  # `3 > log` is an argument, not a descriptor


def test_shipped_inventory_renders_every_flag_and_variable_of_the_seed_line() -> None:
    seed = adopt.parse_command(SEED_SSH_LINE)
    inv = inventory.load(ROOT / "inventory.yaml")
    plan = build(inv.hosts["gpu1"], Options(steps=3))
    _same_server(seed, list(plan.argv), dict(plan.env))
    # 0.0.0.0 is kept as the operator ran it; the tool says what it would advise instead of changing it.
    assert any("listen 0.0.0.0" in n and "127.0.0.1" in n for n in plan.notes)
    assert "listen 0.0.0.0" in (ROOT / "inventory.yaml").read_text()


def test_adopt_command_writes_an_entry_that_renders_the_same_command(tmp_path: Path) -> None:
    out = tmp_path / "adopted.yaml"
    r = run_cli("adopt", "--command", SEED_SSH_LINE, "--name", "seed", "--write", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "listen 0.0.0.0: kept as the server ran" in text
    assert yaml.safe_load(text)["hosts"]["seed"]["sglang_args"] == [
        "--trust-remote-code", "--mem-fraction-static", "0.88", "--num-continuous-decode-steps", "4",
        "--disable-custom-all-reduce"]
    r = run_cli("render", "--host", "seed", "--json", inventory=out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    plan = build(inventory.load(out).hosts["seed"], Options())
    _same_server(adopt.parse_command(SEED_SSH_LINE), list(plan.argv), dict(plan.env))
    assert doc["config"] == "eagle3-s3-k1-d4"


def test_adopt_keeps_unknown_flags_verbatim_and_sglang_defaults() -> None:
    line = ("CUDA_VISIBLE_DEVICES=0,1 /usr/bin/python3 -m sglang.launch_server --model-path /m --tp 2 "
            "--weird-flag=a,b --chunked-prefill-size -1 --enable-x")
    entry = adopt.host_entry(adopt.parse_command(line))
    assert entry["sglang_args"] == ["--weird-flag=a,b", "--chunked-prefill-size", "-1", "--enable-x"]
    assert entry["listen"] == "127.0.0.1" and entry["port"] == 30000 and entry["tp"] == 2
    assert entry["env"] == {"CUDA_VISIBLE_DEVICES": "0,1"} and entry["speculative"]["steps"] == 0
    host = adopt.validate_entry("h", entry)
    plan = build(host, Options())
    assert shlex.join(plan.argv).endswith("--weird-flag=a,b --chunked-prefill-size -1 --enable-x")


@pytest.mark.parametrize("line, says", [
    ("NCCL_PROTO=LL python3 -m sglang.launch_server --model-path '/m", "cannot parse"),
    ("echo hello", "no `python -m sglang.launch_server`"),
    ("python3 -m sglang.launch_server --tp-size 8", "no --model-path"),
    ("python3 -m sglang.launch_server --model-path /m --tp-size eight", "--tp-size expects a whole number"),
    ("/usr/bin/python3 -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3 "
     "--speculative-num-steps 3 --speculative-draft-model-path /d "
     "--speculative-eagle-topk 1 --speculative-num-draft-tokens 9", "draft_tokens"),
])
def test_adopt_bad_command_is_one_sentence_exit_2_nothing_written(tmp_path: Path, line: str, says: str) -> None:
    out = tmp_path / "never.yaml"
    r = run_cli("adopt", "--command", line, "--write", str(out))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert says in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("error: --command:") or "--command" in r.stderr.splitlines()[0]
    assert not out.exists()


def test_adopt_refuses_to_overwrite_a_file(tmp_path: Path) -> None:
    out = tmp_path / "inventory.yaml"
    out.write_text("hosts: {}\n")
    r = run_cli("adopt", "--command", SEED_SSH_LINE, "--write", str(out))
    assert r.returncode == 2 and "already exists" in r.stderr
    assert out.read_text() == "hosts: {}\n"


def _hand_start(host: SimHost, inv_path: Path) -> int:
    h = yaml.safe_load(inv_path.read_text())
    d = {**h["defaults"], **h["hosts"][host.name]}
    line = (f"NCCL_PROTO=LL NCCL_ALGO=Ring EAGLE3_PROFILE=1 SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 setsid nohup "
            f"{d['python']} -m sglang.launch_server --model-path {d['model']} --trust-remote-code --tp-size 2 "
            f"--mem-fraction-static 0.88 --host 127.0.0.1 --port {d['port']} --disable-custom-all-reduce "
            f"> /tmp/hand.log 2>&1 < /dev/null & echo $!")
    pid = int(host.exec(line).stdout.strip())
    deadline = waiting.deadline()
    while not any(p == pid for p, _ in sglang_pids(host)):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return pid


def test_adopt_host_reads_proc_and_the_next_deploy_replaces_that_server(fleet: Fleet, sim_host: SimHost,
                                                                       tmp_path: Path) -> None:
    inv_path = derived_inventory(fleet, tmp_path, hosts={sim_host.name: {"tp": 2, "gpus": 2}})
    pid = _hand_start(sim_host, inv_path)
    out = tmp_path / "adopted.yaml"
    r = run_inv("adopt", "--host", sim_host.name, "--write", str(out), inventory=inv_path)
    assert r.returncode == 0, r.stderr
    entry = yaml.safe_load(out.read_text())["hosts"][sim_host.name]
    assert entry["env"] == {"EAGLE3_PROFILE": "1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
                            "NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"} or (
        entry.get("nccl_env") == {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}
        and entry["env"] == {"EAGLE3_PROFILE": "1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})
    assert entry["sglang_args"] == ["--trust-remote-code", "--mem-fraction-static", "0.88",
                                    "--disable-custom-all-reduce"]
    assert entry["log_dir"] == "/tmp" and entry["tp"] == 2
    # The file carries how the host was reached (it wrote only hosts:, and could not reach the host by itself)
    written = yaml.safe_load(out.read_text())
    assert Path(written["ssh_config"]).is_absolute() and Path(written["ssh_config"]).exists()
    assert run_inv("status", "--host", sim_host.name, inventory=out).returncode == 0
    # The adopted entry, merged into the fleet's inventory (its ssh and timeouts), deploys and replaces the server.
    data = yaml.safe_load(inv_path.read_text())
    data["hosts"][sim_host.name].update({k: v for k, v in entry.items() if k not in ("log_dir",)})
    merged = tmp_path / "merged.yaml"
    merged.write_text(yaml.safe_dump(data, sort_keys=False))
    r = run_inv("deploy", "--host", sim_host.name, "--json", inventory=merged, timeout=180)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "adopted server (inv adopt)" in r.stdout
    assert pid not in [p for p, _ in sglang_pids(sim_host)]
    run_inv("stop", "--host", sim_host.name, inventory=merged)


def test_adopt_host_with_no_server_is_exit_2_and_writes_nothing(fleet: Fleet, sim_host: SimHost,
                                                                tmp_path: Path) -> None:
    inv_path = derived_inventory(fleet, tmp_path)
    run_inv("stop", "--host", sim_host.name, inventory=inv_path)
    out = tmp_path / "adopted.yaml"
    r = run_inv("adopt", "--host", sim_host.name, "--write", str(out), inventory=inv_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "no SGLang server runs on this host" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()
    assert sim_host.exec("ls ~/.specdeploy/adopted.json").returncode != 0
