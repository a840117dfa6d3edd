"""The agent protocol's shared vocabulary: error kinds and every verb's request and answer shapes, imported by BOTH
the host agent and the client (the verbs themselves, each with its two shapes, are ``verbs.py``'s table).

One table, so the two sides cannot drift: the agent raises ``AgentError(kind, ...)`` with a kind listed here, and the
client turns the kind's ``category`` into its exception class (and exit code) and falls back on the kind's ``hint``
when the agent sent none. ``tests/unit/remote/test_protocol.py`` reads the agent's source and fails when a raised kind
is missing here, or a kind here is raised nowhere. Stdlib only, Python 3.9+ (it runs on the host too).

The request and answer shapes (``TypedDict``: plain dicts at run time, so the wire format is whatever JSON the dict
makes) are annotated on the client where a request is built and an answer read (``transport/session.py``'s
``HostSession`` methods) and on the agent's verb function, so mypy checks that both sides name the same keys with
the same types; ``tests/unit/remote/test_protocol.py`` runs each verb for real and checks its answer against its shape.
The agent cannot trust the wire to match (an older client, a record written by an older agent): it still reads
optional keys with ``.get``. Under the future import a TypedDict body's
annotations stay strings (Python 3.9 wraps them in ``ForwardRef`` and only compiles them), so ``int | None`` is
safe there; ``tests/unit/remote/test_agent_pythons.py`` imports this module under 3.9 to keep it so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypedDict, Union

from .versions import PLUGIN_SYSTEM

# A deploy's steps, in the order they run: "connect" and "preflight" are the client's, the rest the agent's (one
# process on the host, `serve/deploy.py`); `bench` and `profile` are the measuring verbs' one step each. Both ends
# name a step only through this type: the agent's step runner takes a StepName, the client's titles are keyed by one.
StepName = Literal["connect", "preflight", "lock", "patch", "stop", "gpu_clean", "port_free", "start", "wait_ready",
                   "first_request", "accept_gate", "verify_env", "record", "bench", "profile"]
DEPLOY_STEPS: tuple[StepName, ...] = (
    "connect", "preflight", "lock", "patch", "stop", "gpu_clean", "port_free", "start", "wait_ready", "first_request",
    "accept_gate", "verify_env", "record")

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
    "port_in_use": ("launch", "stop whatever listens on that port on the host, or change `port` in the inventory"),
    "bad_listen": ("launch", "set `listen` in the inventory to an address of the host"),
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


# --- JSON --------------------------------------------------------------------------------------------------------
# What ``json.dumps`` writes, for documents the tool builds and saves or prints whole (a sweep's row, a report's
# figures). Read-only containers (Sequence, Mapping), so a ``list[str]`` or ``dict[str, float]`` is one. A document
# read back, whose shape nothing promises, is ``Mapping[str, object]`` and narrowed where read. A runtime alias (the
# agent's Python 3.9 has no ``X | Y`` at run time): ``Union``.
JSONValue = Union[None, bool, int, float, str, Sequence["JSONValue"], Mapping[str, "JSONValue"]]
JSONObject = dict[str, JSONValue]


class NodeSpec(TypedDict):
    """A multi-node rank (``inventory.values.NodeRole`` as a dict): SGLang's --nnodes/--node-rank/--dist-init-addr."""

    cluster: str
    rank: int
    nnodes: int
    total_tp: int
    dist_init_addr: str


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
    patch: PatchApplyRequest | None  # built by ``render.patchset.build_patch_request``
    expected: dict[str, str]
    nccl_debug: bool
    verify: VerifySpec | None
    summary: LaunchSummary
    heartbeat_s: float
    node: NodeSpec | None  # a multi-node rank (the inventory's ``node``), None on one node
    gates: GateSpec | None
    profile_dir: str  # SGLANG_TORCH_PROFILER_DIR: created 0700 before the start, never through a symlink
    measure: bool  # the launch has SGLang's device timer on (--enable-metrics + SGLANG_ENABLE_METRICS_DEVICE_TIMER)


class DeployRequest(_DeployRequired, total=False):
    """``deploy`` (built by ``commands.deploy.deploy_request``; ``redeploy`` rebuilds one from a record)."""

    rollback_of: str | None  # the deploy id a rollback starts again
    tune_id: str  # a tune's own deploy: admitted while that tune holds the host (serve/tunelease)


class StopRequest(TypedDict, total=False):
    """``stop`` (built by ``HostSession.stop`` only)."""

    state_dir: str
    target_gpus: list[int]
    grace: float
    dry_run: bool
    lock_wait: float
    client: str


class _TuneLeaseRequired(TypedDict):
    tune_id: str
    action: str  # hold (until the channel closes) | release


