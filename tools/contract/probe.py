"""Run by the simulator venv's own python (``python probe.py SCENARIOS_JSON``): reads what the installed
simulated ``sglang`` does, and prints one JSON object.

- ``flags``: every ``--flag`` its parser accepts → sorted choices or ``any``;
- ``env``: for each scenario, what ``_set_envs_and_config`` wrote into the environment (new or changed
  variables only; ``SGLANG_RUN_ID``'s random value is shown as ``<set>``);
- ``deterministic``: what building ``ServerArgs`` with ``--enable-deterministic-inference --tp-size 2``
  wrote into the environment (SGLang does that write in its argument post-processing);
- ``spec_defaults``: (steps, topk, draft tokens) ``ServerArgs`` picks per architecture and algorithm when the
  speculative parameters are not given (``python probe.py SCENARIOS_JSON ARCHS_JSON``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import types
from typing import Any

DEFAULTS: dict[str, Any] = {
    "tp_size": 1,
    "dp_size": 1,
    "pp_size": 1,
    "dcp_size": 1,
    "nnodes": 1,
    "enable_symm_mem": False,
    "enable_nccl_nvls": False,
    "enable_metrics": False,
    "enable_deterministic_inference": False,
    "attention_backend": None,
    "custom_sigquit_handler": None,
    "gc_threshold": None,
}
RANDOM = ("SGLANG_RUN_ID", "PROMETHEUS_MULTIPROC_DIR")


def diff(before: dict[str, str], after: dict[str, str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for k in set(before) | set(after):
        if before.get(k) != after.get(k):
            out[k] = "<set>" if k in RANDOM and k in after else after.get(k)
    return dict(sorted(out.items()))


def main() -> None:
    scenarios = json.loads(sys.argv[1])
    from sglang.srt.entrypoints import engine
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags: dict[str, Any] = {}
    for action in parser._actions:
        for opt in action.option_strings:
            if opt.startswith("--") and opt != "--help":
                flags[opt] = sorted(str(c) for c in action.choices) if action.choices else "any"

    saved = dict(os.environ)
    env_out = []
    for sc in scenarios:
        os.environ.clear()
        os.environ.update(sc["env"])
        args = types.SimpleNamespace(**{**DEFAULTS, **sc["args"]})
        engine._set_envs_and_config(args)  # type: ignore[arg-type]
        env_out.append(diff(sc["env"], dict(os.environ)))

    os.environ.clear()
    model = tempfile.mkdtemp()
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"]}, f)
    ServerArgs(model_path=model, tp_size=2, enable_deterministic_inference=True)
    deterministic = diff({}, dict(os.environ))
    spec: dict[str, Any] = {}
    algos = [a for a in ("EAGLE3", "STANDALONE") if a in (flags_choices(parser) or [a])]
    for arch in json.loads(sys.argv[2]):
        for algo in algos:
            with open(os.path.join(model, "config.json"), "w") as f:
                json.dump({"architectures": [arch]}, f)
            sa = ServerArgs(model_path=model, speculative_algorithm=algo, speculative_draft_model_path=model)
            spec[f"{arch} {algo}"] = [sa.speculative_num_steps, sa.speculative_eagle_topk,
                                      sa.speculative_num_draft_tokens]
    os.environ.clear()
    os.environ.update(saved)
    print(json.dumps({"flags": dict(sorted(flags.items())), "env": env_out, "deterministic": deterministic,
                      "spec_defaults": spec}))


def flags_choices(parser: argparse.ArgumentParser) -> list[str] | None:
    for action in parser._actions:
        if "--speculative-algorithm" in action.option_strings:
            return [str(c) for c in action.choices] if action.choices else None
    return None


if __name__ == "__main__":
    main()
