"""``fabfile/plan/sglang_spec_facts.py``: what each SGLang release understands on its launch command, from the wheels.

Per release: every ``--flag`` of ``launch_server`` (``real.flags``: ``add_argument`` calls and, from 0.5.20, the
annotated dataclass fields), the ``--speculative-algorithm`` choices (``any`` from 0.5.12, where the name is
checked after parsing), whether any server module reads ``SGLANG_ENABLE_SPEC_V2`` (the spec-v2 overlap path), and
whether the ``sglang serve`` entry point exists (``sglang/cli/serve.py``), and the device timer: whether a server
module reads ``SGLANG_ENABLE_METRICS_DEVICE_TIMER`` (``environ.py`` only declares it) and which counter it feeds
(``sglang:forward_execution_seconds_total`` by phase from 0.5.11; ``sglang:gpu_execution_seconds_total`` before,
one category per batch, no phases), what ``inv deploy --measure`` needs. The flag sets are stored as the first
release's list and then what each release added and removed, to keep the table readable.
"""

from __future__ import annotations

import pprint
import re
from typing import Any

from tools.contract import real

SPEC_V2 = "SGLANG_ENABLE_SPEC_V2"
DEVICE_TIMER = "SGLANG_ENABLE_METRICS_DEVICE_TIMER"
_TIMER_COUNTER = re.compile(r'name="(sglang:(?:forward|gpu)_execution_seconds_total)"')


def device_timer(w: real.Wheel) -> dict[str, Any]:
    """The timer's switch (read outside ``environ.py``, where every variable is only declared) and its counter."""
    readers = sorted(m for m in w.py("sglang/srt/") if not m.endswith("/environ.py") and DEVICE_TIMER in
                     (w.text(m) or ""))
    counters = sorted({c for m in w.py("sglang/srt/") for c in _TIMER_COUNTER.findall(w.text(m) or "")})
    return {"device_timer_env": bool(readers), "device_timer_read_in": [m.replace("/", ".")[:-3] for m in readers],
            "device_timer_counter": counters[0] if readers and counters else None}


def version_facts(w: real.Wheel) -> dict[str, Any]:
    flags = real.flags(w)
    reads_v2 = sorted(m for m in w.py("sglang/srt/") if SPEC_V2 in (w.text(m) or ""))
    return {
        "flags": sorted(flags),
        "speculative_algorithms": flags.get("--speculative-algorithm", "any"),
        "spec_v2_env": bool(reads_v2),
        "spec_v2_read_in": [m.replace("/", ".")[:-3] for m in reads_v2],
        "sglang_serve": "sglang/cli/serve.py" in w.names,
        **device_timer(w),
    }


def compact(table: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Flags as deltas: the first release keeps its list, each later one says what it added and removed."""
    out: dict[str, dict[str, Any]] = {}
    prev: set[str] | None = None
    for v, facts in table.items():
        row = {k: val for k, val in facts.items() if k != "flags"}
        now = set(facts["flags"])
        if prev is None:
            row["flags"] = sorted(now)
        else:
            row["flags_added"] = sorted(now - prev)
            row["flags_removed"] = sorted(prev - now)
        out[v] = row
        prev = now
    return out


def render(table: dict[str, dict[str, Any]]) -> str:
    body = pprint.pformat(compact(table), width=116, sort_dicts=False)
    return (
        '"""What each SGLang release understands on its launch command (generated; do not edit).\n\n'
        "Regenerate with ``python -m tools.contract --write``: read from the real release wheels by\n"
        "``tools/contract/specfacts.py`` (``tests/wheels/test_contract.py`` fails when this table drifts from them).\n"
        "Keys are the releases read, oldest first; a host version between two keys has the facts of the lower one\n"
        "(``fabfile.plan.versioncheck``). Per release: ``speculative_algorithms`` (``any``: checked after parsing),\n"
        "``spec_v2_env`` (a server module reads SGLANG_ENABLE_SPEC_V2; ``spec_v2_read_in`` names them),\n"
        "``sglang_serve`` (the ``sglang serve`` entry point exists), ``device_timer_env`` (a server module reads\n"
        "SGLANG_ENABLE_METRICS_DEVICE_TIMER; ``device_timer_read_in`` names them) with the counter it feeds\n"
        "(``device_timer_counter``), and the launch flags: ``flags`` for the first release, then\n"
        "``flags_added``/``flags_removed`` against the previous one.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from typing import Any\n\n"
        f"SPEC_FACTS: dict[str, dict[str, Any]] = {body}\n"
    )