class TuneLeaseRequest(_TuneLeaseRequired, total=False):
    """``tune_lease`` (built by ``HostSession.tune_lease`` only): one tune per host for the whole tune."""

    state_dir: str
    client: str
    wait_s: float  # release: how long to wait for the holder to let go


class TuneLeaseAnswer(TypedDict, total=False):
    released: bool
    held_s: float
    holder: Holder | None  # release: the holder found (None: nobody held the host)


class CheckEnvRequest(TypedDict, total=False):
    """``evidence`` (``inv check-env``): the inventory's values; the host prefers the running deploy's record."""

    state_dir: str
    expected: dict[str, str]
    nccl_debug_file: str | None


class GatherRequest(TypedDict, total=False):
    """What ``evidence.gather.gather`` reads (built on the host: by ``evidence.gather.evidence_request`` for a
    recorded deploy, or with only the processes to go on when nothing recorded runs)."""

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
    recorded_schedulers: list[Scheduler]  # the deploy's schedulers once ready


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
    # The server's own args to answer with (``server_args``), by name: what the running server reports in its
    # /server_info (SGLang's ServerArgs, as dataclasses.asdict gives them), never all of it (api_key is one).
    server_args: list[str]


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
    batch: float | None  # requests per pass (SGLang's bs= label), what sizes its all-reduce messages
    nccl_ms: float  # per pass: the all-reduce time in NCCL's own kernels (what NCCL settings move; SGLang's custom
    # all-reduce, e.g. cross_device_reduce_*, is the rest of classes_ms["allreduce"])
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
    local_file: str  # the client's copy (``inv profile --out``), never the agent's


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
    server_args: dict[str, Any]  # the request's ``server_args`` as the server reported them (absent: not there)
    wall_s: float  # the verb's own time on the host
    trace_dir: str | None
    # with a trace: what sizes and carries the all-reduces (hidden size and dtype from the model's config.json and
    # the server's dtype, the GPUs' link from nvidia-smi topo -m, the TP size): a sweep's NCCL model reads it
    allreduce_context: dict[str, Any]


class ProfileDocument(ProfileResult, total=False):
    """``inv profile``'s document (the client's, saved and printed): the host's answer, where it ran, what was
    asked, and the traces fetched (``commands.profile.profile_host``)."""

    host: str
    requested: dict[str, object]  # the load (``BenchParams``) and the trace's steps
    fetched: list[str]  # local paths of the fetched traces
    measured_at: float  # when the client took it (its clock): `inv explain` reuses a young one
    local_path: str  # where the client saved it (RUNS/<host>/profiles/<id>.json)


# --- every verb's request and answer ------------------------------------------------------------------------------
# One pair per verb of ``verbs.TABLE`` (``DeployRequest``, ``StopRequest``, ``CheckEnvRequest``, ``BenchRequest``
# and ``ProfileRequest`` above are five of the requests; ``ProfileResult`` is ``profile``'s answer). A key that only
# some answers carry is in a ``total=False`` part (NotRequired is Python 3.11; the agent runs on 3.9). Nested objects
# the client only shows (a process table, a record's request, the evidence document) stay ``dict[str, Any]``; the
# evidence's fixed pieces (an NCCL record, a marker, a saved scan) have shapes below ``Hint``.

class _ProcRequired(TypedDict):
    pid: int
    ppid: int
    pgid: int
    state: str  # /proc's one letter: R, S, T (stopped by a signal), Z, ...
    start_ticks: int
    cmdline: str


class Proc(_ProcRequired, total=False):
    """A process as ``procs.ProcInfo.as_dict()`` gives it; ``why`` when a stop names why it was chosen."""

    why: str


class Holder(TypedDict, total=False):
    """The lock's holder note (``lock.DeployLock``): who holds the host, since when, at which step; a deploy's adds
    its journal and, once started, its new server."""

    deploy_id: str
    client: str | None
    config_name: str
    journal: str | None
    step: str
    step_since: str
    pid: int
    start_ticks: int | None
    since: str
    tune_id: str  # a tune lease's holder (``serve.tunelease``): the tune whose deploys it admits
    server_pid: int
    server_start_ticks: int | None
    log_path: str
    log_offset: int
    journal_tail: list[str]  # added by ``status``: the deploy's last step lines


class _SchedulerRequired(TypedDict):
    pid: int
    title: str  # its process title (``sglang::scheduler_TP0``)
    rank: int | None


class Scheduler(_SchedulerRequired, total=False):
    """One SGLang process under a launcher (``procs.schedulers_of``; ``serve.ranks.snapshot`` adds the rest)."""

    start_ticks: int
    label: str  # ``TP0``, ``PP1 TP0``: how the launcher names the rank


