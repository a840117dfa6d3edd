"""check-env and rollback-patches over real SSH: every patch mode, positive and negative, on the simulated fleet.

The simulated host can strip the environment on the launch path (like sudo env_reset or a container entrypoint),
so `env` mode must fail check-env there while the in-process modes pass, and the evidence must say why.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_host_json, inv_json, run_inv, ssh_logins

SCHEDULER_PY = "sglang/srt/managers/scheduler.py"


def _sha(host: SimHost, rel: str) -> str:
    return hashlib.sha256((host.site_packages() / rel).read_bytes()).hexdigest()


@pytest.fixture
def inventory(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> Path:
    return derived_inventory(fleet, tmp_path)


@pytest.mark.parametrize("mode", ["scheduler", "plugin", "engine", "sitecustomize"])
def test_in_process_modes_survive_a_launch_path_that_strips_the_environment(inventory: Path, sim_host: SimHost,
                                                                             mode: str) -> None:
    sim_host.set_sim_config(strip_env_prefixes=["NCCL_"])
    code, doc, err = inv_host_json("deploy", "--steps", "2", "--patch-mode", mode, inventory=inventory)
    assert code == 0, (err, doc.get("error"))
    assert doc["patch_mode"] == mode
    rows = doc["check_env"]["rows"]
    assert rows and all(r["status"] == "proven" for r in rows)
    # Both ranks, every variable of the preset.
    assert {r["label"] for r in rows} == {"TP0", "TP1"}
    assert {r["var"] for r in rows} == {"NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_MAX_NCHANNELS",
                                        "NCCL_BUFFSIZE", "NCCL_NTHREADS"}
    code, report, _ = inv_json("check-env", inventory=inventory)
    assert code == 0 and report["ok"] is True


def test_a_users_sglang_plugins_still_lets_the_plugin_mode_work(fleet: Fleet, sim_host: SimHost,
                                                                 tmp_path: Path) -> None:
    """SGLang 0.5.11+ loads only the plugins SGLANG_PLUGINS names: with the user's own list in the inventory env,
    the tool adds its plugin (and says so), so the values are still proven behind a launch path that strips NCCL_*."""
    sim_host.set_sim_config(strip_env_prefixes=["NCCL_"])
    inventory = derived_inventory(fleet, tmp_path, hosts={"sim1": {"env": {"SGLANG_PLUGINS": "other"}}})
    code, doc, err = inv_host_json("deploy", "--steps", "2", "--patch-mode", "plugin", inventory=inventory)
    assert code == 0, (err, doc.get("error"))
    assert doc["env"]["SGLANG_PLUGINS"] == "other,specdeploy_nccl_env"
    assert any("SGLANG_PLUGINS" in n and "specdeploy_nccl_env" in n for n in doc["notes"])
    assert all(r["status"] == "proven" for r in doc["check_env"]["rows"])


def test_env_mode_fails_check_env_when_the_launch_path_strips_the_environment(inventory: Path,
                                                                               sim_host: SimHost) -> None:
    sim_host.set_sim_config(strip_env_prefixes=["NCCL_"])
    code, doc, _ = inv_host_json("deploy", "--steps", "2", "--patch-mode", "env", inventory=inventory)
    assert code == 1
    assert doc["error"]["kind"] == "EnvNotProvenError"
    # The failed deploy tears its server down.
    code, status, _ = inv_json("status", inventory=inventory)
    assert status["hosts"][0]["data"]["running"] is False
    # `inv status` names the tool's own verdict and its evidence, not `inv logs` (whose last lines are SGLang's
    # answer to the tool's own stop)
    r = run_inv("status", inventory=inventory)
    assert "`inv logs` shows why" not in r.stderr, r.stderr
    assert "failed on specdeploy's own verdict (env_not_proven" in r.stderr, r.stderr
    assert "specdeploy stopped its server" in r.stderr and " in TP0: " in r.stderr, r.stderr
    # Deployed without the verify step, check-env itself reports it, names the cause and the fix.
    code, doc, _ = inv_host_json("deploy", "--steps", "2", "--patch-mode", "env", "--no-verify", inventory=inventory)
    assert code == 0
    code, report, _ = inv_json("check-env", inventory=inventory)
    assert code == 1 and report["ok"] is False
    assert any(r["status"] != "proven" for r in report["hosts"][0]["rows"])
    hints = " ".join(h["message"] for h in report["hosts"][0]["hints"])
    assert "scheduler" in hints and "strip" in hints
    r = run_inv("check-env", inventory=inventory)
    assert r.returncode == 1 and "NOT PROVEN" in r.stdout + r.stderr


def test_in_process_values_are_proven_by_nccl_lines_not_by_environ(inventory: Path, sim_host: SimHost) -> None:
    """The seed's blind spot: a value set inside the scheduler never shows in /proc/PID/environ."""
    sim_host.set_sim_config(strip_env_prefixes=["NCCL_"])
    code, _doc, err = inv_host_json("deploy", "--steps", "2", "--patch-mode", "scheduler", inventory=inventory)
    assert code == 0, err
    code, report, _ = inv_json("check-env", inventory=inventory)
    assert code == 0
    for row in report["hosts"][0]["rows"]:
        assert row["evidence"] == "nccl_log"
        assert row["sources"]["environ"] is None  # the start-time environment never had it


