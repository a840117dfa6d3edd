"""The hints check-env gives beside its rows: what most likely went wrong and what to do, one sentence each.

Split from ``evidence`` (the judgement of each row) so that module reads as the rules of proof and this one as the
advice: the per-row judgement calls ``hint`` with a code, the run-level hints (no server, no NCCL lines, a capped
log, a changed inventory, custom all-reduce) and the blame for a different value are written here. Pure; stdlib
only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import versions

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import EnvRow, Hint

# Patch modes that set the values inside each scheduler process (engine sets them in the launcher only).
IN_PROCESS_MODES = ("scheduler", "plugin", "sitecustomize")


def hint(
    hints: dict[str, Hint],
    code: str,
    message: str,
    severity: str = "error",
    var: str | None = None,
    pid: int | None = None,
) -> None:
    h = hints.setdefault(
        code, {"code": code, "severity": severity, "message": message, "vars": [], "pids": []}
    )
    if var is not None and var not in h["vars"]:
        h["vars"].append(var)
    if pid is not None and pid not in h["pids"]:
        h["pids"].append(pid)


def mode_advice(mode: str | None) -> str:
    """How to get values into the workers, never the patch mode already in use."""
    if mode in IN_PROCESS_MODES:
        return (
            f"the {mode} patch is in use but printed no marker in these workers: check `inv patch-status` "
            "(SGLang reinstalled since the patch?) and deploy again to re-apply it"
        )
    used = f" (this deploy used --patch-mode {mode})" if mode else ""
    return (f"use --patch-mode scheduler (or plugin on SGLang >= {versions.PLUGIN_SYSTEM}) to set them inside each "
            "worker" + used)


def _diag(evidence: dict[str, Any], name: str) -> tuple[str | None, str]:
    """A logging/diagnostic variable's value as the processes saw it (schedulers, launcher) or as launched."""
    for s in evidence.get("schedulers") or []:
        if s.get("environ_status") == "ok":
            return (s.get("environ_diag") or {}).get(name), "the workers' environment"
    launcher = evidence.get("launcher") or {}
    if launcher.get("environ_status") == "ok":
        return (launcher.get("environ_diag") or {}).get(name), "the launcher's environment"
    launch_env = (evidence.get("facts") or {}).get("launch_env") or {}
    if name in launch_env:
        return launch_env.get(name), "the recorded launch environment"
    return None, "unknown"


def _stripped_by(evidence: dict[str, Any], name: str) -> tuple[str, str] | None:
    """(value, the launcher that had it) when a variable was set upstream of workers whose readable environment
    lacks it: the launch path stripped it, so "it was not on" would send the operator the wrong way."""
    workers = [s for s in evidence.get("schedulers") or [] if s.get("environ_status") == "ok"]
    if not workers or any((s.get("environ_diag") or {}).get(name) is not None for s in workers):
        return None
    launcher = evidence.get("launcher") or {}
    value = (launcher.get("environ_diag") or {}).get(name) if launcher.get("environ_status") == "ok" else None
    if value is not None:
        # The program and its module only: a flag's value (an --api-key) has no place in a hint.
        words = str(launcher.get("cmdline") or "").split()
        cmd = " ".join(next(iter([words[:i] for i, w in enumerate(words) if w.startswith("-") and w != "-m"]),
                            words)[:3])
        return value, f"the launcher (pid {launcher.get('pid')}{', `' + cmd + '`' if cmd else ''})"
    value = ((evidence.get("facts") or {}).get("launch_env") or {}).get(name)
    if value is not None:
        return value, "the recorded launch environment"
    return None