class Ended(TypedDict, total=False):
    """How a deploy ended (``records.ended_of``): ``kind`` ready | failed | cancelled | replaced | stopped |
    unfinished, when, and by whom or what."""

    kind: str
    at: str | None
    after: str  # how it had ended before (a ready deploy later stopped or replaced)
    by: str  # the deploy that replaced it
    by_client: str | None
    why: str


class ErrorDoc(TypedDict):
    """An ``AgentError`` as the wire and a record carry it (``common.AgentError.as_dict``)."""

    kind: str
    message: str
    hint: str | None
    details: dict[str, Any]  # what the error names beside its sentence (a holder, a measured length, ...)


class Cancelled(TypedDict):
    reason: str  # who asked and how ("cancelled by ana@laptop with `inv cancel`")
    at: str


class _ReadyRequired(TypedDict):
    ready_path: str
    ready_after_s: float
    probe_latency_s: float
    log_offset: int  # how far the log had been read when it answered
    fired_up_line: bool  # SGLang's "The server is fired up" line was seen
    probe_timeout_s: float
    probes: int


class Ready(_ReadyRequired, total=False):
    """What ``server.wait_ready`` saw: the endpoint that answered 200, after how long, and how fast it answered."""

    sglang_warnings: list[str]  # moved to the record's own ``sglang_warnings`` by the deploy


class FirstRequest(TypedDict):
    """The first real generation after ready (``gates.first_request``)."""

    latency_s: float
    completion_tokens: int
    timeout_s: float


class Accept(TypedDict):
    """The accept-length gate's measurement (``gates.judge_accept``)."""

    accept_length: float
    source: str
    requests: int
    completion_tokens: int | None
    verify_ct: int | None
    gate: float
    draft_acceptance: float | None


class GpuInfo(TypedDict):
    index: int
    uuid: str
    name: str
    used_mib: int
    total_mib: int


class GpuApp(TypedDict):
    pid: int
    gpu: int  # the GPU's index (-1: a UUID nvidia-smi did not list)
    gpu_uuid: str
    used_mib: int
    process_name: str
    cmdline: str


class GpuSnapshot(TypedDict):
    """nvidia-smi's GPUs and the processes holding them; ``available`` is False without nvidia-smi."""

    available: bool
    gpus: list[GpuInfo]
    apps: list[GpuApp]


class FactsRequest(TypedDict, total=False):
    """``facts`` (the preflight, built by ``HostSession.host_facts``)."""

    state_dir: str
    paths: dict[str, str | None]  # name -> a path that must exist on the host (None: not needed)
    need_gpus: int
    min_free_disk_gb: float
    log_dir: str
    log_path: str
    gpus: bool  # False: skip nvidia-smi


class _SGLangInfoRequired(TypedDict):
    installed: bool


class SGLangInfo(_SGLangInfoRequired, total=False):
    """Where the host's SGLang is and which version (``facts.sglang_info``), read without importing it."""

    version: str | None
    version_sources: dict[str, str]  # where each version was read -> what it says
    version_conflict: dict[str, str]  # the same, when they disagree (a mixed install)
    root: str
    site_packages: str
    layout: dict[str, bool]  # the files the patch modes need -> present


class NcclInfo(TypedDict):
    """The NCCL wheel beside SGLang (``facts.nccl_info``)."""

    version: str
    source: str  # the wheel's name (nvidia-nccl-cu12)


class PathFact(TypedDict):
    path: str
    exists: bool
    is_dir: bool


class FactsAnswer(TypedDict):
    hostname: str
    home: str
    user: str
    state_dir: str
    python: dict[str, str]  # executable, version, purelib
    sglang: SGLangInfo
    nccl: NcclInfo | None
    paths: dict[str, PathFact]  # name -> the path the request named
    disk_free_gb: float | None
    gpu: GpuSnapshot
    lock_holder: Holder | None
    unsafe: list[str]  # directories another account could change: sentences
    problems: list[str]  # what the deploy cannot live with: sentences


class GpusRequest(TypedDict, total=False):
    state_dir: str
    topology: bool


class GpusAnswer(GpuSnapshot, total=False):
    topology: str | None  # ``nvidia-smi topo -m``


class AttachRequest(TypedDict, total=False):
    """``attach``: follow a deploy's journal from event ``skip`` (a re-attach after a lost link)."""

    state_dir: str
    deploy_id: str
    skip: int


