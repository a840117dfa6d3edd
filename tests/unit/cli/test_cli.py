"""The command line itself: every task and flag documented, help never runs anything, errors are sentences."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
from pathlib import Path

import tomllib

from fabfile.cli import tasks
from fabfile.present.text import PIPE_CLOSED_EXIT
from tests.support import sources
from tests.support.cli import run_cli
from tests.support.invoke_cli import INV, ROOT, run_inv


def test_every_task_and_flag_has_help_text() -> None:
    assert tasks.ns.tasks, "no tasks registered"
    for name, task in tasks.ns.tasks.items():
        assert (task.__doc__ or "").strip(), f"{name} has no docstring"
        params = [p for p in inspect.signature(task.body).parameters if p != "c"]
        missing = [p for p in params if p not in task.help]
        assert not missing, f"inv {name}: flags without help: {missing}"


def test_list_shows_the_commands_users_type() -> None:
    r = run_cli("--list", "-F", "json")
    assert r.returncode == 0, r.stderr
    names = {t["name"] for t in json.loads(r.stdout)["tasks"]}
    assert {"deploy", "check-env", "rollback-patches", "stop", "status", "logs", "render"} <= names


def test_help_describes_and_runs_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = run_cli("--help", "deploy", cwd=tmp_path)
    assert r.returncode == 0
    assert "--steps" in r.stdout and "--patch-mode" in r.stdout and "--dry-run" in r.stdout


def test_missing_inventory_is_a_sentence_and_exit_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = run_cli("check-env", "--inventory", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2
    assert "does not exist" in r.stderr and "Traceback" not in r.stderr


def test_every_error_is_printed_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A failure was printed twice: cut in the table's cell (or on the step line) and again in full below it."""
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {python: /opt/venv/bin/python3, model: /models/m, draft_model: /models/d}\n"
                   "hosts:\n  gpu9: {ssh_host: no-such-alias.invalid, timeouts: {connect_total: 2}}\n")
    for args in (("status",), ("deploy", "--steps", "1"), ("gpus",), ("check-env",), ("logs",)):
        r = run_cli(*args, "--inventory", str(inv))
        text = r.stdout + r.stderr
        assert r.returncode == 1, (args, text)
        assert text.count("cannot resolve the host name") == 1, (args, text)
        assert "hint:" in r.stderr and "Traceback" not in text, (args, text)


def test_rollback_patches_says_it_restores_files_not_configurations() -> None:
    from fabfile.present.hosts_report import rollback_action

    r = run_cli("--help", "rollback-patches")
    assert r.returncode == 0 and "files only" in r.stdout and "deploy --previous" in r.stdout, r.stdout
    # --dry-run printed "would removed:"
    assert rollback_action("would_removed") == "would remove" and rollback_action("would_restored") == "would restore"
    assert rollback_action("removed") == "removed"
    r = run_cli("--help", "deploy")
    assert "--previous" in r.stdout


def test_deploy_previous_takes_no_configuration_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = run_cli("deploy", "--previous", "--steps", "2")
    assert r.returncode == 2 and "--previous: starts a recorded deploy as it ran; drop --steps" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------------------------
# The command line's own manners (issue 30 point 5): its Program, fabfile/cli/program.py

def test_a_mistyped_flag_is_bad_input_with_the_nearest_flag() -> None:
    r = run_cli("deploy", "--stesp", "2")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "--stesp: inv deploy has no such flag; did you mean --steps?" in r.stderr, r.stderr
    assert "No idea" not in r.stderr and "Traceback" not in r.stderr
    r = run_cli("deplyo")
    assert r.returncode == 2 and "did you mean deploy?" in r.stderr, r.stderr


def test_inv_itself_runs_the_tools_program() -> None:
    """`inv` is Invoke's own Program; tasks.py hands it the tool's (the README's commands are `inv ...`)."""
    r = run_inv("deploy", "--stesp", "2", process=True)
    assert r.returncode == 2 and "did you mean --steps?" in r.stderr, (r.returncode, r.stderr)