def _no_nccl_debug_message(evidence: dict[str, Any]) -> str:
    """Why NCCL said nothing about its environment, as precisely as the evidence allows."""
    facts = evidence.get("facts") or {}
    debug, where = _diag(evidence, "NCCL_DEBUG")
    subsys, _ = _diag(evidence, "NCCL_DEBUG_SUBSYS")
    if debug is not None and debug.strip().upper() not in ("INFO", "TRACE"):
        why = f"NCCL_DEBUG={debug} in {where} keeps NCCL from saying what it read"
        if facts.get("nccl_debug"):
            why += " (the inventory's `env` sets it, and `env` wins over nccl_debug: remove it there)"
        return why
    if debug is not None and subsys:
        items = [x.strip().upper() for x in subsys.split(",") if x.strip()]
        excluded = bool(items) and items[0].startswith("^")
        names = {items[0][1:], *items[1:]} if excluded else set(items)
        if ("ENV" in names) == excluded and "ALL" not in names:
            return f"NCCL_DEBUG_SUBSYS={subsys} in {where} leaves out ENV, so NCCL does not echo its variables"
    stripped = _stripped_by(evidence, "NCCL_DEBUG")
    if debug is None and stripped is not None:
        value, launcher = stripped
        return (
            f"NCCL_DEBUG={value} was on in {launcher}, but its workers' environment lacks it: that launcher's "
            "launch path stripped it before the workers started (sudo env_reset, a container entrypoint, a "
            "wrapper that resets the environment), so NCCL could not say what it read; keep NCCL_DEBUG through "
            "it, or let an in-process patch mode (--patch-mode scheduler) set the values inside each worker"
        )
    if debug is not None:
        return (
            "NCCL_DEBUG=INFO was on but NCCL printed nothing for these processes (not initialised yet, or "
            "NCCL_DEBUG_FILE sends it elsewhere)"
        )
    if facts.get("nccl_debug") is False:
        return (
            "NCCL_DEBUG=INFO was not on (nccl_debug is false for this host), so only weaker evidence exists "
            "(markers, start environment); set nccl_debug: true to let NCCL say what it read"
        )
    return (
        "NCCL_DEBUG=INFO was not on, so only weaker evidence exists (markers, start environment); deploy with "
        "nccl_debug to let NCCL say what it read"
    )


def blind_message(evidence: dict[str, Any], env_status: str | None) -> tuple[str, str]:
    """(code, message) for workers whose start environment cannot be read."""
    if env_status == "unreadable":
        return (
            "environ_unreadable",
            "/proc/PID/environ of the workers is unreadable: run check-env as the server's user, or deploy "
            "with nccl_debug so NCCL says what it read",
        )
    spt, where = _diag({"launcher": evidence.get("launcher"), "facts": evidence.get("facts")}, "SPT_NOENV")
    if spt == "1":
        return (
            "environ_wiped",
            f"SPT_NOENV=1 was in {where}, yet the workers' environ is wiped by setproctitle: the launch path "
            "dropped it before the workers started; the values may be there but cannot be seen: deploy with "
            "nccl_debug so NCCL says what it read",
        )
    return (
        "environ_wiped",
        "the workers' environ is wiped by setproctitle (SPT_NOENV=1 was not in their environment); the "
        "values may be there but cannot be seen: launch with SPT_NOENV=1 or NCCL_DEBUG=INFO",
    )


def server_hints(hints: dict[str, Hint], schedulers: list[dict[str, Any]], launcher: dict[str, Any],
                  server: dict[str, Any]) -> bool:
    """Hints about which server was judged (none running; not the recorded deploy). True: it is not the recorded
    deploy, so its verdict cannot stand for the deploy."""
    if not schedulers:
        why = "no running server found"
        if launcher.get("pid") is not None and launcher.get("identity") in ("gone", "pid_reused"):
            why += (
                f" (the recorded launcher pid {launcher['pid']} is {launcher['identity'].replace('_', ' ')})"
            )
        elif launcher.get("alive"):
            why += f" (launcher pid {launcher['pid']} runs but has no sglang::scheduler children yet)"
        hint(hints, "no_server", why + ": deploy, or wait for the server to come up, then check again")
    not_recorded = bool(schedulers) and server.get("is_recorded_deploy") is False
    if not_recorded:
        hint(
            hints,
            "not_recorded_deploy",
            f"the running server is not the recorded deploy {server.get('recorded_deploy') or ''}"
            f" ({server.get('why') or 'its launcher is gone'}): it was started outside specdeploy, so the "
            "recorded log and record say nothing about it; only its own processes are read, and its verdict "
            "cannot stand for the deploy: deploy again, or stop it",
        )
    return not_recorded


