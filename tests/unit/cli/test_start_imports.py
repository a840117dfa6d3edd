"""What a read-only command's start imports (issue 42): an operator runs status, check-env, gpus and logs many
times a day and from cron, so their start loads only what they use. Behaviour, not timing: which modules end up
in ``sys.modules`` of a fresh interpreter, never how long they took."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Everything the read-only commands' tasks reach before the first host answers: the tasks, the commands, their
# carrier (OpenSSH's client: fabfile/transport/openssh.py), the session and the tables they print.
READ_ONLY_PATH = ("fabfile.cli.tasks", "fabfile.commands.operations", "fabfile.transport.openssh",
                  "fabfile.transport.session", "fabfile.present.hosts_report", "fabfile.present.checkenv_report",
                  "fabfile.inventory.hosts")
# What none of them needs: the templates (jinja2), the inventory's validator (pydantic; only on a cache miss), the
# live spinner (a deploy's) and the protocol's TypedDicts (annotations only; the deploy machinery neither).
# Nor Paramiko, Fabric and tenacity: a deploy's SSH client, and a read-only command's only when its connection failed.
# Nor what only writing files or shipping the agent needs: tempfile and shutil (with bz2 and lzma), zipfile, secrets
# (with hmac).
NOT_NEEDED = ("jinja2", "pydantic", "fabfile.render.jinja", "fabfile.inventory.schema", "rich.live", "rich.spinner",
              "fabfile.present.progress", "fabfile.remote.protocol", "fabfile.remote.serve.deploy", "paramiko",
              "fabric", "tenacity", "fabfile.transport.ssh", "tempfile", "shutil", "zipfile", "secrets", "hmac")


def loaded_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return list(json.loads(out.splitlines()[-1]))


def test_the_read_only_commands_start_without_templates_validator_spinner_or_protocol_shapes() -> None:
    modules = loaded_after("\n".join(f"import {m}" for m in READ_ONLY_PATH))
    assert "fabfile.transport.sshfailures" in modules  # the import ran: the path really reaches the SSH carrier
    assert [m for m in NOT_NEEDED if m in modules] == []


def test_check_env_expects_without_the_plan_and_a_table_prints_without_the_emoji_table() -> None:
    """check-env's expected values come from ``plan/ncclsettings``, not the plan's module; what is printed reads no
    emoji codes (``present/output.console``), so Rich's emoji table is never loaded."""
    modules = loaded_after("from fabfile.inventory import hosts\n"
                           "from fabfile.commands.operations import expected_env\n"
                           "from fabfile.present.output import out\n"
                           "from fabfile.present.tables import Col, print_table\n"
                           "expected_env(next(iter(hosts.load('inventory.yaml').hosts.values())))\n"
                           "print_table(out, [Col('host')], [['gpu1 :warning:']])\n")
    assert "fabfile.plan.ncclsettings" in modules and "rich.table" in modules
    assert [m for m in ("fabfile.plan.deploy_plan", "rich._emoji_codes") if m in modules] == []


def test_the_read_only_commands_reach_their_hosts_before_rich_loads() -> None:
    """Rich (~25 ms of imports) is what prints the answers: the task, its command, the fan-out and the carrier load
    none of it, so the host call goes first and the printing's imports run while the host answers
    (``for_each_host``'s ``meanwhile``, tests/unit/commands/test_fanout_meanwhile.py)."""
    modules = loaded_after("import fabfile.cli.run, fabfile.cli.tasks, fabfile.commands.operations, "
                           "fabfile.transport.openssh, fabfile.transport.session, fabfile.inventory.hosts")
    assert "fabfile.commands.fanout" in modules
    assert [m for m in modules if m == "rich" or m.startswith(("rich.", "fabfile.present.output",
                                                               "fabfile.present.hosts_report"))] == []
