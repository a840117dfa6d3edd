"""check-env's "used" proof against the simulator's NCCL-2.28-shaped TUNING lines end to end: rank 0 logs the
choices, LL holds for every phase, and a tuner plugin that goes around NCCL_PROTO for prefill is caught."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fabfile.remote.common import EventSink
from fabfile.remote.evidence import judge as evidence
from tests.support.sim import Sim, http, sim  # noqa: F401 (the fixture)

H = 7168  # Kimi K2.5's hidden size: one bf16 token is 14336 bytes


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