class AgentEvent(TypedDict, total=False):
    """One JSON line the agent prints while a verb runs (``common.EventSink.emit``); the last is its ``result``.
    ``event`` names it; the other keys are those of its kind."""

    event: str  # agent | step | progress | log | info | lock_wait | started | heartbeat | replay | result
    # step: a deploy's (or bench's, profile's) step began or ended
    name: str
    status: str  # start | ok | fail
    elapsed: float
    detail: str | None
    message: str  # a failed step's sentence; an ``info`` event's line
    # progress: requests done of the total, or a step of check-env's gathering, or a trace's ranks
    done: int
    total: int
    step: str
    phase: str
    ranks: int
    of: int
    # log: the server's new lines
    lines: list[str]
    count: int
    # lock_wait: who holds the host and how long this one still waits
    holder: Holder | None
    left_s: float
    # agent, started: the agent's own process, the server's
    pid: int
    start_ticks: int | None
    log_path: str
    log_offset: int
    # replay: an event of a deploy's journal, read again by ``attach``
    original: AgentEvent
    # result: the verb's answer (``data``: its answer shape) or its error, and the agent's CPU time
    ok: bool
    data: object
    error: ErrorDoc
    cpu_s: float


class AttachAnswer(TypedDict):
    replayed: bool
    result: AgentEvent  # the deploy's own ``result`` event: ok, and data (its record) or error


class PreviousDeploy(TypedDict):
    """The deploy a deploy replaced, as a rollback needs it."""

    deploy_id: str | None
    config_name: str | None
    plan_hash: str | None
    status: str | None
    running: bool
    pid: int | None
    redeployable: bool
    client: str | None
    started_at: str | None
    ended: Ended


class KeptRequest(TypedDict, total=False):
    """The keys of a deploy's request its record keeps, so that a redeploy can start it again (``deploy.kept``);
    None where the request had none (a request of an older client)."""

    config_name: str | None
    plan_hash: str | None
    tool_version: str | None
    log_path: str | None
    cwd: str | None
    listen: str | None
    port: int | None
    sglang_version: str | None
    target_gpus: list[int] | None
    gpu_idle_mib: int | None
    timeouts: Timeouts | None
    verify: VerifySpec | None
    summary: LaunchSummary | None
    node: NodeSpec | None
    state_dir: str | None
    patch: PatchApplyRequest | None
    expected: dict[str, str] | None
    nccl_debug: bool | None
    gates: GateSpec | None
    profile_dir: str | None
    measure: bool | None


class _DeployRecordRequired(TypedDict):
    deploy_id: str
    status: str  # starting | running | failed | stopped
    client: str | None
    started_at: str
    config_name: str
    plan_hash: str
    tool_version: str | None
    sglang_version: str
    listen: str
    port: int
    log_path: str
    script: str
    launch: LaunchSummary
    patch_mode: str
    previous: PreviousDeploy | None
    node: NodeSpec | None
    rollback_of: str | None
    expected: dict[str, str] | None
    measure: bool
    profile_dir: str | None
    request: KeptRequest  # the deploy request's keys a redeploy needs


class DeployRecord(_DeployRecordRequired, total=False):
    """A deploy's record on the host (``records``): ``deploy``'s and ``redeploy``'s answer, ``status``'s record."""

    script_copy: str
    script_sha256: str | None
    pid: int
    pgid: int
    start_ticks: int | None
    log_offset: int
    patch: PatchApplyAnswer
    stopped: Stopped
    ready: Ready
    # SGLang's own warnings about the launch, read from its log while waiting for ready (serve/launchwarnings)
    sglang_warnings: list[str]
    schedulers: list[Scheduler]
    first_request: FirstRequest
    accept: Accept
    verify: Verified
    ready_at: str
    timings: dict[StepName, float]
    error: ErrorDoc
    ended_at: str  # when a failed deploy ended
    cancelled: Cancelled
    stopped_at: str
    ended: Ended  # how it ended (``records.ended_of`` reads it)


class Stopped(TypedDict):
    """What a stop did (``procs.terminate``): on SIGTERM, on SIGKILL, and what survived even that."""

    terminated: list[Proc]
    killed: list[Proc]
    survivors: list[Proc]


class _StopAnswerRequired(TypedDict):
    routers_running: list[str]  # routers stay up (they serve no model): named so the user knows


class StopAnswer(_StopAnswerRequired, total=False):
    """``stop``: with ``dry_run``, ``would_stop``; else what went on SIGTERM, what needed SIGKILL, what survived."""

    dry_run: bool
    would_stop: list[Proc]
    terminated: list[Proc]
    killed: list[Proc]
    survivors: list[Proc]


class StateRequest(TypedDict, total=False):
    """A verb that reads only the host's state directory (``status``, ``watch``)."""

    state_dir: str


class Health(TypedDict, total=False):
    path: str
    status: int | None  # the HTTP status the readiness endpoint answered, None: no answer
    latency_s: float | None
    timeout_s: float


class _StatusAnswerRequired(TypedDict):
    record: DeployRecord | None
    running: bool
    deploy_in_progress: Holder | None
    other_sglang_processes: list[Proc]


