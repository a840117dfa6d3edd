"""NCCL settings that will hurt or not do what they say, said before the server starts (``inv render``, deploy).

Pure: from the NCCL values a plan asks for, its launch flags and the SGLang (and, when known, NCCL) release. Each
note says what the setting does and what to do instead; the plan never changes what the operator wrote. Sources:
NCCL's ``src/graph/tuning.cc`` (protocol selection, parseList), its docs (``NCCL_PROTO`` is discouraged,
``NCCL_MAX_NCHANNELS`` deprecated since 2.17 for ``NCCL_MAX_CTAS``), and SGLang's own NCCL writes read from the
release wheels (``remote/evidence/sglang_env_facts.py``, applied by ``remote/evidence/sglangnccl.sglang_nccl_rules``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fabfile.remote.evidence import ncclenv
from fabfile.remote.evidence.sglangnccl import argv_flags, sglang_nccl_rules

DEPRECATED = {"NCCL_MAX_NCHANNELS": "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS": "NCCL_MIN_CTAS"}


def _proto_note(value: str, nccl: tuple[int, int] | None) -> str | None:
    try:
        allreduce = ncclenv.selection("NCCL_PROTO", value, nccl)["AllReduce"]
    except ncclenv.SelectionError as e:
        return f"{e}: NCCL fails the communicator's init, so the server will not start"
    if "Simple" in allreduce:
        return None
    from fabfile.plan.nccl_model import enabled

    left = [p for p in ncclenv.PROTOCOLS if p in allreduce]  # what the value leaves, in NCCL's order
    # What the large messages run instead of Simple, by what is left away from NVLink (nccl_model's protocol facts:
    # LL128 is on by default only over NVLink-class paths, and a value naming it forces it on): it said "every size
    # runs LL" of NCCL_PROTO=LL128 too.
    pcie = [p for p in ncclenv.PROTOCOLS if p in enabled({"NCCL_PROTO": value}, "pcie")[0]]
    if "LL128" in pcie:
        runs = (f"every size runs {' or '.join(pcie)}, LL128 forced on even where NCCL keeps it off (it enables "
                "LL128 by default only over NVLink-class paths), prefill's too (TTFT)")
    elif left == ["LL"]:
        runs = "every size runs LL at half the bandwidth, prefill's too (TTFT)"
    else:
        runs = (f"without NVLink every size runs LL at half the bandwidth ({' or '.join(left)} over NVLink), "
                "prefill's too (TTFT)")
    keep = ",".join([*left, "Simple"])
    offer = f"NCCL_PROTO=\"{keep}\" keeps Simple for large messages"
    if nccl is None or nccl >= ncclenv.PER_COLLECTIVE_SINCE:
        offer += f" ({ncclenv.PER_COLLECTIVE_SINCE_TEXT}+: per-collective \"allreduce:{keep}\")"
    # Short: it was ~600 characters, printed per deploy, per host and in the summary.
    return (f"NCCL_PROTO={value} leaves all-reduce no Simple protocol: {runs}; {offer}; `inv sweep --nccl-env` "
            "measures both (kept as written)")


def nccl_notes(tuning: Mapping[str, str], argv: Sequence[str], sglang_version: str | None,
               nccl_version: str | None = None, quiet: frozenset[str] = frozenset()) -> list[str]:
    """The notes for a plan asking for ``tuning`` (the NCCL_* values the server gets). ``quiet``: variables whose
    advice is not said (the preset's own values, under ``notes: {quiet: [nccl_preset]}``); a value NCCL would
    refuse, or one SGLang replaces, is said all the same."""
    nccl = ncclenv.nccl_release(nccl_version)
    notes: list[str] = []
    if "NCCL_PROTO" in tuning and "NCCL_PROTO" in quiet:
        try:
            ncclenv.selection("NCCL_PROTO", tuning["NCCL_PROTO"], nccl)
        except ncclenv.SelectionError as e:
            notes.append(f"{e}: NCCL fails the communicator's init, so the server will not start")
    elif "NCCL_PROTO" in tuning:
        note = _proto_note(tuning["NCCL_PROTO"], nccl)
        if note:
            notes.append(note)
    if "NCCL_ALGO" in tuning:
        try:
            ncclenv.selection("NCCL_ALGO", tuning["NCCL_ALGO"], nccl)
        except ncclenv.SelectionError as e:
            notes.append(f"{e}: NCCL fails the communicator's init, so the server will not start")
    for old, new in DEPRECATED.items():
        if old in tuning and old not in quiet:
            notes.append(f"{old} is deprecated since NCCL 2.17 in favour of {new} (NCCL still reads it); "
                         f"{new}={tuning[old]} says the same in the current name (kept as written)")
    for rule in sglang_nccl_rules(sglang_version, argv_flags(list(argv))):
        var, value = rule["var"], rule.get("value")
        if rule["action"] != "overrides" or var not in tuning or rule["applies"] is False:
            continue
        if value is not None and ncclenv.same(var, tuning[var], str(value)):
            continue
        certainty = "replaces" if rule["applies"] else "may replace"
        notes.append(f"SGLang {certainty} {var}={tuning[var]} with {value if value is not None else 'its own value'}"
                     f" in the scheduler ({rule['condition']}): NCCL will not see the value asked for, and check-env "
                     "will report it different")
    debug = tuning.get("NCCL_DEBUG_SUBSYS")
    if debug and "TUNING" in debug.upper().split(","):
        notes.append("NCCL_DEBUG_SUBSYS has TUNING: NCCL's rank 0 logs a line per eager all-reduce (two per layer "
                     "at every prefill) for as long as the server runs; keep it for a verification deploy only")
    return notes
