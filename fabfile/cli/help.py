"""What `inv --help <command>` says of each flag, and what Ctrl-C leaves behind, per command."""

from __future__ import annotations

INVENTORY_HELP = "inventory file (default: $SPECDEPLOY_INVENTORY or ./inventory.yaml)"
HOST_HELP = "host, group, comma list of them, or all (every host; default: the inventory's default host)"
JSON_HELP = "print one JSON document on stdout instead of tables"
HOST_TIMEOUT_HELP = ("wall-clock bound in seconds on each host's part (default: timeouts.host, 60): a host past it "
                     "is reported as timed out while the others' results print")
# What Ctrl-C leaves behind, for the commands that change hosts (a deploy says it itself: fabfile.errors.Interrupted).
_ON_HOSTS = ("interrupted: what was started on the host goes on there without this terminal (or tears itself down); "
             "`inv status` shows what runs, `inv cancel` stops a deploy in progress")
INTERRUPTED = {"deploy": _ON_HOSTS, "sweep": _ON_HOSTS + "; the sweep's finished rows are in its --out folder",
               "deploy_router": _ON_HOSTS, "stop": "interrupted: `inv status` shows what still runs",
               "rollback_patches": "interrupted: `inv rollback-patches --dry-run` shows what is left to restore",
               "cancel": "interrupted: `inv status` shows whether the deploy let go of the host"}
DEPLOY_HELP = {
    "host": HOST_HELP,
    "steps": "speculative steps (0 = baseline without speculation; default from the inventory)",
    "topk": "EAGLE top-k (default from the inventory, 1)",
    "draft_tokens": "draft tokens per verify (default steps+1 when topk is 1, SGLang's rule)",
    "patch_mode": "how NCCL settings reach the workers: auto|env|engine|scheduler|plugin|sitecustomize",
    "timeout": "hard bound in seconds on waiting for the server to become ready",
    "dry_run": "print the plan (command, env, files, steps) and touch no host; with --previous or --id: say which "
               "recorded deploy would start and what it would replace, start nothing",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
    "no_verify": "skip the check-env step (not recommended: it is the proof the tuning reached the workers)",
    "strategy": "several hosts: rolling (default: a canary host first, then batches) or parallel (all at once)",
    "batch": "rolling: hosts per batch after the canary, a number (2) or a share (25%, the default)",
    "no_canary": "rolling: do not deploy one host alone first",
    "accept_gate": "EAGLE accept length at or below which the deploy fails, measured after ready by a short burst "
                   "(default: the inventory's accept_gate, 1.1; 0 turns the gate off)",
    "rollback_on_failure": "when a batch fails, put every host this run changed back to the deploy it ran before "
                           "(default: hosts already deployed stay on the new version)",
    "lock_wait": "when another deploy holds a host, queue behind it up to this many seconds, showing its step, "
                 "then replace what it leaves running (default: timeouts.lock_wait, 0 = refuse at once, naming it)",
    "previous": "start again, on each host, the deploy recorded before the one that runs (following the chain: "
                "again goes one further back), from its own launch script",
    "id_": "start the recorded deploy ID again (`inv deploys --host H` lists them), from its own launch script",
    "yes": "start a recorded deploy that was cancelled or failed without asking (without a terminal: required)",
    "measure": "turn SGLang's per-phase GPU timer on (--enable-metrics + SGLANG_ENABLE_METRICS_DEVICE_TIMER=1, "
               "SGLang 0.5.11+): bench, sweep and explain then show measured phases (default: the inventory's "
               "`measure`; unset, on only for a sweep's deploys)",
    "no_measure": "turn the device timer off, whatever the inventory says",
    "strict": "exit 2, before anything on a host is touched, when a knob has no effect on the host's SGLang "
              "release (or is a deprecated alias)",
    "sglang_version": "with --dry-run: judge the knobs on this SGLang release (default: the newest supported; a "
                      "deploy reads the host's)",
}
LOCK_WAIT_HELP = DEPLOY_HELP["lock_wait"]
BENCH_HELP = {
    "host": HOST_HELP + "; several hosts are benchmarked at once, each from itself",
    "concurrency": "requests in flight at once (default 1: the single-stream speed speculation is for)",
    "input_len": "prompt length in tokens, random ids (default 256)",
    "output_len": "new tokens per request, EOS ignored (default 128)",
    "num_prompts": "requests to measure, after one warm-up request (default 16)",
    "client": "auto (sglang.bench_serving when the host's SGLang has it, else builtin) | sglang | builtin",
    "timeout": "bound in seconds on the whole benchmark (default: from its size)",
    "out": "local directory for results: OUT/<host>/<id>.json (default ./runs)",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
    "explain": "say where the cycle's time goes, in sentences from the measured figures (`inv explain --rules`)",
    "baseline": "with --explain: a saved bench of the baseline to compare with (default: the newest in --out)",
}
TUNE_HELP = {
    **{k: BENCH_HELP[k] for k in ("concurrency", "input_len", "output_len", "json", "inventory")},
    "host": "the host to tune (default: the inventory's default host); a group or list: its first host is tuned, "
            "the others are told what they would get (their running configuration against the final one, as an "
            "inventory diff) and never deployed",
    "num_prompts": "requests of the load each deploy is measured under (default 16)",
    "objective": "what to maximise: tok-s (output tokens per second at the bench's load; the service limits, if "
                 "given, guard every change) or sla (meet the service limits first, then tok/s; needs a limit)",
    "max_loads": "model loads the tuner may spend (default 40; a trial is 6 plus its incumbent)",
    "max_minutes": "wall-clock minutes the tuner may spend (default 60)",
    "resume": "continue the path saved after each trial in runs/tune-<host>.json (beside it: tune.png)",
    "write": "write the final configuration as an inventory diff to FILE",
    "max_ttft_ms": "service limit: median TTFT at most this many ms on every deploy a change is kept on (a guard; "
                   "with --objective sla, the objective)",
    "max_tpot_ms": "service limit: median time per output token at most this many ms (see --max-ttft-ms)",
    "min_tok_s": "service limit: output tok/s at least this (see --max-ttft-ms)",
    "trace_steps": "scheduler steps the profiler records when a measurement is traced (default 12, at most 200): "
                   "only while a rule that reads kernel classes has an untried remedy",
}