class StatusAnswer(_StatusAnswerRequired, total=False):
    """``status``: what runs on the host now, observed (``commands.operations.server_view`` reads it)."""

    schedulers: list[Scheduler]
    uptime_s: float
    process_state: str
    health: Health
    last_decode: dict[str, Any] | None
    deploying_server: DeployingServer
    routers: list[RouterStatus]


class DeployingServer(TypedDict):
    """The server a deploy in progress has started (from its lock holder's note)."""

    pid: int
    config_name: str | None
    deploy_id: str | None


class LogsRequest(TypedDict, total=False):
    state_dir: str
    lines: int
    follow: bool
    follow_s: float
    log_path: str  # a log of the host's choosing (default: the recorded deploy's)


class LogsAnswer(TypedDict):
    log_path: str
    offset: int


class AdoptRequest(TypedDict, total=False):
    state_dir: str
    port: int | None  # which server, when several run


class AdoptAnswer(TypedDict):
    pid: int
    start_ticks: int
    argv: list[str]
    env: dict[str, str]  # what the server was given beyond the agent's own environment
    env_readable: bool
    log_path: str | None
    cwd: str | None
    record: str  # the host path of the adoption record
    sglang: str | None  # the host's SGLang version


class RecordsRequest(TypedDict, total=False):
    state_dir: str
    ids: list[str]  # `inv diff`: records to load by id
    history: bool  # `inv deploys`, `inv deploy --previous/--id`: every recorded deploy, summarised


class DeploySummary(TypedDict):
    """One recorded deploy, as `inv deploys` lists it (``records.summary``)."""

    deploy_id: str
    config_name: str | None
    patch_mode: str | None
    sglang_version: str | None
    plan_hash: str | None
    started_at: str | None
    client: str | None
    ended: Ended
    previous: str | None  # the deploy this one replaced
    rollback_of: str | None  # started again from that recorded deploy (`--previous`, `--id`, a rollback)
    redeployable: bool


class _RecordsAnswerRequired(TypedDict):
    current: DeployRecord | None
    previous: DeployRecord | None  # the one ``current`` replaced (what a rollback puts back)


class RecordsAnswer(_RecordsAnswerRequired, total=False):
    loaded: dict[str, DeployRecord | None]  # by id (None: this host has no such record)
    history: list[DeploySummary]  # newest first


class _RedeployRequired(TypedDict):
    from_deploy_id: str
    deploy_id: str
    client: str | None


class RedeployRequest(_RedeployRequired, total=False):
    """``redeploy`` (rollback): start a recorded deploy again from its saved script."""

    state_dir: str
    journal: str | None
    lock_wait: float  # this run's --lock-wait (the recorded request's own is not this run's choice)


class CancelRequest(TypedDict, total=False):
    state_dir: str
    deploy_id: str  # omitted: the deploy holding the host's lock
    reason: str
    wait_s: float  # wait (bounded) until it has let go of the host


class _CancelAnswerRequired(TypedDict):
    cancelled: str | None  # the deploy asked to stop, None: no deploy was in progress


class CancelAnswer(_CancelAnswerRequired, total=False):
    holder: Holder | None  # nothing cancelled: who holds the lock (maybe a stop), if anyone
    step: str | None
    ended: bool
    status: str | None  # how it ended, from its record
    error: ErrorDoc | None


class _RouterStartRequired(TypedDict):
    name: str
    script: str
    cwd: str
    log_path: str
    listen: str
    port: int
    workers: list[str]
    policy: str | None
    argv: list[str]
    ready_s: float
    grace: float


class RouterStartRequest(_RouterStartRequired, total=False):
    state_dir: str


class _RouterRecordRequired(TypedDict):
    name: str
    pid: int
    start_ticks: int | None
    listen: str
    port: int
    workers: list[str]  # the worker URLs it was started with
    policy: str | None
    log_path: str
    status: str  # starting | running | failed | stopped
    started_at: str
    argv: list[str] | None


class RouterRecord(_RouterRecordRequired, total=False):
    """A router's record on its host (``serve.router``: ``STATE/routers/<name>.json``)."""

    ready_after_s: float
    workers_listed: bool  # the router listed its workers before the deadline (``GET /workers``)


class RouterWorker(TypedDict):
    url: str
    health: int | None  # the worker's own /health status, None: no answer
    router_says_healthy: bool | None


class _RouterStatusRequired(TypedDict):
    name: str | None
    pid: int | None
    listen: str | None
    port: int | None
    policy: str | None
    status: str | None
    started_at: str | None
    log_path: str | None
    workers_at_start: list[str] | None
    running: bool
    health: int | None  # the router's /health status now, None: not running or no answer
    workers: list[RouterWorker]


class RouterStatus(_RouterStatusRequired, total=False):
    """One router on the host as ``status`` reports it (``serve.router.status``)."""

    workers_source: str  # where the worker list came from: the router's own GET /workers, or its record


