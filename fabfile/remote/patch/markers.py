"""The one-line marker every NCCL-env patch prints to stderr from inside each process it runs in.

Format (JSON dicts with sorted keys)::

    [specdeploy] nccl-env mode=scheduler hash=0123456789ab pid=1234 start=98765 deploy=ID set={"NCCL_PROTO": "LL"} \
kept={...}

``start`` is the process start time (clock ticks since boot, /proc/PID/stat field 22): with the pid it names the
process exactly, so a marker an older process with the same pid printed is never taken for this one's.

Written by the templates in templates/patch/, parsed here for both the patch engine and check-env.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the shapes are annotations only (verbs.py)
    from ..protocol import Marker

MARKER_PREFIX = "[specdeploy] nccl-env"

_MARKER_HEAD_RE = re.compile(r"\[specdeploy\] nccl-env((?: [a-z_]+=\S*)*) set=")


def parse_marker(line: str) -> Marker | None:
    """Parse one marker line printed by a patch block; None if the line is not one.

    Format (one line, JSON dicts with sorted keys)::

        [specdeploy] nccl-env mode=scheduler hash=0123456789ab pid=1234 deploy=ID set={"NCCL_PROTO": "LL"} \
kept={"NCCL_ALGO": "Tree"}

    Returns ``{"mode", "hash", "pid" (int), "deploy" (str or None), "set" (dict), "kept" (dict)}``, plus
    ``"start"`` (int) when the line carries the process start time.
    Text before the marker on the same line (a log prefix) is ignored.
    """
    m = _MARKER_HEAD_RE.search(line)
    if not m:
        return None
    fields: dict[str, str] = {}
    for tok in m.group(1).split():
        k, _, v = tok.partition("=")
        fields[k] = v
    dec = json.JSONDecoder()
    try:
        set_vals, end = dec.raw_decode(line, m.end())
        rest = line[end:]
        if not rest.startswith(" kept="):
            return None
        kept_vals, end2 = dec.raw_decode(line, end + len(" kept="))
        pid = int(fields.get("pid", ""))
    except ValueError:
        return None
    if not isinstance(set_vals, dict) or not isinstance(kept_vals, dict) or line[end2:].strip():
        return None
    deploy = fields.get("deploy", "-")
    out: Marker = {
        "mode": fields.get("mode", ""),
        "hash": fields.get("hash", ""),
        "pid": pid,
        "deploy": None if deploy in ("", "-") else deploy,
        "set": {str(k): str(v) for k, v in set_vals.items()},
        "kept": {str(k): str(v) for k, v in kept_vals.items()},
    }
    start = fields.get("start", "-")
    if start.isdigit():  # the process start time in clock ticks (markers from before it was printed lack it)
        out["start"] = int(start)
    return out

