"""Parsers for SGLang's speculative-decoding figures: ``Decode batch`` log lines of every version's format.

0.5.7 ends the line with ``", "``; 0.5.11+ does not; hybrid models replace ``#token``/``token usage`` with
``#full token``/``full token usage``/``#swa token``; ``accept rate`` means accept_len/draft_tokens on 0.5.5–0.5.10
and (accept_len-1)/(draft_tokens-1) from 0.5.11 (shared/reference/sglang.md, section 7).
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

_FIELD = re.compile(r"(#?[A-Za-z][A-Za-z ._()/-]*?):\s*([-+]?[0-9.]+(?:e[-+]?\d+)?|True|False)")
_PREFIX = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)(?P<ranks>(?: [A-Z_]+\d+)*)\]\s*")

_NAMES = {
    "#running-req": "running_req", "#token": "tokens", "token usage": "token_usage",
    "#full token": "tokens", "full token usage": "token_usage", "#swa token": "swa_tokens",
    "accept len": "accept_len", "accept rate": "accept_rate", "cuda graph": "cuda_graph",
    "gen throughput (token/s)": "gen_throughput", "#queue-req": "queue_req", "cap len": "cap_len",
    "block accept len": "block_accept_len",
}


def parse_decode_line(line: str) -> Optional[Dict[str, Any]]:
    idx = line.find("Decode batch")
    if idx < 0:
        return None
    out: Dict[str, Any] = {}
    m = _PREFIX.search(line[:idx].strip() + " ") if line[:idx].strip() else None
    if m:
        out["time"] = m.group("ts")
        out["ranks"] = m.group("ranks").strip()
    body = line[idx + len("Decode batch"):]
    for key, value in _FIELD.findall(body):
        key = key.strip().lstrip(",").strip()
        name = _NAMES.get(key)
        if name is None:
            continue
        if value in ("True", "False"):
            out[name] = value == "True"
        else:
            num = float(value)
            out[name] = int(num) if name in ("running_req", "tokens", "queue_req", "swa_tokens") else num
    out["trailing_comma"] = line.rstrip("\n").endswith(", ")
    return out


def accept_rate_meaning(version: str) -> str:
    from fabfile.remote.server import version_tuple

    v = version_tuple(version)
    if v >= (0, 5, 11):
        return "(accept_len - 1) / (draft_tokens - 1): share of drafted tokens accepted"
    if v >= (0, 5, 5):
        return "accept_len / draft_tokens: tokens per verify step over tokens verified"
    return "not printed before 0.5.5"