class RouterStartAnswer(TypedDict):
    record: RouterRecord
    replaced: list[int]  # pids of the router it replaced


class _RouterNamed(TypedDict):
    name: str


class RouterStopRequest(_RouterNamed, total=False):
    state_dir: str
    grace: float


class RouterStopAnswer(TypedDict):
    stopped: list[int]


class _RouterWorkerRequired(TypedDict):
    name: str
    url: str
    action: str  # add | remove


class RouterWorkerRequest(_RouterWorkerRequired, total=False):
    state_dir: str
    drain_s: float
    wait_s: float


class RouterWorkerAnswer(TypedDict, total=False):
    removed: bool
    why: str
    drained_s: float
    added: bool


class _WatchAnswerRequired(TypedDict):
    time: float
    running: bool


class WatchAnswer(_WatchAnswerRequired, total=False):
    """One ``inv watch`` sample: throughput and acceptance from /metrics, else from the log's last Decode line."""

    config_name: str | None
    deploy_id: str | None
    sglang_version: str | None
    health: Health
    source: str
    tok_s: float | None
    gen_tok_s: float | None  # the same figure by its name: SGLang's gen throughput over one Decode window
    accept_len: float | None
    running_req: float | None
    queue_req: float | None
    age_s: float | None   # the sample's own age (its Decode line's time), not the read's
    age_of: str | None    # what the age is of
    window_forwards: int  # the decode forwards one figure covers (--decode-log-interval)


class LoadFigures(TypedDict, total=False):
    """What the client measured of its own requests (``loadgen.summarize``, or ``sglang.bench_serving``'s block):
    counts, time, throughput and its interval, and each latency's distribution (mean, median, p95, p99, max)."""

    completed: int
    failed: int
    errors: list[str]
    interrupted: bool
    duration_s: float
    window_s: float
    output_tokens: int
    output_tok_s: float
    tok_s_ci: float | None  # the throughput's relative 95 % interval
    request_throughput: float
    ttft_ms: dict[str, float | None]
    tpot_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]
    e2e_ms: dict[str, float | None]
    accept_histogram_requests: int
    adaptive: dict[str, Any] | None  # an adaptive length: its target, bounds and why it stopped


class BenchAnswer(LoadFigures, total=False):
    """``bench``'s result document: the client's figures (``LoadFigures``; a bench_serving run may add its own
    beside them) and the speculative ones from every source."""

    bench_id: str
    started_at: str
    client: str
    params: dict[str, Any]
    deploy_id: str | None
    config_name: str | None
    plan_hash: str | None
    sglang_version: str
    speculative: dict[str, Any]
    accept_len: float | None
    accept_len_sources: dict[str, float | None]
    accept_len_source: str | None
    accept_len_windows: dict[str, str]  # each source's window and sample size ("16 requests (...)")
    accept_rate: float | None
    accept_rate_meaning: str | None
    draft_acceptance: float | None
    decode_ms_per_token: float | None
    cycle_ms: float | None
    cycle_ms_source: str | None
    accept_histogram: Any
    accept_histogram_source: str | None
    decode_log: dict[str, Any]
    prometheus: dict[str, Any] | None  # None: the server serves no /metrics
    server_info: dict[str, Any]
    phases: dict[str, Any] | None
    host_path: str


class TimerCost(TypedDict):
    """The device timer's cost on served tok/s, this bench against one with the timer the other way
    (``commands.bench.timer_cost``)."""

    pct: float
    timer_on_tok_s: float
    timer_off_tok_s: float
    against: str  # the other bench's file
    source: str


class BenchDocument(BenchAnswer, total=False):
    """A bench's document on the client: the host's answer, where it ran and what was asked
    (``commands.bench.run_bench``; a sweep saves one per level)."""

    host: str
    requested: dict[str, object]  # the ``BenchParams``


class SavedBench(BenchDocument, total=False):
    """``inv bench``'s document, saved as ``RUNS/<host>/<bench_id>.json``: with the device timer's cost and where it
    lies; with ``--explain``, its subjects and findings."""

    timer_cost: TimerCost | None  # None: no bench with the timer the other way to hold it against
    local_path: str


class ExplainedBench(SavedBench, total=False):
    """``inv bench --explain``'s document: the saved bench with its subjects and findings."""

    explain: dict[str, Any]


class _EnvRowRequired(TypedDict):
    var: str
    expected: str | None
    observed: str | None
    status: str  # ``judge.STATUSES``: proven, overridden, sglang_overrides, ...
    note: str


