"""NCCL values and names refused before anything is stopped: ``inv render`` and ``inv deploy`` exit 2 on them.

Pure, from NCCL's own reading rules (``fabfile.remote.evidence.ncclenv``, the rules check-env judges evidence by).
Without this, ``NCCL_P2P_LEVEL: sys`` (NCCL matches level names case-sensitively and ignores ``sys`` without a word) or
``NCCL_NTHREAD`` (NCCL has ``NCCL_NTHREADS``) reached the host: the deploy stopped the running server, loaded the
model, and only check-env found that NCCL never took the value. What is refused:

- a level NCCL cannot map (``ncclGetLevel``: a path name, exact case, or an old-style number): the message gives
  NCCL's spelling when the value is one in another case;
- an integer parameter whose value NCCL would read as something else than written: no digits at all (``strtoll``
  gives 0), a unit or other text after the number (``16M`` is 16), or out of the 64-bit range. A trailing
  ``.0`` (YAML's float ``16777216.0``) reads as the same number and passes;
- an ``NCCL_*`` name NCCL does not read that is one typo away from one it does (``NCCL_NTHREAD``);
- an ``NCCL_PROTO`` / ``NCCL_ALGO`` list naming what NCCL does not have, by ncclenv's ``selection`` (parseList).

A name far from every name NCCL reads is kept with a note: it may be read by a newer NCCL or by PyTorch, which
the table of the names NCCL ``ncclenv.NCCL_KNOWN`` reads cannot tell.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from fabfile.remote.evidence import ncclenv

# Read by NCCL with getenv rather than NCCL_PARAM (so not in ncclenv's tables), or by PyTorch's NCCL process
# group: real names, never taken for typos.
READ_ELSEWHERE = frozenset({
    "NCCL_IB_HCA", "NCCL_P2P_DISABLE", "NCCL_NET", "NCCL_CUDA_PATH", "NCCL_RAS_ADDR", "NCCL_WORK_FIFO_DEPTH",
    "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_DESYNC_DEBUG", "NCCL_ENABLE_TIMING",
    "NCCL_ENABLE_MONITORING", "NCCL_TRACE_BUFFER_SIZE",
})
KNOWN = frozenset(ncclenv.INT_PARAMS | ncclenv.LEVEL_VARS | ncclenv.STRING_VARS | ncclenv.LOGGING_VARS
                  | ncclenv.NOT_PARAMS | READ_ELSEWHERE)
# difflib's ratio for one typo in a name this long (NCCL_NTHREAD vs NCCL_NTHREADS: 0.96); far names stay notes.
_TYPO_CUTOFF = 0.9
_WHOLE = re.compile(r"\s*[+-]?(?:0[xX][0-9a-fA-F]+|[0-9]+)(?:\.0*)?\s*")


# NCCL_NTHREADS: NCCL's documented values (docs/env.html); another number is not what NCCL runs.
NTHREADS_VALUES = (64, 128, 256, 512)


def refusal(var: str, raw: str) -> str | None:
    """Why NCCL would not take ``var=raw`` as written (a sentence naming NCCL's spelling), or None."""
    if var.upper().startswith("NCCL_") and var != var.upper():
        # NCCL's getenv is case-sensitive: nccl_p2p_level reaches the server and NCCL never reads it.
        return (f"{var} is not a variable NCCL reads: NCCL's names are case-sensitive; "
                f"NCCL's spelling is {var.upper()}")
    k = ncclenv.kind(var)
    if raw == "" and k in ("int", "level"):
        return None  # NCCL reads an empty value as unset: the default, as intended
    if k == "level":
        if ncclenv.level_name(raw) is not None:
            return None
        upper = raw.strip().upper()
        spelling = f"write {upper} (NCCL matches level names case-sensitively and ignores {raw!r} without a word)" \
            if upper in ncclenv.LEVEL_NAMES else \
            f"NCCL takes one of {', '.join(ncclenv.LEVEL_NAMES)} (exact case) or an old-style number"
        return f"{var}={raw!r} is not a level NCCL knows: {spelling}"
    if k == "int":
        n = ncclenv.strtoll(raw)
        if n is None:
            return f"{var}={raw!r} is out of NCCL's 64-bit integer range (NCCL refuses it and keeps its default)"
        if _whole(raw):
            if var == "NCCL_NTHREADS" and n not in NTHREADS_VALUES:
                return (f"{var}={raw!r} is not one of NCCL's documented values "
                        f"({', '.join(map(str, NTHREADS_VALUES))})")
            return None
        if not any(c.isdigit() for c in raw):
            return f"{var}={raw!r} is not a number: NCCL reads it as 0 (C strtoll finds no digits); write a number"
        return (f"{var}={raw!r} is not a whole number: NCCL reads it as {n} (C strtoll: the leading digits "
                f"only); write the number itself, e.g. {var}={n}")
    if var in ("NCCL_PROTO", "NCCL_ALGO"):
        # NCCL's parseList refuses an unknown protocol or algorithm name and the communicator's init fails (the
        # server never starts); ncclenv.selection reads a list by the same rules.
        try:
            ncclenv.selection(var, raw)
        except ValueError as e:
            return f"{e}: NCCL fails the communicator's init, so the server would not start"
        return None
    if k == "unknown":
        close = difflib.get_close_matches(var, sorted(KNOWN), n=1, cutoff=_TYPO_CUTOFF)
        if close and var not in KNOWN:
            return f"{var} is not a variable NCCL reads; NCCL's spelling is {close[0]}"
    return None


def _whole(raw: str) -> bool:
    """A number as NCCL's strtoll reads it whole: digits (0x hex, 0 octal) with an optional ``.0`` YAML adds."""
    return _WHOLE.fullmatch(raw) is not None


def unknown_names(values: Mapping[str, str]) -> list[str]:
    """The ``NCCL_*`` names NCCL (``ncclenv.NCCL_KNOWN``) does not read and that are no typo of one it does: kept,
    with a note."""
    return [k for k in values if ncclenv.kind(k) == "unknown" and k not in KNOWN and refusal(k, values[k]) is None]
