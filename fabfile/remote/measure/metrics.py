"""Parsers for SGLang's speculative-decoding figures, from every channel SGLang offers.

- ``Decode batch`` log lines of every version's format (read from the wheels' scheduler log code): 0.4.x ends
  ``Decode batch.``; 0.5.1–0.5.8 end the line with ``", "``, gone from 0.5.9; 0.5.4 prints ``Decode batch [N],``;
  hybrid models replace ``#token``/``token usage`` with ``#full token``/``full token usage``/``#swa token``/
  ``swa token usage`` (or add ``mamba num``/``mamba usage``); 0.5.11+ may add ``cap len``/``block accept len``.
- ``accept rate`` (printed from 0.5.4) means accept_len/(steps+1) on 0.5.4–0.5.5, accept_len/draft_tokens on
  0.5.6–0.5.10 and (accept_len-1)/(draft_tokens-1) from 0.5.11 (the same figure only for topk 1, where
  draft_tokens = steps+1); :func:`draft_acceptance` gives the version-independent figure.
- ``/server_info`` ``internal_states[0].avg_spec_accept_length`` (cumulative since the server started).
- ``/metrics`` (Prometheus text, ``--enable-metrics``): ``sglang:spec_accept_length`` and friends.
- per-request ``meta_info``: ``spec_verify_ct``, ``completion_tokens`` and the version's draft counters.
- ``python -m sglang.bench_serving``'s result block (``"{:<40} {:<10.2f}"`` lines).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, Union

from .. import versions

# One ``Decode batch`` line's fields by name (``_NAMES``): numbers and flags, and the line's time and ranks.
DecodeFields = dict[str, Union[float, bool, str]]


class DecodeSummary(TypedDict, total=False):
    """The ``Decode batch`` lines of a window: how many, their mean figures, and the last line's fields."""

    lines: int
    accept_len: float
    accept_rate: float
    gen_throughput: float
    last: DecodeFields


class ServerSpec(TypedDict, total=False):
    """The speculative configuration ``/server_info`` reports, and its server-wide figures."""

    algorithm: str | None
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    version: str | None
    avg_spec_accept_length: float
    last_gen_throughput: float


class SpecMeta(TypedDict, total=False):
    """Totals over requests' ``meta_info`` (``spec_from_meta``)."""

    requests: int
    accept_len: float
    verify_ct: int
    completion_tokens: int
    draft_acceptance: float

_FIELD = re.compile(r"(#?[A-Za-z][A-Za-z ._()/-]*?):\s*([-+]?[0-9.]+(?:e[-+]?\d+)?|True|False)")
_PREFIX = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?)(?P<ranks>(?: [A-Z_]+\d+)*)\]\s*")

_NAMES = {
    "#running-req": "running_req", "#token": "tokens", "token usage": "token_usage",
    "#full token": "tokens", "full token usage": "token_usage", "#swa token": "swa_tokens",
    "swa token usage": "swa_token_usage", "mamba num": "mamba_num", "mamba usage": "mamba_usage",
    "accept len": "accept_len", "accept rate": "accept_rate", "cuda graph": "cuda_graph",
    "gen throughput (token/s)": "gen_throughput", "#queue-req": "queue_req", "cap len": "cap_len",
    "block accept len": "block_accept_len",
}
_INTS = ("running_req", "tokens", "queue_req", "swa_tokens", "mamba_num")


def parse_decode_line(line: str) -> DecodeFields | None:
    """One ``Decode batch`` log line → its fields (None for any other line)."""
    idx = line.find("Decode batch")
    if idx < 0:
        return None
    out: DecodeFields = {}
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
            out[name] = int(num) if name in _INTS else num
    out["trailing_comma"] = line.rstrip("\n").endswith(", ")
    return out


