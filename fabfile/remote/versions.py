"""SGLang versions: the one parser of the agent and the client, and what changed in which release.

Stdlib only and free of agent imports, so ``fabfile`` (the client) imports it as it is. SGLang versions have one
order, :func:`key` (PEP 440's: 0.5.20rc1 < 0.5.20 < 0.5.20.post1 < 0.5.21.dev3); a feature gate compares the
release a build carries the code of, :func:`feature_key` (the same order, with "0.5.20rc1" counted as 0.5.20: it
already has 0.5.20's endpoints), through :func:`at_least`; a table read from the wheels is looked up with
:func:`newest_not_newer`. The release each fact the tool relies on started in is a constant below (the table
"What changed in which release"): the agent's modules and the client ask these, so a reader finds every version
gate in one place. Facts that differ in every release (which NCCL variables SGLang sets, which flags it accepts)
are generated tables beside their users: ``sglang_env_facts.py`` (agent) and ``fabfile/plan/sglang_spec_facts.py``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

# The newest SGLang release the tool was checked against (its wheels in the contract tests). Defaults that need "some
# version" when none is recorded use it. The one place this literal is written in fabfile/ (the generated tables
# name it as a key among every other release).
NEWEST_SUPPORTED = "0.5.23"

# A PEP 440 version as pip and SGLang's own build (setuptools-scm / vcs-versioning) write them: "0.5.12",
# "v0.5.12", "0.5.15.post1", "0.5.20rc1", "0.5.21.dev12+g1a2b3c", "0.4.3.post4".
_VERSION_RE = re.compile(
    r"""^\s*v?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre>a|alpha|b|beta|c|rc|pre|preview)[-_.]?(?P<pre_n>\d*))?
    (?:(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post_n>\d*))|-(?P<post_implicit>\d+))?
    (?:[-_.]?dev[-_.]?(?P<dev_n>\d*))?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.X | re.I,
)
_PRE_ORDER = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}

# The development fallback SGLang's own version.py uses when neither _version.py nor the metadata is there.
DEV_FALLBACK = "0.0.0.dev0"


def valid(version: object) -> bool:
    return isinstance(version, str) and _VERSION_RE.match(version) is not None


# (release numbers without trailing zeros, pre-release kind, its number, post number or -1, 1 unless a dev build,
# dev number): compared as tuples, PEP 440's order.
Key = tuple[tuple[int, ...], int, int, int, int, int]
_FINAL = 3  # the pre-release kind of a version that is none


# Cached: a deploy's version check looks each table's versions up again for every flag and knob (knob_effects,
# newest_not_newer), ~5,700 parses per host per deploy, which were the largest part of the client's CPU in a
# parallel deploy (measured on 8 simulated hosts). A version's key never changes.
@functools.lru_cache(maxsize=4096)
def key(version: str) -> Key:
    """The one order of SGLang versions, PEP 440's: dev < pre < final < post, and a dev release of a post before
    that post. Raises ValueError on a string that is not a version."""
    m = _VERSION_RE.match(str(version))
    if not m:
        raise ValueError(f"not a version: {version!r}")
    rel = tuple(int(x) for x in m.group("release").split("."))
    while len(rel) > 1 and rel[-1] == 0:
        rel = rel[:-1]
    has_post = m.group("post_n") is not None or m.group("post_implicit") is not None
    post = int(m.group("post_n") or m.group("post_implicit") or 0) if has_post else -1
    dev = m.group("dev_n")
    if m.group("pre"):
        pre_kind, pre_n = _PRE_ORDER[m.group("pre").lower()], int(m.group("pre_n") or 0)
    elif dev is not None and not has_post:
        pre_kind, pre_n = -1, 0  # "0.5.21.dev3" comes before "0.5.21a1"
    else:
        pre_kind, pre_n = _FINAL, 0
    return rel, pre_kind, pre_n, post, 0 if dev is not None else 1, int(dev or 0)


@functools.lru_cache(maxsize=4096)
def feature_key(version: str) -> Key:
    """:func:`key` of the release whose code ``version`` carries, what per-version facts of SGLang are keyed by: a
    pre-release or development build of X counts as X ("0.5.20rc1" has /ready), X.postN comes after X ("0.5.15.post1"
    already has code that 0.5.15 lacks), X.postN.devM counts as X.postN. Raises ValueError on a string that is not a
    version."""
    rel, _pre, _pre_n, post, _dev, _dev_n = key(version)
    return rel, _FINAL, 0, post, 1, 0


