"""The tool's per-candidate all-reduce model, for a ``--predict`` sweep's NCCL skip (``plan/nccl_skip``). Pure.

What it holds is NCCL's documented behaviour (../shared/reference/profiling.md; the value grammar is NCCL's own,
read by ``remote/evidence/ncclenv.selection``):

* NCCL's tuner picks, per all-reduce and message size, the (algorithm, protocol) its cost model calls fastest among
  the enabled ones: time = latency + bytes moved / bandwidth. ``NCCL_PROTO`` and ``NCCL_ALGO`` only narrow that
  choice (lists, ``^`` to exclude, per-collective entries from NCCL 2.24).
* LL: the lowest latency and about half the bandwidth (4 B of data per 8 B store); Simple: the opposite; LL128:
  about 95 % of the bandwidth at a latency between the two, and on by default only over NVLink-class paths (on
  PCIe NCCL chooses between LL and Simple unless NCCL_PROTO names LL128).
* A ring all-reduce moves 2 (n − 1) / n of the message over each link in 2 (n − 1) steps; a one-node tree is a
  chain, a little slower than the ring. PCIe carries an order of magnitude less than NVLink.

The latencies and bandwidths below are the tool's round figures of that order, not a measurement of any host: the
model is a ratio, calibrated on the first candidate's measured all-reduce time. For a pass whose messages are
``bytes`` long (hidden size × tokens × dtype bytes; tokens = requests per pass, times the draft tokens for verify),
another candidate's all-reduce ms per pass = the measured ms × T(its choice, bytes) / T(the first's choice, bytes):
the absolute speed of the host cancels, what is left is the shape of latency against bandwidth by size, which is
NCCL's. The figure handed to the skip rule is the optimistic end of that ratio: the candidate's latency taken
``LAT_MARGIN`` lower and the first's as much higher (the latencies are the least known part: measured gaps between
LL and Simple on small messages run wider than NCCL's own tables), and the bandwidth parts ``BW_MARGIN`` apart (the
protocols' shares of the bandwidth are NCCL's documented facts).

None (the skip rule then sets the candidate's all-reduce time to zero, the bound no setting beats) where the tool
cannot model a candidate: it differs from the first in a variable other than NCCL_PROTO/NCCL_ALGO (channel counts,
buffer sizes, the P2P level move bandwidth in ways this model does not hold), the GPUs' link is not known to be PCIe
or NVLink, or the pass's message size is not known (the model's config.json gives no hidden size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabfile.remote.evidence import ncclenv

MODELLED = ("NCCL_PROTO", "NCCL_ALGO")
LAT_MARGIN = 0.5  # the optimistic end: each latency may be off by half
BW_MARGIN = 0.1  # and each bandwidth share by a tenth
PATHS = ("pcie", "nvlink")
BUS_BYTES_PER_US = {"pcie": 20_000.0, "nvlink": 300_000.0}  # what Simple reaches per link
PROTO_BW = {"LL": 0.5, "LL128": 0.95, "Simple": 1.0}  # share of the link's bandwidth each protocol carries data at
BASE_LAT_US = {"LL": 6.6, "LL128": 7.5, "Simple": 8.4}  # per all-reduce: LL lowest, Simple highest
STEP_LAT_US = {"pcie": {"LL": 1.0, "LL128": 1.9, "Simple": 5.7}, "nvlink": {"LL": 0.6, "LL128": 1.25, "Simple": 3.4}}
ALGO_BW = {"Ring": 1.0, "Tree": 1 / 1.15}  # a one-node tree is a chain: a little under the ring
DEFAULT_ALGOS = frozenset(ALGO_BW)


def enabled(tuning: Mapping[str, str], path: str) -> tuple[frozenset[str], frozenset[str]]:
    """The AllReduce protocols and algorithms the candidate's NCCL_PROTO/NCCL_ALGO leave NCCL on ``path`` (unset:
    LL and Simple, LL128 on NVLink only; Ring and Tree). A value NCCL refuses never gets here (the sweep's flags
    checked it)."""
    protos = frozenset({"LL", "Simple"} | ({"LL128"} if path == "nvlink" else set()))
    algos = DEFAULT_ALGOS
    if tuning.get("NCCL_PROTO") is not None:
        protos = ncclenv.selection("NCCL_PROTO", tuning["NCCL_PROTO"])["AllReduce"] & frozenset(PROTO_BW)
        if path != "nvlink" and not _names_ll128(tuning["NCCL_PROTO"]):
            protos -= {"LL128"}  # an exclusion list (^LL) leaves LL128 at its default: off away from NVLink
    if tuning.get("NCCL_ALGO") is not None:
        algos = ncclenv.selection("NCCL_ALGO", tuning["NCCL_ALGO"])["AllReduce"] & DEFAULT_ALGOS
    return protos, algos


def _names_ll128(value: str) -> bool:
    """Whether an NCCL_PROTO value asks for LL128 by name (not merely leaves it, as ``^LL`` does)."""
    for entry in value.split(";"):
        prefix, sep, items = entry.partition(":")
        items = items if sep else prefix
        if (not sep or prefix.lower() == "allreduce") and not items.startswith("^") and \
                "ll128" in [i.strip().lower() for i in items.split(",")]:
            return True
    return False


def parts_us(nbytes: float, tp: int, path: str, proto: str, algo: str) -> tuple[float, float]:
    """(latency, transfer) of one all-reduce of ``nbytes`` over ``tp`` ranks with one choice, in µs."""
    moved = 2.0 * (tp - 1) / max(tp, 1) * nbytes
    latency = BASE_LAT_US[proto] + 2 * max(tp - 1, 1) * STEP_LAT_US[path][proto]
    return latency, moved / (BUS_BYTES_PER_US[path] * PROTO_BW[proto] * ALGO_BW[algo])


def message_us(nbytes: float, tp: int, path: str, protos: frozenset[str], algos: frozenset[str],
               lat: float = 1.0, bw: float = 1.0) -> float | None:
    """The model's time of one all-reduce of ``nbytes`` over ``tp`` ranks: the fastest enabled choice, its latency
    times ``lat`` and its transfer times ``bw`` (the margins' ends); None: the settings leave nothing the model
    knows (e.g. only NVLS or CollNet)."""
    times = [lat * la + bw * tr for p in protos for a in algos for la, tr in [parts_us(nbytes, tp, path, p, a)]]
    return min(times) if times else None


def unmodelled(first: Mapping[str, str], other: Mapping[str, str]) -> list[str]:
    """The NCCL variables the two candidates set differently that this model does not hold."""
    return sorted(k for k in set(first) | set(other) if k not in MODELLED and first.get(k) != other.get(k))


@dataclass(frozen=True)
class CandidateModel:
    """``model(candidate, row)`` for ``nccl_skip.skips``: the candidate's optimistic all-reduce ms per pass in that
    row's configuration, None where the tool cannot model it (``why`` says why)."""

    first: Mapping[str, str]  # the first candidate's NCCL tuning values (what it was deployed with)
    others: Mapping[str, Mapping[str, str]]  # each other candidate's
    context: Mapping[str, Any]  # the profile's allreduce_context: interconnect, tp, hidden_size, dtype_bytes
    why: dict[str, str] = field(default_factory=dict)

    def __call__(self, candidate: str, row: Mapping[str, Any]) -> float | None:
        return self.predict(candidate, row, optimistic=True)

    def predict(self, candidate: str, row: Mapping[str, Any], optimistic: bool = False) -> float | None:
        """The candidate's all-reduce ms per pass: the ratio model's point figure, or with ``optimistic`` its
        fast end (the candidate's latency and transfer at their margins' low ends, the first's at their high)."""
        path = str(self.context.get("interconnect") or "unknown")
        tp = int(self.context.get("tp") or 0)
        ar = row.get("allreduce") or {}
        other = self.others.get(candidate)
        diff = unmodelled(self.first, other) if other is not None else []
        if other is None:
            self.why[candidate] = "the tool has no NCCL values for it"
        elif diff:
            self.why[candidate] = f"it differs in {', '.join(diff)}, which the model does not hold"
        elif path not in PATHS:
            self.why[candidate] = f"the GPUs' link is {path}, not PCIe or NVLink"
        elif tp < 2 or not ar.get("bytes"):
            self.why[candidate] = "the all-reduce message size is not known (the model's config.json gives no " \
                                  "hidden size)"
        if candidate in self.why or other is None:
            return None
        nbytes = float(ar["bytes"])
        lo, hi = (1 - LAT_MARGIN, 1 - BW_MARGIN), (1 + LAT_MARGIN, 1 + BW_MARGIN)
        mine = message_us(nbytes, tp, path, *enabled(self.first, path), *(hi if optimistic else (1.0, 1.0)))
        theirs = message_us(nbytes, tp, path, *enabled(other, path), *(lo if optimistic else (1.0, 1.0)))
        if not mine or theirs is None:
            self.why[candidate] = "its NCCL_PROTO/NCCL_ALGO leave only choices the model does not hold"
            return None
        return float(ar["ms_per_pass"]) * theirs / mine


def allreduce_figures(profile: Mapping[str, Any], speculative: bool, draft_tokens: int | None,
                      period_ms: float | None = None) -> dict[str, Any] | None:
    """``row["allreduce"]`` from one ``profile`` answer with a trace (rank 0's): verify's pass for a speculative
    configuration, decode's for the baseline; its NCCL all-reduce ms (``ms_per_pass``: what NCCL settings move;
    ``allreduce_ms_per_pass`` adds SGLang's custom all-reduce) and GPU span per pass, the period the pass repeats
    at (the trace's cycle; for decode, ``period_ms``: the bench's TPOT), the calls, the message size. None when the
    trace shows no such pass."""
    ranks = [r for r in profile.get("ranks") or [] if isinstance(r.get("trace"), dict)]
    if not ranks:
        return None
    anatomy = min(ranks, key=lambda r: int(r.get("rank") or 0))["trace"]
    phase = "verify" if speculative else "decode"
    k = (anatomy.get("kernels") or {}).get(phase)
    if not isinstance(k, dict) or not k.get("span_ms"):
        return None
    ctx = profile.get("allreduce_context") or {}
    tokens = None
    if k.get("batch"):
        tokens = float(k["batch"]) * (int(draft_tokens or 1) if speculative else 1)
    per_token = (ctx.get("hidden_size") or 0) * (ctx.get("dtype_bytes") or 0)
    cycle = (anatomy.get("cycle") or {}).get("ms") if speculative else period_ms
    total = float((k.get("classes_ms") or {}).get("allreduce") or 0.0)
    # What NCCL's settings move: its own kernels' time (SGLang's custom all-reduce is not NCCL's; a trace read
    # before the tool split them counts every all-reduce kernel as NCCL's).
    nccl = float(k["nccl_ms"]) if isinstance(k.get("nccl_ms"), (int, float)) else total
    return {"phase": phase, "ms_per_pass": nccl, "allreduce_ms_per_pass": total,
            "pass_ms": float(k["span_ms"]), "period_ms": float(cycle) if cycle else None,
            "calls": k.get("allreduce_calls"), "mean_us": k.get("allreduce_mean_us"), "passes": k.get("passes"),
            "tokens": tokens, "bytes": tokens * per_token if tokens and per_token else None,
            "source": "measured by SGLang's profiler trace (NCCL's all-reduce kernels in the pass; period: "
                      + ("the trace's cycle" if speculative else "the benchmark's TPOT") + ")",
            "profile_id": profile.get("profile_id")}
