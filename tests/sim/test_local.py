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
from tests.support.invoke_cli import inv_host_json, inv_json, run_inv


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
        code, doc, err = inv_host_json("deploy", "--steps", "2", "--patch-mode", "scheduler", inventory=path)
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
    assert status["hosts"][0]["data"]["running"] is False
    code, doc, _ = inv_json("rollback-patches", inventory=path)
    assert code == 0 and doc["hosts"][0]["data"]["files"]


def test_every_verb_answers_in_its_shape(local_host: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    """Each verb of the table, run for real by the agent on the local host (through ``HostSession`` like the
    commands), sends a request of its request shape and answers in its answer shape (``protocol``)."""
    from typing import Any

    from fabfile.commands.bench import BenchParams, bench_request, new_bench_id
    from fabfile.commands.deploy import deadline_for, deploy_host
    from fabfile.commands.profile import ProfileParams, new_profile_id, profile_request
    from fabfile.inventory import hosts as inventory
    from fabfile.plan.deploy_plan import Options, build, new_deploy_id
    from fabfile.present.progress import Reporter
    from fabfile.remote import verbs
    from fabfile.transport.session import HostSession
    from tests.support.shapes import problems

    path, env = local_host
    monkeypatch.setenv("PATH", env["PATH"])
    seen: dict[str, list[str]] = {}
    real_call = HostSession._call

    def checked(self: HostSession, verb: verbs.Verb[Any, Any], request: Any, timeout: float | None = None,
                **kw: Any) -> Any:
        answer = real_call(self, verb, request, timeout, **kw)
        sent = {"state_dir": self.host.state_dir, **request}
        seen[verb.name] = problems(sent, verb.request, f"{verb.name} request") + \
            problems(answer, verb.answer, f"{verb.name} answer", open_shapes=frozenset({verbs.BENCH.answer}))
        return answer

    monkeypatch.setattr(HostSession, "_call", checked)
    inv = inventory.load(path)
    host = inv.hosts["box"]
    try:
        assert deploy_host(inv, host, Options(steps=2, patch_mode="scheduler"), Reporter("box", enabled=False)).ok
        with HostSession.open(inv, host) as s:
            rec = s.records()["current"]
            assert rec is not None
            # a rollout's re-check skips the progress: the finished deploy's result still comes back
            assert s.attach(rec["deploy_id"], skip=1 << 30, timeout=60)["result"]["ok"] is True
            s.status()
            s.watch()
            s.gpus()
            s.logs(lines=5, follow=False, follow_s=0, timeout=30)
            s.records([rec["deploy_id"], "no-such-id"])
            s.check_env({"NCCL_P2P_LEVEL": "PHB"})
            s.bench(bench_request(host, BenchParams(num_prompts=4, output_len=8), new_bench_id()), timeout=120)
            s.profile(profile_request(ProfileParams(load=BenchParams(num_prompts=4, output_len=8)),
                                      new_profile_id()), timeout=120)
            s.cancel(reason="nothing runs: nothing to cancel")
            from fabfile.commands.tune import hold_host

            with hold_host(inv, host, "tune-shape", 1.0):  # the hold, then its release
                pass
            s.redeploy(rec["deploy_id"], new_deploy_id(), timeout=deadline_for(build(host, Options())))
            # a router in front of the server (the simulator's: it takes no worker out, so a URL it does not list
            # is "taken out", and the server it lists is "put back"), then stopped
            server = f"http://127.0.0.1:{host.port}"
            rport = _free_port()
            script = tmp_path / "state" / "router-r.sh"
            argv = [host.python, "-m", "sglang_router.launch_router", "--worker-urls", server, "--host=127.0.0.1",
                    f"--port={rport}"]
            script.write_text("#!/bin/sh\nexec " + " ".join(argv) + "\n")
            script.chmod(0o700)
            s.router_start(name="r", script=str(script), log_path=str(tmp_path / "logs" / "router-r.log"),
                           listen="127.0.0.1", port=rport, workers=[server], policy=None, argv=argv, ready_s=30)
            s.router_worker("r", "http://127.0.0.1:9", back=False, drain_s=0.5)
            s.router_worker("r", server, back=True, drain_s=0.5)
            s.router_stop("r")
            s.adopt(host.port)
            patch = (s.records()["current"] or {}).get("request", {}).get("patch")
            s.stop(dry_run=True)
            s.stop()
            s.patch_rollback(dry_run=True)
            s.patch_rollback(dry_run=False)
            assert patch
            s.patch_apply(patch)
            s.host_facts(paths={"model": host.model}, need_gpus=1, min_free_disk_gb=0, log_dir=host.log_dir,
                         log_path=f"{host.log_dir}/x.log")
            s.patch_rollback(dry_run=False)
    finally:
        run_inv("stop", inventory=path)
    assert set(seen) == set(verbs.TABLE), set(verbs.TABLE) - set(seen)
    wrong = [line for lines in seen.values() for line in lines]
    assert not wrong, "\n".join(wrong)