def newest_not_newer(version: str | None, known: Iterable[str]) -> str | None:
    """The newest of ``known`` (releases a table was read for) that is not newer than ``version`` by
    :func:`feature_key`: a host's version between two releases read has the facts of the lower one. None when
    ``version`` is none, not a version, or older than every one known."""
    if not valid(version):
        return None
    want = feature_key(str(version))
    below = [k for k in known if feature_key(k) <= want]
    return max(below, key=feature_key) if below else None


def at_least(version: str | None, minimum: str) -> bool:
    """``version`` >= ``minimum`` by :func:`feature_key`; False when the version is unknown or not one."""
    if not valid(version):
        return False
    return feature_key(str(version)) >= feature_key(minimum)


# ----------------------------------------------------------------------------------------------------
# What changed in which release: the first release that has each fact (test it with ``at_least(version, X)``; a
# pre-release of X counts as X). Evidence: the release wheels' source, named per line; the tests in brackets read
# the wheels (``wheels`` marker, ``$SPECDEPLOY_WHEEL_CACHE``) and fail when a release disagrees.

# bench_serving's ``--dataset-name random-ids`` (bench_serving.py's choices; 0.4.5's "random" samples ShareGPT,
# downloading it) [test_sglang_versions::test_bench_dataset_follows_the_release]. Post releases count: several facts
# below start in one (``python -m tools.contract --all`` reads every release).
BENCH_RANDOM_IDS = "0.4.5.post1"
# ``/health`` waits for the scheduler (http_server.py ``health``); before, 0.4.x answers 200 as soon as uvicorn is up,
# before warmup [test_sglang_versions::test_probe_fits_the_health_endpoint_of_the_release].
HEALTH_WAITS_FOR_SCHEDULER = "0.4.10.post2"
# ``--config FILE`` (server_args.py, a YAML file of flag names): secret flags can stay off the command line.
CONFIG_FILE = "0.5.3"
# The ``Decode batch`` line prints ``accept rate`` (scheduler_metrics_mixin.py), meaning accept_len / (steps + 1)
# [test_sglang_versions::test_decode_line_notes_follow_the_release].
ACCEPT_RATE_PRINTED = "0.5.3.post2"
# ... meaning accept_len / draft_tokens from here.
ACCEPT_RATE_PER_DRAFT_TOKEN = "0.5.5.post3"
# ``/server_info`` (http_server.py); ``/get_server_info`` stays as the older name.
SERVER_INFO = "0.5.6"
# Per-request ``meta_info.spec_accept_histogram`` (tokenizer_manager.py ``_calculate_spec_decoding_metrics``; until
# 0.5.20). Before it the agent derives the histogram from the streamed tokens (``metrics.histogram_from_stream``).
ACCEPT_HISTOGRAM = "0.5.9"
# The plugin system (``sglang/srt/plugins``, ``load_plugins_by_group``, ``SGLANG_PLUGINS``): patch mode ``plugin``
# and the ``auto`` mode's first choice [test_patch_wheels; test_sglang_versions::test_plugin_allowlist_...].
PLUGIN_SYSTEM = "0.5.11"
# ... and ``accept rate`` means (accept_len - 1) / (draft_tokens - 1) from here.
ACCEPT_RATE_PER_DRAFT = "0.5.11"
# The device timer: ``SGLANG_ENABLE_METRICS_DEVICE_TIMER`` + ``--enable-metrics`` feed
# ``sglang:forward_execution_seconds_total{category=...}`` (metrics_collector.py; eagerly ``decode``/``extend``/
# ``idle`` from model_runner.py, CUDA graphs ``forward_mode.name.lower()``, ``eagle_draft``, ``eagle_draft_extend``).
DEVICE_TIMER = "0.5.11"
# ``sglang:spec_verify_calls_total`` (metrics_collector.py): before it, verify passes are Σ meta_info.spec_verify_ct.
SPEC_VERIFY_CALLS = "0.5.13"
# An eager verify forward is timed as ``target_verify`` (eager_runner.py / model_runner.py); before, as ``extend``.
EAGER_VERIFY_CATEGORY = "0.5.15"
# ``meta_info.spec_correct_drafts_histogram`` and ``spec_num_correct_drafts`` counters (tokenizer_manager.py).
CORRECT_DRAFTS_HISTOGRAM = "0.5.12"
# ``--speculative-adaptive`` (+ ``--speculative-adaptive-config``; server_args.py, speculative/adaptive_spec_params.py):
# SGLang moves the step count itself (topk 1) [test_sweep_adaptive::test_the_boundaries_match_the_wheels].
SPECULATIVE_ADAPTIVE = "0.5.11"
# The ``sglang:spec_num_steps`` / ``sglang:spec_num_draft_tokens`` gauges (observability/metrics_collector.py): the
# step count the adaptive mode is on [test_sweep_adaptive::test_the_boundaries_match_the_wheels].
SPEC_NUM_STEPS_GAUGE = "0.5.13"
# ``/ready`` (http_server.py): 200 once the server is up, answered at once
# [test_sglang_versions::test_probe_fits_the_health_endpoint_of_the_release].
READY_ENDPOINT = "0.5.20"

