"""The agent protocol's shared vocabulary: verb names, error kinds and request shapes, imported by BOTH the host
agent and the client.

One table, so the two sides cannot drift: the agent raises ``AgentError(kind, ...)`` with a kind listed here, and the
client turns the kind's ``category`` into its exception class (and exit code) and falls back on the kind's ``hint``
when the agent sent none. ``tests/unit/remote/test_protocol.py`` reads the agent's source and fails when a raised kind
is missing here, or a kind here is raised nowhere. Stdlib only, Python 3.9+ (it runs on the host too).

The request shapes (``TypedDict``: plain dicts at run time, so the wire format is whatever JSON the dict makes) are
annotated on the client where a request is built and on the agent where it is read, so mypy checks that both
sides name the same keys with the same types. The agent cannot trust the wire to match (an older client, a record
written by an older agent): it still reads optional keys with ``.get``. Under the future import a TypedDict body's
annotations stay strings (Python 3.9 wraps them in ``ForwardRef`` and only compiles them), so ``int | None`` is
safe there; ``tests/unit/remote/test_agent_pythons.py`` imports this module under 3.9 to keep it so.
"""

from __future__ import annotations

from typing import Any, TypedDict

from .versions import PLUGIN_SYSTEM

# Every verb the agent answers (``fabfile/remote/verbs.py``'s TABLE has exactly these keys).
VERBS: tuple[str, ...] = (
    "facts", "deploy", "attach", "stop", "status", "logs", "gpus", "stale", "adopt", "records", "redeploy", "cancel",
    "router_start", "router_stop", "router_worker", "watch", "bench", "evidence", "patch_apply", "patch_rollback",
    "patch_status", "profile",
)

# What the client makes of a kind. Categories name the client's exception classes (``fabfile/errors.py``):
CATEGORIES: tuple[str, ...] = (
    "preflight", "lock_held", "patch", "gpu_busy", "launch", "bench", "agent_crash", "env_not_proven", "remote",
    "unsafe_path", "usage", "accept_gate",
)

# kind -> (category, hint used when the agent's error carries none).
ERROR_KINDS: dict[str, tuple[str, str]] = {
    # the protocol itself
    "bad_request": ("agent_crash", "the client and the host's agent disagree: this is a bug in specdeploy"),
    "deadline": ("remote", "raise the timeout or look at the host's load"),
    "internal_error": ("agent_crash", "this is a bug in specdeploy: send the traceback file named above"),
    "disk_full": ("remote", "free space on the host (state_dir and log disk), then run the command again"),
    "unsafe_path": ("unsafe_path", "use a directory only the deploying user can write"),
    "no_server": ("usage", "start the server first, or deploy with specdeploy"),
    # one deploy per host
    "lock_held": ("lock_held", "wait for it (--lock-wait SECONDS), follow it with `inv status`, or stop it with "
                               "`inv cancel`"),
    "patch_busy": ("lock_held", "another specdeploy command is changing the patches on this host: retry when it ends"),
    "cancelled": ("launch", "the deploy was cancelled on purpose; deploy again when you want a server"),
    "deploy_lost": ("remote", "run `inv status` to see what runs now"),
    # patches
    "bad_version": ("patch", "the host's SGLang reports a version specdeploy cannot parse: report it"),
    "bad_mode": ("patch", "choose another --patch-mode"),
    "mode_unsupported": ("patch", "choose another --patch-mode (auto picks one this version supports)"),
    "site_packages_missing": ("preflight", "check the host's `python` in the inventory: its SGLang install moved"),
    "version_mismatch": ("patch", "SGLang changed on the host since the preflight: deploy again"),
    "anchor_not_found": ("patch", f"use patch mode 'env' or 'plugin' ({PLUGIN_SYSTEM}+), or report the version"),
    "anchor_ambiguous": ("patch", f"use patch mode 'env' or 'plugin' ({PLUGIN_SYSTEM}+), or report the version"),
    "patch_verify_failed": ("patch", "nothing was written; use another patch mode and report the version"),
    "file_missing": ("patch", "check site_packages and the SGLang install"),
    "foreign_file": ("patch", "move the file away or use another patch mode"),
    "file_changed": ("patch", "someone edited a patched file: restore it (reinstall SGLang) or roll back first"),
    "rollback_refused": ("patch", "the file named was edited since specdeploy patched it; nothing was changed"),
    "manifest_corrupt": ("patch", "inspect the manifest by hand; the original files' backups are next to it"),
    "backup_corrupt": ("patch", "nothing was modified; reinstall SGLang for pristine sources, then clear "
                                "STATE/patches"),
    "write_failed": ("patch", "check free space and permissions on the host, then retry"),
    "rollback_verify_failed": ("patch", "another process wrote the files during the rollback: check them by hand"),
    # GPUs, the server
    "gpu_busy": ("gpu_busy", "see `inv gpus`; stop what holds the GPU or pick other GPUs"),
    "gpu_query": ("remote", "nvidia-smi misbehaves on this host: check the driver"),
    "fatal_log": ("launch", "see the log excerpt above"),
    "generate_failed": ("launch", "the server answers its readiness endpoint but not a generate: see `inv logs`"),
    "accept_gate": ("accept_gate", "the speculative configuration does not pay here: deploy the baseline or "
                                   "another configuration"),
    "process_died": ("launch", "see the log excerpt above"),
    "stalled": ("launch", "raise timeouts.stall if the model really loads that slowly"),
    "ready_timeout": ("launch", "raise --timeout if the model really loads that slowly"),
    "env_not_proven": ("env_not_proven", "see the table; the hint names the patch mode that fixes it"),
    "not_running": ("remote", "deploy first"),
    "bench_failed": ("bench", "see `inv logs` for the server's side"),
    "profile_failed": ("bench", "see `inv logs` for the server's side; `inv profile` without --trace needs no "
                                "profiler"),
    "profile_running": ("bench", "wait for it to end, or stop it: curl -X POST http://HOST:PORT/stop_profile"),
    "trace_too_big": ("bench", "profile fewer steps (--trace-steps) or a smaller load"),
    # fleet operations
    "no_record": ("remote", "deploy that configuration explicitly"),
    "script_changed": ("remote", "deploy that configuration explicitly"),
    "router_failed": ("launch", "see the router's log on its host"),
}


