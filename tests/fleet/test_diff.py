"""`inv diff` answers "what changed since it was fast?" between two deploys of a host, or a
deploy and what render would run now; two hosts' configurations side by side (issue 40, point 6); a missing record
is refused (exit 2, nothing touched)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_host_json, inv_json, run_inv


def _with(inv: Path, **host_fields: object) -> None:
    data = yaml.safe_load(inv.read_text())
    data["hosts"]["sim1"].update(host_fields)
    inv.write_text(yaml.safe_dump(data, sort_keys=False))


def test_diff_two_deploys_and_a_deploy_against_render_now(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path, hosts={"sim1": {"tp": 2, "gpus": 2}})
    code, first, err = inv_host_json("deploy", "--steps", "3", inventory=inv)
    assert code == 0, err
    _with(inv, env={"EAGLE3_PROFILE": "1"}, sglang_args=["--mem-fraction-static", "0.88"], patch_mode="scheduler")
    code, second, err = inv_host_json("deploy", "--steps", "2", inventory=inv)
    assert code == 0, err

    code, doc, err = inv_json("diff", inventory=inv)  # previous vs current
    assert code == 0, err
    got = {r["what"]: (r["a"], r["b"]) for r in doc["differences"]}
    assert got["argv --speculative-num-steps"] == ("3", "2")
    assert got["argv --speculative-num-draft-tokens"] == ("4", "3")
    assert got["argv --mem-fraction-static"] == ("(absent)", "0.88")
    assert got["env EAGLE3_PROFILE"] == ("(absent)", "1")
    assert got["patch mode"] == ("plugin", "scheduler")
    assert any(k.startswith("file ") for k in got)  # the plugin's files went, the scheduler patch came
    assert "env SPECDEPLOY_DEPLOY_ID" not in got and "check env" not in got  # both proven in full
    assert doc["a"]["label"] == f"deploy {first['deploy_id']}" and doc["b"]["label"] == f"deploy {second['deploy_id']}"

    r = run_inv("diff", "--old", "current", "--new", "now", inventory=inv, env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "no difference" in r.stdout
    # `--new now` alone compares what runs now (it compared the previous deploy: a difference that is not there)
    r = run_inv("diff", "--new", "now", inventory=inv, env={"COLUMNS": "80"})
    assert r.returncode == 0 and "no difference" in r.stdout, r.stdout

    _with(inv, env={"EAGLE3_PROFILE": "0"})
    r = run_inv("diff", "--old", first["deploy_id"], "--new", "now", inventory=inv, env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "env EAGLE3_PROFILE" in r.stdout and "new: 0" in r.stdout and "patch mode" in r.stdout
    # Back to the first deploy's patch mode: the plugin files render now byte-identical to what it installed.
    _with(inv, patch_mode="auto", env={}, sglang_args=[])
    code, doc, err = inv_json("diff", "--old", first["deploy_id"], "--new", "now", inventory=inv)
    assert code == 0, err
    assert doc["differences"] == [] and len(doc["b"]["patched_files"]) >= 2
    run_inv("stop", inventory=inv)


def test_diff_bad_references_are_exit_2_with_one_sentence(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path)
    r = run_inv("diff", "--old", "sim1:20261130T000000-aaaaaa", "--new", "sim2:20261130T000000-bbbbbb", inventory=inv)
    # two hosts: each side from its own host (records from different hosts were refused)
    assert r.returncode == 2 and "sim1 has no record of deploy 20261130T000000-aaaaaa" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run_inv("diff", "--old", "../../etc/passwd", inventory=inv)
    assert r.returncode == 2 and "is not a deploy id" in r.stderr
    r = run_inv("diff", "--old", "20200101T000000-000000", "--new", "now", inventory=inv)
    assert r.returncode == 2 and "no record of deploy 20200101T000000-000000" in r.stderr
    assert json.loads(json.dumps(r.stderr))  # one sentence, no traceback
    assert len([x for x in r.stderr.splitlines() if x.startswith("error:")]) == 1