class EnvRow(_EnvRowRequired, total=False):
    """One (scheduler, variable) row of check-env (``judge.evaluate``); the client adds rows of the inventory's own
    variables SGLang assigns itself (``operations.sglang_overwrites``), which name no process."""

    pid: int
    rank: int | None
    label: str | None
    title: str | None
    evidence: str | None  # the strongest source seen (``judge.SOURCES``), None: nothing seen
    sources: dict[str, Any]  # source -> what it showed, and the launcher's value
    environ_status: str | None


class Hint(TypedDict):
    """One piece of advice beside check-env's rows (``hints.hint``), with the variables and processes it names."""

    code: str
    severity: str  # error | warning | info
    message: str
    vars: list[str]
    pids: list[int]


class _EvaluationRequired(TypedDict):
    ok: bool
    rows: list[EnvRow]  # one per (scheduler, variable)
    summary: dict[str, int]  # status -> rows
    nranks: int | None
    nranks_source: str
    single_rank: bool
    schedulers: int
    recorded_deploy: bool
    hints: list[Hint]
    used: dict[str, Any]


class Evaluation(_EvaluationRequired, total=False):
    """check-env's judgement of the evidence (``evidence.evaluate``)."""

    # how many ranks should run and which are gone (``evidence.gather.rank_census``), with ``verdict``: the
    # sentence, None while every rank runs
    ranks: dict[str, Any]
    sglang_overwrites: list[EnvRow]  # added by the client (``operations.sglang_overwrites``), never the agent


# --- what check-env reads (``evidence.gather``, ``evidence.nccllog``, ``patch.markers``) ------------------------------
# The pieces of the evidence document with a fixed shape: a saved scan's key and state, the log's read, one NCCL
# record, one marker line. The evidence document itself (``CheckEnvAnswer.evidence``) is read by the judge only.

class Marker(TypedDict, total=False):
    """One ``[specdeploy] nccl-env`` line a patched process printed (``markers.parse_marker``); ``start`` (its
    process's start time in clock ticks) only on lines of agents that print it."""

    mode: str
    hash: str
    pid: int
    deploy: str | None
    set: dict[str, str]
    kept: dict[str, str]
    start: int


class Tuning(TypedDict):
    """A TUNING choice line's fields (``nccllog.parse_tuning``); ``func`` None before NCCL 2.23."""

    func: str | None
    bytes: int
    algo: str
    proto: str | None
    channels: str | None  # "lo..hi"
    kernel: str | None  # a symmetric kernel's name


class _NcclRecordRequired(TypedDict):
    kind: str  # env | version | init | warn | invalid | tuning | other
    host: str
    pid: int
    tid: int
    dev: str
    level: str
    message: str


class NcclRecord(_NcclRecordRequired, total=False):
    """One NCCL record of a log line (``nccllog.parse_nccl_records``), with its kind's own fields."""

    var: str  # env, invalid
    value: str  # env, invalid
    default: str  # invalid
    version: str  # version
    rank: int  # init
    nranks: int  # init
    phase: str  # init
    func: str | None  # tuning: ``Tuning``'s fields
    bytes: int
    algo: str
    proto: str | None
    channels: str | None
    kernel: str | None


class NcclInit(TypedDict):
    rank: int
    nranks: int
    phase: str


class TuningChoice(TypedDict):
    algo: str
    proto: str | None
    channels: str | None
    count: int


class TuningSize(TypedDict):
    """The choices NCCL logged for one (function, size), each with how often."""

    func: str | None
    bytes: int
    choices: list[TuningChoice]


class _PidRecords(TypedDict):
    env: dict[str, list[str]]  # variable -> every value it echoed
    invalid: dict[str, str]
    version: str | None
    inits: list[NcclInit]
    warnings: list[str]
    lines: int
    sources: list[str]
    tuning_lines: int
    tuning_capped: bool


class PidNccl(_PidRecords):
    """What one process's NCCL printed (``nccllog.PidEvidence.nccl_dict``): a scheduler's or the launcher's ``nccl``."""

    tuning: list[TuningSize]


class PidState(_PidRecords):
    """``PidEvidence`` as a saved scan holds it: every field."""

    markers: list[Marker]
    tuning: dict[str, TuningSize]  # "func:bytes" -> its choices


class ScanState(TypedDict):
    """Everything the log's lines fed to a ``nccllog.Scan`` left, as a saved scan holds it."""

    by_pid: list[tuple[int, PidState]]  # JSON: [pid, state] pairs
    nccl_lines: int
    marker_lines: int
    foreign_markers: int
    custom_ar_disabled_line: str | None


class ScanKey(TypedDict):
    """Which log region, read by which code, a saved scan is of (``gather.scan_log``)."""

    code: str  # the scan's own code (``gather._code_version``)
    path: str
    offset: int
    cap: int
    deploy_id: str


