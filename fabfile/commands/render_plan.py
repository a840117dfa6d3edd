"""``inv render`` / ``inv deploy --dry-run``: the whole plan and every file a deploy would write, touching nothing.

The host's SGLang version is not known without connecting, so ``auto`` is shown as the mode it picks on the
newest release, with the rule stated; the deploy itself resolves it at preflight.
"""

from __future__ import annotations

import shlex
from typing import Any

from fabfile import __version__
from fabfile.commands.result import CommandResult
from fabfile.inventory.hosts import Host
from fabfile.plan.deploy_plan import Options, build, mask_secrets, secret_values
from fabfile.remote import versions

ASSUMED_VERSION = versions.NEWEST_SUPPORTED


def plan_document(host: Host, opts: Options, sglang_version: str | None = None) -> dict[str, Any]:
    from fabfile.plan import knob_effects
    from fabfile.render.patchset import build_patch_request, resolve_mode

    plan = build(host, opts)
    doc = plan.summary()
    # Knobs the release does nothing with (tools/contract/knobfacts.py reads that from the wheels), said before
    # anything is touched; judged on the newest release unless the caller names the host's.
    judged_on = sglang_version or ASSUMED_VERSION
    doc["knob_notes"] = knob_effects.notes(judged_on, list(plan.launch_argv), plan.env)
    doc["knob_notes_version"] = judged_on
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


def render_hosts(hosts: list[Host], opts: Options, sglang_version: str | None = None,
                 strict: bool = False) -> CommandResult:
    """``inv render`` (and ``deploy --dry-run``): each host's plan, ``{"ok": true, "hosts": [plan, ...]}`` for one
    host or many (a plan that cannot be built is bad input: the command stops before any document)."""
    from fabfile.errors import Collector, FlagError
    from fabfile.plan.knob_effects import checked_version
    from fabfile.present.plan_report import describe
    from fabfile.results.hosts import hosts_document

    sglang_version = checked_version(sglang_version)
    found = Collector()  # every host's refusals at once, not the first host's alone
    built = [found.check(plan_document, h, opts, sglang_version) for h in hosts]
    found.done()
    docs = [{"ok": True, **d} for d in built]
    if strict:
        for d in docs:
            if d["knob_notes"]:
                raise FlagError(f"--strict: {d['host']}: {d['knob_notes'][0]}"
                                + (f" (and {len(d['knob_notes']) - 1} more)" if len(d["knob_notes"]) > 1 else ""),
                                "remove those knobs from the inventory; nothing was touched")

    def for_people() -> None:
        for d in docs:
            describe(d)

    return CommandResult(hosts_document(docs), for_people)
