"""Evidence that NCCL tuning variables reached every SGLang scheduler process (behind ``check-env``).

Runs on the GPU host (stdlib only). Three kinds of evidence, strongest first:

* ``nccl_log``: NCCL itself printed ``host:pid:tid [dev] NCCL INFO NCCL_X set by environment to VALUE``
  for that pid (needs ``NCCL_DEBUG=INFO``; read from the server log and from ``NCCL_DEBUG_FILE`` files).
  This is the proof that NCCL took the value, including values a patch or plugin set inside the process.
* ``marker``: the specdeploy patch/plugin code printed its
  ``[specdeploy] nccl-env ... pid=N set={..} kept={..}`` line from inside that very process.
* ``environ``: ``/proc/PID/environ``, the environment the process was *started* with. Blind to anything set
  in-process, and wiped to NULs by setproctitle unless ``SPT_NOENV=1`` was in the launch environment.

Launcher evidence is collected and reported separately and is never proof for a worker: the launch path
may strip the environment between the launcher and its spawned schedulers.

``gather`` is the agent verb (reads /proc, the log, nvidia-smi: ``gathering``, with the line parsing in
``nccllog`` and SGLang's own NCCL writes in ``sglangnccl``); ``evaluate``, here, is pure. This module is the one
door: callers import ``evidence`` and find both.
"""

from __future__ import annotations

from typing import Any

from . import ncclenv, versions
from .gathering import DRAFT_WORKER_NOTE, SCHEMA, gather, parse_topology
from .nccllog import parse_nccl_line, parse_nccl_records
from .sglangnccl import _argv_flags, _custom_ar, sglang_env_facts_for, sglang_nccl_rules

__all__ = ["DRAFT_WORKER_NOTE", "SCHEMA", "_argv_flags", "_custom_ar", "evaluate", "gather", "parse_nccl_line",
           "parse_nccl_records", "parse_topology", "sglang_env_facts_for", "sglang_nccl_rules"]


# ----------------------------------------------------------------------------------------------------
# evaluation (pure)

STATUSES = ("proven", "different", "unconfirmed", "missing", "launcher_only")
SOURCES = ("nccl_log", "marker", "environ")
# Patch modes that set the values inside each scheduler process (engine sets them in the launcher only).
IN_PROCESS_MODES = ("scheduler", "plugin", "sitecustomize")


def _marker_value(markers: list[dict[str, Any]], var: str) -> tuple[str | None, str | None]:
    """(value, "set"|"kept") from the last marker of a process that mentions ``var``."""
    for mk in reversed(markers):
        if var in mk.get("set", {}):
            return str(mk["set"][var]), "set"
        if var in mk.get("kept", {}):
            return str(mk["kept"][var]), "kept"
    return None, None


