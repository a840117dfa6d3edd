"""One spec per flag of the command line: the task parameter it is, what it takes (the metavar help shows,
``--steps=N``), how its value is read (through the one parser, fabfile/flags.py, so a bad value is refused in the
same words everywhere: exit 2, the flag named), and the sentence `inv --help TASK` shows for each task that takes it.

Everything else is derived from :data:`FLAGS`: each task's help (:func:`helps`), the metavars of fabfile/cli/program.py
(:func:`metavars`) and the reading of a value (:func:`read`, which the tasks and fabfile/cli/options.py call, most
through an ``errors.Collector`` so every bad flag of a run is said at once). Invoke reads a task's flags from its
function's parameters, so each flag is also a parameter there; tests/unit/cli/test_flagspec.py holds the two
together (every task parameter has exactly one spec, every spec names only tasks that take it).

A flag whose value means something different in two tasks (``--steps``: one number for deploy, a comma list for a
sweep) has one row per meaning; one row's sentence may still differ by task (``--host``). Imports only
fabfile.flags: a reader that needs a room's list (patch modes, clients, strategies) imports it when it reads, so
`inv --list` imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from fabfile import flags
from fabfile.errors import Collector
from fabfile.flags import DAY_S

Check = Callable[[str, Any], Any]  # (the flag as typed, its value) -> the value read; refuses with a FlagError

# The ranges of the numeric flags. Each maximum is far above any real use, so only a typo (or a fuzzer) meets it;
# without one, a huge wait never ends and a huge count never finishes.
MAX_STEPS = 64              # EAGLE draft steps: SGLang's own EAGLE tests run 5; an accept length is at most steps + 1
MAX_TOPK = 64               # draft branches per step (the tree's size grows with its square)
MAX_DRAFT_TOKENS = 4096     # tokens per verify pass (topk + (steps - 1)·topk² bounds it further, with the plan)
MAX_ACCEPT = 64.0           # an accept length (--accept-gate, --min-accept, --accept-len): at most MAX_STEPS + 1
MAX_CONCURRENCY = 4096      # requests in flight from one benchmark client (a server's batch is far smaller)
MAX_TOKENS = 1048576        # prompt / output length: 1M tokens, beyond every model's context
MAX_REQUESTS = 1000000      # requests in one benchmark (hours at any speed)
MAX_LINES = 1000000         # log lines printed first (more is a file copy: use scp)
MAX_MS = 60000.0            # a time per token or per pass: a minute is no GPU server
MAX_TOK_S = 1e7             # a throughput alarm: no server generates ten million tok/s
MAX_INTERVAL_S = 3600.0     # between two watch samples: an hour apart is no live view
WEEK_S = 7 * 86400.0        # `logs --follow --timeout`: past a week, use a log shipper
MONTH_S = 31 * 86400.0      # `watch --duration`: a month of samples (cron restarts it anyway)


class Value:
    """What a flag takes: its ``kind`` (a word for people and tests: switch, text, whole, number, seconds, list,
    choice, path, ...) and its ``check``; None takes the value as typed (a switch, or text whose meaning the command
    judges: a host name, a config name)."""

    # A plain class, not a dataclass: `inv --list` imports this module, and a dataclass costs ~0.7 ms to define.
    __slots__ = ("check", "kind")

    def __init__(self, kind: str, check: Check | None = None) -> None:
        self.kind, self.check = kind, check

    @property
    def numeric(self) -> bool:
        """A number, or a comma list of them (tests/unit/cli/test_fuzz.py refuses NaN, ±inf, hex... on each)."""
        return self.kind in NUMERIC_KINDS


NUMERIC_KINDS = frozenset({"whole", "number", "seconds", "list", "batch"})
SWITCH = Value("switch")
TEXT = Value("text")
PATH = Value("path", flags.path)


def whole(minimum: int, maximum: int) -> Value:
    return Value("whole", partial(flags.whole, minimum=minimum, maximum=maximum))


def number(minimum: float, maximum: float, *, open_minimum: bool = False, open_maximum: bool = False, unit: str = "",
           what: str = "") -> Value:
    return Value("number", partial(flags.number, minimum=minimum, maximum=maximum, open_minimum=open_minimum,
                                   open_maximum=open_maximum, unit=unit, what=what))


def seconds(maximum: float = DAY_S, *, zero: bool = False) -> Value:
    """Above 0 (from 0 with ``zero``: "0 = at once") up to ``maximum``, a day unless said."""
    return Value("seconds", partial(flags.seconds, maximum=maximum, zero=zero))


def whole_list(minimum: int, maximum: int, max_items: int) -> Value:
    """A comma list of distinct whole numbers (a sweep's axes)."""
    return Value("list", partial(flags.int_list, minimum=minimum, maximum=maximum, max_items=max_items))


def limit(maximum: float, unit: str, what: str) -> Value:
    """A service limit of `inv sweep` and `inv tune`: above 0 and bounded."""
    return number(0.0, maximum, open_minimum=True, unit=unit, what=what)


def _patch_mode(flag: str, value: Any) -> str | None:
    from fabfile.remote.patch.modes import PATCH_MODES

    return flags.choice(flag, value, PATCH_MODES, what="mode")


def _client(flag: str, value: Any) -> str | None:
    from fabfile.commands.bench import CLIENTS

    return flags.choice(flag, value, CLIENTS, what="client")


def _strategy(flag: str, value: Any) -> str | None:
    from fabfile.commands.rollout import STRATEGIES

    return flags.choice(flag, value, STRATEGIES, what="strategy")


def _objective(flag: str, value: Any) -> str | None:
    from fabfile.commands.tune import OBJECTIVES

    return flags.choice(flag, value, OBJECTIVES, what="objective")


def _batch(flag: str, value: Any) -> Any:
    from fabfile.commands.rollout import parse_batch  # a count of hosts or a share of them: rollout's own rule

    return None if value is None else parse_batch(value)


def _release(flag: str, value: Any) -> str | None:
    from fabfile.plan.knob_effects import checked_version

    return checked_version(value)


def _trace_steps(flag: str, value: Any) -> int | None:
    # Each profiled step grows every rank's trace: bounded by what the agent accepts (remote/protocol.py).
    from fabfile.remote.protocol import MAX_TRACE_STEPS

    return flags.whole(flag, value, minimum=1, maximum=MAX_TRACE_STEPS)


def _folder(flag: str, value: Any) -> Any:
    """A folder to read back (``sweep --resume DIR``), ``~`` expanded."""
    from pathlib import Path

    text = flags.path(flag, value)
    if text is None:
        return None
    try:
        return Path(text).expanduser()
    except RuntimeError:  # "~name" of no user on this machine
        from fabfile.errors import FlagError

        raise FlagError(f"{flag}: {flags.quote(text)} names the home of no user here; "
                        "give the sweep's folder") from None


CHOICE_PATCH_MODE = Value("choice", _patch_mode)
CHOICE_CLIENT = Value("choice", _client)
ACCEPT_LEN = number(0.0, MAX_ACCEPT + 1, open_minimum=True, what="an accept length")
MS = number(0.0, MAX_MS, open_minimum=True, unit="ms", what="a number of milliseconds")


class Flag:
    """One flag in one meaning: its task parameter (``draft_tokens`` is --draft-tokens, ``for_`` is --for), what it
    takes as help shows it (None: a switch, which takes nothing), how it is read, and its help sentence for each
    group of tasks that take it (the keys name every such task)."""

    __slots__ = ("help", "metavar", "param", "value")

    def __init__(self, param: str, metavar: str | None, value: Value, help: Mapping[tuple[str, ...], str]) -> None:
        self.param, self.metavar, self.value, self.help = param, metavar, value, help

    @property
    def flag(self) -> str:
        return flag_name(self.param)

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(t for group in self.help for t in group)


def flag_name(param: str) -> str:
    """A task parameter's flag: ``draft_tokens`` is --draft-tokens, ``for_`` is --for."""
    return "--" + param.rstrip("_").replace("_", "-")


# The help sentences several flags' rows share.
HOST = "host, group, comma list of them, or all (every host; default: the inventory's default host)"
HOST_TIMEOUT = ("wall-clock bound in seconds on each host's part (default: timeouts.host, 60): a host past it is "
                "reported as timed out while the others' results print")

FLAGS: tuple[Flag, ...] = (
    # Every command's
    Flag("host", "HOST", TEXT, {
        ("deploy", "render", "stop", "status", "logs", "watch", "rollback-patches", "gpus", "cancel", "deploys"):
            HOST,
        ("check-env",): HOST + "; a cluster name covers the ranks on every node",
        ("bench",): HOST + "; several hosts are benchmarked at once, each from itself",
        ("sweep",): "the host to sweep (one host; default: the inventory's default host)",
        ("trust-host",):
            "the host(s) whose key to fetch and trust: a host, a group, a comma list or all (every fingerprint is "
            "shown, then one question for the new ones)",
        ("adopt",):
            "read the SGLang server running on this inventory host (from /proc) and record it as adopted there, so "
            "the next deploy replaces exactly it",
        ("diff",):
            "the host whose deploys to compare, or two hosts (A,B) to compare what each runs: their current "
            "deploys' argv, environment, version, patch mode and files",
        ("profile",):
            "the host(s) to profile: a host, a group, a comma list or all, each under its own load at once "
            "(default: the inventory's default host); each profile is saved as runs/<host>/profiles/<id>.json",
        ("tune",):
            "the host to tune (default: the inventory's default host); a group or list: its first host is tuned, "
            "the others are told what they would get (their running configuration against the final one, as an "
            "inventory diff) and never deployed",
        ("explain",): "without --from: the host(s) to profile and explain (default: the inventory's default host)",
    }),
    Flag("inventory", "PATH", TEXT, {
        ("deploy", "render", "stop", "status", "logs", "watch", "check-env", "rollback-patches", "gpus", "bench",
         "sweep", "deploy-router", "trust-host", "adopt", "diff", "cancel", "profile", "tune", "deploys", "explain"):
            "inventory file (default: $SPECDEPLOY_INVENTORY or ./inventory.yaml)",
    }),
    Flag("json", None, SWITCH, {
        ("deploy", "render", "stop", "status", "check-env", "rollback-patches", "gpus", "bench", "sweep", "analyze",
         "deploy-router", "adopt", "diff", "cancel", "profile", "tune", "deploys", "explain"):
            "print one JSON document on stdout instead of tables",
        ("watch",): "one JSON line per sample",
    }),
    Flag("host_timeout", "SECONDS", seconds(), {
        ("stop", "status", "logs", "check-env", "gpus", "deploys"): HOST_TIMEOUT,
        ("deploy-router",): HOST_TIMEOUT + "; applies to judging the replicas",
    }),
    Flag("lock_wait", "SECONDS", seconds(zero=True), {
        ("deploy", "stop", "rollback-patches"):
            "when another deploy holds a host, queue behind it up to this many seconds, showing its step, then "
            "replace what it leaves running (default: timeouts.lock_wait, 0 = refuse at once, naming it)",
    }),
    Flag("dry_run", None, SWITCH, {
        ("deploy",):
            "print the plan (command, env, files, steps) and touch no host; with --previous or --id: say which "
            "recorded deploy would start and what it would replace, start nothing",
        ("stop",): "list what would be stopped, stop nothing",
        ("rollback-patches",): "say what would be restored, change nothing",
    }),
    Flag("verbose", None, SWITCH, {
        ("status",):
            "also SGLang's own warnings about each launch (a flag or variable deprecated, removed or ignored, a "
            "fallback, the default MoE kernel config), read from its log at deploy",
        ("check-env",):
            "one row per rank and variable with expected, observed and evidence (default: a compact ranks × "
            "variables matrix)",
        ("profile",): "one table per rank (by default ranks that agree within 2 % print as one table)",
    }),

    # What a deploy runs (deploy, render; a sweep's axes are lists)
    Flag("steps", "N", whole(0, MAX_STEPS), {
        ("deploy", "render"): "speculative steps (0 = baseline without speculation; default from the inventory)",
        ("diff",): "with --new now: the steps to render (default: the old deploy's)",
    }),
    Flag("steps", "N", whole_list(0, MAX_STEPS, MAX_STEPS + 1), {
        ("sweep",):
            "comma list of speculative steps to try, e.g. 0,1,2,3,4 (0 = baseline; the baseline is always run)",
    }),
    Flag("steps", "N", whole(1, MAX_STEPS), {
        ("analyze",): "speculative steps (bounds the accept length at steps+1 and multiplies --draft-ms)",
    }),
    Flag("topk", "K", whole(1, MAX_TOPK), {("deploy", "render"): "EAGLE top-k (default from the inventory, 1)"}),
    Flag("topk", "K", whole_list(1, MAX_TOPK, MAX_TOPK), {
        ("sweep",): "comma list of EAGLE top-k values (default: the inventory's)",
    }),
    Flag("draft_tokens", "N", whole(1, MAX_DRAFT_TOKENS), {
        ("deploy", "render"): "draft tokens per verify (default steps+1 when topk is 1, SGLang's rule)",
    }),
    Flag("draft_tokens", "N", whole_list(2, MAX_DRAFT_TOKENS, 64), {
        ("sweep",): "comma list of draft token counts for topk > 1 (topk 1 always uses steps+1, SGLang's rule)",
    }),
    Flag("patch_mode", "MODE", CHOICE_PATCH_MODE, {
        ("deploy", "render", "sweep"):
            "how NCCL settings reach the workers: auto|env|engine|scheduler|plugin|sitecustomize",
    }),
    Flag("timeout", "SECONDS", seconds(), {
        ("deploy", "render"): "hard bound in seconds on waiting for the server to become ready",
        ("sweep",): "bound in seconds on each deploy's wait for readiness",
        ("bench", "profile"): "bound in seconds on the whole benchmark (default: from its size)",
        ("deploy-router",): "seconds the router has to answer /health (default 60)",
        ("cancel",):
            "seconds to wait for the cancelled deploy to let go of the host (default: 3 x timeouts.stop_grace + 30)",
    }),
    Flag("timeout", "SECONDS", seconds(WEEK_S), {
        ("logs",): "with --follow, stop after this many seconds (default 3600)",
    }),
    Flag("measure", None, SWITCH, {
        ("deploy", "render"):
            "turn SGLang's per-phase GPU timer on (--enable-metrics + SGLANG_ENABLE_METRICS_DEVICE_TIMER=1, SGLang "
            "0.5.11+): bench, sweep and explain then show measured phases (default: the inventory's `measure`; "
            "unset, on only for a sweep's deploys)",
        ("sweep",): "turn SGLang's device timer on (default: on where the version has it, for a sweep measures)",
    }),
    Flag("no_measure", None, SWITCH, {
        ("deploy", "render"): "turn the device timer off, whatever the inventory says",
        ("sweep",): "deploy every configuration without the device timer (the derived cycle only)",
    }),
    Flag("strict", None, SWITCH, {
        ("deploy",):
            "exit 2, before anything on a host is touched, when a knob has no effect on the host's SGLang release "
            "(or is a deprecated alias)",
        ("render",): "exit 2 when a knob has no effect on that release (or is a deprecated alias)",
    }),
    Flag("sglang_version", "VERSION", Value("release", _release), {
        ("deploy",):
            "with --dry-run: judge the knobs on this SGLang release (default: the newest supported; a deploy reads "
            "the host's)",
        ("render",):
            "judge the knobs on this SGLang release (default: the newest supported): flags it parses and never "
            "reads, deprecated aliases, variables it overwrites",
        ("adopt",):
            "judge a pasted line's knobs on this SGLang release (default: the newest supported; --host reads the "
            "running server's)",
    }),

    # inv deploy's own
    Flag("no_verify", None, SWITCH, {
        ("deploy",): "skip the check-env step (not recommended: it is the proof the tuning reached the workers)",
    }),
    Flag("strategy", "rolling|parallel", Value("choice", _strategy), {
        ("deploy",): "several hosts: rolling (default: a canary host first, then batches) or parallel (all at once)",
    }),
    Flag("batch", "N|PCT%", Value("batch", _batch), {
        ("deploy",): "rolling: hosts per batch after the canary, a number (2) or a share (25%, the default)",
    }),
    Flag("no_canary", None, SWITCH, {("deploy",): "rolling: do not deploy one host alone first"}),
    Flag("rollback_on_failure", None, SWITCH, {
        ("deploy",):
            "when a batch fails, put every host this run changed back to the deploy it ran before (default: hosts "
            "already deployed stay on the new version)",
    }),
    Flag("accept_gate", "LEN", number(0.0, MAX_ACCEPT, open_maximum=True,
                                      what="an accept length (e.g. 1.1, or 0 for no gate)"), {
        ("deploy",):
            "EAGLE accept length at or below which the deploy fails, measured after ready by a short burst (default: "
            "the inventory's accept_gate, 1.1; 0 turns the gate off)",
    }),
    Flag("previous", None, SWITCH, {
        ("deploy",):
            "start again, on each host, the deploy recorded before the one that runs (following the chain: again "
            "goes one further back), from its own launch script",
    }),
    Flag("id_", "ID", Value("id", flags.deploy_id), {
        ("deploy",):
            "start the recorded deploy ID again (`inv deploys --host H` lists them), from its own launch script",
    }),
    Flag("yes", None, SWITCH, {
        ("deploy",):
            "start a recorded deploy that was cancelled or failed without asking (without a terminal: required)",
    }),

    # The routers
    Flag("router", "ROUTER", TEXT, {
        ("stop",): "stop this router of the inventory's `routers:` instead of servers (on the host it runs on)",
        ("deploy-router",): "which router of the inventory's `routers:` (default: the only one)",
    }),

    # Logs and the live view
    Flag("follow", None, SWITCH, {("logs",): "keep printing new lines (Ctrl-C to stop)"}),
    Flag("lines", "N", whole(1, MAX_LINES), {("logs",): "how many lines of the end to show first (default 50)"}),
    Flag("interval", "SECONDS", seconds(MAX_INTERVAL_S), {("watch",): "seconds between samples (default 2)"}),
    Flag("once", None, SWITCH, {("watch",): "one sample, then exit (thresholds judged on it)"}),
    Flag("min_accept", "LEN", ACCEPT_LEN, {("watch",): "alarm when a server's accept length stays below this"}),
    Flag("min_tok_s", "TOK_S", number(0.0, MAX_TOK_S, open_minimum=True, unit="tok/s",
                                      what="a throughput in tok/s"), {
        ("watch",): "alarm when a server's generation throughput (tok/s) stays below this",
    }),
    Flag("for_", "SECONDS", seconds(zero=True), {
        ("watch",): "how long (seconds) a figure must stay below its threshold before the alarm (default 0)",
    }),
    Flag("duration", "SECONDS", seconds(MONTH_S), {
        ("watch",): "stop after this many seconds (exit 0 unless an alarm fired; default: until Ctrl-C)",
    }),

    # A benchmark's load (bench, profile, tune, explain; a sweep's levels are a list)
    Flag("concurrency", "N", whole(1, MAX_CONCURRENCY), {
        ("bench", "profile", "tune"):
            "requests in flight at once (default 1: the single-stream speed speculation is for)",
        ("explain",): "without --from: requests in flight (default 1)",
    }),
    Flag("concurrency", "N", whole_list(1, MAX_CONCURRENCY, 16), {  # 16 levels of every configuration: hours already
        ("sweep",):
            "comma list of load levels, e.g. 1,8,32: each deployed configuration is benchmarked at each (one model "
            "load serves them all); the table, report and plot give the winner per level, and the first level's "
            "winner is left running (default 1)",
    }),
    Flag("input_len", "TOKENS", whole(1, MAX_TOKENS), {
        ("bench", "sweep", "profile", "tune"): "prompt length in tokens, random ids (default 256)",
    }),
    Flag("output_len", "TOKENS", whole(2, MAX_TOKENS), {
        ("bench", "sweep", "profile", "tune"): "new tokens per request, EOS ignored (default 128)",
    }),
    Flag("num_prompts", "N", whole(1, MAX_REQUESTS), {
        ("bench",): "requests to measure, after one warm-up request (default 16)",
        ("sweep",): "a fixed number of requests per configuration and level (default: adaptive, see --target-ci)",
        ("profile",): "requests of the load the phases are measured under (default 16)",
        ("tune",): "requests of the load each deploy is measured under (default 16)",
        ("explain",): "without --from: requests of the profile's load (default 16)",
    }),
    Flag("client", "CLIENT", CHOICE_CLIENT, {
        ("bench", "sweep"):
            "auto (sglang.bench_serving when the host's SGLang has it, else builtin) | sglang | builtin",
    }),
    Flag("out", "DIR", PATH, {
        ("bench",): "local directory for results: OUT/<host>/<id>.json (default ./runs)",
        ("sweep",): "local directory: OUT/<host>/sweep-<id>/ gets sweep.json, report.md, sweep.png (default ./runs)",
        ("profile",):
            "with --trace: fetch each rank's trace into DIR as <host>-<deploy id>-TP<rank>.trace.json.gz (opens in "
            "Perfetto)",
    }),
    Flag("explain", None, SWITCH, {
        ("bench", "sweep"):
            "say where the cycle's time goes, in sentences from the measured figures (`inv explain --rules`)",
    }),
    Flag("baseline", "FILE", PATH, {
        ("bench",): "with --explain: a saved bench of the baseline to compare with (default: the newest in --out)",
        ("explain",):
            "a saved bench (or profile) of the baseline: the decode step the break-even needs (default: the newest "
            "saved baseline bench of the host in ./runs)",
    }),
    Flag("trace", None, SWITCH, {
        ("profile",):
            "also record SGLang's profiler trace (bounded: --trace-steps) and break each phase down by kernel",
        ("explain",): "without --from: also take SGLang's profiler trace (kernels, all-reduces, CUDA graphs)",
    }),
    Flag("trace_steps", "N", Value("whole", _trace_steps), {
        ("profile",): "scheduler steps the profiler records with --trace (default 12, at most 200)",
        ("tune",):
            "scheduler steps the profiler records when a measurement is traced (default 12, at most 200): only while "
            "a rule that reads kernel classes has an untried remedy",
    }),

    # inv sweep's own
    Flag("keep", "CONFIG", TEXT, {
        ("sweep",):
            "leave this configuration running afterwards (a config name from the table, e.g. baseline or "
            "eagle3-s2-k1-d3; default: the winner)",
    }),
    # ±50 % or more is no measurement at all.
    Flag("target_ci", "PCT", number(0.0, 50.0, open_minimum=True, open_maximum=True, unit="%",
                                    what="a percentage, e.g. 2"), {
        ("sweep",):
            "adaptive length: each benchmark stops once its tok/s is known within ±PCT % (95 % interval; default 2)",
    }),
    Flag("min_requests", "N", whole(2, MAX_REQUESTS), {
        ("sweep",): "adaptive length: at least this many requests (default 8)",
    }),
    Flag("max_requests", "N", whole(2, MAX_REQUESTS), {
        ("sweep",): "adaptive length: at most this many requests (default 256)",
    }),
    Flag("predict", None, SWITCH, {
        ("sweep",):
            "measure the baseline and the largest chain step count (the smallest too where SGLang's device timer is "
            "off: --no-measure or a release without it), predict the other topk-1 configurations from the "
            "accepted-drafts histogram and the measured phases (or the cycle fit), deploy only the predicted winner "
            "to confirm it (topk > 1 and other draft-token counts are measured); with NCCL candidates at TP >= 2, "
            "load the first candidate (with a short profiler trace) and only the others that can win. The sweep says "
            "its model-load count before the first load and the same at the end",
    }),
    Flag("nccl", "CANDIDATES", TEXT, {
        ("sweep",):
            "NCCL candidates crossed with every configuration (each its own server start): built-in presets (pcie, "
            "none = no NCCL tuning variables) or host (the inventory's own), e.g. pcie,none",
    }),
    Flag("nccl_env", "'VAR=A|B'", TEXT, {
        ("sweep",):
            "NCCL values to try, laid over each --nccl candidate: 'NCCL_PROTO=LL|Simple|-' (- = unset; several "
            "variables separated by spaces are crossed); checked with NCCL's own parsing rules",
    }),
    Flag("adaptive", None, SWITCH, {
        ("sweep",):
            "add SGLang's own --speculative-adaptive (it moves the step count itself, starting from the largest "
            "--steps; releases 0.5.11 and later) as a configuration, with the step count it settled on",
    }),
    Flag("resume", "DIR", Value("path", _folder), {
        ("sweep",):
            "OUT/<host>/sweep-<id>: continue that interrupted or failed sweep (run with the same flags and "
            "inventory): what it measured on the same deploy plans is kept, the rest is measured",
    }),

    # Service limits (sweep, tune)
    Flag("max_ttft_ms", "MS", limit(MAX_MS, "ms", "a number of milliseconds"), {
        ("sweep",):
            "service limit: the winner (per concurrency level) is the fastest configuration whose median time to "
            "first token is at most this many ms; the table says which limit the others broke; exit 1 when none "
            "meets the limits",
        ("tune",):
            "service limit: median TTFT at most this many ms on every deploy a change is kept on (a guard; with "
            "--objective sla, the objective)",
    }),
    Flag("max_tpot_ms", "MS", limit(MAX_MS, "ms", "a number of milliseconds"), {
        ("sweep", "tune"): "service limit: median time per output token at most this many ms (see --max-ttft-ms)",
    }),
    Flag("min_tok_s", "TOK_S", limit(MAX_TOK_S, "tok/s", "a number of tokens per second"), {
        ("sweep", "tune"): "service limit: output tok/s at least this (see --max-ttft-ms)",
    }),

    # inv tune's own
    Flag("objective", "OBJECTIVE", Value("choice", _objective), {
        ("tune",):
            "what to maximise: tok-s (output tokens per second at the bench's load; the service limits, if given, "
            "guard every change) or sla (meet the service limits first, then tok/s; needs a limit)",
    }),
    Flag("max_loads", "N", whole(0, 10_000), {
        ("tune",): "model loads the tuner may spend (default 40; a trial is 6 plus its incumbent)",
    }),
    Flag("max_minutes", "MINUTES", number(0.0, 10_000.0, unit="min", what="a number of minutes"), {
        ("tune",): "wall-clock minutes the tuner may spend (default 60)",
    }),
    Flag("resume", None, SWITCH, {
        ("tune",): "continue the path saved after each trial in runs/tune-<host>.json (beside it: tune.png)",
    }),
    Flag("write", "FILE", PATH, {
        ("adopt",): "write a new inventory file with the entry (refuses an existing file) instead of printing it",
        ("tune",): "write the final configuration as an inventory diff to FILE",
    }),

    # inv analyze
    Flag("sweep", "FILE", TEXT, {
        ("analyze",): "a sweep result file (OUT/<host>/sweep-<id>/sweep.json): break-even for each configuration",
    }),
    Flag("baseline_ms", "MS", MS, {("analyze",): "baseline decode time per token, ms (e.g. 12.2)"}),
    Flag("verify_ms", "MS", MS, {
        ("analyze",): "one verify pass, ms (e.g. 29 or 18.7); include the draft here if --draft-ms is not given",
    }),
    Flag("draft_ms", "MS", number(0.0, MAX_MS, unit="ms", what="a number of milliseconds"), {
        ("analyze",): "draft cost per step, ms (default 0)",
    }),
    Flag("accept_len", "LEN", ACCEPT_LEN, {
        ("analyze",): "the accept length measured (optional: without it, only the break-even is printed)",
    }),

    # inv explain
    Flag("from_", "FILE", PATH, {
        ("explain",):
            "a saved sweep.json, bench result (RUNS/<host>/<id>.json) or profile JSON to explain (default: profile "
            "the running server(s) now, as `inv profile` does)",
    }),
    Flag("rules", None, SWITCH, {("explain",): "print the rule table (id, threshold, what it points at) and stop"}),
    Flag("fresh", None, SWITCH, {
        ("explain",): "without --from: profile the server now, even when a profile of the same deploy was saved lately",
    }),
    Flag("max_age", "SECONDS", seconds(), {
        ("explain",):
            "without --from: reuse a saved profile of the deploy running now (same concurrency; a trace when "
            "--trace) measured less than SECONDS ago (default 300), instead of loading the server again",
    }),

    # trust-host, adopt, diff
    Flag("fingerprint", "SHA256:…", TEXT, {
        ("trust-host",):
            "the SHA256:... fingerprint you verified out of band (a comma list for several hosts); written only if "
            "each host offers exactly one of them, else nothing is written",
    }),
    Flag("command", "'LAUNCH LINE'", TEXT, {
        ("adopt",): "a pasted launch line instead (env assignments, nohup, redirections, `&`, even the ssh line)",
    }),
    Flag("name", "NAME", TEXT, {("adopt",): "the host name for the entry (default: --host, else gpu1)"}),
    Flag("old", "REF", TEXT, {
        ("diff",):
            "the first side: a deploy id, HOST:ID, current or previous (default: previous; current with --new now or "
            "two hosts)",
    }),
    Flag("new", "REF", TEXT, {
        ("diff",):
            "the second side: a deploy id, HOST:ID, current, previous, or now = what render would run now (default: "
            "current)",
    }),
)

# Both indexes in one pass at import (`inv --list` builds every task's help from them).
_BY_TASK: dict[tuple[str, str], Flag] = {}
_HELPS: dict[str, dict[str, str]] = {}
for _f in FLAGS:
    for _group, _text in _f.help.items():
        for _t in _group:
            _BY_TASK[(_t, _f.param)] = _f
            _HELPS.setdefault(_t, {})[_f.param] = _text


def spec(task: str, param: str) -> Flag:
    """The one spec of ``task``'s flag ``param``."""
    return _BY_TASK[(task, param)]


def read(task: str, param: str, value: Any) -> Any:
    """``value`` of ``task``'s flag ``param`` read by its spec; a bad value is a FlagError naming the flag (exit 2).
    None (not given, or a flag the task does not have, which a shared reader of options passes) stays None."""
    if value is None:
        return None
    f = _BY_TASK[(task, param)]
    return value if f.value.check is None else f.value.check(f.flag, value)


def read_each(task: str, **values: Any) -> list[Any]:
    """Each of ``task``'s flags read by its spec, in the order given; every bad one is said at once (exit 2)."""
    found = Collector()
    out = [found.check(read, task, param, value) for param, value in values.items()]
    found.done()
    return out


def helps(task: str) -> dict[str, str]:
    """Each flag's sentence in `inv --help TASK`, by parameter (Invoke's ``@task(help=...)``)."""
    return dict(_HELPS.get(task, {}))  # a copy: Invoke pops each text as it builds the flag


def metavars() -> dict[str, str]:
    """What each value flag takes as help shows it (``--steps=N``), by the flag's name without its dashes."""
    return {f.flag[2:]: f.metavar for f in FLAGS if f.metavar is not None}
