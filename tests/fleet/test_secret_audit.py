"""Every command, text and JSON, on a host whose configuration carries secrets: none of them is ever printed.

The secrets are planted where a user puts them (the inventory's ``env`` by name, ``secret_env`` under an innocent
name, ``--api-key`` in ``sglang_args``) and where SGLang puts them (its log, which prints ``server_args`` and here
also a line quoting a token). The commands come from the CLI's own collection, so a command added later without a
run here fails the test instead of escaping the audit."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from fabfile.cli.tasks import ns
from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, run_inv

SECRETS = {"HF_TOKEN": "hf_S3CRETa'q\"1", "MY_PASSWORD": "pw-S3CRETb-2", "DATABASE_URL": "postgres://u:S3CRETc@db/x"}
API_KEY = "key-S3CRETd-4"
HOST = "sim1"
LOAD = ["--num-prompts", "3", "--output-len", "16", "--input-len", "16"]


def _runs(tmp_path: Path) -> dict[str, list[list[str]]]:
    """Each command's runs, in the order they are made (a deploy first, so the others have a server to read)."""
    sweep_out = tmp_path / "sweep-runs"
    profile_out = tmp_path / "profile.json"
    h = ["--host", HOST]
    return {
        "render": [["render", *h], ["render", *h, "--json"]],
        "deploy": [["deploy", *h, "--dry-run"], ["deploy", *h, "--dry-run", "--json"], ["deploy", *h, "--json"],
                   ["deploy", *h, "--steps", "2"], ["deploy", *h, "--previous", "--dry-run"],
                   ["deploy", *h, "--previous", "--dry-run", "--json"]],
        "deploys": [["deploys", *h], ["deploys", *h, "--json"]],
        "status": [["status", *h], ["status", *h, "--json"]],
        "check-env": [["check-env", *h], ["check-env", *h, "--json"]],
        "logs": [["logs", *h, "--lines", "2000"]],
        "watch": [["watch", *h, "--once"], ["watch", *h, "--once", "--json"]],
        "gpus": [["gpus", *h], ["gpus", *h, "--json"]],
        "bench": [["bench", *h, *LOAD], ["bench", *h, *LOAD, "--json"]],
        "profile": [["profile", *h, *LOAD], ["profile", *h, *LOAD, "--trace", "--trace-steps", "4", "--out",
                                             str(profile_out), "--json"]],
        "explain": [["explain", "--from", str(profile_out)], ["explain", "--from", str(profile_out), "--json"],
                    ["explain", *h, "--num-prompts", "3"]],
        "diff": [["diff", *h], ["diff", *h, "--json"]],
        "rollback-patches": [["rollback-patches", *h, "--dry-run"], ["rollback-patches", *h, "--dry-run", "--json"]],
        "trust-host": [["trust-host", *h]],
        "deploy-router": [["deploy-router", "--json"]],
        "sweep": [["sweep", *h, "--steps", "0,2", *LOAD, "--out", str(sweep_out), "--json"]],
        "tune": [["tune", *h, *LOAD, "--max-loads", "1", "--json"], ["tune", *h, *LOAD, "--max-loads", "1"]],
        "analyze": [["analyze", "--sweep", str(sweep_out)], ["analyze", "--sweep", str(sweep_out), "--json"]],
        "cancel": [["cancel", *h], ["cancel", *h, "--json"]],
        "stop": [["stop", *h, "--dry-run"], ["stop", *h, "--dry-run", "--json"], ["stop", *h, "--json"]],
        # After the stop: a server started by hand (adopt refuses to take over the tool's own), with the secrets in
        # its environment and on its command line, and the variables the tool adds to its launches.
        "adopt": [["adopt", *h], ["adopt", *h, "--json"], ["adopt", *h, "--write", str(tmp_path / "adopted.yaml")],
                  ["adopt", "--command", f"HF_TOKEN={shlex.quote(SECRETS['HF_TOKEN'])} /usr/bin/python3 -m "
                   f"sglang.launch_server --model-path /m --api-key {API_KEY}"]],
    }
# Given by the tool to every launch: an adopted entry leaves them out (a deploy adds them again).
TOOL_VARIABLES = {"SPT_NOENV": "1", "PYTHONSAFEPATH": "1", "PYTHONUNBUFFERED": "1", "SPECDEPLOY_DEPLOY_ID": "x-1"}


def _hand_start(host: SimHost) -> int:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**SECRETS, **TOOL_VARIABLES}.items())
    line = (f"cd /root; {env} setsid nohup {host.python_in_host} -m sglang.launch_server --model-path "
            f"/root/models/kimi-k2.5-int4 --port 8000 --api-key {API_KEY} > /tmp/hand.log 2>&1 < /dev/null & echo $!")
    return int(host.exec(line).stdout.strip())


def test_no_command_ever_prints_a_secret(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path, defaults={
        "env": dict(SECRETS), "secret_env": ["DATABASE_URL"], "sglang_args": [f"--api-key={API_KEY}"]})
    runs = _runs(tmp_path)
    assert set(runs) == set(ns.task_names), "a command the audit does not run: add its runs to _runs"
    outputs: list[str] = []
    for command, argvs in runs.items():
        if command == "adopt":
            hand = _hand_start(sim_host)
        for args in argvs:
            needs = args[0] not in ("analyze",) and "--from" not in args and "--command" not in args
            # tune keeps its path in ./runs: this test's own folder, not the checkout's.
            r = run_inv(*args, inventory=inventory if needs else None, timeout=300,
                        cwd=tmp_path if args[0] == "tune" else None)
            outputs.append(f"$ inv {' '.join(args)} (exit {r.returncode})\n{r.stdout}\n{r.stderr}")
            if args[:3] == ["deploy", "--host", HOST] and "--dry-run" not in args:
                assert r.returncode == 0, outputs[-1][-3000:]
                # SGLang printing a secret itself (a token in an error, its server_args): what the tool shows of
                # the log is masked too.
                log = sim_host.exec("ls -t /root/sglang-logs/sglang-*.log | head -1").stdout.strip()
                sim_host.exec(f"echo 'ERROR token rejected: HF_TOKEN=hf_S3CRETa'\\''q\"1 api_key={API_KEY}' "
                              f">> {log}")
    sim_host.exec(f"kill {hand}")
    text = "\n".join(outputs)
    # The runs did what they are for (a failed command prints little, and so would leak nothing).
    for ran in ("deploy --host sim1 --json (exit 0)", "logs --host sim1 --lines 2000 "
                "(exit 0)", "profile --host sim1 --num-prompts 3 --output-len 16 --input-len 16 (exit 0)",
                "sweep --host sim1 --steps 0,2", "stop --host sim1 --json (exit 0)", "adopt --host sim1 (exit 0)",
                "analyze --sweep", "explain --from", "tune --host sim1", "--api-key key-S3CRETd-4 (exit 0)"):
        assert ran in text, text[-4000:]
    assert "token rejected" in text  # the planted log line was shown, masked
    # The adopted entry names the secrets to fill in, and keeps none of the tool's own variables.
    entry = yaml.safe_load((tmp_path / "adopted.yaml").read_text())["hosts"][HOST]
    assert set(entry["secret_env"]) == set(SECRETS) and set(entry["env"]) == set(SECRETS), entry
    assert "--api-key" in " ".join(entry.get("sglang_args") or [])
    # (The "$ inv ..." lines are the test's own record of what it typed.)
    leaks = [line for line in text.splitlines() if "S3CRET" in line and not line.startswith("$ inv ")]
    assert leaks == [], "\n".join(leaks)
