"""Knobs judged on the host's own release once a deploy knows it (issue 39): the plan's knob lines, the flag the tool
chooses itself written under its new name, SGLang's own launch warnings read from its log, and the simulator's alias
and removed-variable tables held to the facts read from the wheels."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest
from rich.console import Console

from fabfile.inventory import hosts as inventory
from fabfile.plan import knob_effects
from fabfile.plan.deploy_plan import Options, build, for_version
from fabfile.plan.sglang_knob_facts import KNOB_FACTS
from fabfile.remote import versions
from fabfile.remote.serve.launchwarnings import Collector, message

ROOT = Path(__file__).resolve().parents[3]
SIM_ARGS = ROOT / "tests/simhost/sim/site/sglang/srt/server_args.py"


def _host(tmp_path: Path) -> inventory.Host:
    (tmp_path / "inv.yaml").write_text(
        "hosts:\n  seed:\n    connection: local\n    python: /venv/bin/python3\n    gpus: 8\n    tp: 8\n"
        "    model: /m\n    draft_model: /d\n    env: {CUDA_DEVICE_MAX_CONNECTIONS: '1'}\n"
        "    sglang_args: ['--num-continuous-decode-steps', '4', '--cuda-graph-max-bs', '8']\n")
    return inventory.load(str(tmp_path / "inv.yaml")).hosts["seed"]


@pytest.mark.parametrize(("version", "alias"), [("0.5.12", False), ("0.5.16", True), ("0.5.19", True)])
def test_a_plan_for_the_hosts_release_names_each_knob_without_effect(tmp_path: Path, version: str,
                                                                      alias: bool) -> None:
    plan = for_version(build(_host(tmp_path), Options()), version)
    got = list(plan.knob_notes)
    assert got[0] == (f"--num-continuous-decode-steps has no effect on SGLang {version}: it is parsed and read "
                      "nowhere; remove it")
    assert any("deprecated alias" in n and "--cuda-graph-max-bs-decode" in n for n in got) is alias
    assert any(n.startswith("SGLang sets CUDA_DEVICE_MAX_CONNECTIONS=") for n in got)
    assert plan.summary()["knob_notes"] == got
    # Before the host's release is known there is nothing to judge on (render judges on a named one itself).
    assert build(_host(tmp_path), Options()).knob_notes == ()


def test_strict_rides_on_the_options_into_the_plan(tmp_path: Path) -> None:
    assert build(_host(tmp_path), Options(strict_knobs=True)).strict_knobs is True
    assert build(_host(tmp_path), Options()).strict_knobs is False


@pytest.mark.parametrize(("version", "name"), [("0.4.9", "--cuda-graph-max-bs"), ("0.5.13", "--cuda-graph-max-bs"),
                                               ("0.5.14", "--cuda-graph-max-bs-decode"),
                                               ("0.5.16", "--cuda-graph-max-bs-decode"),
                                               ("0.5.20", "--cuda-graph-max-bs-decode"),
                                               (versions.NEWEST_SUPPORTED, "--cuda-graph-max-bs-decode")])
def test_the_tool_writes_a_deprecated_alias_under_its_new_name(version: str, name: str) -> None:
    from fabfile.plan import remedies

    assert knob_effects.current_name(version, "--cuda-graph-max-bs") == name
    assert remedies.graph_bs_flag(version) == name
    assert knob_effects.current_name(version, "--tp-size") == "--tp-size"
    assert knob_effects.current_name(version, "--never-a-flag") is None


# SGLang's own words, as the wheels log them (server_args.py DeprecatedAliasStoreAction, coloured by
# print_deprecated_warning; speculative_hook.py; environ.py; fused_moe_triton_config.py), each with its log prefix.
LOG = [
    "[2026-12-03 07:00:00] \x1b[1;33m'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
    "Use '--cuda-graph-max-bs-decode' instead.\x1b[0m",
    "[2026-12-03 07:00:00] server_args=ServerArgs(help='--x is deprecated')",
    "[2026-12-03 07:00:00] SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker.",
    "/v/lib/python3.11/site-packages/sglang/srt/environ.py:160: DeprecationWarning: Environment variable "
    "'SGLANG_NSA_FUSE_TOPK' is deprecated; use 'SGLANG_DSA_FUSE_TOPK' instead.",
    "  warnings.warn(",
    "[2026-12-03 07:00:01 TP0] Using default MoE kernel config. Performance might be sub-optimal! Config file not "
    "found at /c/E=256.json",
    "[2026-12-03 07:00:01 TP1] Using default MoE kernel config. Performance might be sub-optimal! Config file not "
    "found at /c/E=256.json",
    "[2026-12-03 07:00:01 TP0] speculative_adaptive disabled: topk > 1. Falling back to static speculative params.",
    "[2026-12-03 07:00:02 TP0] NCCL INFO NCCL_PROTO set by environment to LL, ignored later",
    "[2026-12-03 07:00:02 TP0] Load weight end. type=LlamaForCausalLM",
]


def test_sglangs_launch_warnings_are_read_one_line_each_without_prefix_or_colour() -> None:
    c = Collector()
    c.feed(LOG[:4])
    c.feed(LOG[4:])
    assert c.lines == [
        "'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-max-bs-decode' instead.",
        "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker.",
        "DeprecationWarning: Environment variable 'SGLANG_NSA_FUSE_TOPK' is deprecated; use 'SGLANG_DSA_FUSE_TOPK' "
        "instead.",
        "Using default MoE kernel config. Performance might be sub-optimal! Config file not found at /c/E=256.json",
        "speculative_adaptive disabled: topk > 1. Falling back to static speculative params.",
    ]
    assert message("[2026-12-03 07:00:02] The server is fired up and ready to roll!") is None


def _sim_table(name: str) -> dict[str, tuple]:
    tree = ast.parse(SIM_ARGS.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == name)
    return ast.literal_eval(node.value)


def _key(v: str) -> tuple[int, ...]:
    parts = [int(x) for x in v.split(".post")[0].split(".")]
    return (*parts, int(v.split(".post")[1]) if ".post" in v else 0)


@pytest.mark.parametrize("release", list(KNOB_FACTS))
def test_the_simulators_deprecated_aliases_are_the_wheels(release: str) -> None:
    """What the simulated SGLang warns of, per release, is what the facts read from the wheels say."""
    facts = KNOB_FACTS[release]["aliases"]
    for old, (new, since, gone) in _sim_table("DEPRECATED_ALIASES").items():
        aliased = tuple(since) <= _key(release) < tuple(gone)
        assert (facts.get(old) == new) is aliased, (release, old)


def test_the_simulators_removed_variables_are_the_releases() -> None:
    removed = _sim_table("REMOVED_ENV")
    assert _key(versions.SPEC_V2_ENV_REMOVED)[:3] == removed["SGLANG_ENABLE_SPEC_V2"][0][:3]


def test_the_deploy_summary_says_knobs_and_sglangs_warnings_once_each(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from fabfile.present import deploy_report
    from fabfile.results.deploys import DeployResult

    plan = for_version(build(_host(tmp_path), Options()), "0.5.16")
    warned = ["Using default MoE kernel config. Performance might be sub-optimal!"]
    r = DeployResult(host="seed", ok=True, plan=plan, sglang_version="0.5.16", patch_mode="env",
                     record={"pid": 1, "log_path": plan.log_path, "sglang_warnings": warned})
    buf = io.StringIO()
    monkeypatch.setattr(deploy_report, "out", Console(file=buf, width=300, color_system=None))
    deploy_report.deploy_summary(r)
    text = buf.getvalue()
    assert f"  sglang warns: {warned[0]}" in text.splitlines()
    assert r.as_dict()["sglang_warnings"] == warned and r.as_dict()["knob_notes"] == list(plan.knob_notes)