def accept_rate_meaning(version: str) -> str:
    """What the ``accept rate`` of this version's ``Decode batch`` line divides (checked against the wheels by
    tests/wheels/test_sglang_versions.py)."""
    if versions.at_least(version, versions.ACCEPT_RATE_PER_DRAFT):
        return "(accept_len - 1) / (draft_tokens - 1): share of drafted tokens accepted"
    if versions.at_least(version, versions.ACCEPT_RATE_PER_DRAFT_TOKEN):
        return "accept_len / draft_tokens: tokens per verify step over tokens verified"
    if versions.at_least(version, versions.ACCEPT_RATE_PRINTED):
        return "accept_len / (steps + 1): tokens per verify step over steps + 1 (not draft_tokens when topk > 1)"
    return f"not printed before {versions.ACCEPT_RATE_PRINTED}"


def draft_acceptance(accept_len: float | None, draft_tokens: int | None) -> float | None:
    """The share of drafted tokens accepted, (accept_len-1)/(draft_tokens-1): the same meaning on every version."""
    if accept_len is None or not draft_tokens or draft_tokens < 2:
        return None
    return (accept_len - 1.0) / (draft_tokens - 1)


def summarize_decode_lines(lines: Iterable[str]) -> DecodeSummary:
    """Every ``Decode batch`` line in ``lines`` → count, mean accept len/rate, mean and last gen throughput."""
    parsed = [d for d in (parse_decode_line(ln) for ln in lines) if d is not None]
    out: DecodeSummary = {"lines": len(parsed)}
    if not parsed:
        return out

    def mean(key: str) -> float | None:
        vals = [float(d[key]) for d in parsed if key in d]
        return sum(vals) / len(vals) if vals else None

    accept_len, accept_rate, gen_throughput = mean("accept_len"), mean("accept_rate"), mean("gen_throughput")
    if accept_len is not None:
        out["accept_len"] = accept_len
    if accept_rate is not None:
        out["accept_rate"] = accept_rate
    if gen_throughput is not None:
        out["gen_throughput"] = gen_throughput
    out["last"] = parsed[-1]
    return out


# -- Prometheus text ------------------------------------------------------------------------------------------------
_PROM = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def served(record: Mapping[str, Any] | None) -> bool:
    """Whether the recorded server has ``/metrics``: SGLang serves it only with ``--enable-metrics``, and every GET
    without it leaves a ``GET /metrics 404`` line in the server's log (``inv watch`` asked every 2 s). A record
    without its launch line (an older one) is asked, as before."""
    argv = ((record or {}).get("launch") or {}).get("argv")
    return not isinstance(argv, list) or "--enable-metrics" in argv


# SGLang's default --decode-log-interval (server_args.decode_log_interval in every wheel read): a Decode batch line,
# and the gauges set with it, cover that many decode forwards.
DECODE_LOG_INTERVAL = 40


def decode_log_interval(record: Mapping[str, Any] | None) -> int:
    """The forwards one Decode batch line (and its gauges) covers: the recorded launch's --decode-log-interval, else
    SGLang's default. The window a "last Decode line" figure is over, named beside it."""
    argv = ((record or {}).get("launch") or {}).get("argv")
    if isinstance(argv, list):
        for i, a in enumerate(argv):
            value = a.split("=", 1)[1] if str(a).startswith("--decode-log-interval=") else \
                argv[i + 1] if a == "--decode-log-interval" and i + 1 < len(argv) else None
            if value is not None:
                try:
                    return max(1, int(value))
                except ValueError:
                    break
    return DECODE_LOG_INTERVAL


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus exposition text → ``{metric: [(labels, value), ...]}`` (comments and bad lines skipped)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group("labels") or ""))
        out.setdefault(m.group("name"), []).append((labels, value))
    return out


_PROM_SPEC = {
    "sglang:spec_accept_length": "accept_len", "sglang:spec_accept_rate": "accept_rate",
    "sglang:spec_cap_length": "cap_len", "sglang:spec_block_accept_length": "block_accept_len",
    "sglang:spec_num_steps": "num_steps", "sglang:spec_num_draft_tokens": "num_draft_tokens",
    "sglang:spec_verify_calls_total": "verify_calls_total", "sglang:gen_throughput": "gen_throughput",
    "sglang:num_running_reqs": "running_req", "sglang:generation_tokens_total": "generation_tokens_total",
}


