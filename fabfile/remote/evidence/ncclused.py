"""What NCCL really chose for the all-reduces of decode, verify and prefill, held against NCCL_ALGO/NCCL_PROTO.

Part of ``check-env`` (pure: ``evidence.evaluate`` calls :func:`used`). The evidence is NCCL's own TUNING line
(``nccllog``: ``AllReduce: N Bytes -> Algo X proto Y channel{Lo..Hi}={a..b}``), which NCCL prints with
``NCCL_DEBUG=INFO`` and TUNING in ``NCCL_DEBUG_SUBSYS``:

* only on rank 0 of each communicator: the other ranks run the same choice (every rank of a communicator must
  pick the same algorithm and protocol, or the collective would not complete), so their rows cite rank 0's line;
* once per collective as NCCL schedules it: every eager call (prefill, and decode/verify without CUDA graphs),
  and once per captured call at CUDA-graph capture; graph replays print nothing. So a server with graphs on shows
  decode and verify at capture, and prefill at every prefill forward (two all-reduces per layer): the log grows
  with traffic, which is why the tool turns TUNING on only where a server's life is bounded (see README,
  check-env: "what NCCL used").

Message sizes (SGLang's tensor-parallel all-reduces sum a ``[tokens, hidden]`` activation: the row-parallel
attention output, the MLP/MoE output, the vocabulary-parallel embedding): ``hidden_size × tokens × dtype bytes``
with tokens = 1 for decode (one request), the draft-token count for verify (``--speculative-num-draft-tokens``,
else steps + 1 at topk 1), and for prefill ``--chunked-prefill-size`` when the launch gives it, else the largest
logged size that is a whole number of tokens above the verify's.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..common import flag_value
from . import ncclenv

DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "half": 2, "fp16": 2, "float32": 4, "float": 4, "fp32": 4}
USED_STATUSES = ("proven", "overridden", "observed", "unseen")


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def model_path(argv: list[str] | None) -> str | None:
    """The target model's directory from the launch flags (``--model-path``, ``--model``)."""
    return flag_value(list(argv or []), "--model-path", "--model")


def read_model_config(path: str | None) -> dict[str, Any]:
    """A model directory's config.json (hidden size, dtype) for the all-reduce sizes; {} when unreadable."""
    if not path:
        return {}
    try:
        with open(os.path.join(os.path.expanduser(path), "config.json"), encoding="utf-8") as f:
            data = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def model_shape(argv: list[str] | None, config: dict[str, Any]) -> dict[str, Any]:
    """The numbers the message sizes need, from the launch flags and the model's config.json (``{}`` if absent).

    ``{"hidden_size", "dtype", "dtype_bytes", "draft_tokens", "prefill_tokens", "why"}``; ``hidden_size`` None
    when the config does not say it (then no size can be computed: ``why`` says so)."""
    argv = list(argv or [])
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    hidden = config.get("hidden_size") or (text or {}).get("hidden_size")
    dtype = flag_value(argv, "--dtype") or "auto"
    if dtype == "auto":
        dtype = str(config.get("torch_dtype") or (text or {}).get("torch_dtype") or "bfloat16")
    spec = flag_value(argv, "--speculative-algorithm", "--speculative-algo")
    draft = _int(flag_value(argv, "--speculative-num-draft-tokens"))
    if spec and draft is None:
        steps = _int(flag_value(argv, "--speculative-num-steps"))
        draft = steps + 1 if steps is not None else None
    shape: dict[str, Any] = {
        "hidden_size": int(hidden) if isinstance(hidden, int) and hidden > 0 else None,
        "dtype": dtype,
        "dtype_bytes": DTYPE_BYTES.get(dtype.replace("torch.", "").lower()),
        "draft_tokens": draft if spec else None,
        "prefill_tokens": _int(flag_value(argv, "--chunked-prefill-size")),
        "why": None,
    }
    if shape["hidden_size"] is None:
        shape["why"] = "the model's config.json gives no hidden_size"
    elif shape["dtype_bytes"] is None:
        shape["why"] = f"activation dtype {dtype!r} is not one the tool sizes"
    return shape


