"""The agent protocol's shared vocabulary: verb names and error kinds, imported by BOTH the host agent and the client.

One table, so the two sides cannot drift: the agent raises ``AgentError(kind, ...)`` with a kind listed here, and the
client turns the kind's ``category`` into its exception class (and exit code) and falls back on the kind's ``hint``
when the agent sent none. ``tests/test_protocol.py`` reads the agent's source and fails when a raised kind is
missing here, or a kind here is raised nowhere. Stdlib only, Python 3.9+ (it runs on the host too).
"""

from __future__ import annotations

# Every verb the agent answers (``fabfile/remote/verbs.py``'s TABLE has exactly these keys).
VERBS: tuple[str, ...] = (
    "facts", "deploy", "attach", "stop", "status", "logs", "gpus", "stale", "adopt", "records", "redeploy", "cancel",
    "router_start", "router_stop", "router_worker", "watch", "bench", "evidence", "patch_apply", "patch_rollback",
    "patch_status",
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
    "anchor_not_found": ("patch", "use patch mode 'env' or 'plugin' (0.5.11+), or report the version"),
    "anchor_ambiguous": ("patch", "use patch mode 'env' or 'plugin' (0.5.11+), or report the version"),
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
