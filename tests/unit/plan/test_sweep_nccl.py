"""NCCL candidates in the sweep (``--nccl``, ``--nccl-env``; fabfile/plan/sweep_nccl.py): crossed with the
speculative configurations, each its own server start, checked with NCCL's own parsing rules before anything
starts; on the simulator (whose all-reduce cost follows NCCL's protocol by message size) the baseline's best NCCL
setting is not EAGLE-3's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabfile.commands.sweep_files import save_plot as plot
from fabfile.errors import FlagError
from fabfile.inventory import hosts as inventory
from fabfile.plan.deploy_plan import Options, build
from fabfile.plan.sweep_nccl import apply, candidates
from fabfile.plan.sweep_plan import configs
from fabfile.present.plot import plot_series
from fabfile.present.sweep_report import nccl_lines
from tests.support.invoke_cli import run_inv

INV = ("defaults: {python: /v/bin/python3, model: /m, draft_model: /d, gpus: 8, tp: 8}\n"
       "hosts:\n  h: {ssh_host: 192.0.2.1, nccl_preset: pcie, env: {NCCL_PROTO: Simple, NCCL_DEBUG: WARN}}\n")


def _host(tmp_path: Path) -> Any:
    p = tmp_path / "inventory.yaml"
    p.write_text(INV)
    return inventory.load(p).hosts["h"]


def test_candidates_cross_presets_with_values_and_name_each() -> None:
    names = [c.name for c in candidates("pcie,none", "NCCL_PROTO=LL|- NCCL_ALGO=Ring|Tree")]
    assert names == ["pcie+PROTO=LL+ALGO=Ring", "pcie+PROTO=LL+ALGO=Tree", "pcie+PROTO=-+ALGO=Ring",
                     "pcie+PROTO=-+ALGO=Tree", "none+PROTO=LL+ALGO=Ring", "none+PROTO=LL+ALGO=Tree",
                     "none+PROTO=-+ALGO=Ring", "none+PROTO=-+ALGO=Tree"]
    assert [c.name for c in candidates(None, "NCCL_PROTO=LL|Simple")] == ["PROTO=LL", "PROTO=Simple"]
    assert candidates(None, None) == []


def test_a_candidate_replaces_the_hosts_tuning_values_and_keeps_its_logging(tmp_path: Path) -> None:
    host = _host(tmp_path)
    none = apply(host, candidates("none", None)[0])
    plan = build(none, Options(steps=0))
    assert not any(k in plan.env for k in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_BUFFSIZE")) and plan.expected == {}
    assert plan.env["NCCL_DEBUG"] == "WARN"  # the operator's logging stays
    unset = build(apply(host, candidates(None, "NCCL_PROTO=-")[0]), Options(steps=0))
    assert "NCCL_PROTO" not in unset.env and unset.env["NCCL_ALGO"] == "Ring"  # the rest of the host's values
    ll = build(apply(host, candidates("pcie", "NCCL_PROTO=Simple")[0]), Options(steps=0))
    assert ll.expected["NCCL_PROTO"] == "Simple" and ll.expected["NCCL_BUFFSIZE"] == "16777216"


def test_the_inventorys_own_presets_are_candidates(tmp_path: Path) -> None:
    p = tmp_path / "inventory.yaml"
    p.write_text("presets:\n  nccl:\n    simple8: {NCCL_PROTO: Simple, NCCL_MAX_CTAS: '8'}\n" + INV)
    inv = inventory.load(p)
    assert inv.nccl_presets["simple8"] == {"NCCL_PROTO": "Simple", "NCCL_MAX_CTAS": "8"}
    assert "pcie" in inv.nccl_presets   # the built-in ones stay
    cands = candidates("simple8,none", "NCCL_ALGO=Ring|-", inv.nccl_presets)
    assert [c.name for c in cands] == ["simple8+ALGO=Ring", "simple8+ALGO=-", "none+ALGO=Ring", "none+ALGO=-"]
    plan = build(apply(inv.hosts["h"], cands[0]), Options(steps=0))
    assert plan.expected == {"NCCL_PROTO": "Simple", "NCCL_MAX_CTAS": "8", "NCCL_ALGO": "Ring"}
    with pytest.raises(FlagError, match="unknown preset 'simple8'"):
        candidates("simple8", None)   # without the inventory's table: the built-in presets only
    # Through the CLI: accepted before anything starts (bad input elsewhere stops it: exit 2, nothing touched).
    r = run_inv("sweep", "--steps", "0,1", "--nccl", "simple8,fast", "--out", str(tmp_path / "runs"), inventory=p)
    assert r.returncode == 2 and "'fast'" in r.stderr and "simple8" in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()

def test_every_configuration_is_crossed_with_every_candidate(tmp_path: Path) -> None:
    cfgs = configs(_host(tmp_path), Options(), [0, 2], None, None, candidates(None, "NCCL_PROTO=LL|Simple"))
    assert [(c.name, c.nccl) for c in cfgs] == [("baseline@PROTO=LL", "PROTO=LL"),
                                                ("baseline@PROTO=Simple", "PROTO=Simple"),
                                                ("eagle3-s2-k1-d3@PROTO=LL", "PROTO=LL"),
                                                ("eagle3-s2-k1-d3@PROTO=Simple", "PROTO=Simple")]
    assert cfgs[1].host is not None and cfgs[1].host.nccl_env["NCCL_PROTO"] == "Simple"


@pytest.mark.parametrize(("nccl", "env", "says"), [
    ("pcie,nvlink", None, "--nccl: unknown preset 'nvlink'"),
    (None, "NCCL_PROTO=LL|Fast", "'Fast' is not a name NCCL knows"),
    (None, "NCCL_PROTO=LL;Simple", "needs a collective prefix"),
    (None, "NCCL_BUFFSIZE=99999999999999999999", "out of range"),
    (None, "NCCL_P2P_LEVEL=sys", "not a level NCCL knows"),
    (None, "NCCL_PROTOCOL=LL", "not a variable NCCL reads"),
    (None, "NCCL_DEBUG=INFO", "logging setting"),
    (None, "NCCL_PROTO", "expected VAR=V1|V2|-"),
    (None, "NCCL_PROTO=LL||Simple", "empty value"),
])
def test_bad_candidates_are_refused_in_one_sentence(nccl: str | None, env: str | None, says: str) -> None:
    with pytest.raises(FlagError, match=says.replace("|", r"\|")):
        candidates(nccl, env)


def test_bad_candidates_exit_2_before_anything_starts(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(INV)
    for args, words in ((("--nccl", "fast"), "--nccl"), (("--nccl-env", "NCCL_ALGO=Ring|Rung"), "--nccl-env"),
                        (("--nccl", "pcie,fast", "--predict"), "--nccl")):
        r = run_inv("sweep", "--steps", "0,1,2", *args, "--out", str(tmp_path / "runs"), inventory=inv)
        assert r.returncode == 2 and words in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()


def test_the_report_names_each_configurations_best_candidate_and_each_ttft() -> None:
    rows = [{"config": f"{c}@PROTO={p}", "nccl": f"PROTO={p}", "ok": True, "tok_s": t, "ttft_ms": ttft, "steps": s}
            for c, s, p, t, ttft in (("baseline", 0, "LL", 60.0, 180.0), ("baseline", 0, "Simple", 50.0, 95.0),
                                     ("eagle3-s7-k1-d8", 7, "LL", 90.0, 181.0),
                                     ("eagle3-s7-k1-d8", 7, "Simple", 99.0, 96.0))]
    best, ttft = nccl_lines({"rows": rows})
    assert best.endswith("baseline → PROTO=LL (60.0, beyond ±2.0%), "
                         "eagle3-s7-k1-d8 → PROTO=Simple (99.0, beyond ±2.0%)")
    assert "baseline@PROTO=LL 180 ms" in ttft and "eagle3-s7-k1-d8@PROTO=Simple 96 ms" in ttft


def test_the_sweep_plot_has_a_line_per_nccl_candidate(tmp_path: Path) -> None:
    rows = [{"config": f"eagle3-s{s}-k1-d{s + 1}@PROTO={p}", "nccl": f"PROTO={p}", "ok": True, "tok_s": 50.0 + s,
             "steps": s, "topk": 1, "draft_tokens": s + 1} for p in ("Simple", "LL") for s in (3, 1, 2)]
    series = plot_series(rows)
    assert [label for label, _ in series] == ["topk 1, NCCL PROTO=LL", "topk 1, NCCL PROTO=Simple"]
    assert [[r["steps"] for r in rs] for _, rs in series] == [[1, 2, 3], [1, 2, 3]]
    assert all({r["nccl"] for r in rs} == {label.split("NCCL ")[1]} for label, rs in series)
    base = [{"config": f"baseline@PROTO={p}", "nccl": f"PROTO={p}", "ok": True, "tok_s": 40.0, "steps": 0,
             "topk": 1, "draft_tokens": None} for p in ("Simple", "LL")]
    doc = {"host": "h", "sweep_id": "x", "rows": base + rows, "winners": {"1": rows[0]["config"]},
           "params": {"concurrency": 1}}
    assert plot(doc, tmp_path / "sweep.png") and (tmp_path / "sweep.png").stat().st_size > 0
