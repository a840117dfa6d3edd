"""Simulated ``sglang.srt.server_args`` (TEST EQUIPMENT): SGLang's CLI flags and their post-processing.

Unknown flags are rejected by argparse exactly as SGLang's parser does
(``launch_server.py: error: unrecognized arguments: --foo``, exit status 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import socket
from typing import Any

from sglang._sim.runtime import version

logger = logging.getLogger(__name__)

SPEC_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]


# Deprecated aliases the simulator parses (old -> (new, first release aliasing, first release without)), as the
# wheels' knob facts say (fabfile/plan/sglang_knob_facts.py; tests/unit/plan/test_sim_knobs.py holds them equal).
DEPRECATED_ALIASES: dict[str, tuple[str, tuple[int, ...], tuple[int, ...]]] = {
    "--cuda-graph-max-bs": ("--cuda-graph-max-bs-decode", (0, 5, 14), (0, 5, 20)),
    "--cuda-graph-bs": ("--cuda-graph-bs-decode", (0, 5, 14), (0, 5, 20)),
}
# Variables SGLang reads only to say they are gone (first release that says so, its words: speculative_hook.py).
REMOVED_ENV: dict[str, tuple[tuple[int, ...], str]] = {
    "SGLANG_ENABLE_SPEC_V2": ((0, 5, 14), "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs "
                              "the V2 worker. Use --disable-overlap-schedule to select the non-overlap "
                              "(synchronous) path."),
}


def print_deprecated_warning(message: str) -> None:
    logger.warning(f"\033[1;33m{message}\033[0m")


class DeprecatedAliasStoreAction(argparse.Action):
    """Deprecated alias that stores its value and prints a warning (SGLang's words, 0.5.14+)."""

    def __init__(self, option_strings: list[str], dest: str, new_flag: str | None = None, **kwargs: Any) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        print_deprecated_warning(
            f"'{option_string}' is deprecated and will be removed in a future release.{replacement}"
        )
        setattr(namespace, self.dest, values)


def spec_algorithm_choices() -> list[str] | None:
    """``--speculative-algorithm``'s argparse choices in this version (docs/sglang-contract.md); from 0.5.12
    SGLang declares none (any registered name) and rejects an unknown one after parsing."""
    ver = version()
    if ver >= (0, 5, 12):
        return None
    if ver >= (0, 5, 11):
        return ["DFLASH", "EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"]
    if ver >= (0, 5, 3):
        return ["EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"]
    if ver >= (0, 5, 2):
        return ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"]
    return ["EAGLE", "EAGLE3", "NEXTN"]


@dataclasses.dataclass
class ServerArgs:
    # Model and tokenizer
    model_path: str
    tokenizer_path: str | None = None
    tokenizer_mode: str = "auto"
    load_format: str = "auto"
    trust_remote_code: bool = False
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    context_length: int | None = None
    device: str | None = None
    served_model_name: str | None = None
    revision: str | None = None
    is_embedding: bool = False
    skip_tokenizer_init: bool = False

    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    skip_server_warmup: bool = False

    # Memory and scheduling
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    page_size: int | None = None
    stream_interval: int = 1
    num_continuous_decode_steps: int = 1
    scheduler_recv_interval: int = 1  # every 0.5.x read (server_args.py: "The interval to poll requests")

    # Runtime
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    dcp_size: int = 1
    random_seed: int | None = None
    watchdog_timeout: float = 300
    base_gpu_id: int = 0
    gpu_id_step: int = 1

    # Logging
    log_level: str = "info"
    log_level_http: str | None = None
    log_requests: bool = False
    show_time_cost: bool = False
    enable_metrics: bool = False
    decode_log_interval: int = 40

    # Distributed
    dist_init_addr: str | None = None
    nnodes: int = 1
    node_rank: int = 0

    # Speculative decoding
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_draft_model_revision: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_accept_threshold_single: float = 1.0
    speculative_accept_threshold_acc: float = 1.0
    speculative_token_map: str | None = None
    speculative_attention_mode: str = "prefill"
    # 0.5.11+ (the flags exist only there); left out of the printed server_args like the other version-only fields
    speculative_adaptive: bool = dataclasses.field(default=False, repr=False)
    speculative_adaptive_config: str | None = dataclasses.field(default=None, repr=False)

    # Kernels / optimisation
    attention_backend: str | None = None
    sampling_backend: str | None = None
    grammar_backend: str | None = None
    disable_radix_cache: bool = False
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: list[int] | None = None
    disable_cuda_graph: bool = False
    disable_cuda_graph_padding: bool = False
    disable_custom_all_reduce: bool = False
    disable_overlap_schedule: bool = False
    enable_mixed_chunk: bool = False
    enable_dp_attention: bool = False
    enable_torch_compile: bool = False
    torch_compile_max_bs: int = 32
    enable_deterministic_inference: bool = False
    enable_symm_mem: bool = False
    enable_nccl_nvls: bool = False
    enable_cache_report: bool = False
    chat_template: str | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None

    # ------------------------------------------------------------------ post-processing
    def __post_init__(self) -> None:
        from sglang._sim.runtime import load_config

        for name, value in (load_config().get("server_args_override") or {}).items():
            setattr(self, name, value)  # the sim's stand-in for a flag the server does not take as given
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        if self.served_model_name is None:
            self.served_model_name = self.model_path
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        if self.device is None:
            self.device = "cuda"
        if self.page_size is None:
            self.page_size = 1
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = 8192
        if self.cuda_graph_max_bs is None:
            self.cuda_graph_max_bs = 160 if self.tp_size < 4 else 256
        if self.mem_fraction_static is None:
            reserve_gb = 10 + (2 if self.speculative_algorithm in ("EAGLE", "EAGLE3") else 0)
            self.mem_fraction_static = round((140.0 - reserve_gb) / 140.0, 3)
        if self.speculative_algorithm is not None:
            self._handle_speculative_decoding()
        self._handle_deterministic_inference()
        for name, (since, words) in REMOVED_ENV.items():
            if version() >= since and os.getenv(name) is not None:
                logger.warning(words)

    def _handle_deterministic_inference(self) -> None:
        # SGLang writes these in its argument post-processing (ServerArgs._handle_deterministic_inference,
        # arg_groups/attention_hook.py from 0.5.20), before _set_envs_and_config: operator values are lost.
        if not self.enable_deterministic_inference or self.tp_size <= 1 or version() < (0, 5, 3):
            return
        os.environ["NCCL_ALGO"] = "allreduce:tree"
        self.disable_custom_all_reduce = True
        if version() >= (0, 5, 18):
            nchannels = os.environ.get("SGLANG_DETERMINISTIC_NCCL_NCHANNELS", "8")
            os.environ["NCCL_MIN_NCHANNELS"] = nchannels
            os.environ["NCCL_MAX_NCHANNELS"] = nchannels

    def _model_architectures(self) -> list[str]:
        try:
            with open(os.path.join(self.model_path, "config.json")) as f:
                arch = json.load(f).get("architectures") or []
        except (OSError, ValueError):
            return []
        return [str(a) for a in arch]

    def _handle_speculative_decoding(self) -> None:
        if spec_algorithm_choices() is None and self.speculative_algorithm not in [*SPEC_ALGORITHMS, "DFLASH"]:
            raise ValueError(f"Unknown speculative algorithm name: {self.speculative_algorithm}")
        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"
        if self.max_running_requests is None:
            self.max_running_requests = 48
            logger.warning(
                "Max running requests is reset to 48 for speculative decoding. You can override this "
                "by explicitly setting --max-running-requests."
            )
        if self.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
            if not self.disable_overlap_schedule and version() < (0, 5, 11):
                self.disable_overlap_schedule = True
                logger.warning("Overlap scheduler is disabled because of using eagle3 speculative decoding.")
            if self.speculative_num_steps is None:
                assert self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None
                (
                    self.speculative_num_steps,
                    self.speculative_eagle_topk,
                    self.speculative_num_draft_tokens,
                ) = auto_choose_speculative_params(self)
            if self.speculative_eagle_topk is None:
                self.speculative_eagle_topk = 1
            if self.speculative_num_draft_tokens is None:
                self.speculative_num_draft_tokens = self.speculative_num_steps + 1
            if (
                self.speculative_eagle_topk == 1
                and self.speculative_num_draft_tokens != self.speculative_num_steps + 1
            ):
                logger.warning(
                    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                    "speculative_eagle_topk == 1"
                )
                self.speculative_num_draft_tokens = self.speculative_num_steps + 1

    @property
    def speculative(self) -> bool:
        return self.speculative_algorithm is not None

    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------------ CLI
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        # Only flags SGLang defines in this version (tests/wheels/test_contract.py checks them against the wheels).
        ver = version()
        a = parser.add_argument
        a("--model-path", *(["--model"] if ver >= (0, 4, 8, 1) else []), type=str, required=True,
          help="The path of the model weights.")
        a("--tokenizer-path", type=str, default=None)
        a("--tokenizer-mode", type=str, default="auto", choices=["auto", "slow"])
        a("--load-format", type=str, default="auto")
        a("--trust-remote-code", action="store_true")
        a("--dtype", type=str, default="auto",
          choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
        a("--kv-cache-dtype", type=str, default="auto")  # choices vary by release; not simulated
        a("--quantization", type=str, default=None)
        a("--context-length", type=int, default=None)
        a("--device", type=str, default=None)
        a("--served-model-name", type=str, default=None)
        a("--revision", type=str, default=None)
        a("--is-embedding", action="store_true")
        a("--skip-tokenizer-init", action="store_true")
        a("--host", type=str, default="127.0.0.1")
        a("--port", type=int, default=30000)
        a("--api-key", type=str, default=None)
        if ver >= (0, 4, 9):
            a("--skip-server-warmup", action="store_true")
        a("--mem-fraction-static", type=float, default=None)
        a("--max-running-requests", type=int, default=None)
        a("--max-total-tokens", type=int, default=None)
        a("--chunked-prefill-size", type=int, default=None)
        a("--max-prefill-tokens", type=int, default=16384)
        a("--schedule-policy", type=str, default="fcfs")
        a("--schedule-conservativeness", type=float, default=1.0)
        a("--page-size", type=int, default=None)
        a("--stream-interval", type=int, default=1)
        a("--num-continuous-decode-steps", type=int, default=1)
        if ver >= (0, 5, 3):  # the oldest wheel read that has it (0.4.9 does not)
            a("--scheduler-recv-interval", type=int, default=1)
        a("--tensor-parallel-size", "--tp-size", type=int, default=1, dest="tp_size")
        if ver >= (0, 4, 6, 2):
            a("--pipeline-parallel-size", "--pp-size", type=int, default=1, dest="pp_size")
        a("--data-parallel-size", "--dp-size", type=int, default=1, dest="dp_size")
        ep_names = ["--expert-parallel-size", "--ep-size"] + (["--ep"] if ver >= (0, 5, 1) else [])
        a(*ep_names, type=int, default=1, dest="ep_size")
        if ver >= (0, 5, 15):
            a("--decode-context-parallel-size", "--dcp-size", type=int, default=1, dest="dcp_size")
        a("--random-seed", type=int, default=None)
        a("--watchdog-timeout", type=float, default=300)
        a("--base-gpu-id", type=int, default=0)
        a("--gpu-id-step", type=int, default=1)
        a("--log-level", type=str, default="info")
        a("--log-level-http", type=str, default=None)
        a("--log-requests", action="store_true")
        a("--show-time-cost", action="store_true")
        a("--enable-metrics", action="store_true")
        a("--decode-log-interval", type=int, default=None)
        a("--dist-init-addr", "--nccl-init-addr", type=str, default=None)
        a("--nnodes", type=int, default=1)
        a("--node-rank", type=int, default=0)
        a("--speculative-algorithm", type=str, default=None, choices=spec_algorithm_choices())
        if ver >= (0, 5, 2):
            a("--speculative-draft-model-path", "--speculative-draft-model", type=str, default=None)
            a("--speculative-draft-model-revision", type=str, default=None)
        else:
            a("--speculative-draft-model-path", type=str, default=None)
        a("--speculative-num-steps", type=int, default=None)
        a("--speculative-eagle-topk", type=int, default=None)
        a("--speculative-num-draft-tokens", type=int, default=None)
        if ver >= (0, 5, 11):  # the wheels: --speculative-adaptive and its config JSON from 0.5.11
            a("--speculative-adaptive", action="store_true")
            a("--speculative-adaptive-config", type=str, default=None)
        a("--speculative-accept-threshold-single", type=float, default=1.0)
        a("--speculative-accept-threshold-acc", type=float, default=1.0)
        a("--speculative-token-map", type=str, default=None)
        if ver >= (0, 5, 2):
            a("--speculative-attention-mode", type=str, default="prefill", choices=["prefill", "decode"])
        a("--attention-backend", type=str, default=None)
        a("--sampling-backend", type=str, default=None)
        a("--grammar-backend", type=str, default=None)
        a("--disable-radix-cache", action="store_true")
        if ver >= (0, 5, 14):  # the per-phase names; the old ones are deprecated aliases of them to 0.5.19
            a("--cuda-graph-max-bs-decode", type=int, default=None, dest="cuda_graph_max_bs")
            a("--cuda-graph-bs-decode", type=int, nargs="+", default=None, dest="cuda_graph_bs")
        for old, (new, since, gone) in DEPRECATED_ALIASES.items():
            if since <= ver < gone:
                a(old, type=int, nargs="+" if old == "--cuda-graph-bs" else None, action=DeprecatedAliasStoreAction,
                  new_flag=new, dest=old[2:].replace("-", "_"), default=None)  # the field the new name fills
        if ver < (0, 5, 14):  # their own flags before; 0.5.20 folded them into the cuda-graph config
            a("--cuda-graph-max-bs", type=int, default=None)
            a("--cuda-graph-bs", type=int, nargs="+", default=None)
        a("--disable-cuda-graph", action="store_true")
        a("--disable-cuda-graph-padding", action="store_true")
        a("--disable-custom-all-reduce", action="store_true")
        a("--disable-overlap-schedule", action="store_true")
        a("--enable-mixed-chunk", action="store_true")
        a("--enable-dp-attention", action="store_true")
        a("--enable-torch-compile", action="store_true")
        a("--torch-compile-max-bs", type=int, default=32)
        if ver >= (0, 5, 3):
            a("--enable-deterministic-inference", action="store_true")
        if ver >= (0, 5, 1):
            a("--enable-symm-mem", action="store_true")
        a("--enable-nccl-nvls", action="store_true")
        a("--enable-cache-report", action="store_true")
        a("--chat-template", type=str, default=None)
        a("--reasoning-parser", type=str, default=None)
        a("--tool-call-parser", type=str, default=None)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {k: v for k, v in vars(args).items() if k in names}
        if kwargs.get("decode_log_interval") is None:
            from sglang._sim.runtime import load_config

            kwargs["decode_log_interval"] = int(load_config()["decode_log_interval"])
        return cls(**kwargs)


@dataclasses.dataclass
class PortArgs:
    tokenizer_ipc_name: str
    scheduler_input_ipc_name: str
    detokenizer_ipc_name: str
    nccl_port: int

    @staticmethod
    def init_new(server_args: ServerArgs) -> PortArgs:
        base = f"ipc:///tmp/sglang-sim-{os.getpid()}"
        return PortArgs(base + "-tok", base + "-sched", base + "-detok", server_args.port + 111)


# Architectures for which SGLang defaults to (3, 1, 4), with the release that added each (read from the wheels;
# tests/wheels/test_contract.py checks the resulting defaults against each matrix release's own function).
MTP_LIKE_SINCE = {
    "DeepseekV3ForCausalLM": (0, 4, 7), "DeepseekV2ForCausalLM": (0, 4, 7), "GptOssForCausalLM": (0, 5, 1),
    "DeepseekV32ForCausalLM": (0, 5, 3), "BailingMoeForCausalLM": (0, 5, 3), "BailingMoeV2ForCausalLM": (0, 5, 3),
    "Glm4MoeForCausalLM": (0, 5, 6, 1), "MistralLarge3ForCausalLM": (0, 5, 6, 1),
    "PixtralForConditionalGeneration": (0, 5, 6, 1), "MiMoV2FlashForCausalLM": (0, 5, 7),
    "Glm4MoeLiteForCausalLM": (0, 5, 8), "GlmMoeDsaForCausalLM": (0, 5, 9), "BailingMoeV2_5ForCausalLM": (0, 5, 9),
    "MiMoV2ForCausalLM": (0, 5, 11),
}


def auto_choose_speculative_params(self: ServerArgs) -> tuple[int, int, int]:
    """(steps, topk, draft_tokens) as SGLang picks them when --speculative-num-steps is not given."""
    arch = (self._model_architectures() or [""])[0]
    ver = version()
    if self.speculative_algorithm == "STANDALONE":
        return (3, 1, 4)
    if arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
        return (5, 4, 8)
    if arch in MTP_LIKE_SINCE and ver >= MTP_LIKE_SINCE[arch]:
        return (3, 1, 4)
    return (3, 1, 4) if ver >= (0, 5, 8) else (5, 4, 8)


def _config_args(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """SGLang's ``--config FILE`` (0.5.3+, ``ConfigArgumentMerger``): a YAML mapping of flag names to values,
    turned into ``--key value`` words placed before the command line's own (which win). Booleans add the bare
    flag for store_true actions; lists add one word per item."""
    i = argv.index("--config")
    if argv.count("--config") > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    if i == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = argv[i + 1]
    if not path.endswith((".yaml", ".yml")):
        raise ValueError(f"Config file must be YAML format: {path}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        import yaml  # type: ignore[import-untyped]

        data = yaml.safe_load(text)
    except ImportError:  # the simulated venv has no PyYAML: JSON (a subset of YAML) still parses
        data = json.loads(text) if text.strip() else None
    store_true = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
    words: list[str] = []
    for key, value in (data or {}).items():
        if isinstance(value, bool):
            if key.replace("-", "_") in store_true:
                if value:
                    words.append(f"--{key}")
            else:
                words += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            if value:
                words += [f"--{key}", *(str(v) for v in value)]
        else:
            words += [f"--{key}", str(value)]
    return words + argv[:i] + argv[i + 2:]


def prepare_server_args(argv: list[str]) -> ServerArgs:
    # 0.5.10+ names its parser "sglang serve" (server_args.prepare_server_args), so argparse's complaint reads
    # "sglang serve: error: ..."; before, it is the script's name, "launch_server.py".
    parser = argparse.ArgumentParser(prog="sglang serve" if version() >= (0, 5, 10) else None)
    ServerArgs.add_cli_args(parser)
    if version() >= (0, 5, 3):
        parser.add_argument("--config", type=str, help="Read CLI options from a config file.")
        if "--config" in argv:
            argv = _config_args(argv, parser)
    raw_args = parser.parse_args(argv)
    return ServerArgs.from_cli_args(raw_args)


def is_port_available(port: int, host: str = "") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
            s.listen(1)
            return True
        except OSError:
            return False
