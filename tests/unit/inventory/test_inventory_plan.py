"""Inventory layering and validation, and the plan a deploy derives from it (no host involved)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fabfile.errors import FlagError, InventoryError
from fabfile.inventory import hosts as inventory
from fabfile.plan.deploy_plan import Options, build, env_file_text

BASE = """
presets:
  nccl:
    tuned: {NCCL_PROTO: Simple, NCCL_BUFFSIZE: 4194304}
defaults:
  python: /opt/venv/bin/python3
  model: /models/m
  draft_model: /models/d
  log_dir: /var/log/sg
  port: 9000
  nccl_preset: pcie
  env: {A: from-defaults, B: from-defaults}
groups:
  big:
    hosts: [g1, g2]
    defaults: {gpus: 8, tp: 8, env: {B: from-group}, nccl_preset: tuned}
hosts:
  g1: {default: true, env: {C: "from host"}, nccl_env: {NCCL_BUFFSIZE: 1048576}}
  g2: {ssh_host: gpu-two, port: 9100}
  g3: {gpus: 2, tp: 2}
"""


@pytest.fixture
def inv(tmp_path: Path) -> inventory.Inventory:
    p = tmp_path / "inventory.yaml"
    p.write_text(BASE)
    return inventory.load(p)


def test_layering_host_over_group_over_defaults_over_preset(inv: inventory.Inventory) -> None:
    g1, g2, g3 = inv.hosts["g1"], inv.hosts["g2"], inv.hosts["g3"]
    assert g1.env == {"A": "from-defaults", "B": "from-group", "C": "from host"}
    assert g1.tp == 8 and g3.tp == 2
    assert g1.nccl_env == {"NCCL_PROTO": "Simple", "NCCL_BUFFSIZE": "1048576"}  # nccl_env over preset `tuned`
    assert g3.nccl_env["NCCL_PROTO"] == "LL"  # built-in pcie preset from defaults
    assert g2.port == 9100 and g2.ssh_host == "gpu-two" and g1.ssh_host == "g1"


def test_selection_by_name_group_and_comma_list(inv: inventory.Inventory) -> None:
    assert [h.name for h in inv.select(None)] == ["g1"]
    assert [h.name for h in inv.select("big")] == ["g1", "g2"]
    assert [h.name for h in inv.select("g3,big,g1")] == ["g3", "g1", "g2"]
    with pytest.raises(InventoryError, match="unknown host or group 'g9'"):
        inv.select("g9")


def test_plan_launch_command_env_and_names(inv: inventory.Inventory) -> None:
    plan = build(inv.hosts["g1"], Options(steps=2))
    assert plan.config_name == "eagle3-s2-k1-d3"
    assert plan.argv[:3] == ("/opt/venv/bin/python3", "-m", "sglang.launch_server")
    assert "--speculative-num-draft-tokens=3" in plan.argv
    assert plan.env["SPT_NOENV"] == "1" and plan.env["NCCL_DEBUG"] == "INFO"
    assert plan.log_path == "/var/log/sg/sglang-eagle3-s2-k1-d3.log"
    baseline = build(inv.hosts["g1"], Options(steps=0))
    assert baseline.config_name == "baseline" and not any(a.startswith("--speculative") for a in baseline.argv)
    # Same configuration, same hash, whatever the deploy id.
    assert build(inv.hosts["g1"], Options(steps=2)).plan_hash == plan.plan_hash
    assert baseline.plan_hash != plan.plan_hash


def test_flag_rules(inv: inventory.Inventory) -> None:
    with pytest.raises(FlagError, match="steps \\+ 1 = 4"):
        build(inv.hosts["g1"], Options(steps=3, draft_tokens=5))
    with pytest.raises(FlagError, match="--draft-tokens is required") as e:
        build(inv.hosts["g1"], Options(steps=3, topk=4))
    # it says which values SGLang takes and suggests one (it suggested none)
    assert "it can be 1 to 37" in e.value.message and "--draft-tokens 8" in e.value.hint
    assert build(inv.hosts["g1"], Options(steps=3, topk=4, draft_tokens=8)).config_name == "eagle3-s3-k4-d8"


def test_tree_drafts_follow_sglangs_only_limit(inv: inventory.Inventory) -> None:
    """SGLang picks draft_tokens - 1 of the topk + (steps - 1) * topk**2 tree candidates and sets no other limit:
    its own EAGLE fixture (steps 5, topk 8, draft tokens 64) must plan (the old steps*topk+1 bound refused it)."""
    plan = build(inv.hosts["g1"], Options(steps=5, topk=8, draft_tokens=64))
    assert plan.config_name == "eagle3-s5-k8-d64"
    assert "--speculative-num-draft-tokens=64" in plan.argv
    assert build(inv.hosts["g1"], Options(steps=1, topk=2, draft_tokens=3)).config_name == "eagle3-s1-k2-d3"
    assert build(inv.hosts["g1"], Options(steps=2, topk=4, draft_tokens=21)).config_name == "eagle3-s2-k4-d21"
    with pytest.raises(FlagError, match="between 1 and 21, got 22"):
        build(inv.hosts["g1"], Options(steps=2, topk=4, draft_tokens=22))


def test_steps_are_bounded_by_sglangs_verify_tree(inv: inventory.Inventory) -> None:
    """SGLang's build_tree kernel refuses more than 1024 draft tokens (tree.cuh in the 0.5.21+ wheels), at the first
    draft after the model loaded: refused at plan time instead, naming the flag and the bound."""
    assert build(inv.hosts["g1"], Options(steps=1023)).config_name == "eagle3-s1023-k1-d1024"
    with pytest.raises(FlagError, match=r"--steps: .*at most 1024 draft tokens.* up to 1023, got 1024"):
        build(inv.hosts["g1"], Options(steps=1024))
    with pytest.raises(FlagError, match=r"--draft-tokens: .*up to 1024, got 1025"):
        build(inv.hosts["g1"], Options(steps=400, topk=4, draft_tokens=1025))


def test_secrets_are_masked_everywhere_they_are_shown(tmp_path: Path) -> None:
    p = tmp_path / "i.yaml"
    p.write_text(BASE.replace("g3: {gpus: 2, tp: 2}", "g3: {gpus: 2, tp: 2, env: {HF_TOKEN: hf_s3cr3t}, "
                              "sglang_args: [--api-key, k3y-s3cr3t]}"))
    plan = build(inventory.load(p).hosts["g3"], Options(steps=1))
    shown = str(plan.summary()) + plan.masked_script()
    assert "hf_s3cr3t" not in shown and "k3y-s3cr3t" not in shown
    # Neither is in the script (its words become command lines any account can read): the env value is in the
    # private env file the script sources, the key in SGLang's --config file, both written 0600.
    assert "hf_s3cr3t" not in plan.script and "k3y-s3cr3t" not in plan.script
    assert "HF_TOKEN=hf_s3cr3t" in env_file_text(plan.file_env) and plan.env_file in plan.script.replace(
        '"$HOME"/', "~/")
    assert plan.secret_config == {"api-key": "k3y-s3cr3t"} and "--config" in plan.launch_argv


def test_launch_script_passes_hostile_values_exactly(tmp_path: Path) -> None:
    """Render the real launch script and run it with a stand-in python that prints its argv and env."""
    hostile = "a b 'c' \"d\" $HOME `id` ; $(touch pwned) \\ \t end"
    p = tmp_path / "i.yaml"
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"ARG=$a\"; done\nprintf 'ENV=%s\\n' \"$NOTE\"\n")
    fake.chmod(0o755)
    import yaml

    p.write_text(yaml.safe_dump({"hosts": {"h": {"python": str(fake), "model": "/m", "log_dir": str(tmp_path),
                                                 "served_model_name": hostile, "env": {"NOTE": hostile}}}}))
    plan = build(inventory.load(p).hosts["h"], Options(steps=0))
    script = tmp_path / "launch.sh"
    script.write_text(plan.script)
    env_file = tmp_path / plan.env_file.removeprefix("~/")
    env_file.parent.mkdir(parents=True)
    env_file.write_text(env_file_text(plan.file_env))
    out = subprocess.run(["/bin/sh", str(script)], capture_output=True, text=True, cwd=tmp_path,
                         env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]}).stdout
    lines = out.splitlines()
    assert f"ARG=--served-model-name={hostile}" in lines  # the flag and its value, one word (plan/argv.py)
    assert f"ENV={hostile}" in lines
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("text, words", [
    ("hosts: {}\n", "at least one host"),
    ("hosts:\n  a: {python: /p, model: /m, default: true}\n  b: {python: /p, model: /m, default: true}\n",
     "only one host"),
    ("hosts:\n  a: {python: /p, model: /m, env: {BAD-NAME: x}}\n", "not a valid environment variable"),
    ("hosts:\n  a: {python: /p, model: /m, env: {X: true}}\n", "quote true"),
    ("hosts:\n  a: {python: /p, model: /m, nccl_env: {FOO: 1}}\n", "not an NCCL_ variable"),
    ("hosts:\n  a: {python: /p, model: /m, sglang_args: [--tp-size, '2']}\n", "set by the tool"),
    ("hosts:\n  a: {python: /p, model: /m, port: 70000}\n", "between 1 and 65535"),
    ("groups: {g: [nobody]}\nhosts:\n  a: {python: /p, model: /m}\n", "unknown host 'nobody'"),
    ("hosts:\n  a: {python: /p, model: /m, state_dir: rel/dir}\n", "absolute or start with ~/"),
    ("ssh_config: missing_config\nhosts:\n  a: {python: /p, model: /m}\n", "does not exist"),
])
def test_invalid_inventories_name_the_field(tmp_path: Path, text: str, words: str) -> None:
    p = tmp_path / "inventory.yaml"
    p.write_text(text)
    with pytest.raises(InventoryError) as e:
        inventory.load(p)
    assert words in str(e.value) and str(p) in str(e.value)
    assert "\n" not in e.value.message


def test_repository_example_inventory_is_the_seed_host() -> None:
    inv = inventory.load(Path(__file__).resolve().parents[3] / "inventory.yaml")
    h = inv.default_host()
    assert (h.gpus, h.tp, h.python, h.model, h.draft_model, h.port) == (
        8, 8, "/root/ml-env/bin/python3", "/shared/kimi-k2.5-int4", "/data/eagle3/output_100k_sglang/4", 8000)
    assert h.nccl_env == {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS",
                          "NCCL_MAX_NCHANNELS": "16", "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}
    assert h.ssh_host == "gpu1" and not any(c.isdigit() and "." in h.ssh_host for c in h.ssh_host)


@pytest.mark.parametrize(("value", "mode", "launched"), [
    ("other", "auto", "other,specdeploy_nccl_env"),
    ("other, ", "plugin", "other, specdeploy_nccl_env"),
    (" , ", "plugin", " , specdeploy_nccl_env"),  # SGLang loads no plugin at all with this allowlist
    ("other, specdeploy_nccl_env", "plugin", "other, specdeploy_nccl_env"),
    ("", "plugin", ""),  # empty: SGLang loads every plugin
    ("other", "scheduler", "other"),  # no plugin in that mode
    ("other", "env", "other"),
])
def test_a_users_sglang_plugins_lets_the_tools_plugin_load(tmp_path: Path, value: str, mode: str,
                                                           launched: str) -> None:
    """From 0.5.11 SGLang loads only the general plugins SGLANG_PLUGINS names (comma-separated): the plugin mode
    would silently do nothing, so the tool adds its plugin to the user's list and says so in the plan."""
    p = tmp_path / "i.yaml"
    p.write_text(BASE.replace('env: {C: "from host"}', f"env: {{C: from host, SGLANG_PLUGINS: {value!r}}}, "
                              f"patch_mode: {mode}"))
    plan = build(inventory.load(p).hosts["g1"], Options(steps=1))
    assert plan.env["SGLANG_PLUGINS"] == launched
    assert f"SGLANG_PLUGINS={shlex.quote(launched)}" in env_file_text(plan.file_env)
    notes = plan.summary()["notes"]
    if launched == value:
        assert notes == []
    else:
        (note,) = notes
        assert repr(value) in note and "specdeploy_nccl_env" in note and repr(launched) in note


