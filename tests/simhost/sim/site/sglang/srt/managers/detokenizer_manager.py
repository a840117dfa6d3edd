"""Simulated ``sglang.srt.managers.detokenizer_manager`` (TEST EQUIPMENT): a titled idle child."""

from __future__ import annotations

import setproctitle

from sglang._sim import runtime
from sglang.srt.server_args import PortArgs, ServerArgs


def run_detokenizer_process(server_args: ServerArgs, port_args: PortArgs) -> None:
    runtime.kill_itself_when_parent_died()
    setproctitle.setproctitle("sglang::detokenizer")
    if runtime.version() >= (0, 5, 22):  # SGLang 0.5.22+ loads the plugins in the detokenizer too
        from sglang.srt.plugins import load_plugins

        load_plugins()
    runtime.configure_logger("", server_args.log_level)
    runtime.sleep_forever()
