"""From a hand-typed launch line to the tool: the shipped inventory renders the seed's server, and `inv adopt`
turns a pasted line into an entry that renders the same command (unknown flags kept verbatim, bad lines refused in
one sentence, no file overwritten)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from fabfile.commands import adopt
from fabfile.inventory import hosts as inventory
from fabfile.plan.deploy_plan import Options, build
from tests.support.cli import host_doc, run_cli
from tests.support.invoke_cli import ROOT

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
            "SPECDEPLOY_DEPLOY_ID", "SGLANG_TORCH_PROFILER_DIR"}  # the profiler's private directory


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
    doc = host_doc(json.loads(r.stdout))
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


def test_adopt_names_the_knobs_of_a_hand_started_line_that_do_nothing_on_the_release(tmp_path: Path) -> None:
    """Issue 39: the seed's --num-continuous-decode-steps is parsed and read nowhere; adopt says so in the entry's
    head and in the JSON, on the release named (default the newest supported)."""
    said = "--num-continuous-decode-steps has no effect on SGLang 0.5.16: it is parsed and read nowhere; remove it"
    r = run_cli("adopt", "--command", SEED_SSH_LINE, "--sglang-version", "0.5.16", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["knob_notes"] == [said] and doc["knob_notes_version"] == "0.5.16"
    out = tmp_path / "adopted.yaml"
    r = run_cli("adopt", "--command", SEED_SSH_LINE, "--sglang-version", "0.5.16", "--write", str(out))
    assert r.returncode == 0, r.stderr
    assert f"# knob: {said}\n" in out.read_text()
    line = SEED_SSH_LINE.replace("EAGLE3_PROFILE=1", "CUDA_DEVICE_MAX_CONNECTIONS=1")
    r = run_cli("adopt", "--command", line, "--json")
    assert "SGLang sets CUDA_DEVICE_MAX_CONNECTIONS=8 itself: your value never reaches the workers" in \
        json.loads(r.stdout)["knob_notes"]
    r = run_cli("adopt", "--command", SEED_SSH_LINE, "--sglang-version", "five")
    assert r.returncode == 2 and "--sglang-version" in r.stderr