@pytest.mark.parametrize(("env", "named", "spelling"), [
    ({"NCCL_P2P_LEVEL": "sys"}, "env.NCCL_P2P_LEVEL", "write SYS"),
    ({"NCCL_NTHREAD": "512"}, "env.NCCL_NTHREAD", "NCCL's spelling is NCCL_NTHREADS"),
    ({"NCCL_BUFFSIZE": "16M"}, "env.NCCL_BUFFSIZE", "NCCL reads it as 16"),
    ({"NCCL_PROTO": "LL,Simpel"}, "env.NCCL_PROTO", "'Simpel' is not a name NCCL knows"),
    # issue 36: NCCL reads names case-sensitively, so nccl_p2p_level reached the launch and NCCL never read it
    ({"nccl_p2p_level": "SYS"}, "env.nccl_p2p_level", "NCCL's spelling is NCCL_P2P_LEVEL"),
    # issue 36: NCCL's documented NCCL_NTHREADS values are 64, 128, 256 and 512; "100" was accepted
    ({"NCCL_NTHREADS": "100"}, "env.NCCL_NTHREADS", "64, 128, 256, 512"),
])
def test_nccl_values_and_names_nccl_refuses_stop_the_deploy_before_any_host_is_touched(
        tmp_path: Path, env: dict[str, str], named: str, spelling: str) -> None:
    """`env: {NCCL_P2P_LEVEL: sys, NCCL_NTHREAD: '512'}` stopped the running server, loaded the model and failed at
    verify env: refused at plan time instead (exit 2, the variable and NCCL's spelling), before any host call."""
    from fabfile.commands.dispatch import deploy_command
    from fabfile.commands.rollout import parse_batch
    from fabfile.transport.session import connector
    from tests.support.fakehost import FakeFleet

    p = tmp_path / "i.yaml"
    p.write_text(BASE.replace('g3: {gpus: 2, tp: 2}', f"g3: {{gpus: 2, tp: 2, env: {env}}}"))
    inv = inventory.load(p)
    fleet = FakeFleet({})
    with connector(fleet), pytest.raises(InventoryError) as e:
        deploy_command(inv, [inv.hosts["g1"], inv.hosts["g3"]], None, Options(steps=1), strategy=None,
                       batch=parse_batch("1"), canary=True, rollback_on_failure=False, as_json=True)
    assert e.value.exit_code == 2 and e.value.host == "g3"
    assert e.value.message.startswith(named) and spelling in e.value.message
    assert not fleet.calls  # nothing was asked of any host
    # what NCCL reads the same way passes: a YAML float, an old-style level, the exact name
    p.write_text(BASE.replace('g3: {gpus: 2, tp: 2}', 'g3: {gpus: 2, tp: 2, env: {NCCL_BUFFSIZE: 16777216.0, '
                                                      'NCCL_P2P_LEVEL: "5", NCCL_NTHREADS: "512", NCCL_IB_HCA: mlx5}}'))
    assert build(inventory.load(p).hosts["g3"], Options(steps=1)).expected["NCCL_P2P_LEVEL"] == "5"


