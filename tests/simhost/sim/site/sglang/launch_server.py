"""Simulated ``python -m sglang.launch_server`` (TEST EQUIPMENT, not SGLang; no GPU, no model).

The launcher keeps its title (``python -m sglang.launch_server ...``), spawns one titled scheduler per
TP rank plus the detokenizer, and serves SGLang's HTTP endpoints once all schedulers are ready.
Runtime behaviour (failures, timing, GPU inventory) comes from ``<venv>/sim-state/config.json``.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from sglang._sim import runtime

logger = logging.getLogger(__name__)


def _strip_environment(prefixes: list[str]) -> None:
    """Simulates a launch path that strips the environment (sudo env_reset, systemd, ...)."""
    for key in list(os.environ):
        if any(key.startswith(p) for p in prefixes):
            del os.environ[key]


def _check_model_path(path: str | None) -> None:
    if path is None:
        return
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise OSError(
            f"Incorrect path_or_model_id: '{path}'. Please provide either the path to a local folder or the "
            "repo_id of a model on the Hub."
        )
    with open(os.path.join(path, "config.json")) as f:
        json.load(f)


def run_server(server_args) -> None:
    from sglang.srt.entrypoints.http_server import launch_server

    launch_server(server_args)


def main(argv: list[str]) -> None:
    cfg = runtime.load_config()
    prefixes = [str(p) for p in (cfg.get("strip_env_prefixes") or [])]
    if prefixes:
        _strip_environment(prefixes)

    runtime.configure_logger("", "info")

    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    runtime.configure_logger("", server_args.log_level)
    if runtime.version() >= (0, 5, 19):  # SGLang logs the resolved dict from 0.5.19
        import dataclasses

        logger.info(f"server_args={dataclasses.asdict(server_args)}")
    else:
        logger.info(f"server_args={server_args!r}")

    # SGLang never checks the HTTP port early (no release does: uvicorn's bind fails after the schedulers are up,
    # http_server.launch_server below). What it checks at start are its internal ports (PortArgs.init_new, 0.5.5+):
    # the `port_in_use` knob stands for one of those being taken.
    if cfg.get("fail") == "port_in_use":
        base = server_args.port + 1
        logger.error(f"Port is already in use. dist_init_port={base + 2} port_base={base} "
                     f"detokenizer_port={base + 1} nccl_port={base + 3} scheduler_input_port={base + 4}")
        sys.exit(1)

    _check_model_path(server_args.model_path)
    if server_args.speculative_algorithm in ("EAGLE", "EAGLE3"):
        _check_model_path(server_args.speculative_draft_model_path)

    from sglang.srt.entrypoints.engine import kill_process_tree

    try:
        run_server(server_args)
    finally:
        kill_process_tree(include_parent=False)


if __name__ == "__main__":
    # As in SGLang 0.5.11+: the plugins load at the top of `python -m sglang.launch_server`, before parsing
    # (the strip_env_prefixes launch-path simulation runs first: it stands for what launched the process).
    _cfg = runtime.load_config()
    _strip_environment([str(p) for p in (_cfg.get("strip_env_prefixes") or [])])
    if runtime.version() >= (0, 5, 11):
        from sglang.srt.plugins import load_plugins

        load_plugins()
    main(sys.argv[1:])