def spec_from_prometheus(text: str) -> dict[str, float]:
    """The speculative figures in a ``/metrics`` page; the tp_rank 0 sample when several ranks report."""
    metrics = parse_prometheus(text)
    out: dict[str, float] = {}
    for name, key in _PROM_SPEC.items():
        samples = metrics.get(name)
        if not samples:
            continue
        rank0 = [v for labels, v in samples if labels.get("tp_rank", "0") == "0"]
        out[key] = (rank0 or [samples[0][1]])[0]
    return out


# -- /server_info ---------------------------------------------------------------------------------------------------
def spec_from_server_info(info: Mapping[str, Any]) -> ServerSpec:
    """Speculative configuration and the server-wide accept length from a ``/server_info`` document."""
    states = info.get("internal_states") or [{}]
    state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    out: ServerSpec = {
        "algorithm": info.get("speculative_algorithm"),
        "steps": info.get("speculative_num_steps"),
        "topk": info.get("speculative_eagle_topk"),
        "draft_tokens": info.get("speculative_num_draft_tokens"),
        "version": info.get("version"),
    }
    if state.get("avg_spec_accept_length") is not None:
        out["avg_spec_accept_length"] = float(state["avg_spec_accept_length"])
    if state.get("last_gen_throughput") is not None:
        out["last_gen_throughput"] = float(state["last_gen_throughput"])
    return out


# -- per-request meta_info ------------------------------------------------------------------------------------------
def spec_from_meta(metas: Iterable[dict[str, Any]]) -> SpecMeta:
    """Totals over requests' ``meta_info``: accept length = Σ completion_tokens / Σ spec_verify_ct.

    The accept rate comes from the version's draft counters: ``spec_accept_token_num``/``spec_draft_token_num``
    (0.5.6–0.5.10), ``spec_accepted_drafts``/``spec_proposed_drafts`` (0.5.11) or
    ``spec_num_correct_drafts``/``spec_num_proposed_drafts`` (0.5.12+).
    """
    tokens = verify = accepted = proposed = 0
    n = 0
    have_counts = False
    for m in metas:
        if not m or m.get("spec_verify_ct") is None:
            continue
        n += 1
        tokens += int(m.get("completion_tokens") or 0)
        verify += int(m.get("spec_verify_ct") or 0)
        for a_key, p_key in (("spec_accept_token_num", "spec_draft_token_num"),
                             ("spec_accepted_drafts", "spec_proposed_drafts"),
                             ("spec_num_correct_drafts", "spec_num_proposed_drafts")):
            if m.get(a_key) is not None and m.get(p_key) is not None:
                accepted += int(m[a_key])
                proposed += int(m[p_key])
                have_counts = True
                break
    out: SpecMeta = {"requests": n}
    if verify:
        out["accept_len"] = tokens / verify
        out["verify_ct"] = verify
        out["completion_tokens"] = tokens
    if have_counts and proposed:
        out["draft_acceptance"] = accepted / proposed
    return out


# -- accepted drafts per verify pass ---------------------------------------------------------------------------------
# Which SGLang returns the per-request histogram (read in the wheels' tokenizer_manager.py,
# ``_calculate_spec_decoding_metrics``): ``spec_accept_histogram`` from ``versions.ACCEPT_HISTOGRAM`` (0.5.9) to
# 0.5.20, ``spec_correct_drafts_histogram`` from ``versions.CORRECT_DRAFTS_HISTOGRAM`` (0.5.12); before 0.5.9
# neither. Both keys are tried (whichever the server sent), so no version gate. Index j counts the verify passes
# that accepted j drafts.
HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def histogram_from_meta(meta: dict[str, Any]) -> list[int] | None:
    for key in HISTOGRAM_KEYS:
        h = meta.get(key)
        if isinstance(h, list) and h and all(isinstance(x, int) for x in h):
            return list(h)
    return None


def histogram_from_stream(chunk_tokens: list[int], verify_ct: int | None) -> list[int] | None:
    """Accepted drafts per verify pass from the tokens each streamed chunk brought: SGLang streams the prefill's
    token first, then each verify pass's tokens together (1 + accepted drafts). Trusted only when the chunks after
    the first are exactly the request's ``spec_verify_ct`` passes (coalesced chunks would inflate it); the last pass
    is left out, as ``max_new_tokens`` may have cut it short."""
    if not verify_ct or len(chunk_tokens) != int(verify_ct) + 1 or chunk_tokens[0] != 1:
        return None
    hist: list[int] = []
    for n in chunk_tokens[1:-1]:
        j = n - 1
        if j < 0:
            return None
        if len(hist) <= j:
            hist.extend([0] * (j + 1 - len(hist)))
        hist[j] += 1
    return hist or None