# ---------------------------------------------------------------------------------------------------------------
# Values that start with '-': each reaches SGLang as its flag's value.

SIM_SITE = Path(__file__).parents[2] / "simhost" / "sim" / "site"
# The simulator's server_args is SGLang's parser (stdlib argparse, the same flags), here at the newest release.
_PARSE = ("import sys, types\n"
          "m = types.ModuleType('sglang.version'); m.__version__ = '0.5.23'; sys.modules['sglang.version'] = m\n"
          f"sys.path.insert(0, {str(SIM_SITE)!r})\n"
          "from sglang.srt.server_args import prepare_server_args\n"
          "a = prepare_server_args(sys.argv[1:])\n"
          "print(repr((a.model_path, a.served_model_name, a.speculative_draft_model_path, a.api_key)))\n")


def sglang_reads(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-c", _PARSE, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]})


def _dash_inventory(tmp_path: Path, **fields: object) -> inventory.Inventory:
    import yaml

    p = tmp_path / "i.yaml"
    p.write_text(yaml.safe_dump({"hosts": {"h": {"python": "/p", "model": "/m", "draft_model": "/d/eagle3",
                                                 "served_model_name": "--warmups", **fields}}}))
    return inventory.load(p)


def test_values_that_start_with_a_dash_reach_sglang_as_values(tmp_path: Path) -> None:
    """`served_model_name: "--warmups"` was rendered `--served-model-name --warmups`: SGLang's argparse read the
    name as a flag and exited ("expected one argument") after the deploy had stopped the old server. Each value is
    now in its flag's word, and the render shows exactly that argv."""
    old = sglang_reads(["--model-path", "/m", "--served-model-name", "--warmups"])
    assert old.returncode == 2 and "argument --served-model-name: expected one argument" in old.stderr, old.stderr
    plan = build(_dash_inventory(tmp_path).hosts["h"], Options(steps=3))
    assert {"--model-path=/m", "--served-model-name=--warmups", "--speculative-draft-model-path=/d/eagle3"} <= \
        set(plan.argv)
    r = sglang_reads(list(plan.argv[3:]))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == repr(("/m", "--warmups", "/d/eagle3", None))
    # Model and draft paths are absolute on a host (the inventory refuses others), but are written the same way: a
    # path that did start with '-' would be read as the value too.
    assert sglang_reads(["--model-path=-m", "--speculative-draft-model-path=-d"]).stdout.strip() == \
        repr(("-m", "-m", "-d", None))  # SGLang serves the model under its path when no name is given
    from fabfile.commands.render_plan import plan_document

    doc = plan_document(plan.host, Options(steps=3))
    assert "--served-model-name=--warmups" in doc["argv"] and "--served-model-name=--warmups" in doc["launch_command"]


def test_an_sglang_args_value_argparse_would_read_as_a_flag_is_refused(tmp_path: Path) -> None:
    """In sglang_args the user's words pass as written; one argparse would take for a flag where a value is meant
    (`--api-key -k3y`) is refused when the inventory is read, saying how to write it. Negative numbers are values
    to argparse, and a value in its flag's word passes."""
    with pytest.raises(InventoryError, match=r"-k3y starts with '-'.*value of --api-key; write the two as one "
                                             r"word, --api-key=VALUE"):
        _dash_inventory(tmp_path, sglang_args=["--api-key", "-k3y"])
    host = _dash_inventory(tmp_path, sglang_args=["--random-seed", "-1", "--chat-template=-t"]).hosts["h"]
    plan = build(host, Options(steps=0))
    assert plan.argv[-3:] == ("--random-seed", "-1", "--chat-template=-t")


def test_a_secret_value_sglang_cannot_read_from_its_config_file_is_refused(tmp_path: Path) -> None:
    """SGLang turns its --config file back into `--api-key VALUE` words before its argparse reads them, so a key
    that starts with '-' cannot reach it that way (and on the command line every account could read it): refused
    before anything on the host changes."""
    host = _dash_inventory(tmp_path, sglang_args=["--api-key=-k3y-s3cr3t"]).hosts["h"]
    with pytest.raises(InventoryError, match="the value of --api-key starts with '-'") as e:
        build(host, Options(steps=0))
    assert "k3y" not in str(e.value.describe()) and e.value.exit_code == 2
    assert sglang_reads(["--model-path", "/m", "--api-key", "-k3y"]).returncode == 2  # as SGLang's merger words it


def test_every_reader_of_a_command_line_takes_both_forms(tmp_path: Path) -> None:
    """The tool now writes `--flag=value`; a server started by hand (or by an older specdeploy) may use
    `--flag value`: the sweep, the version check, diff, adopt and check-env's reading of SGLang's flags take both."""
    from fabfile.commands.adopt import split_flags
    from fabfile.commands.diff import flag_map
    from fabfile.plan.sweep_plan import configs
    from fabfile.plan.versioncheck import check
    from fabfile.remote.evidence.sglangnccl import argv_flags

    one_word = ["--tp-size=2", "--served-model-name=--warmups", "--speculative-algorithm=NOPE",
                "--enable-symm-mem"]
    two_words = ["--tp-size", "2", "--served-model-name", "kimi", "--speculative-algorithm", "NOPE",
                 "--enable-symm-mem"]
    for argv in (one_word, two_words):
        assert flag_map(argv)["--tp-size"] == "2" and flag_map(argv)["--enable-symm-mem"] == ""
        assert split_flags(argv)[0]["--tp-size"] == "2"
        assert argv_flags(argv)["tp_size"] == 2 and argv_flags(argv)["symm_mem"] is True
        with pytest.raises(FlagError, match="no speculative algorithm NOPE"):
            check(argv, {}, "0.5.1", "h")
    assert flag_map(one_word)["--served-model-name"] == "--warmups"
    host = _dash_inventory(tmp_path).hosts["h"]
    assert [(c.steps, c.topk, c.draft_tokens) for c in configs(host, Options(), [0, 2], [1, 2], [3])] == \
        [(0, 1, None), (2, 1, 3), (2, 2, 3)]


def test_one_splitter_reads_a_command_line_as_argparse_does() -> None:
    """Every reader of SGLang's argv (client and agent) splits it with ``remote.common.split_argv``: a value is
    ``--flag=value`` or the next word unless argparse would read that word as a flag."""
    from fabfile.remote.common import flag_value, split_argv
    from fabfile.remote.procs import SECRET_FLAGS, redact_argv

    argv = ["python3", "-m", "sglang.launch_server", "--tp", "2", "--served-model-name", "--warmups", "--x=-1",
            "--y", "-1", "--name", "-my model", "--api-key=a b", "--switch"]
    got = [(f.name, f.value) for f in split_argv(argv)]
    assert got == [("", None), ("-m", "sglang.launch_server"), ("--tp", "2"), ("--served-model-name", None),
                   ("--warmups", None), ("--x", "-1"), ("--y", "-1"), ("--name", "-my model"), ("--api-key", "a b"),
                   ("--switch", None)]
    assert [w for f in split_argv(argv) for w in f.words] == argv
    assert flag_value(["--tp", "2", "--tp=4"], "--tp") == "4"  # the last one wins, as in argparse
    # A secret flag takes the next word whatever it is: its value never stays a word of its own.
    assert [(f.name, f.value) for f in split_argv(["--api-key", "-k", "--p"], values=SECRET_FLAGS)] == \
        [("--api-key", "-k"), ("--p", None)]
    assert redact_argv(["--api-key", "-k", "--hf-token=t", "--p"]) == ["--api-key", "***", "--hf-token=***", "--p"]


def test_a_value_flag_of_sglang_args_without_its_value_is_refused(tmp_path: Path) -> None:
    """`sglang_args: [--api-key, --enable-metrics]` made the next flag the API key (moved into --config, where SGLang
    reads it back as `--api-key --enable-metrics` and exits); `[..., --served-model-name]` at the end gives it none."""
    for args, words in ((["--api-key", "--enable-metrics"], "--api-key takes a value, and --enable-metrics is the "
                                                             "next flag; write the two as one word, --api-key=VALUE"),
                        (["--enable-metrics", "--served-model-name"], "--served-model-name takes a value, and none "
                                                                      "follows")):
        with pytest.raises(InventoryError, match=words):
            _dash_inventory(tmp_path, sglang_args=args)
    assert _dash_inventory(tmp_path, sglang_args=["--api-key=--k3y"]).hosts["h"].sglang_args == ("--api-key=--k3y",)
