"""``fabfile/remote/evidence/sglang_env_facts.py``: the NCCL variables each SGLang version writes, derived from the
wheels.

Each write is classified here (not in the host agent, which stays a plain table lookup): the guard texts of
the source become ``requires`` (launch flags that must hold: ``symm_mem``, ``nccl_nvls``, ``deterministic``,
``tp>1``, or negated with ``!``), ``unset_or`` (``"NCCL_X" not in os.environ or <flags>``: SGLang fills the
gap, and overrides the operator's value only when one of the flags is on) and ``other`` (conditions the
tool cannot judge from the launch flags: the rule's ``applies`` is then unknown).
"""

from __future__ import annotations

import pprint
import re
from typing import Any

from tests.contract import real

_FLAG_ATOMS = (
    (re.compile(r"^\w+\.enable_symm_mem$"), "symm_mem"),
    (re.compile(r"^\w+\.enable_nccl_nvls$"), "nccl_nvls"),
    (re.compile(r"^\w+\.enable_deterministic_inference$"), "deterministic"),
    (re.compile(r"^\w+\.tp_size > 1$"), "tp>1"),
)
# AMD (ROCm) branches: the tool deploys to NVIDIA GPUs, where they are always false.
_HIP = re.compile(r"^(?:is_hip\(\)|get_platform\(\)\.is_hip)$")


def _atom(text: str) -> tuple[str | None, bool]:
    """One condition atom → (known flag or None, negated)."""
    t = text.strip()
    neg = False
    m = re.fullmatch(r"not \((.*)\)|not (.*)", t)
    if m:
        t, neg = (m.group(1) or m.group(2)).strip(), True
    if _HIP.match(t):
        return "hip", neg
    for rx, name in _FLAG_ATOMS:
        if rx.match(t):
            return name, neg
    return None, neg


def classify(write: dict[str, Any], value: str | None) -> dict[str, Any]:
    requires: list[str] = []
    other: list[str] = []
    unset_or: list[str] | None = None
    guards = list(write["when"])
    where = write["where"]
    if "deterministic" in where and not any("deterministic_inference" in g for g in guards):
        requires.append("deterministic")
    if not where.endswith(":_set_envs_and_config") and "deterministic" not in where:
        other.append(f"when {where.split(':')[-1]}() runs")
    for g in guards:
        m = re.fullmatch(r"'(NCCL_\w+)' not in os\.environ or (.+)", g)
        if m:
            unset_or = []
            for a in m.group(2).split(" or "):
                name, neg = _atom(a)
                unset_or.append(("!" if neg else "") + name if name else f"?{a}")
            continue
        for a in g.split(" and "):
            name, neg = _atom(a)
            if name == "hip":
                if not neg:
                    other.append("AMD GPUs")
                continue
            if name is None:
                other.append(a.strip())
            else:
                requires.append(("!" if neg else "") + name)
    expr = write["value"] or ""
    value_flags = sorted({n for n, _ in (_atom(x) for x in re.findall(r"\w+\.enable_\w+", expr)) if n})
    if re.sub(r"\w+\.enable_\w+|\b(?:str|int|or)\b|[()\s]", "", expr):
        value_flags = []  # the value also depends on something else: left to value_from
    return {
        "var": write["var"],
        "action": "sets_if_unset" if write["how"] == "setdefault" else "overrides",
        "value": value,
        "value_from": write["value"] if value is None else None,
        "value_flags": value_flags,
        "where": where,
        "when": guards,
        "requires": requires,
        "unset_or": unset_or,
        "other": other,
    }


def version_facts(w: real.Wheel) -> list[dict[str, Any]]:
    det = real.deterministic_writes(w)
    out = []
    for wr in real.nccl_writes(w):
        value = wr["value"] if wr["value"] is not None and re.fullmatch(r"[\w:.,-]*", wr["value"]) else None
        if "deterministic" in wr["where"]:
            value = det.get(wr["var"])
        if value is not None and re.fullmatch(r"[a-z_]\w*", value) and value not in ("allreduce:tree",):
            value = None  # a variable name, not a literal
        if wr["value"] and wr["value"].startswith("str(") and value == wr["value"]:
            value = None
        out.append(classify(wr, value))
    return out


def render(table: dict[str, list[dict[str, Any]]]) -> str:
    """The module's text; ``table`` oldest first. A release whose writes are those of the release before it is
    stored as None (changes only, like the spec table's flags)."""
    stored: dict[str, list[dict[str, Any]] | None] = {}
    before: list[dict[str, Any]] | None = None
    for v, writes in table.items():
        stored[v] = None if writes == before else writes
        before = writes
    body = pprint.pformat(stored, width=116, sort_dicts=False)
    return (
        '"""The NCCL variables each SGLang release itself writes (generated; do not edit).\n\n'
        "Regenerate with ``python -m tests.contract --write``: read from the real release wheels by\n"
        "``tests/contract/envfacts.py`` (``tests/test_contract.py`` fails when this table drifts from them).\n"
        "Keys are the releases read, oldest first; None: the same writes as the release before it. A host version\n"
        "between two keys has the facts of the lower one (``sglang_env_facts_for``). Each write: ``var``;\n"
        "``action`` (``overrides``: replaces any value, ``sets_if_unset``: setdefault); ``value`` (None when it\n"
        "depends on the flags: see ``value_flags`` or ``value_from``); ``where`` (module:function); ``when`` (the\n"
        "source's guards, verbatim); ``requires`` (launch flags that must hold, ``!`` negated); ``unset_or``\n"
        "(guarded by ``'VAR' not in os.environ or <flags>``); ``other`` (conditions not judged from the launch\n"
        "flags).\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from typing import Any\n\n"
        f"NCCL_WRITES: dict[str, list[dict[str, Any]] | None] = {body}\n"
    )