def add_histograms(a: list[int], b: list[int]) -> list[int]:
    out = list(a) + [0] * max(0, len(b) - len(a))
    for i, x in enumerate(b):
        out[i] += x
    return out


# -- how well a throughput is known ---------------------------------------------------------------------------------
_T95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t95(df: int) -> float:
    """Two-sided 95 % Student-t quantile (table, the next smaller df where not listed; 1.96 beyond 120)."""
    if df <= 0:
        return float("inf")
    if df > 120:
        return 1.96
    return _T95[max(k for k in _T95 if k <= df)]


def throughput_ci(tokens: list[float], seconds: list[float]) -> float | None:
    """Relative half-width of the 95 % confidence interval of a throughput Σtokens/Σseconds over requests (the ratio
    estimator; with C requests in flight the served tok/s is C times it, so the relative width is the same).
    None with fewer than 2 requests."""
    n = len(tokens)
    if n < 2 or sum(seconds) <= 0 or sum(tokens) <= 0:
        return None
    r = sum(tokens) / sum(seconds)
    resid = [tokens[i] - r * seconds[i] for i in range(n)]  # (no zip(strict=): the agent runs on Python 3.9)
    var = sum(x * x for x in resid) / (n - 1)
    se = math.sqrt(var / n) / (sum(seconds) / n)
    return t95(n - 1) * se / r


# -- bench_serving output -------------------------------------------------------------------------------------------
_BENCH_KEYS = {
    "Successful requests": "completed", "Benchmark duration (s)": "duration_s",
    "Request throughput (req/s)": "request_throughput", "Input token throughput (tok/s)": "input_tok_s",
    "Output token throughput (tok/s)": "output_tok_s", "Peak output token throughput (tok/s)": "peak_output_tok_s",
    "Total token throughput (tok/s)": "total_tok_s", "Concurrency": "concurrency", "Accept length": "accept_len",
    "Total input tokens": "input_tokens", "Total generated tokens": "output_tokens",
}
_BENCH_LINE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z0-9 ()/._-]*?):\s+(?P<value>[-+]?[0-9.]+(?:e[-+]?\d+)?)\s*$")
_LAT = re.compile(r"^(?P<stat>Mean|Median|P\d+|Max|Min|Std) (?P<what>E2E Latency|TTFT|TPOT|ITL) \(ms\)$")
_LAT_KEYS = {"E2E Latency": "e2e_ms", "TTFT": "ttft_ms", "TPOT": "tpot_ms", "ITL": "itl_ms"}


def parse_bench_serving(text: str) -> dict[str, Any]:
    """``sglang.bench_serving``'s printed result block → throughputs, accept length and latency percentiles."""
    out: dict[str, Any] = {}
    for raw in text.splitlines():
        m = _BENCH_LINE.match(raw)
        if not m:
            continue
        key, value = m.group("key").strip(), float(m.group("value"))
        lat = _LAT.match(key)
        if lat:
            stat = lat.group("stat").lower()
            out.setdefault(_LAT_KEYS[lat.group("what")], {})[stat] = value
        elif key in _BENCH_KEYS:
            out[_BENCH_KEYS[key]] = int(value) if key in ("Successful requests", "Total input tokens",
                                                          "Total generated tokens") else value
    return out


# -- statistics -----------------------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), ``q`` in 0..100; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def distribution(values: list[float], qs: tuple[int, ...] = (50, 95, 99)) -> dict[str, float | None]:
    """mean, median, the given percentiles and max of ``values`` (empty dict for no values)."""
    if not values:
        return {}
    out: dict[str, float | None] = {"mean": sum(values) / len(values), "median": percentile(values, 50),
                                    "max": max(values)}
    for q in qs:
        if q != 50:
            out[f"p{q}"] = percentile(values, q)
    return out