def _allreduce_entries(tuning: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # NCCL < 2.23 prints no function name: those lines are kept, all-reduce being what SGLang's TP group runs
    return [t for t in tuning if t.get("func") in ("AllReduce", None)]


def phase_sizes(shape: dict[str, Any], tuning: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{"phase", "tokens", "bytes", "how"}]`` for decode, verify (speculative only) and prefill."""
    hidden, nbytes = shape.get("hidden_size"), shape.get("dtype_bytes")
    if not hidden or not nbytes:
        return []
    per_token = hidden * nbytes
    how = f"hidden {hidden} x {{t}} token(s) x {nbytes} B ({shape.get('dtype')})"
    out = [{"phase": "decode", "tokens": 1, "bytes": per_token, "how": how.format(t=1)}]
    draft = shape.get("draft_tokens")
    if draft:
        out.append({"phase": "verify", "tokens": draft, "bytes": per_token * draft, "how": how.format(t=draft)})
    prefill = shape.get("prefill_tokens")
    if prefill:
        out.append({"phase": "prefill", "tokens": prefill, "bytes": per_token * prefill,
                    "how": how.format(t=prefill) + " (--chunked-prefill-size)"})
    else:
        floor = per_token * max(draft or 1, 1)
        sizes = [t["bytes"] for t in _allreduce_entries(tuning) if t["bytes"] > floor and t["bytes"] % per_token == 0]
        if sizes:
            top = max(sizes)
            out.append({"phase": "prefill", "tokens": top // per_token, "bytes": top,
                        "how": how.format(t=top // per_token) + " (the largest logged)"})
        else:
            out.append({"phase": "prefill", "tokens": None, "bytes": None,
                        "how": "no prefill-sized all-reduce logged (give --chunked-prefill-size to name one)"})
    return out


def _allowed(expected: dict[str, str], nccl: tuple[int, int] | None) -> dict[str, frozenset[str] | None]:
    """The AllReduce protocols/algorithms the expected values leave NCCL; None where nothing is asked."""
    out: dict[str, frozenset[str] | None] = {}
    for var in ncclenv.SELECTION_VARS:
        value = expected.get(var)
        try:
            out[var] = ncclenv.selection(var, value, nccl)["AllReduce"] if value is not None else None
        except ncclenv.SelectionError:
            out[var] = None  # the env rows already say NCCL refuses it
    return out


def _judge(choices: list[dict[str, Any]], allowed: dict[str, frozenset[str] | None]) -> tuple[str, list[str]]:
    """proven / overridden / observed for the choices NCCL logged at one size, with what broke the rule."""
    broke: list[str] = []
    for c in choices:
        for var, field in (("NCCL_PROTO", "proto"), ("NCCL_ALGO", "algo")):
            allow = allowed[var]
            if allow is None:
                continue
            got = c.get(field)
            if c.get("algo") == "Symmetric":
                broke.append(f"a symmetric-memory kernel ran ({c.get('kernel') or 'no algo/proto'}): {var} does "
                             "not apply to it")
            elif got not in allow:
                broke.append(f"{field} {got} ({c['count']}x) is outside {var}'s {','.join(sorted(allow))}")
    if broke:
        return "overridden", sorted(set(broke))
    if all(v is None for v in allowed.values()):
        return "observed", []
    return "proven", []


def used(evidence: dict[str, Any], expected: dict[str, str], nranks: int | None) -> dict[str, Any]:
    """Rows ``{"pid", "rank", "label", "phase", "tokens", "bytes", "algo", "proto", "count", "status",
    "evidence", "note"}`` per scheduler and phase; ``status`` in ``USED_STATUSES``; ``overridden`` names the
    NCCL variables whose value arrived but that NCCL's choice went around for some size."""
    schedulers = list(evidence.get("schedulers") or [])
    facts = evidence.get("facts") or {}
    shape = facts.get("model_shape") or {}
    logged = {s.get("rank"): s for s in schedulers if (s.get("nccl") or {}).get("tuning")}
    rank0 = logged.get(0) or next(iter(logged.values()), None)
    tuning = _allreduce_entries((rank0 or {}).get("nccl", {}).get("tuning") or [])
    versions = [str((s.get("nccl") or {}).get("version")) for s in schedulers if (s.get("nccl") or {}).get("version")]
    nccl = ncclenv.nccl_release(versions[0]) if versions else None
    allowed = _allowed(expected, nccl)
    sizes = phase_sizes(shape, tuning)
    result: dict[str, Any] = {"rows": [], "sizes": sizes, "shape": shape, "overridden": [],
                              "tuning_lines": sum((s.get("nccl") or {}).get("tuning_lines") or 0 for s in schedulers),
                              "logged_by": (rank0 or {}).get("pid"), "nccl": versions[0] if versions else None,
                              "summary": {st: 0 for st in USED_STATUSES}}
    if nranks == 1:
        result["note"] = "single rank: NCCL runs no all-reduce tuning with one rank (and SGLang builds no group)"
        return result
    if not sizes:
        result["note"] = shape.get("why") or "the launch flags and model config give no message sizes"
    for s in schedulers:
        for size in sizes:
            choices = [c for t in tuning if t["bytes"] == size["bytes"] for c in t["choices"]]
            row: dict[str, Any] = {"pid": s.get("pid"), "rank": s.get("rank"), "label": s.get("label"),
                                   "phase": size["phase"], "tokens": size["tokens"], "bytes": size["bytes"],
                                   "algo": None, "proto": None, "count": 0, "status": "unseen", "evidence": None,
                                   "note": size["how"]}
            if choices:
                top = max(choices, key=lambda c: c["count"])
                status, broke = _judge(choices, allowed)
                row.update(algo=top["algo"], proto=top["proto"], count=sum(c["count"] for c in choices),
                           status=status, evidence="nccl_tuning")
                if len(choices) > 1:
                    broke.append("NCCL chose differently across calls: " + ", ".join(
                        f"{c['algo']}/{c['proto']} {c['count']}x" for c in choices))
                if rank0 is not None and s.get("pid") != rank0.get("pid"):
                    row["evidence"] = "nccl_tuning_rank0"
                    broke.append(f"NCCL logs its choice on rank 0 only (pid {rank0.get('pid')}); every rank of a "
                                 "communicator runs the same one")
                row["note"] = "; ".join([size["how"], *broke])
            elif size["bytes"] is not None and tuning:
                row["note"] = f"{size['how']}; NCCL logged no all-reduce of {size['bytes']} bytes"
            result["rows"].append(row)
    over = {var for r in result["rows"] if r["status"] == "overridden"
            for var in ncclenv.SELECTION_VARS if var in str(r["note"])}
    result["overridden"] = sorted(over)
    result["summary"] = {st: sum(1 for r in result["rows"] if r["status"] == st) for st in USED_STATUSES}
    dead_logger = next((g for g in (evidence.get("ranks") or {}).get("gone") or [] if g.get("rank") == 0), None)
    if not tuning and dead_logger is not None:
        # NCCL logs its choices on rank 0 only: with that rank gone, the silence of the others says nothing about
        # NCCL_DEBUG_SUBSYS.
        pid = f" (pid {dead_logger['pid']})" if dead_logger.get("pid") is not None else ""
        result["note"] = (f"{dead_logger.get('label') or 'TP0'}{pid}, the rank NCCL logs its TUNING lines on, is "
                          "gone: what NCCL used cannot be read from the ranks that run")
    elif not tuning:
        result["note"] = ("NCCL logged no TUNING line: add TUNING to NCCL_DEBUG_SUBSYS (env: NCCL_DEBUG_SUBSYS: "
                          "INIT,ENV,TUNING) for a bounded check; NCCL 2.18-2.19 print none at INFO")
    return result