PROFILE_HELP = {
    **{k: BENCH_HELP[k] for k in ("concurrency", "input_len", "output_len", "timeout", "json", "inventory")},
    "host": "the host(s) to profile: a host, a group, a comma list or all, each under its own load at once "
            "(default: the inventory's default host); each profile is saved as runs/<host>/profiles/<id>.json",
    "num_prompts": "requests of the load the phases are measured under (default 16)",
    "trace": "also record SGLang's profiler trace (bounded: --trace-steps) and break each phase down by kernel",
    "trace_steps": "scheduler steps the profiler records with --trace (default 12, at most 200)",
    "out": "with --trace: fetch each rank's trace into DIR as <host>-<deploy id>-TP<rank>.trace.json.gz "
           "(opens in Perfetto)",
    "verbose": "one table per rank (by default ranks that agree within 2 % print as one table)",
}
SWEEP_HELP = {
    "host": "the host to sweep (one host; default: the inventory's default host)",
    "steps": "comma list of speculative steps to try, e.g. 0,1,2,3,4 (0 = baseline; the baseline is always run)",
    "topk": "comma list of EAGLE top-k values (default: the inventory's)",
    "draft_tokens": "comma list of draft token counts for topk > 1 (topk 1 always uses steps+1, SGLang's rule)",
    "keep": "leave this configuration running afterwards (a config name from the table, e.g. baseline or "
            "eagle3-s2-k1-d3; default: the winner)",
    "input_len": BENCH_HELP["input_len"],
    "output_len": BENCH_HELP["output_len"],
    "concurrency": "comma list of load levels, e.g. 1,8,32: each deployed configuration is benchmarked at each "
                   "(one model load serves them all); the table, report and plot give the winner per level, and "
                   "the first level's winner is left running (default 1)",
    "num_prompts": "a fixed number of requests per configuration and level (default: adaptive, see --target-ci)",
    "target_ci": "adaptive length: each benchmark stops once its tok/s is known within ±PCT % (95 % interval; "
                 "default 2)",
    "min_requests": "adaptive length: at least this many requests (default 8)",
    "max_requests": "adaptive length: at most this many requests (default 256)",
    "predict": "measure the baseline and the largest chain step count (the smallest too where SGLang's device "
               "timer is off: --no-measure or a release without it), predict the other topk-1 configurations from "
               "the accepted-drafts histogram and the measured phases (or the cycle fit), deploy only the "
               "predicted winner to confirm it (topk > 1 and other draft-token counts are measured); with NCCL "
               "candidates at TP >= 2, load the first candidate (with a short profiler trace) and only the others "
               "that can win. The sweep says its model-load count before the first load and the same at the end",
    "nccl": "NCCL candidates crossed with every configuration (each its own server start): built-in presets "
            "(pcie, none = no NCCL tuning variables) or host (the inventory's own), e.g. pcie,none",
    "nccl_env": "NCCL values to try, laid over each --nccl candidate: 'NCCL_PROTO=LL|Simple|-' (- = unset; "
                "several variables separated by spaces are crossed); checked with NCCL's own parsing rules",
    "resume": "OUT/<host>/sweep-<id>: continue that interrupted or failed sweep (run with the same flags and "
              "inventory): what it measured on the same deploy plans is kept, the rest is measured",
    "adaptive": "add SGLang's own --speculative-adaptive (it moves the step count itself, starting from the "
                "largest --steps; releases 0.5.11 and later) as a configuration, with the step count it settled on",
    "max_ttft_ms": "service limit: the winner (per concurrency level) is the fastest configuration whose median "
                   "time to first token is at most this many ms; the table says which limit the others broke; exit 1 "
                   "when none meets the limits",
    "max_tpot_ms": "service limit: median time per output token at most this many ms (see --max-ttft-ms)",
    "min_tok_s": "service limit: output tok/s at least this (see --max-ttft-ms)",
    "client": BENCH_HELP["client"],
    "measure": "turn SGLang's device timer on (default: on where the version has it, for a sweep measures)",
    "no_measure": "deploy every configuration without the device timer (the derived cycle only)",
    "explain": BENCH_HELP["explain"],
    "patch_mode": DEPLOY_HELP["patch_mode"],
    "timeout": "bound in seconds on each deploy's wait for readiness",
    "out": "local directory: OUT/<host>/sweep-<id>/ gets sweep.json, report.md, sweep.png (default ./runs)",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
}
ANALYZE_HELP = {
    "sweep": "a sweep result file (OUT/<host>/sweep-<id>/sweep.json): break-even for each configuration",
    "baseline_ms": "baseline decode time per token, ms (e.g. 12.2)",
    "verify_ms": "one verify pass, ms (e.g. 29 or 18.7); include the draft here if --draft-ms is not given",
    "draft_ms": "draft cost per step, ms (default 0)",
    "steps": "speculative steps (bounds the accept length at steps+1 and multiplies --draft-ms)",
    "accept_len": "the accept length measured (optional: without it, only the break-even is printed)",
    "json": JSON_HELP,
}
EXPLAIN_HELP = {
    "from_": "a saved sweep.json, bench result (RUNS/<host>/<id>.json) or profile JSON to explain (default: profile "
            "the running server(s) now, as `inv profile` does)",
    "baseline": "a saved bench (or profile) of the baseline: the decode step the break-even needs (default: the "
                "newest saved baseline bench of the host in ./runs)",
    "rules": "print the rule table (id, threshold, what it points at) and stop",
    "host": "without --from: the host(s) to profile and explain (default: the inventory's default host)",
    "trace": "without --from: also take SGLang's profiler trace (kernels, all-reduces, CUDA graphs)",
    "num_prompts": "without --from: requests of the profile's load (default 16)",
    "concurrency": "without --from: requests in flight (default 1)",
    "fresh": "without --from: profile the server now, even when a profile of the same deploy was saved lately",
    "max_age": "without --from: reuse a saved profile of the deploy running now (same concurrency; a trace when "
               "--trace) measured less than SECONDS ago (default 300), instead of loading the server again",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
}
TRUST_HELP = {
    "host": "the host(s) whose key to fetch and trust: a host, a group, a comma list or all (every fingerprint is "
            "shown, then one question for the new ones)",
    "fingerprint": "the SHA256:... fingerprint you verified out of band (a comma list for several hosts); written "
                   "only if each host offers exactly one of them, else nothing is written",
    "inventory": INVENTORY_HELP,
}
ADOPT_HELP = {
    "host": "read the SGLang server running on this inventory host (from /proc) and record it as adopted there, "
            "so the next deploy replaces exactly it",
    "command": "a pasted launch line instead (env assignments, nohup, redirections, `&`, even the ssh line)",
    "name": "the host name for the entry (default: --host, else gpu1)",
    "write": "write a new inventory file with the entry (refuses an existing file) instead of printing it",
    "sglang_version": "judge a pasted line's knobs on this SGLang release (default: the newest supported; --host "
                      "reads the running server's)",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
}
DIFF_HELP = {
    "host": "the host whose deploys to compare, or two hosts (A,B) to compare what each runs: their current "
            "deploys' argv, environment, version, patch mode and files",
    "old": "the first side: a deploy id, HOST:ID, current or previous (default: previous; current with --new now "
           "or two hosts)",
    "new": "the second side: a deploy id, HOST:ID, current, previous, or now = what render would run now "
         "(default: current)",
    "steps": "with --new now: the steps to render (default: the old deploy's)",
    "json": JSON_HELP,
    "inventory": INVENTORY_HELP,
}

