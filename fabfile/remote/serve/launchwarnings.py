"""SGLang's own warnings about a launch, as its log says them while the deploy waits for ready: a flag or variable
removed, deprecated, ignored or to be removed, a fallback chosen instead of what was asked, the default MoE kernel
config. One line each, deduplicated across ranks, for the deploy summary, ``inv status --verbose`` and the JSON.

The wording is SGLang's (read from the release wheels, ``sglang/srt/server_args.py``, ``environ.py``,
``speculative_hook.py``, ``fused_moe_triton_config.py``), e.g.::

    '--cuda-graph-max-bs' is deprecated and will be removed in a future release. Use '--cuda-graph-max-bs-decode' ...
    SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker. ...
    Environment variable 'SGLANG_NSA_FUSE_TOPK' is deprecated; use 'SGLANG_DSA_FUSE_TOPK' instead. ...
    speculative_adaptive disabled: <reason>. Falling back to static speculative params.
    Using default MoE kernel config. Performance might be sub-optimal! Config file not found at <path>, ...
"""

from __future__ import annotations

import re

# SGLang colours its deprecation lines (print_deprecated_warning: yellow, bold).
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Its log prefix: "[2026-01-01 00:00:00 TP0] " (the rank part varies, the message does not); a Python warning's
# "path/file.py:160: DeprecationWarning: " says where, not what.
_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d[ T][\d:.,]+[^\]]*\]\s*")
_WARNINGS_WHERE = re.compile(r"^\S+\.py:\d+:\s*(?=\w*Warning:)")
_SAYS = re.compile(
    r"\bis deprecated\b|\bhas been deprecated\b|\bwill be deprecated\b|\bwill be removed\b|"
    r"\bha(?:s|ve) been removed\b|\bis (?:now )?ignored\b|\bare ignored\b|\b[Ff]alling back to\b|"
    r"\bwill fallback to\b|Using default MoE kernel config", )
# Lines that quote such words without being SGLang's warning about this launch: NCCL's chatter, tracebacks' frames,
# SGLang echoing its own arguments (the help text of a deprecated flag is in server_args=...).
_NOT = re.compile(r"NCCL INFO|^\s|server_args=|ServerArgs\(|Traceback")
MAX_WARNINGS = 20
MAX_CHARS = 300


def message(line: str) -> str | None:
    """The warning ``line`` carries, without its colour and log prefix; None when it is not one."""
    text = _ANSI.sub("", line).rstrip()
    if not text or _NOT.search(text):
        return None
    text = _WARNINGS_WHERE.sub("", _PREFIX.sub("", text)).strip()
    if not _SAYS.search(text):
        return None
    return text[:MAX_CHARS]


class Collector:
    """The warnings of one launch, in the order first seen, each once (every TP rank logs its own copy)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def feed(self, lines: list[str]) -> None:
        for line in lines:
            said = message(line)
            if said is not None and said not in self.lines and len(self.lines) < MAX_WARNINGS:
                self.lines.append(said)
