"""The simulator's speculative ``meta_info``: the fields each version returns, checked against the real wheels'
``tokenizer_manager.py``."""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

import pytest

from tests.support.sim import Sim, http, sim, sim_module  # noqa: F401  (the fixture)

WHEEL_VERSIONS = ["0.4.9", "0.5.3", "0.5.7", "0.5.9", "0.5.12", "0.5.16", "0.5.20", "0.5.23"]


# Set only with SGLang features the simulator does not run (ragged verify caps, block accept).
FEATURE_GATED = {"spec_cap_length", "spec_block_accept_length", "spec_cap_lens_histogram"}


def _wheel_fields(source: str) -> set[str]:
    """Every ``meta_info["spec_…"] = …`` the tokenizer manager writes."""
    tree = ast.parse(source)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for tgt in node.targets:
                if isinstance(tgt, ast.Subscript) and isinstance(tgt.value, ast.Name) and \
                        tgt.value.id == "meta_info" and isinstance(tgt.slice, ast.Constant) and \
                        str(tgt.slice.value).startswith("spec_"):
                    out.add(str(tgt.slice.value))
    return out


def _sim_fields(version: str) -> set[str]:
    with sim_module("sglang._sim.generation", version) as gen:
        ver = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
        return set(gen.spec_meta(ver, completion_tokens=40, verify_ct=12, correct_drafts=20, steps=3,
                                 num_draft_tokens=4, histogram=[2, 3, 4, 3]))


@pytest.mark.wheels
@pytest.mark.parametrize("version", WHEEL_VERSIONS)
def test_meta_info_fields_are_the_real_versions(version: str) -> None:
    from tools.wheels import fetch_wheel

    try:
        info = fetch_wheel(version)
    except (OSError, ValueError, LookupError) as e:
        pytest.skip(f"sglang {version}: wheel unavailable ({e})")
    with zipfile.ZipFile(Path(info["path"])) as z:
        src = z.read("sglang/srt/managers/tokenizer_manager.py").decode()
    assert _sim_fields(version) == _wheel_fields(src) - FEATURE_GATED