RENDER_HELP = {k: DEPLOY_HELP[k] for k in ("host", "steps", "topk", "draft_tokens", "patch_mode", "timeout", "json",
                                           "inventory", "measure", "no_measure")}
RENDER_HELP["sglang_version"] = ("judge the knobs on this SGLang release (default: the newest supported): flags it "
                                 "parses and never reads, deprecated aliases, variables it overwrites")
RENDER_HELP["strict"] = "exit 2 when a knob has no effect on that release (or is a deprecated alias)"

STOP_HELP = {"host": HOST_HELP, "dry_run": "list what would be stopped, stop nothing", "json": JSON_HELP,
             "inventory": INVENTORY_HELP, "host_timeout": HOST_TIMEOUT_HELP, "lock_wait": LOCK_WAIT_HELP,
             "router": "stop this router of the inventory's `routers:` instead of servers (on the host it runs on)"}

STATUS_HELP = {"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP, "host_timeout": HOST_TIMEOUT_HELP,
               "verbose": "also SGLang's own warnings about each launch (a flag or variable deprecated, removed or "
                          "ignored, a fallback, the default MoE kernel config), read from its log at deploy"}

LOGS_HELP = {"host": HOST_HELP, "follow": "keep printing new lines (Ctrl-C to stop)",
             "lines": "how many lines of the end to show first (default 50)",
             "timeout": "with --follow, stop after this many seconds (default 3600)", "inventory": INVENTORY_HELP,
             "host_timeout": HOST_TIMEOUT_HELP}