# The environment variables ``inv tune``'s remedies may set, by the first release that reads each (and, for one, the
# release that dropped it), from ../shared/reference/tune.md §1 (wheels read there; cited per name).
SET_CPU_AFFINITY_ENV = "0.5.3"  # SGLANG_SET_CPU_AFFINITY, srt/utils/common.py (all 0.5.x)
DRAFT_EXTEND_GRAPH_ENV = "0.5.16"  # SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH
METADATA_GLUE_GRAPH_ENV = "0.5.20"  # SGLANG_ENABLE_METADATA_GLUE_GRAPH, decode_cuda_graph_runner.py:548
PCIE_IPC_ALLREDUCE_ENV = "0.5.23"  # SGLANG_ENABLE_PCIE_IPC_ALLREDUCE, environ.py:1539
SPEC_V2_ENV = "0.5.5"  # SGLANG_ENABLE_SPEC_V2 read from 0.5.5 (0.5.4: --enable-beta-spec) ...
SPEC_V2_ENV_REMOVED = "0.5.14"  # ... and removed in 0.5.14: V2 always runs (speculative_hook.py:69)

# Changes read without a gate (the code takes whichever form it finds, so no constant): the version files
# (``version.py``, then the build-generated ``_version.py`` from 0.5.7: ``facts.sglang_info``), the ``Decode batch``
# line's formats (``metrics.parse_decode_line``), the draft counters' names (0.5.6 / 0.5.11 / 0.5.12:
# ``metrics.spec_from_meta``), ``sglang.bench_serving`` moving to ``sglang.benchmark.serving`` in 0.5.15 (a shim
# stays: ``bench.bench_serving_help``).

# SGLang's HEALTH_CHECK_TIMEOUT (http_server.py, the same in every release from 0.4.5 to NEWEST_SUPPORTED): how long
# its health-generate handler waits for the one-token answer before it says 503; the server's
# SGLANG_HEALTH_CHECK_TIMEOUT overrides it.
HEALTH_CHECK_TIMEOUT_S = 20


# sglang_router's own health endpoint, and the one of each worker it reads before it routes to that worker (a
# router is no SGLang server: no version of its own decides this).
ROUTER_HEALTH_PATH = "/health"


def readiness_path(version: str, node_rank: int = 0) -> str:
    """The cheapest endpoint whose 200 means "ready" on this version: every probe of a server's health (a deploy's
    wait, ``status``, ``watch``, a rollback's start) asks this one function.

    0.5.20+ has ``/ready`` (200 once the server is up, answered at once). 0.5.1 ... 0.5.19 ``/health`` waits for the
    scheduler (and on most of them runs a one-token generate); 0.4.x ``/health`` answers 200 as soon as uvicorn is up,
    before warmup, so only ``/health_generate`` means ready there. A multi-node rank >= 1 serves only SGLang's stub
    health server (``/ping``, ``/health``, ``/health_generate``), whatever the version: ``/health`` there.
    """
    if node_rank > 0:
        return "/health"
    v = version if valid(version) else NEWEST_SUPPORTED
    if at_least(v, READY_ENDPOINT):
        return "/ready"
    if at_least(v, HEALTH_WAITS_FOR_SCHEDULER):
        return "/health"
    return "/health_generate"


def server_info_paths(version: str) -> tuple[str, ...]:
    """Where this version answers its server info, newest name first."""
    return ("/server_info", "/get_server_info") if at_least(version, SERVER_INFO) else ("/get_server_info",)


def has_config_file(version: str | None) -> bool:
    """Whether SGLang takes ``--config FILE`` (None, a version not known yet: assume it does)."""
    return version is None or at_least(version, CONFIG_FILE)
