"""``fabfile/plan/sglang_spec_facts.py``: what each SGLang release understands on its launch command, from the wheels.

Per release: every ``--flag`` of ``launch_server`` (``real.flags``: ``add_argument`` calls and, from 0.5.20, the
annotated dataclass fields), the ``--speculative-algorithm`` choices (``any`` from 0.5.12, where the name is
checked after parsing), whether any server module reads ``SGLANG_ENABLE_SPEC_V2`` (the spec-v2 overlap path), and
whether the ``sglang serve`` entry point exists (``sglang/cli/serve.py``). The flag sets are stored as the first
release's list and then what each release added and removed, to keep the table readable.
"""

from __future__ import annotations

import pprint
from typing import Any

from tests.contract import real

SPEC_V2 = "SGLANG_ENABLE_SPEC_V2"


def version_facts(w: real.Wheel) -> dict[str, Any]:
    flags = real.flags(w)
    reads_v2 = sorted(m for m in w.py("sglang/srt/") if SPEC_V2 in (w.text(m) or ""))
    return {
        "flags": sorted(flags),
        "speculative_algorithms": flags.get("--speculative-algorithm", "any"),
        "spec_v2_env": bool(reads_v2),
        "spec_v2_read_in": [m.replace("/", ".")[:-3] for m in reads_v2],
        "sglang_serve": "sglang/cli/serve.py" in w.names,
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
        "Regenerate with ``python -m tests.contract --write``: read from the real release wheels by\n"
        "``tests/contract/specfacts.py`` (``tests/test_contract.py`` fails when this table drifts from them).\n"
        "Keys are the releases read, oldest first; a host version between two keys has the facts of the lower one\n"
        "(``fabfile.plan.versioncheck``). Per release: ``speculative_algorithms`` (``any``: checked after parsing),\n"
        "``spec_v2_env`` (a server module reads SGLANG_ENABLE_SPEC_V2; ``spec_v2_read_in`` names them),\n"
        "``sglang_serve`` (the ``sglang serve`` entry point exists), and the launch flags: ``flags`` for the\n"
        "first release, then ``flags_added``/``flags_removed`` against the previous one.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from typing import Any\n\n"
        f"SPEC_FACTS: dict[str, dict[str, Any]] = {body}\n"
    )
