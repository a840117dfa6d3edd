"""What each SGLang release does with a knob (fabfile/plan/knob_effects.py over the table read from the wheels):
one test per class, each on at least three releases whose status is known from their source."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabfile.errors import FlagError
from fabfile.inventory import hosts as inventory
from fabfile.plan.deploy_plan import Options
from fabfile.plan.knob_effects import effect, notes
from fabfile.remote.versions import NEWEST_SUPPORTED


@pytest.mark.parametrize("version", ["0.4.5", "0.5.3", "0.5.16", "0.5.20", NEWEST_SUPPORTED])
def test_num_continuous_decode_steps_is_parsed_and_read_nowhere(version: str) -> None:
    e = effect(version, "--num-continuous-decode-steps")
    assert (e.kind, e.acts) == ("unused", False)


@pytest.mark.parametrize("version", ["0.5.14", "0.5.16", "0.5.19"])
def test_cuda_graph_max_bs_is_an_alias_of_the_decode_flag_from_0_5_14(version: str) -> None:
    e = effect(version, "--cuda-graph-max-bs")
    assert (e.kind, e.replacement, e.acts) == ("alias", "--cuda-graph-max-bs-decode", True)


@pytest.mark.parametrize("version", ["0.5.20", "0.5.21", NEWEST_SUPPORTED])
def test_cuda_graph_max_bs_is_gone_from_0_5_20(version: str) -> None:
    e = effect(version, "--cuda-graph-max-bs")
    assert (e.kind, e.since, e.acts) == ("removed", "0.5.20", False)


@pytest.mark.parametrize("version", ["0.4.9", "0.5.3", "0.5.12"])
def test_cuda_graph_max_bs_is_its_own_flag_before_0_5_14(version: str) -> None:
    assert effect(version, "--cuda-graph-max-bs").kind == "used"


@pytest.mark.parametrize(("version", "value"), [("0.4.5", "4"), ("0.5.3", "4"), ("0.5.14", "8"), ("0.5.16", "8"),
                                                (NEWEST_SUPPORTED, "8")])
def test_cuda_device_max_connections_is_overwritten_by_sglang(version: str, value: str) -> None:
    e = effect(version, "CUDA_DEVICE_MAX_CONNECTIONS")
    assert (e.kind, e.value, e.acts) == ("overwritten", value, False)


def test_a_variable_sglang_leaves_alone_and_an_unknown_version() -> None:
    assert effect("0.5.16", "NCCL_ALGO").kind == "used"
    assert effect("0.3.0", "--tp-size").kind == "unknown"
    assert effect("0.5.16.post9", "--num-continuous-decode-steps").release == "0.5.16"


def test_notes_name_each_knob_once_with_its_remedy() -> None:
    got = notes("0.5.16", ["--num-continuous-decode-steps", "4", "--cuda-graph-max-bs", "8", "--tp-size", "8"],
                {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_ALGO": "Ring"})
    assert got == [
        "--num-continuous-decode-steps has no effect on SGLang 0.5.16: it is parsed and read nowhere; remove it",
        "--cuda-graph-max-bs is a deprecated alias on SGLang 0.5.16: write --cuda-graph-max-bs-decode",
        "SGLang sets CUDA_DEVICE_MAX_CONNECTIONS=8 itself: your value never reaches the workers",
    ]


def _seed_inventory(tmp_path: Path) -> inventory.Inventory:
    (tmp_path / "inv.yaml").write_text(
        "hosts:\n  seed:\n    connection: local\n    python: /venv/bin/python3\n    gpus: 8\n    tp: 8\n"
        "    model: /m\n    draft_model: /d\n"
        "    sglang_args: ['--num-continuous-decode-steps', '4', '--disable-custom-all-reduce']\n")
    return inventory.load(str(tmp_path / "inv.yaml"))


def test_render_of_the_seeds_launch_on_0_5_16_names_the_knob_and_strict_refuses(tmp_path: Path) -> None:
    from fabfile.commands.render_plan import render_hosts

    hosts = _seed_inventory(tmp_path).select("seed")
    doc = render_hosts(hosts, Options(), sglang_version="0.5.16").document
    assert doc["hosts"][0]["knob_notes"] == [
        "--num-continuous-decode-steps has no effect on SGLang 0.5.16: it is parsed and read nowhere; remove it"]
    with pytest.raises(FlagError, match="--strict: seed: --num-continuous-decode-steps has no effect"):
        render_hosts(hosts, Options(), sglang_version="0.5.16", strict=True)
    with pytest.raises(FlagError, match="--sglang-version"):
        render_hosts(hosts, Options(), sglang_version="five")
