"""`inv adopt --host` on a simulated host: it reads a hand-started server from /proc into an entry, and the first
deploy after it replaces that server (found through the adoption record); with no server it exits 2 and writes
nothing."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from tests.simhost.fleet import Fleet, SimHost
from tests.support import waiting
from tests.support.invoke_cli import derived_inventory, run_inv, sglang_pids


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
    assert run_inv("gpus", "--host", sim_host.name, inventory=out).returncode == 0
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
