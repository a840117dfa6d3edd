"""What NCCL really chose (check-env's "used" proof): NCCL's TUNING lines parsed, the all-reduce sizes of decode,
verify and prefill derived from the model, and the choice held against NCCL_PROTO/NCCL_ALGO, with NCCL's
per-collective parsing rules; against the simulator's NCCL-2.28-shaped TUNING lines end to end."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fabfile.remote.common import EventSink
from fabfile.remote.evidence import judge as evidence
from fabfile.remote.evidence import ncclenv, ncclused
from fabfile.remote.evidence.nccllog import parse_nccl_records
from fabfile.results.hosts import evaluation_code
from tests.test_evidence import ev, sched
from tests.test_simulator import Sim, http, sim  # noqa: F401 (the fixture)

H = 7168  # Kimi K2.5's hidden size: one bf16 token is 14336 bytes


def test_tuning_lines_of_every_nccl_format_parse() -> None:
    lines = {
        "h:7:7 [0] NCCL INFO AllReduce: 14336 Bytes -> Algo Ring proto LL channel{Lo..Hi}={0..1}":
            ("AllReduce", 14336, "Ring", "LL", "0..1"),
        "h:7:7 [0] NCCL INFO AllReduce: 57344 Bytes -> Algo 0 proto 2 time 31.250000":  # 2.23: numbers
            ("AllReduce", 57344, "Tree", "Simple", None),
        "h:7:7 [0] NCCL INFO 14336 Bytes -> Algo 1 proto 1 time 12.000000":  # 2.20-2.22: no function either
            (None, 14336, "Ring", "LL128", None),
    }
    for line, (func, nbytes, algo, proto, channels) in lines.items():
        (rec,) = parse_nccl_records(line)
        assert rec["kind"] == "tuning" and rec["pid"] == 7
        assert (rec["func"], rec["bytes"], rec["algo"], rec["proto"], rec["channels"]) == \
            (func, nbytes, algo, proto, channels)
    (sym,) = parse_nccl_records("h:7:7 [0] NCCL INFO AllReduce [Symmetric]: 14336 Bytes -> Kernel "
                                "AllReduce_AGxLL_R nchannels 4 nthreads 512 nWorks 1")
    assert sym["algo"] == "Symmetric" and sym["proto"] is None and sym["kernel"] == "AllReduce_AGxLL_R"


@pytest.mark.parametrize(("value", "allreduce"), [
    ("LL", {"LL"}),
    ("ll,simple", {"LL", "Simple"}),
    ("^LL128", {"LL", "Simple"}),
    ("LL,Simple;allreduce:^LL", {"LL128", "Simple"}),
    ("^LL128;broadcast:LL", {"LL", "Simple"}),
])
def test_proto_values_read_the_way_nccl_parses_them(value: str, allreduce: set[str]) -> None:
    assert ncclenv.selection("NCCL_PROTO", value, (2, 28))["AllReduce"] == allreduce


@pytest.mark.parametrize(("value", "nccl", "says"), [
    ("LL,Fast", (2, 28), "'Fast' is not a name NCCL knows"),
    ("allreduce:LL", (2, 23), "need NCCL 2.24 or later"),
    ("LL;Simple", (2, 28), "needs a collective prefix"),
    ("allgahter:LL", (2, 28), "not a collective NCCL knows"),
])
def test_proto_values_nccl_refuses_are_named(value: str, nccl: tuple[int, int], says: str) -> None:
    with pytest.raises(ncclenv.SelectionError, match=says):
        ncclenv.selection("NCCL_PROTO", value, nccl)


def _tuned(pid: int, rank: int, tuning: list[dict[str, Any]], proto: str = "LL") -> dict[str, Any]:
    s = sched(pid, rank, nccl_env={"NCCL_PROTO": [proto]})
    s["nccl"].update(version="2.28.9+cuda13.0", tuning=tuning if rank == 0 else [], tuning_lines=len(tuning))
    return s


def _entry(nbytes: int, *choices: tuple[str, str, int]) -> dict[str, Any]:
    return {"func": "AllReduce", "bytes": nbytes, "choices": [{"algo": a, "proto": p, "channels": "0..1", "count": n}
                                                             for a, p, n in choices]}


SHAPE = {"hidden_size": H, "dtype": "bfloat16", "dtype_bytes": 2, "draft_tokens": 4, "prefill_tokens": None}


def test_every_rank_gets_rank_0s_choice_per_phase_and_a_value_the_tuner_kept_is_proven() -> None:
    tuning = [_entry(H * 2, ("Ring", "LL", 40)), _entry(H * 2 * 4, ("Ring", "LL", 40)),
              _entry(H * 2 * 512, ("Ring", "LL", 6))]
    res = evidence.evaluate(ev(_tuned(10, 0, tuning), _tuned(11, 1, tuning), facts={"model_shape": SHAPE}),
                            {"NCCL_PROTO": "LL"})
    used = res["used"]
    assert [(u["rank"], u["phase"], u["tokens"], u["bytes"], u["proto"], u["status"]) for u in used["rows"]] == [
        (0, "decode", 1, 14336, "LL", "proven"), (0, "verify", 4, 57344, "LL", "proven"),
        (0, "prefill", 512, 7340032, "LL", "proven"),
        (1, "decode", 1, 14336, "LL", "proven"), (1, "verify", 4, 57344, "LL", "proven"),
        (1, "prefill", 512, 7340032, "LL", "proven")]
    assert used["rows"][3]["evidence"] == "nccl_tuning_rank0" and "rank 0 only (pid 10)" in used["rows"][3]["note"]
    assert res["ok"] is True and res["summary"]["proven"] == 2


def test_a_value_that_arrived_but_that_nccl_went_around_for_prefill_is_overridden_not_proven() -> None:
    tuning = [_entry(H * 2, ("Ring", "LL", 40)), _entry(H * 2 * 4, ("Ring", "LL", 40)),
              _entry(H * 2 * 512, ("Ring", "Simple", 6))]
    res = evidence.evaluate(ev(_tuned(10, 0, tuning), _tuned(11, 1, tuning), facts={"model_shape": SHAPE}),
                            {"NCCL_PROTO": "LL"})
    rows = {(u["rank"], u["phase"]): u for u in res["used"]["rows"]}
    assert rows[(0, "decode")]["status"] == "proven" and rows[(0, "prefill")]["status"] == "overridden"
    assert "proto Simple (6x) is outside NCCL_PROTO's LL" in rows[(0, "prefill")]["note"]
    env_row = next(r for r in res["rows"] if r["pid"] == 10 and r["var"] == "NCCL_PROTO")
    assert env_row["status"] == "overridden" and "prefill (7340032 B): Ring/Simple" in env_row["note"]
    assert res["ok"] is False and "tuner_overrode" in {h["code"] for h in res["hints"]}
    assert evaluation_code(res) == 1


def test_without_tuning_lines_the_sizes_are_unseen_and_the_way_to_see_them_is_said() -> None:
    res = evidence.evaluate(ev(_tuned(10, 0, []), facts={"model_shape": {**SHAPE, "prefill_tokens": 8192}}),
                            {"NCCL_PROTO": "LL"})
    assert {u["status"] for u in res["used"]["rows"]} == {"unseen"}
    assert res["used"]["rows"][2]["bytes"] == H * 2 * 8192
    assert "NCCL_DEBUG_SUBSYS" in res["used"]["note"] and res["ok"] is True  # the env proof stands on its own


def test_sizes_come_from_the_launch_flags_and_the_model_config() -> None:
    argv = ["--model-path", "/m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
            "--dtype", "float16"]
    shape = ncclused.model_shape(argv, {"text_config": {"hidden_size": 4096}})
    assert (shape["hidden_size"], shape["dtype_bytes"], shape["draft_tokens"]) == (4096, 2, 6)
    assert ncclused.model_shape(["--model-path", "/m"], {})["why"] == "the model's config.json gives no hidden_size"


class _Sink(EventSink):
    def __init__(self) -> None:
        pass

    def emit(self, kind: str, **fields: Any) -> None:
        pass


def _served(sim: Sim, extra_env: dict[str, str], **cfg: Any) -> tuple[dict[str, Any], str]:  # noqa: F811
    sim.install("0.5.16", time_scale=0.05, **cfg)
    (sim.model / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"],
                                                      "hidden_size": H, "torch_dtype": "bfloat16"}))
    argv = ["--chunked-prefill-size", "512"]
    launcher = sim.launch(*argv, spec=True, extra_env={"NCCL_DEBUG": "INFO", "SPT_NOENV": "1",
                                                       "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING", **extra_env})
    sim.wait_log("fired up", proc=launcher)
    assert http(sim.url("/generate"), {"input_ids": list(range(512)), "sampling_params": {"max_new_tokens": 4}})[0] \
        == 200
    full_argv = ["--model-path", str(sim.model), "--tp-size", "2", "--speculative-algorithm", "EAGLE3",
                 "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4", *argv]
    req = {"log_path": str(sim.log), "launcher_pid": launcher.pid, "expected": {"NCCL_PROTO": extra_env["NCCL_PROTO"]},
           "launch_argv": full_argv, "sglang_version": "0.5.16"}
    gathered = evidence.gather(req, _Sink(), gpu_facts={})  # type: ignore[arg-type]
    return evidence.evaluate(gathered, req["expected"]), sim.text()


@pytest.mark.sim
def test_simulated_nccl_logs_its_choices_on_rank_0_and_ll_holds_for_every_phase(sim: Sim) -> None:  # noqa: F811
    res, text = _served(sim, {"NCCL_PROTO": "LL"})
    assert "NCCL INFO AllReduce: 14336 Bytes -> Algo Ring proto LL channel{Lo..Hi}={0..0}" in text
    rows = {(u["rank"], u["phase"]): u for u in res["used"]["rows"]}
    assert {k: (v["bytes"], v["proto"], v["status"]) for k, v in rows.items()} == {
        (r, p): (b, "LL", "proven") for r in (0, 1)
        for p, b in (("decode", 14336), ("verify", 57344), ("prefill", 14336 * 512))}


@pytest.mark.sim
def test_a_tuner_plugin_that_goes_around_nccl_proto_for_prefill_is_caught(sim: Sim) -> None:  # noqa: F811
    res, _ = _served(sim, {"NCCL_PROTO": "LL", "NCCL_TUNER_PLUGIN": "libnccl-tuner-site.so"},
                     nccl_tuner_plugin_choice={"min_bytes": 1 << 20, "algo": "Ring", "proto": "Simple"})
    rows = {(u["rank"], u["phase"]): u["status"] for u in res["used"]["rows"]}
    assert rows[(0, "decode")] == rows[(0, "verify")] == "proven" and rows[(0, "prefill")] == "overridden"
    assert res["ok"] is False
