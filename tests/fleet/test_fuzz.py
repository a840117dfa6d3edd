"""Valid inventory values, drawn by hypothesis, taken to a simulated host: each arrives in a scheduler's environment
and command line byte for byte (the in-process fuzzing of the loader and the flags: tests/unit/cli/test_fuzz.py)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.simhost.fleet import Fleet, SimHost
from tests.support.fuzzing import SHELLISH
from tests.support.invoke_cli import derived_inventory, http_get, inv_host_json


def _not_a_yaml_word(s: str) -> bool:
    # A named function, not a lambda: Hypothesis parses a lambda's source with `ast` to print it
    # (tests/unit/cli/test_fuzz.py says what that once cost).
    return not re.fullmatch(r"\s*(true|false|null|~|yes|no|on|off)?\s*", s, re.I)


ENV_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1,
                   max_size=30).filter(_not_a_yaml_word)


@settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(note=st.one_of(ENV_TEXT, SHELLISH.filter(bool)), served=ENV_TEXT)
# Found by this test: a served name that starts with '-' reached SGLang as a flag (`--served-model-name
# --warmups`: argparse exits "expected one argument"); and a `\r`, delivered byte for byte, read back as `\n`
# through a text-mode pipe.
@example(note="0\r", served="--warmups")
def test_valid_values_reach_a_scheduler_verbatim(note: str, served: str, fleet: Fleet, sim_host: SimHost,
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    inventory_path = derived_inventory(fleet, tmp_path_factory.mktemp("fuzz"),
                                       hosts={"sim1": {"env": {"OPERATOR_NOTE": note}, "served_model_name": served}})
    code, doc, err = inv_host_json("deploy", "--steps", "1", "--no-verify", inventory=inventory_path)
    assert code == 0, err
    sched = [s["pid"] for s in doc["schedulers"] if s["title"].startswith("sglang::scheduler")]
    assert sched
    raw = sim_host.read_bytes(f"/proc/{sched[0]}/environ")
    assert f"OPERATOR_NOTE={note}".encode() in raw.split(b"\0"), (note, raw)
    assert doc["launch_argv"].count(f"--served-model-name={served}") == 1, doc["launch_argv"]
    status, body = http_get(sim_host, "/v1/models")  # SGLang serves the model under exactly that name
    assert status == 200 and json.loads(body)["data"][0]["id"] == served, body
    assert sim_host.exec(["test", "-e", "/tmp/pwned"]).returncode != 0