class LogRead(TypedDict, total=False):
    """What was read of a file (``gather.read_lines``), with the log's counts added by the gathering."""

    path: str | None
    exists: bool
    size: int | None
    offset: int
    bytes_read: int
    capped: bool
    cap_bytes: int
    rotated: bool
    error: str | None
    nccl_lines: int
    marker_lines: int
    foreign_deploy_markers: int
    other_process_markers: int
    unattributed_pids: dict[str, int]  # pid -> its lines, for pids neither the launcher nor a scheduler


class DebugFile(TypedDict, total=False):
    """One NCCL_DEBUG_FILE file read for a scheduler; ``stale``: older than its process (not read)."""

    path: str
    pid: int
    stale: bool
    bytes_read: int
    capped: bool


class GoneRank(TypedDict):
    pid: int | None
    rank: int | None
    label: str | None
    title: str | None


class _RankCensusRequired(TypedDict):
    expected: int
    running: int
    gone: list[GoneRank]
    source: str


class RankCensus(_RankCensusRequired, total=False):
    """How many ranks should run and which are gone (``gather.rank_census``); ``verdict`` added by the judge: the
    sentence, None while every rank runs."""

    verdict: str | None


class Verified(TypedDict):
    """check-env right after a deploy's readiness (``serve.deploy``): what was read and its judgement."""

    evidence: dict[str, Any]
    evaluation: Evaluation


class CheckEnvAnswer(TypedDict):
    """``evidence``: what was read and how it was judged. The deploy's record it was judged by stays on the host
    (``status`` and ``records`` carry it): ~43 KB a call, its own deploy-time check-env inside, that no reader of
    this answer used."""

    evidence: dict[str, Any]  # what was read (``gathering.gather``): processes, log, NCCL lines, facts
    evaluation: Evaluation


# A patch's rendered pieces by role: ``engine_block``/``scheduler_block`` (code), ``sitecustomize`` (a file's
# text), ``plugin`` (files by path under site-packages). A runtime alias (the agent's Python 3.9): ``Union``.
PatchPieces = dict[str, Union[str, dict[str, str]]]


class _PatchApplyRequired(TypedDict):
    site_packages: str
    sglang_version: str
    mode: str
    values: dict[str, str]
    values_hash: str
    files: PatchPieces  # the rendered pieces by role (``render.patchset.render_files``)


class PatchApplyRequest(_PatchApplyRequired, total=False):
    """``patch_apply`` (built by ``render.patchset.build_patch_request``; a deploy carries one as its ``patch``)."""

    state_dir: str
    force: bool
    tool_version: str
    python: str


class _PatchFileRequired(TypedDict):
    path: str
    kind: str  # source | plugin | sitecustomize
    action: str  # patched | unchanged | repatched | installed | restored | removed (a rollback: already_original,
    # already_removed, and each with ``would_`` on a dry run)


class PatchFile(_PatchFileRequired, total=False):
    """One file the patch engine wrote, kept or undid (``patch.apply``, ``patch.rollback``)."""

    role: str  # engine | scheduler | plugin | sitecustomize
    sha256: str  # what it holds after a deploy (`inv diff` compares it between deploys)


class _ManifestEntryRequired(TypedDict):
    path: str
    rel: str
    role: str
    kind: str
    mode: str
    sha256_before: str | None  # None: a file the engine created
    sha256_after: str
    backup: str | None  # the original's content-addressed copy
    time: str
    tool_version: str | None
    values_hash: str | None
    sglang_version: str


class ManifestEntry(_ManifestEntryRequired, total=False):
    """One file the patch manifest records (``STATE/patches/manifest.json``)."""


class _ManifestRequired(TypedDict):
    version: int
    entries: list[ManifestEntry]
    dirs: list[str]  # directories the engine created (a plugin's), removed again once empty


class Manifest(_ManifestRequired, total=False):
    """The patch engine's record of what it changed on the host (``patch.store``)."""

    mode: str
    site_packages: str
    sglang_version: str
    tool_version: str
    values_hash: str | None
    values: dict[str, str] | None
    force: bool
    updated: str
    last_rollback: str


class PatchApplyAnswer(TypedDict):
    mode: str
    sglang_version: str
    changed: bool
    files: list[PatchFile]
    manifest: str
    warnings: list[str]


class PatchRollbackRequest(TypedDict, total=False):
    """``patch_rollback`` (``inv rollback-patches``, and a rollout's restore): built by
    ``HostSession.patch_rollback`` only."""

    state_dir: str
    dry_run: bool
    forget_changed: bool
    lock_wait: float
    client: str


class _PatchRollbackRequired(TypedDict):
    dry_run: bool
    nothing_to_do: bool
    files: list[PatchFile]
    forgotten: list[str]


class PatchRollbackAnswer(_PatchRollbackRequired, total=False):
    message: str