def test_a_flag_without_its_value_is_a_sentence_naming_it() -> None:
    r = run_cli("deploy", "--steps")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "--steps: needs a value" in r.stderr and "Argument" not in r.stderr, r.stderr


def test_help_offers_only_the_options_this_tool_has() -> None:
    r = run_cli("--help")
    assert r.returncode == 0, r.stderr
    for gone in ("--prompt-for-sudo-password", "--echo", "--pty", "--warn-only", "--hide", "--command-timeout"):
        assert gone not in r.stdout, gone
    for kept in ("--help", "--list", "--version", "--print-completion-script=SHELL", "deploy"):
        assert kept in r.stdout, kept
    assert "STRING" not in r.stdout, r.stdout
    r = run_cli("--echo", "status")
    assert r.returncode == 2 and "--echo" in r.stderr, r.stderr


def test_list_prints_whole_descriptions() -> None:
    r = run_cli("--list")
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())
    assert ("Deploy SGLang (EAGLE-3 unless --steps 0) to host(s) or a multi-node cluster: patch, stop stale, start, "
            "wait ready, verify env. Several hosts: rolling (canary, batches) or parallel, with a final who-runs-what "
            "table.") in flat, r.stdout


def test_each_value_flag_says_what_it_takes() -> None:
    r = run_cli("--help", "deploy")
    assert r.returncode == 0, r.stderr
    assert "--steps=N" in r.stdout and "--host=HOST" in r.stdout and "--inventory=PATH" in r.stdout, r.stdout
    assert "=STRING" not in r.stdout, r.stdout