def run_hints(hints: dict[str, Hint], evidence: dict[str, Any], facts: dict[str, Any],
               expected: dict[str, str], rows: list[EnvRow], no_nccl_lines: bool) -> None:
    """Hints about the whole run rather than one row: no NCCL_DEBUG lines, a capped or rotated log, variables SGLang
    itself touches, an inventory changed since the deploy, custom all-reduce, nothing expected."""
    if no_nccl_lines:
        sev = "info" if all(r["status"] == "proven" for r in rows) else "warning"
        hint(hints, "no_nccl_debug", _no_nccl_debug_message(evidence), severity=sev)
    log = evidence.get("log") or {}
    if log.get("capped"):
        hint(
            hints,
            "log_capped",
            f"only the first {log.get('cap_bytes')} bytes of the log after the deploy offset were read",
            severity="info",
        )
    if log.get("rotated"):
        hint(
            hints,
            "log_rotated",
            "the log is shorter than the deploy's offset (rotated or truncated): read from its start",
            severity="warning",
        )
    for var in facts.get("flagged_expected_vars") or []:
        if var in expected:
            hint(
                hints,
                f"sglang_touches_{var}",
                f"SGLang {facts.get('sglang_version') or '(unknown version)'} "
                f"sets {var} itself in some cases: see facts.sglang_sets",
                severity="info",
                var=var,
            )
    changed = evidence.get("inventory_differs") or {}
    if changed:
        parts = [f"{k}: {v.get('record')!s} → {v.get('inventory')!s}" for k, v in sorted(changed.items())]
        hint(
            hints,
            "inventory_changed",
            "the inventory now asks for other values than the running deploy was started with ("
            + "; ".join(parts)
            + "): check-env judges the running deploy against its record; deploy again to apply the inventory",
            severity="info",
        )
    car = facts.get("custom_all_reduce") or {}
    if car.get("enabled"):
        hint(
            hints,
            "custom_all_reduce_on",
            "custom all-reduce is on: most small decode all-reduces bypass NCCL, "
            "so NCCL tuning matters less (add --disable-custom-all-reduce to make NCCL carry them)",
            severity="info",
        )

    if not expected:
        hint(
            hints, "nothing_expected", "no expected NCCL variables were given, so there is nothing to prove"
        )


def blame(
    hints: dict[str, Hint], rules: list[dict[str, Any]], var: str, pid: Any, facts: dict[str, Any]
) -> None:
    """The likeliest cause of a different value: SGLang's own env writes (only those known to apply are
    stated as fact), else the usual suspects."""
    order = ((True, "overrides"), (True, "sets_if_unset"), (None, "overrides"), (None, "sets_if_unset"))
    for applies, action in order:
        hit = next(
            (r for r in rules if r["var"] == var and r["action"] == action and r.get("applies") is applies), None
        )
        if hit is None:
            continue
        if applies is True and action == "overrides":
            msg = (
                f"something overrides it: SGLang itself sets {var} on this version ({hit['condition']}); patch "
                "with --patch-mode scheduler so the value is set inside each worker"
            )
        elif applies is True:
            msg = (
                f"SGLang fills in {var} when it is unset ({hit['condition']}): the operator value never reached "
                "the launcher, or the launch path stripped it"
            )
        else:
            if not facts.get("sglang_version"):
                unknown = "the SGLang version is unknown"
            elif not (facts.get("launch_flags") or {}).get("known"):
                unknown = "the launch flags are unknown"
            else:
                unknown = "its condition is not decided by the launch flags"
            msg = (
                f"SGLang may set {var} itself ({hit['condition']}), but {unknown}, so whether it did cannot be "
                "told; other causes: the launch environment, ~/.nccl.conf, /etc/nccl.conf"
            )
        code = f"sglang_{'overrides' if action == 'overrides' else 'default'}_{var}" + ("" if applies else "_maybe")
        hint(hints, code, msg, var=var, pid=pid)
        return
    hint(
        hints,
        "overridden",
        "something overrides it: the launch environment, ~/.nccl.conf, /etc/nccl.conf or NCCL_CONF_FILE, or an "
        "operator value kept by the patch",
        var=var,
        pid=pid,
    )
