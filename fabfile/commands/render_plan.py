"""``inv render`` / ``inv deploy --dry-run``: the whole plan and every file a deploy would write, touching nothing.

The host's SGLang version is not known without connecting, so ``auto`` is shown as the mode it picks on the
newest release, with the rule stated; the deploy itself resolves it at preflight.
"""

from __future__ import annotations

import shlex
from typing import Any

from rich.syntax import Syntax

from fabfile import __version__
from fabfile.inventory.hosts import Host
from fabfile.plan.deploy_plan import Options, build, mask_secrets, secret_values
from fabfile.present.output import out
from fabfile.remote import versions

ASSUMED_VERSION = versions.NEWEST_SUPPORTED


def plan_document(host: Host, opts: Options) -> dict[str, Any]:
    from fabfile.render.patchset import build_patch_request, resolve_mode

    plan = build(host, opts)
    doc = plan.summary()
    # The command the script really runs: the inventory's env comes from the private env file, secret flags from
    # SGLang's --config file; masked all the same, in case a version without --config keeps a key in argv.
    inline = [f"{k}={v}" for k, v in plan.env.items() if k not in plan.file_env]
    wrapper = ["/bin/sh", "-c", 'set -a && . "$0" && set +a && exec "$@"', plan.env_file] if plan.env_file else []
    doc["launch_command"] = mask_secrets(shlex.join(["env", "-i", *inline, *wrapper, *plan.launch_argv]),
                                         secret_values(host))
    files: dict[str, str] = {plan.script_path: plan.masked_script(), **plan.masked_files()}
    mode_note = plan.patch_mode
    if plan.patch_mode == "auto":
        mode_note = (f"auto → {resolve_mode('auto', ASSUMED_VERSION)} on SGLang {ASSUMED_VERSION} "
                     f"(plugin on >= {versions.PLUGIN_SYSTEM}, scheduler before); decided from the host's version at "
                     "preflight")
    doc["patch_mode_note"] = mode_note
    if plan.nccl_values and plan.patch_mode != "env":
        req = build_patch_request(plan.patch_mode, plan.nccl_values, plan.force_env, ASSUMED_VERSION,
                                  host.state_dir, "<site-packages>", __version__)
        for role, content in req["files"].items():
            if isinstance(content, dict):
                for rel, text in content.items():
                    files[f"<site-packages>/{rel}"] = text
            else:
                files[f"<{role} inserted by mode {req['mode']}>"] = content
    doc["files"] = files
    doc["touches_hosts"] = False
    return doc


def describe(doc: dict[str, Any]) -> None:
    out.print(f"[bold]plan for {doc['host']}[/bold]  config {doc['config']}  plan {doc['plan_hash']}  "
              "[dim](dry run: no host touched)[/dim]")
    out.print(f"  url: {doc['url']}\n  log: {doc['log_path']}\n  patch mode: {doc['patch_mode_note']}")
    for note in doc.get("nccl_notes") or []:
        out.print(f"  nccl: {note}", markup=False, highlight=False)
    out.print("  steps: " + " → ".join(doc["steps"]))
    for note in doc.get("notes") or []:
        out.print(f"  note: {note}", markup=False, highlight=False)
    out.print("[bold]launch command[/bold]")
    out.print(doc["launch_command"], markup=False, highlight=False)
    for path, text in doc["files"].items():
        out.print(f"[bold]file {path}[/bold]")
        lexer = "bash" if path.endswith(".sh") else "python" if (path.endswith(".py") or "inserted" in path) \
            else "text"
        out.print(Syntax(text, lexer, theme="ansi_dark", word_wrap=True))