def _hint(
    hints: dict[str, dict[str, Any]],
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


def _mode_advice(mode: str | None) -> str:
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


def _blind_message(evidence: dict[str, Any], env_status: str | None) -> tuple[str, str]:
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


def _world(schedulers: list[dict[str, Any]], facts: dict[str, Any]) -> tuple[int | None, str]:
    """How many ranks the server runs, and where that is read: NCCL's init lines, the launch argv, the schedulers."""
    inits = [i for s in schedulers for i in (s.get("nccl") or {}).get("inits") or []]
    if inits:
        return max(int(i["nranks"]) for i in inits), "nccl_log"
    if facts.get("tp_size"):
        return int(facts["tp_size"]), "launch_argv"
    if schedulers:
        return len(schedulers), "scheduler_count"
    return None, "unknown"


def _server_hints(hints: dict[str, dict[str, Any]], schedulers: list[dict[str, Any]], launcher: dict[str, Any],
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
        _hint(hints, "no_server", why + ": deploy, or wait for the server to come up, then check again")
    not_recorded = bool(schedulers) and server.get("is_recorded_deploy") is False
    if not_recorded:
        _hint(
            hints,
            "not_recorded_deploy",
            f"the running server is not the recorded deploy {server.get('recorded_deploy') or ''}"
            f" ({server.get('why') or 'its launcher is gone'}): it was started outside specdeploy, so the "
            "recorded log and record say nothing about it; only its own processes are read, and its verdict "
            "cannot stand for the deploy: deploy again, or stop it",
        )
    return not_recorded


def _run_hints(hints: dict[str, dict[str, Any]], evidence: dict[str, Any], facts: dict[str, Any],
               expected: dict[str, str], rows: list[dict[str, Any]], no_nccl_lines: bool) -> None:
    """Hints about the whole run rather than one row: no NCCL_DEBUG lines, a capped or rotated log, variables SGLang
    itself touches, an inventory changed since the deploy, custom all-reduce, nothing expected."""
    if no_nccl_lines:
        sev = "info" if all(r["status"] == "proven" for r in rows) else "warning"
        _hint(hints, "no_nccl_debug", _no_nccl_debug_message(evidence), severity=sev)
    log = evidence.get("log") or {}
    if log.get("capped"):
        _hint(
            hints,
            "log_capped",
            f"only the first {log.get('cap_bytes')} bytes of the log after the deploy offset were read",
            severity="info",
        )
    if log.get("rotated"):
        _hint(
            hints,
            "log_rotated",
            "the log is shorter than the deploy's offset (rotated or truncated): read from its start",
            severity="warning",
        )
    for var in facts.get("flagged_expected_vars") or []:
        if var in expected:
            _hint(
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
        _hint(
            hints,
            "inventory_changed",
            "the inventory now asks for other values than the running deploy was started with ("
            + "; ".join(parts)
            + "): check-env judges the running deploy against its record; deploy again to apply the inventory",
            severity="info",
        )
    car = facts.get("custom_all_reduce") or {}
    if car.get("enabled"):
        _hint(
            hints,
            "custom_all_reduce_on",
            "custom all-reduce is on: most small decode all-reduces bypass NCCL, "
            "so NCCL tuning matters less (add --disable-custom-all-reduce to make NCCL carry them)",
            severity="info",
        )

    if not expected:
        _hint(
            hints, "nothing_expected", "no expected NCCL variables were given, so there is nothing to prove"
        )


def evaluate(evidence: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """One row per (scheduler process, expected variable); overall ``ok``; hints naming the likely cause.

    Row: ``{"pid", "rank", "label", "title", "var", "expected", "observed", "evidence", "status", "sources",
    "note"}`` with ``status`` one of ``STATUSES`` and ``evidence`` one of ``SOURCES`` (None when nothing was
    seen). The rules (README, check-env): NCCL's own echo decides when there is one; values are compared the
    way NCCL parses them (ncclenv); ``unconfirmed`` where the worker may hold the value but nothing shows NCCL
    took it (NCCL echoed other variables in that process but not this one it always echoes, NCCL ignores the
    value, the worker's environment cannot be read); ``missing``/``launcher_only`` only where evidence shows
    the worker lacks it.
    """
    expected = {str(k): str(v) for k, v in expected.items()}
    schedulers: list[dict[str, Any]] = list(evidence.get("schedulers") or [])
    launcher: dict[str, Any] = evidence.get("launcher") or {}
    facts: dict[str, Any] = evidence.get("facts") or {}
    server: dict[str, Any] = facts.get("server") or {}
    mode = facts.get("patch_mode")
    all_rules = list(facts.get("sglang_sets") or [])
    hints: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []

    nranks, nranks_source = _world(schedulers, facts)
    single_rank = nranks == 1
    any_nccl = any((s.get("nccl") or {}).get("lines") for s in schedulers)

    not_recorded = _server_hints(hints, schedulers, launcher, server)

    l_env = launcher.get("environ") or {}
    l_nccl = (launcher.get("nccl") or {}).get("env") or {}
    l_markers = launcher.get("markers") or []

    for s in schedulers:
        nccl = s.get("nccl") or {}
        nccl_env: dict[str, list[str]] = nccl.get("env") or {}
        invalid: dict[str, str] = nccl.get("invalid") or {}
        env_status = s.get("environ_status")
        env_vals = s.get("environ") or {}
        markers = s.get("markers") or []
        pid = s.get("pid")
        echoed_here = bool(nccl_env) or bool(invalid)  # NCCL echoed its environment in this very process
        for var in sorted(expected):
            exp = expected[var]
            exp_read = ncclenv.reading(var, exp)
            when, condition = ncclenv.read_when(var)
            nccl_vals = nccl_env.get(var) or []
            nccl_val = nccl_vals[-1] if nccl_vals else None
            mk_val, mk_how = _marker_value(markers, var)
            env_val = env_vals.get(var) if env_status == "ok" else None
            sources = {"nccl_log": nccl_val, "marker": mk_val, "environ": env_val}
            lmk, _ = _marker_value(l_markers, var)
            launcher_val = (l_nccl.get(var) or [None])[-1] or lmk or l_env.get(var)
            notes: list[str] = []
            if len(nccl_vals) > 1:
                notes.append(f"NCCL reported several values in this process: {', '.join(nccl_vals)}")
            p2p_off = var == "NCCL_P2P_LEVEL" and any(
                ncclenv.strtoll(v) == 1 for v in nccl_env.get("NCCL_P2P_DISABLE") or []
            )
            would_echo = (
                echoed_here
                and not p2p_off
                and (when == "init" or (when == "multi_rank" and nranks is not None and nranks > 1))
            )
            weaker = next((src for src in ("marker", "environ") if sources[src] is not None), None)
            status: str
            strongest: str | None
            observed: str | None

            if var in invalid:
                strongest, observed, status = "nccl_log", invalid[var], "different"
                notes.append(f"NCCL refused {invalid[var]!r} (out of range) and kept its default")
            elif nccl_val is not None:
                strongest, observed = "nccl_log", nccl_val
                status = "proven" if ncclenv.same(var, nccl_val, exp) else "different"
            elif weaker is not None:
                strongest, observed = weaker, sources[weaker]
                if not ncclenv.same(var, observed, exp) and not (exp_read["value"] is None and observed == exp):
                    status = "different"
                    if would_echo:
                        notes.append(f"NCCL logged its environment in this process but never {var}")
                elif exp_read["value"] is None:
                    status = "unconfirmed"
                    notes.append(f"NCCL ignores this value: {exp_read['why']}")
                    _hint(
                        hints,
                        "nccl_ignores_value",
                        f"NCCL ignores the value asked for {var}: {exp_read['why']}; fix it in the inventory",
                        var=var,
                        pid=pid,
                    )
                elif would_echo:
                    status = "unconfirmed"
                    notes.append(
                        f"NCCL logged its environment in this process but never {var}, which it echoes at every "
                        + ("init" if when == "init" else "init with two or more ranks")
                    )
                    if strongest == "marker" and mode not in IN_PROCESS_MODES:
                        why = (
                            "they were set after NCCL had read its environment (patch too late): "
                            + _mode_advice(mode)
                        )
                    else:
                        why = (
                            "the process held them at start or from the patch, yet NCCL never read them: "
                            "something removed or reset them inside the process before NCCL initialised "
                            "(see facts.sglang_sets)"
                        )
                    _hint(hints, "nccl_silent", "NCCL logged its environment but not these variables: " + why,
                          var=var, pid=pid)
                elif when == "unknown":
                    status = "unconfirmed"
                    notes.append(str(condition))
                    _hint(
                        hints,
                        "not_an_nccl_variable",
                        "NCCL 2.28 reads no variable by this name, so nothing can show it took effect: "
                        "check the spelling",
                        severity="warning",
                        var=var,
                        pid=pid,
                    )
                else:
                    status = "proven"
                    if when == "multi_rank" and single_rank:
                        notes.append(
                            f"single rank: NCCL prints nothing for {var} with nranks 1, so the {strongest} suffices"
                        )
                    elif when == "conditional" and echoed_here:
                        notes.append(f"{condition}: its silence proves nothing; the {strongest} shows the value")
                    elif p2p_off:
                        notes.append("NCCL_P2P_DISABLE=1 wins over NCCL_P2P_LEVEL, which NCCL then never reads")
                    if var.startswith("NCCL_IB_") and facts.get("infiniband") == []:
                        notes.append("this host has no InfiniBand device: NCCL never reads it here")
                        _hint(
                            hints,
                            "ib_without_infiniband",
                            "these variables only matter over InfiniBand, and this host has no InfiniBand "
                            "device: they are set but have no effect here",
                            severity="info",
                            var=var,
                        )
            else:
                strongest, observed = None, None
                absent_shown = would_echo or env_status == "ok"
                if absent_shown:
                    status = "launcher_only" if launcher_val is not None else "missing"
                    if would_echo:
                        notes.append(f"NCCL logged its environment in this process without {var}")
                    if status == "launcher_only":
                        _hint(
                            hints,
                            "env_stripped",
                            "the launch path strips the environment before the workers start: " + _mode_advice(mode),
                            var=var,
                            pid=pid,
                        )
                    else:
                        _hint(
                            hints,
                            "never_set",
                            "the variable reached neither the launcher nor the workers: check the host's "
                            "nccl_env / nccl_preset and the launch script",
                            var=var,
                            pid=pid,
                        )
                else:
                    status = "unconfirmed"
                    if env_status == "wiped":
                        notes.append("environ wiped by setproctitle")
                    elif env_status == "unreadable":
                        notes.append("environ unreadable (permissions)")
                    if when == "multi_rank" and single_rank and echoed_here:
                        notes.append(f"NCCL prints nothing for {var} with a single rank")
                    elif when in ("conditional", "unknown") and echoed_here:
                        notes.append(str(condition))
                    elif not echoed_here:
                        notes.append("NCCL did not echo its environment in this process")
                    if launcher_val is not None:
                        notes.append(f"the launcher has {launcher_val}; nothing shows whether the worker does")
                    code, message = _blind_message(evidence, env_status)
                    _hint(hints, code, message, var=var, pid=pid)

            if status == "proven":
                for src in SOURCES:
                    if sources[src] is not None and not ncclenv.same(var, sources[src], exp):
                        notes.append(f"{src} says {sources[src]} (superseded by {strongest})")
            if status == "different":
                said = ", ".join(f"{src}={sources[src]}" for src in SOURCES if sources[src] is not None)
                notes.append(f"expected {exp}; {said}" if said else f"expected {exp}")
                if var in invalid:
                    pass
                elif mk_how == "kept" and mk_val is not None and ncclenv.same(var, mk_val, observed):
                    _hint(
                        hints,
                        "operator_value_kept",
                        "an operator value was kept (patch without force): remove it from the launch "
                        "environment or patch with force",
                        var=var,
                        pid=pid,
                    )
                else:
                    _blame(hints, all_rules, var, pid, facts)
            rows.append(
                {
                    "pid": pid,
                    "rank": s.get("rank"),
                    "label": s.get("label"),
                    "title": s.get("title"),
                    "var": var,
                    "expected": exp,
                    "observed": observed,
                    "evidence": strongest,
                    "status": status,
                    "sources": {**sources, "launcher": launcher_val},
                    "environ_status": env_status,
                    "note": "; ".join(notes),
                }
            )

    _run_hints(hints, evidence, facts, expected, rows, bool(schedulers) and not any_nccl)
    summary = {st: sum(1 for r in rows if r["status"] == st) for st in STATUSES}
    ok = bool(schedulers) and bool(rows) and all(r["status"] == "proven" for r in rows) and not not_recorded
    order = {"error": 0, "warning": 1, "info": 2}
    return {
        "ok": ok,
        "rows": rows,
        "summary": summary,
        "nranks": nranks,
        "nranks_source": nranks_source,
        "single_rank": single_rank,
        "schedulers": len(schedulers),
        "recorded_deploy": not not_recorded,
        "hints": sorted(hints.values(), key=lambda h: (order.get(h["severity"], 3), h["code"])),
    }


def _blame(
    hints: dict[str, dict[str, Any]], rules: list[dict[str, Any]], var: str, pid: Any, facts: dict[str, Any]
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
        _hint(hints, code, msg, var=var, pid=pid)
        return
    _hint(
        hints,
        "overridden",
        "something overrides it: the launch environment, ~/.nccl.conf, /etc/nccl.conf or NCCL_CONF_FILE, or an "
        "operator value kept by the patch",
        var=var,
        pid=pid,
    )
