"""The `local` connection kind: the same deploy, check-env, stop and rollback, on the machine the tool runs on
(as on the GPU box itself), through the same code path apart from the transport."""

from __future__ import annotations

import os
import socket
import socket as _socket
from pathlib import Path

import pytest
import yaml

from tests.simhost.sim.install import create_venv, install_simulator
from tests.support.invoke_cli import inv_json, run_inv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def local_host(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    venv = tmp_path / "ml-env"
    create_venv(venv)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = str(venv / "bin" / "python3")
    install_simulator(venv, bin_dir, "0.5.23", python, {"gpus": 2, "hostname": _socket.gethostname(),
                                                        "load_seconds": 0.2})
    for d in ("models/m", "draft/d", "logs"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "models/m/config.json").write_text('{"architectures": ["DeepseekV3ForCausalLM"]}')
    (tmp_path / "draft/d/config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    inv = {"hosts": {"box": {
        "connection": "local", "python": python, "gpus": 2, "tp": 2, "model": str(tmp_path / "models/m"),
        "draft_model": str(tmp_path / "draft/d"), "log_dir": str(tmp_path / "logs"),
        "state_dir": str(tmp_path / "state"), "port": _free_port(), "nccl_preset": "pcie",
        "timeouts": {"ready": 60, "stall": 20, "stop_grace": 3, "gpu_clean": 10}}}}
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    # The simulator's nvidia-smi must be what the local host finds on PATH.
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return path, env


def test_local_deploy_check_env_stop_rollback(local_host: tuple[Path, dict[str, str]],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path, env = local_host
    monkeypatch.setenv("PATH", env["PATH"])
    try:
        code, doc, err = inv_json("deploy", "--steps", "2", "--patch-mode", "scheduler", inventory=path)
        assert code == 0, err
        assert doc["transport"]["connections"] == 1 and doc["check_env"]["ok"] is True
        assert [s["title"] for s in doc["schedulers"] if "scheduler" in s["title"]] == [
            "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
        code, report, _ = inv_json("check-env", inventory=path)
        assert code == 0 and report["ok"]
    finally:
        r = run_inv("stop", inventory=path)
    assert r.returncode == 0, r.stderr
    code, status, _ = inv_json("status", inventory=path)
    assert status["data"]["running"] is False
    code, doc, _ = inv_json("rollback-patches", inventory=path)
    assert code == 0 and doc["data"]["files"]