def test_missing_spt_noenv_wipes_environ_but_nccl_lines_still_prove(inventory: Path, sim_host: SimHost) -> None:
    sim_host.set_sim_config(strip_env_prefixes=["NCCL_", "SPT_"])
    code, _doc, err = inv_host_json("deploy", "--steps", "2", "--patch-mode", "scheduler", inventory=inventory)
    assert code == 0, err
    code, report, _ = inv_json("check-env", inventory=inventory)
    assert code == 0
    assert all(r["environ_status"] == "wiped" for r in report["hosts"][0]["rows"])
    assert all(r["status"] == "proven" for r in report["hosts"][0]["rows"])


def test_plugin_mode_on_a_version_without_plugins_is_refused_before_touching(fleet: Fleet, sim_host: SimHost,
                                                                              tmp_path: Path) -> None:
    sim_host.set_version("0.5.7")
    inventory = derived_inventory(fleet, tmp_path)
    before = _sha(sim_host, SCHEDULER_PY)
    code, doc, _ = inv_host_json("deploy", "--steps", "2", "--patch-mode", "plugin", inventory=inventory)
    assert code == 2
    assert "0.5.11" in doc["error"]["message"] and "0.5.7" in doc["error"]["message"]
    assert _sha(sim_host, SCHEDULER_PY) == before
    assert sim_host.exec(["test", "-e", "/root/.specdeploy/patches/manifest.json"]).returncode != 0
    # auto picks the source patch there, and it works.
    code, doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    assert doc["patch_mode"] == "scheduler" and doc["sglang_version"] == "0.5.7"


def test_rollback_restores_bytes_and_is_safe_twice(inventory: Path, sim_host: SimHost) -> None:
    original = _sha(sim_host, SCHEDULER_PY)
    code, doc, err = inv_host_json("deploy", "--steps", "2", "--patch-mode", "scheduler", inventory=inventory)
    assert code == 0, err
    assert _sha(sim_host, SCHEDULER_PY) != original
    r = run_inv("rollback-patches", "--dry-run", inventory=inventory)
    assert r.returncode == 0 and _sha(sim_host, SCHEDULER_PY) != original
    code, doc, _ = inv_json("rollback-patches", inventory=inventory)
    assert code == 0
    assert _sha(sim_host, SCHEDULER_PY) == original
    code, doc, _ = inv_json("rollback-patches", inventory=inventory)
    assert code == 0 and doc["hosts"][0]["data"]["nothing_to_do"] is True


def test_rollback_refuses_after_an_upgrade_and_changes_nothing(inventory: Path, sim_host: SimHost) -> None:
    code, _, err = inv_host_json("deploy", "--steps", "2", "--patch-mode", "engine", inventory=inventory)
    assert code == 0, err
    run_inv("stop", inventory=inventory)
    # "pip install -U sglang" behind our back: a new release's engine.py (different bytes, no patch in it).
    sim_host.set_version("0.5.22")
    engine = sim_host.site_packages() / "sglang/srt/entrypoints/engine.py"
    engine.write_text(engine.read_text() + "\n# changed in 0.5.22\n")
    upgraded = _sha(sim_host, "sglang/srt/entrypoints/engine.py")
    code, doc, _ = inv_json("rollback-patches", inventory=inventory)
    assert code == 1
    assert doc["hosts"][0]["error"]["details"]["agent_kind"] == "rollback_refused"
    assert "engine.py" in doc["hosts"][0]["error"]["message"]
    assert _sha(sim_host, "sglang/srt/entrypoints/engine.py") == upgraded


def test_commands_work_with_no_flags_on_the_default_host(inventory: Path, sim_host: SimHost) -> None:
    env = {"SPECDEPLOY_INVENTORY": str(inventory)}
    from tests.support.invoke_cli import run_inv as run

    assert run("deploy", "--steps", "1", env=env).returncode == 0
    r = run("check-env", env=env)
    assert r.returncode == 0, r.stderr
    assert "sim1" in r.stdout
    assert run("rollback-patches", env=env).returncode == 0
    assert ssh_logins(sim_host) >= 3


def test_env_mode_takes_back_an_earlier_source_patch(inventory: Path, sim_host: SimHost) -> None:
    """The host runs exactly the mode asked for: env mode after a scheduler-mode deploy leaves no source patch."""
    original = _sha(sim_host, SCHEDULER_PY)
    code, _, err = inv_host_json("deploy", "--steps", "1", "--patch-mode", "scheduler", inventory=inventory)
    assert code == 0, err
    assert _sha(sim_host, SCHEDULER_PY) != original
    code, doc, err = inv_host_json("deploy", "--steps", "1", "--patch-mode", "env", inventory=inventory)
    assert code == 0, err
    assert doc["patch_mode"] == "env" and doc["check_env"]["ok"] is True
    assert _sha(sim_host, SCHEDULER_PY) == original