def category_of(kind: str) -> str:
    """The client-side category of an error kind; an unknown kind (a newer agent) is a plain remote error."""
    return ERROR_KINDS.get(kind, ("remote", ""))[0]


def hint_of(kind: str) -> str:
    return ERROR_KINDS.get(kind, ("remote", ""))[1]


# --- request shapes -------------------------------------------------------------------------------------------
# ``state_dir`` of the verbs other than deploy is filled in by ``HostSession.call`` (the host's own), so it is
# optional where the client builds the request. ``deadline_s`` is added to every request by the agent client.


class Timeouts(TypedDict):
    """A deploy's bounds in seconds (the inventory's ``timeouts``, ``ready`` from the plan)."""

    ready: float
    stall: float
    stop_grace: float
    gpu_clean: float
    lock_wait: float


class VerifySpec(TypedDict):
    """check-env right after readiness: the values to prove, and how long NCCL may take to print its lines."""

    expected: dict[str, str]
    settle_s: float


class LaunchSummary(TypedDict):
    """The launch command and environment with secrets masked (kept in the record, shown by ``inv status``)."""

    argv: list[str]
    env: dict[str, str]


class GateSpec(TypedDict):
    """Ready means it answers: the first real request's bound, and the accept-length gate (None: no gate)."""

    timeout: float
    accept_gate: float | None


class _DeployRequired(TypedDict):
    deploy_id: str
    client: str
    tool_version: str
    state_dir: str
    journal: str | None  # set by the client just before the call: where the agent writes its events too
    config_name: str
    plan_hash: str
    script: str
    log_path: str
    cwd: str
    listen: str
    port: int
    sglang_version: str
    target_gpus: list[int]
    gpu_idle_mib: int
    timeouts: Timeouts
    patch: dict[str, Any] | None  # a ``patch_apply`` request (``render.patchset.build_patch_request``)
    expected: dict[str, str]
    nccl_debug: bool
    verify: VerifySpec | None
    summary: LaunchSummary
    heartbeat_s: float
    ready_path: str | None  # None: the version's own readiness endpoint (``versions.readiness_path``)
    node: dict[str, Any] | None  # a multi-node rank (the inventory's ``node``), None on one node
    gates: GateSpec | None
    profile_dir: str  # SGLANG_TORCH_PROFILER_DIR: created 0700 before the start, never through a symlink
    measure: bool  # the launch has SGLang's device timer on (--enable-metrics + SGLANG_ENABLE_METRICS_DEVICE_TIMER)


class DeployRequest(_DeployRequired, total=False):
    """``deploy`` (built by ``commands.deploy.deploy_request``; ``redeploy`` rebuilds one from a record)."""

    rollback_of: str | None  # the deploy id a rollback starts again


class StopRequest(TypedDict, total=False):
    """``stop`` (built by ``HostSession.stop`` only)."""

    state_dir: str
    target_gpus: list[int]
    grace: float
    dry_run: bool
    lock_wait: float
    client: str


class CheckEnvRequest(TypedDict, total=False):
    """``evidence`` (``inv check-env``): the inventory's values; the host prefers the running deploy's record."""

    state_dir: str
    expected: dict[str, str]
    nccl_debug_file: str | None


class GatherRequest(TypedDict, total=False):
    """What ``gathering.gather`` reads (built on the host, by ``deploy.evidence_request`` for a recorded deploy, or
    with only the processes to go on when nothing recorded runs)."""

    log_path: str | None
    log_offset: int
    log_cap_bytes: int
    launcher_pid: int | None
    launcher_start_ticks: int | None
    deploy_id: str
    expected: dict[str, str]
    nccl_debug_file: str | None
    sglang_version: str | None
    launch_argv: list[str] | None
    patch_mode: str
    nccl_debug: bool | None
    launch_env: dict[str, str]
    server: dict[str, Any]


class _BenchRequired(TypedDict):
    bench_id: str
    concurrency: int
    input_len: int
    output_len: int
    num_prompts: int
    client: str  # auto | sglang | builtin
    warmup: int
    target_ci: float | None
    min_requests: int
    need_histogram: bool


