"""The SGLang flags the tool writes from inventory fields have one table (``inventory/launch_flags``): render writes
each from its field, adopt reads each back to it, the inventory's check refuses each in ``sglang_args``, diff and
the version check read the same rows. Three copies of it once differed (``--tp`` was adopt's only)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from fabfile.commands import adopt
from fabfile.commands.diff import compare, flag_map
from fabfile.errors import FlagError, InventoryError
from fabfile.inventory import hosts as inventory
from fabfile.inventory.launch_flags import BY_SPELLING, FLAG_OF, LAUNCH_FLAGS, canonical, row_of
from fabfile.plan.deploy_plan import Options, build
from fabfile.plan.versioncheck import check
from tests.support.sources import modules, nodes

ROOT = Path(__file__).resolve().parents[3]

ENTRY = {"python": "/p", "gpus": 2, "model": "/m", "draft_model": "/d/eagle3", "served_model_name": "kimi", "tp": 2,
         "listen": "127.0.0.1", "port": 30001,
         "speculative": {"algorithm": "EAGLE3", "steps": 3, "topk": 2, "draft_tokens": 5}}


def _load(tmp_path: Path, **fields: object) -> inventory.Inventory:
    p = tmp_path / "i.yaml"
    p.write_text(yaml.safe_dump({"hosts": {"h": {**ENTRY, **fields}}}))
    return inventory.load(p)


def _field(entry: dict[str, object], path: str) -> object:
    value: object = entry
    for part in path.split("."):
        assert isinstance(value, dict), path
        value = value[part]
    return value


def test_render_then_adopt_gives_back_every_field_of_the_table(tmp_path: Path) -> None:
    plan = build(_load(tmp_path).hosts["h"], Options())
    launch = adopt.Launch(python=plan.argv[0], args=list(plan.argv[3:]))
    managed, rest = adopt.split_flags(launch.args)
    assert sorted(managed) == sorted(row.flag for row in LAUNCH_FLAGS)  # render writes every row, by its spelling
    assert rest == []
    entry = adopt.host_entry(launch)
    for row in LAUNCH_FLAGS:
        assert _field(entry, row.field) == _field(ENTRY, row.field), row.flag


def test_every_spelling_of_a_table_flag_in_sglang_args_is_refused_naming_its_field(tmp_path: Path) -> None:
    for spelling, row in BY_SPELLING.items():
        if row.in_args_too:
            assert _load(tmp_path, sglang_args=[f"{spelling}=x"]).hosts["h"].sglang_args == (f"{spelling}=x",)
            continue
        with pytest.raises(InventoryError, match=f"{spelling} is set by the tool from `{row.source}`"):
            _load(tmp_path, sglang_args=[f"{spelling}=2"])
    # `--tp` (argparse completes it to --tp-size) was read by adopt but let through by the inventory: two TPs.
    with pytest.raises(InventoryError, match="--tp is set by the tool from `tp`"):
        _load(tmp_path, sglang_args=["--tp", "4"])


def test_diff_reads_an_alias_as_the_flag_render_writes() -> None:
    assert canonical("--tp") == canonical("--tensor-parallel-size") == FLAG_OF["tp"] == "--tp-size"
    assert flag_map(["python3", "-m", "sglang.launch_server", "--tp", "2"]) == \
        flag_map(["python3", "-m", "sglang.launch_server", "--tp-size=2"])
    view = {"config": "c", "sglang_version": "0.5.7", "patch_mode": "env", "check_env": "x", "env": {},
            "patched_files": {}}
    adopted = {**view, "argv": ["p", "-m", "sglang.launch_server", "--model", "/m", "--tp", "2"]}
    rendered = {**view, "argv": ["p", "-m", "sglang.launch_server", "--model-path=/m", "--tp-size=2"]}
    assert compare(adopted, rendered) == []
    assert compare(adopted, {**rendered, "argv": [*rendered["argv"], "--tp-size=4"]}) == \
        [{"what": "argv --tp-size", "a": "2", "b": "4"}]


def test_the_version_check_names_the_field_a_missing_flag_comes_from() -> None:
    row = row_of("--speculative-draft-model")
    assert row is not None and row.field == "draft_model"
    # 0.4.5 has only --speculative-draft-model-path; the newer spelling is refused with its field named.
    with pytest.raises(FlagError) as e:
        check(["--speculative-draft-model=/d"], {}, "0.4.5", "h")
    assert "the tool writes it from draft_model" in (e.value.hint or "")
    with pytest.raises(FlagError) as e:
        check(["--no-such-flag-anywhere"], {}, "0.4.5", "h")
    assert (e.value.hint or "").startswith("remove it from sglang_args")


def test_no_other_client_module_spells_a_table_flag() -> None:
    """The table's spellings as string literals live in its module alone (the agent, which may not import the
    client, reads a few of them on its own; the generated facts list every flag of every release). ``--host`` and
    ``--port`` are the tool's own flags and the router's too, so only the rest are looked for."""
    spellings = set(BY_SPELLING) - {"--host", "--port"}
    found = []
    for path in modules(ROOT / "fabfile"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("fabfile/remote/") or rel in ("fabfile/inventory/launch_flags.py",
                                                        "fabfile/plan/sglang_spec_facts.py"):
            continue
        for node in nodes(path):
            if isinstance(node, ast.Constant) and node.value in spellings:
                found.append(f"{rel}:{node.lineno} {node.value}")
    assert found == []
