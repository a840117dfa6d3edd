"""The command line itself: every task and flag documented, help never runs anything, errors are sentences."""

from __future__ import annotations

import inspect
import json

import tasks
from tests.support.invoke_cli import run_inv


def test_every_task_and_flag_has_help_text() -> None:
    assert tasks.ns.tasks, "no tasks registered"
    for name, task in tasks.ns.tasks.items():
        assert (task.__doc__ or "").strip(), f"{name} has no docstring"
        params = [p for p in inspect.signature(task.body).parameters if p != "c"]
        missing = [p for p in params if p not in task.help]
        assert not missing, f"inv {name}: flags without help: {missing}"


def test_list_shows_the_commands_users_type() -> None:
    r = run_inv("--list", "-F", "json")
    assert r.returncode == 0, r.stderr
    names = {t["name"] for t in json.loads(r.stdout)["tasks"]}
    assert {"deploy", "check-env", "rollback-patches", "stop", "status", "logs", "render"} <= names


def test_help_describes_and_runs_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = run_inv("--help", "deploy", cwd=tmp_path)
    assert r.returncode == 0
    assert "--steps" in r.stdout and "--patch-mode" in r.stdout and "--dry-run" in r.stdout


def test_missing_inventory_is_a_sentence_and_exit_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = run_inv("check-env", "--inventory", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2
    assert "does not exist" in r.stderr and "Traceback" not in r.stderr


def test_every_error_is_printed_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A failure was printed twice: cut in the table's cell (or on the step line) and again in full below it."""
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {python: /opt/venv/bin/python3, model: /models/m, draft_model: /models/d}\n"
                   "hosts:\n  gpu9: {ssh_host: no-such-alias.invalid, timeouts: {connect_total: 2}}\n")
    for args in (("status",), ("deploy", "--steps", "1"), ("gpus",), ("check-env",), ("logs",)):
        r = run_inv(*args, "--inventory", str(inv))
        text = r.stdout + r.stderr
        assert r.returncode == 1, (args, text)
        assert text.count("cannot resolve the host name") == 1, (args, text)
        assert "hint:" in r.stderr and "Traceback" not in text, (args, text)


def test_rollback_patches_says_it_restores_files_not_configurations() -> None:
    from fabfile.present.hosts_report import rollback_action

    r = run_inv("--help", "rollback-patches")
    assert r.returncode == 0 and "files only" in r.stdout and "deploy --previous" in r.stdout, r.stdout
    # --dry-run printed "would removed:"
    assert rollback_action("would_removed") == "would remove" and rollback_action("would_restored") == "would restore"
    assert rollback_action("removed") == "removed"
    r = run_inv("--help", "deploy")
    assert "--previous" in r.stdout


def test_deploy_previous_takes_no_configuration_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = run_inv("deploy", "--previous", "--steps", "2")
    assert r.returncode == 2 and "--previous: starts a recorded deploy as it ran; drop --steps" in r.stderr, r.stderr