class BenchRequest(_BenchRequired, total=False):
    """``bench`` (built by ``commands.bench.bench_request``)."""

    state_dir: str
    request_timeout: float


MAX_TRACE_STEPS = 200  # the most profiler steps one `profile` records (a trace per rank grows with each)


class _ProfileRequired(TypedDict):
    profile_id: str
    concurrency: int
    input_len: int
    output_len: int
    num_prompts: int
    trace: bool
    trace_steps: int  # the profiler's ``num_steps`` (bounded by the client: ``MAX_TRACE_STEPS``)


class ProfileRequest(_ProfileRequired, total=False):
    """``profile`` (built by ``commands.profile.profile_request``): a bounded load with the bench's own load
    generator between two ``/metrics`` snapshots, and with ``trace`` one SGLang profiler run over it."""

    state_dir: str
    request_timeout: float
    trace_cap_bytes: int  # the most one rank's trace file may weigh before it is refused (read or kept)
    keep_bytes: int  # the profiles directory's bound: oldest traces removed first


# --- what `profile` measures (the agent's answer; `inv explain`, bench and sweep read the same shapes) ------------
# Every figure carries its source, so the client never prints a number without saying who measured it.
SOURCE_TIMER = "SGLang device timer"
SOURCE_TRACE = "SGLang profiler trace"
SOURCE_DERIVED = "derived: TPOT × accept length"
SOURCE_TOOL = "the tool: (E2E − TTFT) / spec_verify_ct per request"
SOURCE_META = "SGLang meta_info: Σ completion_tokens / Σ spec_verify_ct"
SOURCE_OTHER = "derived: the tool's cycle − the device timer's phases"


class _PhaseFigureRequired(TypedDict):
    ms: float  # per occurrence (one verify pass, one draft step, ...)
    source: str  # one of the SOURCE_* above
    count: int  # occurrences it is averaged over


class PhaseFigure(_PhaseFigureRequired, total=False):
    """One measured figure and where it came from."""

    note: str  # how the count was reached where it is not counted by SGLang itself (e.g. calls ÷ concurrency)


class KernelBreakdown(TypedDict):
    """Inside one phase, per pass, from the trace (ms per occurrence of the phase)."""

    classes_ms: dict[str, float]  # KERNEL_CLASSES below, plus "idle_gap": span time no kernel covers
    passes: int  # occurrences of the phase the figures are averaged over
    span_ms: float  # the phase's GPU span per pass
    allreduce_calls: float  # all-reduce kernels per pass
    allreduce_mean_us: float | None
    launch: str  # "cuda graph" | "eager" | "unknown" (from the runtime events inside the CPU span)
    kernel_launches: float  # per pass
    graph_launches: float  # per pass
    launch_gap_ms: float  # per pass: idle GPU time between the phase's kernels (the launch overhead eagerly)


KERNEL_CLASSES: tuple[str, ...] = ("gemm", "attention", "norm_activation", "allreduce", "sampling_verify", "copy",
                                   "other")


class CycleAnatomy(TypedDict, total=False):
    """One configuration on one rank: where one speculative cycle's time goes (or the baseline's decode step)."""

    rank: int
    config: str
    steps: int
    draft_tokens: int
    draft_step: PhaseFigure  # one draft forward
    draft: PhaseFigure  # every draft step of one cycle
    verify: PhaseFigure
    draft_extend: PhaseFigure
    other: PhaseFigure  # scheduler/CPU between phases: cycle − Σ phases
    cycle: PhaseFigure
    accept_length: PhaseFigure  # tokens emitted per cycle (``ms`` holds the length, not milliseconds)
    decode: PhaseFigure  # baseline: decode ms per forward pass (one token per sequence)
    kernels: dict[str, KernelBreakdown]  # "verify", "decode", "draft", "draft_extend"


class ProfileRank(TypedDict, total=False):
    """One rank's measurements by source: the anatomy from the timer, and from the trace where one was taken."""

    rank: int
    timer: CycleAnatomy | None
    trace: CycleAnatomy | None
    difference_pct: dict[str, float]  # phase -> (trace − timer) / timer × 100 where both measured it
    trace_file: str | None  # the host's path of the rank's trace
    trace_bytes: int | None


class ProfileResult(TypedDict, total=False):
    """``profile``'s answer."""

    profile_id: str
    deploy_id: str | None
    config_name: str | None
    sglang_version: str
    speculative: dict[str, Any]  # algorithm, steps, topk, draft_tokens
    cuda_graph: bool | None  # what the server runs with (its launch flags), None when unknown
    timer: bool  # whether the server has the device timer on (its /metrics carry the counters)
    timer_missing: str | None  # why not, a sentence naming what turns it on
    ranks: list[ProfileRank]
    derived: CycleAnatomy | None  # the fallback: TPOT × accept length, when no timer
    bench: dict[str, Any]  # the load generator's own figures (completed, duration_s, output_tok_s, tpot_ms, ...)
    wall_s: float  # the verb's own time on the host
    trace_dir: str | None