WATCH_HELP = {"host": HOST_HELP, "interval": "seconds between samples (default 2)",
              "once": "one sample, then exit (thresholds judged on it)", "json": "one JSON line per sample",
              "min_accept": "alarm when a server's accept length stays below this",
              "min_tok_s": "alarm when a server's generation throughput (tok/s) stays below this",
              "for_": "how long (seconds) a figure must stay below its threshold before the alarm (default 0)",
              "duration": "stop after this many seconds (exit 0 unless an alarm fired; default: until Ctrl-C)",
              "inventory": INVENTORY_HELP}

CHECK_ENV_HELP = {"host": HOST_HELP + "; a cluster name covers the ranks on every node",
                  "json": JSON_HELP, "inventory": INVENTORY_HELP, "host_timeout": HOST_TIMEOUT_HELP,
                  "verbose": "one row per rank and variable with expected, observed and evidence "
                             "(default: a compact ranks × variables matrix)"}

ROLLBACK_PATCHES_HELP = {"host": HOST_HELP, "dry_run": "say what would be restored, change nothing",
                         "json": JSON_HELP, "inventory": INVENTORY_HELP, "lock_wait": LOCK_WAIT_HELP}

CANCEL_HELP = {"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP,
               "timeout": "seconds to wait for the cancelled deploy to let go of the host (default: 3 x "
                          "timeouts.stop_grace + 30)"}

DEPLOYS_HELP = {"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP, "host_timeout": HOST_TIMEOUT_HELP}

GPUS_HELP = {"host": HOST_HELP, "json": JSON_HELP, "inventory": INVENTORY_HELP, "host_timeout": HOST_TIMEOUT_HELP}

DEPLOY_ROUTER_HELP = {
    "router": "which router of the inventory's `routers:` (default: the only one)",
    "timeout": "seconds the router has to answer /health (default 60)",
    "host_timeout": HOST_TIMEOUT_HELP + "; applies to judging the replicas",
    "json": JSON_HELP, "inventory": INVENTORY_HELP}