def test_host_names_tab_complete_from_the_inventory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {python: /opt/venv/bin/python3, model: /models/m, draft_model: /models/d}\n"
                   "hosts: {alpha: {}, beta: {}}\ngroups: {pair: [alpha, beta]}\n")
    r = run_cli("--complete", "--", "inv", "status", "--host", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["all", "alpha", "beta", "pair"], (r.stdout, r.stderr)
    for given in (["--inventory", str(inv)], [f"--inventory={inv}"]):
        r = run_cli("--complete", "--", "inv", "status", *given, "--host", "al")
        assert r.stdout.split() == ["all", "alpha", "beta", "pair"], (r.stdout, r.stderr)
    r = run_cli("--complete", "--", "inv", "status", "--host", "alpha,b", cwd=tmp_path)  # a comma list goes on
    assert r.stdout.split() == ["alpha,all", "alpha,alpha", "alpha,beta", "alpha,pair"], r.stdout
    r = run_cli("--complete", "--", "inv", "stat")  # not a --host value: Invoke's own completion, the commands
    assert "status" in r.stdout.split() and "alpha" not in r.stdout, r.stdout


def test_a_closed_pipe_ends_the_listing_quietly() -> None:
    """`inv --list | head -1` wrote a BrokenPipeError traceback: the reader is gone before the first write here."""
    read, write = os.pipe()
    os.close(read)
    try:
        p = subprocess.run([*INV, "--list"], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
                           cwd=ROOT)
    finally:
        os.close(write)
    assert p.returncode in (0, PIPE_CLOSED_EXIT) and "Traceback" not in p.stderr and not p.stderr.strip(), p.stderr


def test_the_wheel_ships_one_package_with_ranges_not_pins() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py-modules" not in project["tool"]["setuptools"], "a top-level module (tasks) would be installed"
    assert all(p == "fabfile" or p.startswith("fabfile.") for p in project["tool"]["setuptools"]["packages"])
    pinned = [d for d in project["project"]["dependencies"] if "==" in d]
    assert not pinned, f"exact pins fight other packages in an ML environment: {pinned}"
    assert project["project"]["scripts"]["specdeploy"] == "fabfile.cli.main:main"


def test_the_library_never_imports_the_porch() -> None:
    """tasks.py imports the package, never the other way round (fabfile/cli.py imported `tasks`)."""
    for path in sources.modules(ROOT / "fabfile"):
        for node in sources.nodes(path):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            assert "tasks" not in names, f"{path.relative_to(ROOT.resolve())} imports tasks.py"


def test_a_long_mistyped_word_is_quoted_only_in_part() -> None:
    for args in (("x" * 10_000,), ("deploy", "--" + "y" * 10_000), ("--help", "z" * 10_000)):
        r = run_cli(*args)
        assert r.returncode == 2 and len(r.stderr) < 300 and " characters)" in r.stderr, (args[-1][:5], r.stderr[:300])


def test_help_is_the_same_every_time_it_is_asked() -> None:
    """Invoke pops each help text as it parses: a second parse in one process lost them all."""
    first, second = run_cli("--help", "deploy"), run_cli("--help", "deploy")
    assert first.stdout == second.stdout and "speculative steps" in second.stdout, second.stdout


def test_a_clusters_node_is_deployed_only_with_its_cluster(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The refusal moved from the task into commands/dispatch.deploy_targets: still before any host is reached."""
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {python: /opt/venv/bin/python3, model: /models/m, draft_model: /models/d}\n"
                   "hosts: {n1: {ssh_host: no-such-alias.invalid, gpus: 2, address: 10.0.0.1},\n"
                   "        n2: {ssh_host: no-such-alias.invalid, gpus: 2}}\n"
                   "clusters: {duo: {hosts: [n1, n2], tp: 4, dist_init_port: 29555}}\n")
    r = run_cli("deploy", "--host", "n2", "--steps", "1", inventory=inv)
    assert r.returncode == 2 and "--host: n2 is node 1 of cluster duo" in r.stderr, r.stderr
    r = run_cli("deploy", "--host", "duo", "--strategy", "parallel", inventory=inv)
    assert r.returncode == 2 and "--strategy/--batch/--no-canary: a cluster's nodes always start together" in r.stderr
    r = run_cli("deploy", "--host", "duo", "--steps", "1", "--dry-run", "--json", inventory=inv)
    assert r.returncode == 0 and [d["host"] for d in json.loads(r.stdout)["hosts"]] == ["n1", "n2"], r.stderr


def test_render_and_dry_run_print_one_shape_for_one_host_or_two(tmp_path: Path) -> None:
    """One host's plan stood bare at the top and two hosts' under ``hosts``: a script had to know the count."""
    inv = tmp_path / "inventory.yaml"
    inv.write_text("defaults: {python: /opt/venv/bin/python3, model: /models/m, draft_model: /models/d, gpus: 2}\n"
                   "hosts: {g1: {ssh_host: no-such-alias.invalid}, g2: {ssh_host: no-such-alias.invalid}}\n")
    for args in (("render",), ("deploy", "--dry-run")):
        one, two = (run_cli(*args, "--steps", "2", "--host", h, "--json", inventory=inv) for h in ("g1", "g1,g2"))
        assert one.returncode == two.returncode == 0, (one.stderr, two.stderr)
        a, b = json.loads(one.stdout), json.loads(two.stdout)
        assert set(a) == set(b) == {"ok", "hosts"} and a["ok"] is b["ok"] is True, (args, sorted(a), sorted(b))
        assert [h["host"] for h in a["hosts"]] == ["g1"] and [h["host"] for h in b["hosts"]] == ["g1", "g2"]
        assert all(set(h) == set(a["hosts"][0]) and h["ok"] is True for h in b["hosts"])
        assert a["hosts"][0]["config"] == "eagle3-s2-k1-d3" and a["hosts"][0]["touches_hosts"] is False


def test_steps_are_read_back_from_a_config_name() -> None:
    from fabfile.plan.deploy_plan import steps_of

    assert [steps_of(n) for n in ("eagle3-s2-k1-d3", "baseline", "eagle3-s12-k4-d8", "custom", "")] == [2, 0, 12, None,
                                                                                                         None]
