"""An inventory value with shell syntax, a name that is not a plain string, a newline in a router group, or a
file nested too deeply or too large: refused in one sentence, or kept inert, with nothing run on the client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fabfile.errors import InventoryError
from fabfile.inventory import schema
from tests.support.invoke_cli import run_inv


def test_an_ssh_host_with_shell_syntax_runs_nothing_on_the_client(tmp_path: Path) -> None:
    """OpenSSH refuses such names since 9.6 (CVE-2023-51385): with an ordinary ProxyCommand, %h reaches a shell."""
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host *\n  ProxyCommand ssh -W %h:%p bastion.invalid\n")
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"ssh_config": str(cfg), "hosts": {"gpu9": {
        "ssh_host": "[::1]:9 -oProxyCommand=touch\\ X gpu9.lab", "python": "/usr/bin/python3", "model": "/m"}}}))
    for args in (["trust-host", "--host", "gpu9"], ["status"]):
        r = run_inv(*args, inventory=inv, cwd=tmp_path)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "hosts.gpu9.ssh_host: not a valid SSH host name" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "X").exists()


@pytest.mark.parametrize("section", [
    {"routers": {"r\nid": {"host": "h", "group": "h"}}},
    {"routers": {"../../etc/x": {"host": "h", "group": "h"}}},
    {"groups": {"g\n": ["h"]}},
    {"hosts": {"h\n": {}}},
    {"clusters": {"a/b": {"hosts": ["h", "h"], "tp": 2}}},
])
def test_names_are_plain_full_strings(tmp_path: Path, section: dict[str, Any]) -> None:
    data: dict[str, Any] = {"defaults": {"python": "/p", "model": "/m", "address": "10.0.0.1"},
                            "hosts": {"h": {}}}
    for k, v in section.items():
        data[k] = {**data.get(k, {}), **v}
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump(data))
    r = run_inv("render", inventory=inv)
    assert r.returncode == 2 and "names may use letters, digits" in r.stderr, r.stdout + r.stderr


def test_a_newline_in_a_router_group_stays_in_the_comment() -> None:
    from fabfile.commands.router import launch_script
    from fabfile.inventory.hosts import Router

    r = Router(name="r1", host="h", members=("h",), group="h,\nid>/tmp/x", port=30000, listen="0.0.0.0",
               policy="round_robin", python="/p", args=())
    script = launch_script(r, ["/p", "-m", "sglang_router.launch_router"], "~/logs")
    assert [line for line in script.splitlines() if not line.startswith(("#", "cd ", "exec "))] == []


def test_a_deeply_nested_or_huge_inventory_is_a_sentence(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("hosts: " + "[" * 50000)
    huge = tmp_path / "huge.yaml"
    huge.write_text("hosts: {h: {python: /p, model: /m}}\n" + "# padding\n" * 600000)
    # nested by indentation, not brackets: Python's recursion limit is what stops PyYAML there
    block = tmp_path / "block.yaml"
    block.write_text("".join("  " * i + f"k{i}:\n" for i in range(2000)) + "  " * 2000 + "v\n")
    for inv, what in ((deep, "nested too deeply"), (huge, "larger than 4 MiB"), (block, "nested too deeply")):
        r = run_inv("status", inventory=inv)
        assert r.returncode == 2 and what in r.stderr and "Traceback" not in r.stderr, r.stderr[-500:]


def test_flow_collections_nest_up_to_the_limit_and_no_deeper(tmp_path: Path) -> None:
    """The flow depth is refused as PyYAML's scanner reaches it (schema.FLOW_DEPTH_MAX), not after the ~1.2 s its
    scanner took to reach Python's recursion limit; up to the limit the file is read as YAML."""
    def text(depth: int) -> bytes:
        return ("hosts: " + "[" * depth + "]" * depth + "\n").encode()

    deepest = schema.read(tmp_path / "ok.yaml", text(schema.FLOW_DEPTH_MAX))["hosts"]
    for _ in range(schema.FLOW_DEPTH_MAX - 1):
        assert isinstance(deepest, list) and len(deepest) == 1
        deepest = deepest[0]
    assert deepest == []
    with pytest.raises(InventoryError, match="nested too deeply to be an inventory"):
        schema.read(tmp_path / "deep.yaml", text(schema.FLOW_DEPTH_MAX + 1))
