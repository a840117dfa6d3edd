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

``gather`` is the agent verb (reads /proc, the log, nvidia-smi: module ``gather``, with the line parsing in
``nccllog`` and SGLang's own NCCL writes in ``sglangnccl``); ``evaluate``, here, is pure: the rules that decide
each row's status, with the hints it gives (the advice) in ``hints``. This module is the room's door: callers
import ``evidence.judge`` and find both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..common import EventSink, expand
from . import ncclenv, ncclused
from .gather import DRAFT_WORKER_NOTE, SCHEMA, evidence_request, gather
from .hints import IN_PROCESS_MODES, blame, blind_message, hint, mode_advice, run_hints, server_hints
from .interconnect import parse_topology
from .nccllog import parse_nccl_line, parse_nccl_records
from .sglangnccl import argv_flags, custom_ar, sglang_env_facts_for, sglang_nccl_rules

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..gpus import Queries
    from ..protocol import CheckEnvAnswer, CheckEnvRequest, EnvRow, Evaluation, GatherRequest, Hint

__all__ = ["DRAFT_WORKER_NOTE", "IN_PROCESS_MODES", "SCHEMA", "argv_flags", "check_env", "custom_ar", "evaluate",
           "gather",
           "parse_nccl_line", "parse_nccl_records", "parse_topology", "sglang_env_facts_for", "sglang_nccl_rules"]


# ----------------------------------------------------------------------------------------------------
# evaluation (pure)

# overridden: NCCL took the value, but its TUNING lines show a choice outside it for some all-reduce size;
# sglang_overrides: the worker holds SGLang's own value, which this release assigns whatever the operator set
# (facts.sglang_sets; "overridden by SGLang": an in-process patch mode sets it after SGLang does)
STATUSES = ("proven", "overridden", "sglang_overrides", "different", "unconfirmed", "missing", "launcher_only")
SOURCES = ("nccl_log", "marker", "environ")


def _marker_value(markers: list[dict[str, Any]], var: str) -> tuple[str | None, str | None]:
    """(value, "set"|"kept") from the last marker of a process that mentions ``var``."""
    for mk in reversed(markers):
        if var in mk.get("set", {}):
            return str(mk["set"][var]), "set"
        if var in mk.get("kept", {}):
            return str(mk["kept"][var]), "kept"
    return None, None


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


def rank_name(rank: Mapping[str, Any]) -> str:
    """``TP3 (pid 4242)``; ``TP3`` when no pid is known."""
    return str(rank.get("label")) + (f" (pid {rank['pid']})" if rank.get("pid") is not None else "")


def ranks_gone(census: Mapping[str, Any]) -> str | None:
    """``TP3 (pid 4242) is gone: 7 of 8 ranks run``; None when every rank runs."""
    gone = list(census.get("gone") or [])
    if not gone:
        return None
    return (f"{', '.join(rank_name(g) for g in gone)} {'is' if len(gone) == 1 else 'are'} gone: "
            f"{census.get('running')} of {census.get('expected')} ranks run")


# Plain classes, not dataclasses: ``dataclasses`` pulls ``inspect`` (with ``dis``, ``tokenize``, ``ast``) and
# builds each class's methods with ``exec``, a few milliseconds of every check-env call on the host for three
# record-like classes nothing compares or prints.
class _Run:
    """What every row of one evaluation shares: the evidence, the run's facts, the launcher, the hints so far."""

    __slots__ = ("evidence", "facts", "hints", "launcher", "mode", "nranks", "rules")

    def __init__(self, *, evidence: dict[str, Any], facts: dict[str, Any], mode: Any, rules: list[dict[str, Any]],
                 nranks: int | None, launcher: dict[str, Any]) -> None:
        self.evidence, self.facts, self.mode, self.rules = evidence, facts, mode, rules
        self.nranks, self.launcher = nranks, launcher
        self.hints: dict[str, Hint] = {}

    @property
    def single_rank(self) -> bool:
        return self.nranks == 1


class _Proc:
    """One scheduler process as the evidence shows it."""

    __slots__ = ("env_status", "env_vals", "invalid", "markers", "nccl_env", "pid")

    def __init__(self, s: dict[str, Any]) -> None:
        nccl = s.get("nccl") or {}
        self.pid: Any = s.get("pid")
        self.nccl_env: dict[str, list[str]] = nccl.get("env") or {}
        self.invalid: dict[str, str] = nccl.get("invalid") or {}
        self.env_status: str | None = s.get("environ_status")
        self.env_vals: dict[str, str] = s.get("environ") or {}
        self.markers: list[dict[str, Any]] = s.get("markers") or []

    @property
    def echoed_here(self) -> bool:
        return bool(self.nccl_env) or bool(self.invalid)  # NCCL echoed its environment in this very process


class _Row:
    """One (process, variable) judgement in progress: what each source says, and the verdict so far."""

    __slots__ = ("condition", "exp", "exp_read", "launcher_val", "mk_how", "mk_val", "nccl_vals", "notes",
                 "observed", "p2p_off", "sources", "status", "strongest", "var", "when", "would_echo")

    def __init__(self, *, var: str, exp: str, exp_read: dict[str, Any], when: str, condition: Any,
                 nccl_vals: list[str], mk_val: str | None, mk_how: str | None, sources: dict[str, str | None],
                 launcher_val: str | None, p2p_off: bool, would_echo: bool) -> None:
        self.var, self.exp, self.exp_read, self.when, self.condition = var, exp, exp_read, when, condition
        self.nccl_vals, self.mk_val, self.mk_how, self.sources = nccl_vals, mk_val, mk_how, sources
        self.launcher_val, self.p2p_off, self.would_echo = launcher_val, p2p_off, would_echo
        self.notes: list[str] = []
        self.status = ""
        self.strongest: str | None = None
        self.observed: str | None = None

    @property
    def nccl_val(self) -> str | None:
        return self.nccl_vals[-1] if self.nccl_vals else None


def _observe(run: _Run, proc: _Proc, var: str, exp: str) -> _Row:
    """What each source says about ``var`` in this process, and whether NCCL would have echoed it."""
    when, condition = ncclenv.read_when(var)
    nccl_vals = proc.nccl_env.get(var) or []
    mk_val, mk_how = _marker_value(proc.markers, var)
    env_val = proc.env_vals.get(var) if proc.env_status == "ok" else None
    l_env = run.launcher.get("environ") or {}
    l_nccl = (run.launcher.get("nccl") or {}).get("env") or {}
    lmk, _ = _marker_value(run.launcher.get("markers") or [], var)
    p2p_off = var == "NCCL_P2P_LEVEL" and any(
        ncclenv.strtoll(v) == 1 for v in proc.nccl_env.get("NCCL_P2P_DISABLE") or []
    )
    would_echo = (
        proc.echoed_here
        and not p2p_off
        and (when == "init" or (when == "multi_rank" and run.nranks is not None and run.nranks > 1))
    )
    r = _Row(var=var, exp=exp, exp_read=ncclenv.reading(var, exp), when=when, condition=condition,
             nccl_vals=nccl_vals, mk_val=mk_val, mk_how=mk_how,
             sources={"nccl_log": nccl_vals[-1] if nccl_vals else None, "marker": mk_val, "environ": env_val},
             launcher_val=(l_nccl.get(var) or [None])[-1] or lmk or l_env.get(var), p2p_off=p2p_off,
             would_echo=would_echo)
    if len(nccl_vals) > 1:
        r.notes.append(f"NCCL reported several values in this process: {', '.join(nccl_vals)}")
    return r


def _judge(run: _Run, proc: _Proc, r: _Row) -> None:
    """The row's status from its strongest evidence: NCCL's echo, else a marker or the environment, else nothing."""
    var = r.var
    weaker = next((src for src in ("marker", "environ") if r.sources[src] is not None), None)
    if var in proc.invalid:
        r.strongest, r.observed, r.status = "nccl_log", proc.invalid[var], "different"
        r.notes.append(f"NCCL refused {proc.invalid[var]!r} (out of range) and kept its default")
    elif r.nccl_val is not None:
        r.strongest, r.observed = "nccl_log", r.nccl_val
        r.status = "proven" if ncclenv.same(var, r.nccl_val, r.exp) else "different"
    elif weaker is not None:
        r.strongest, r.observed = weaker, r.sources[weaker]
        _judge_weaker(run, proc, r)
    else:
        r.strongest, r.observed = None, None
        _judge_unseen(run, proc, r)


def _judge_weaker(run: _Run, proc: _Proc, r: _Row) -> None:
    """A marker or the start environment shows a value, NCCL did not echo it."""
    var, pid, hints = r.var, proc.pid, run.hints
    if not ncclenv.same(var, r.observed, r.exp) and not (r.exp_read["value"] is None and r.observed == r.exp):
        r.status = "different"
        if r.would_echo:
            r.notes.append(f"NCCL logged its environment in this process but never {var}")
    elif r.exp_read["value"] is None:
        r.status = "unconfirmed"
        r.notes.append(f"NCCL ignores this value: {r.exp_read['why']}")
        hint(
            hints,
            "nccl_ignores_value",
            f"NCCL ignores the value asked for {var}: {r.exp_read['why']}; fix it in the inventory",
            var=var,
            pid=pid,
        )
    elif r.would_echo:
        _nccl_silent(run, proc, r)
    elif r.when == "unknown":
        r.status = "unconfirmed"
        r.notes.append(str(r.condition))
        hint(
            hints,
            "not_an_nccl_variable",
            f"NCCL {ncclenv.NCCL_KNOWN_SERIES} reads no variable by this name, so nothing can show it took effect: "
            "check the spelling",
            severity="warning",
            var=var,
            pid=pid,
        )
    else:
        _weaker_proves(run, proc, r)


def _nccl_silent(run: _Run, proc: _Proc, r: _Row) -> None:
    """NCCL echoed its environment in this process but not this variable, which it always echoes."""
    var = r.var
    r.status = "unconfirmed"
    r.notes.append(
        f"NCCL logged its environment in this process but never {var}, which it echoes at every "
        + ("init" if r.when == "init" else "init with two or more ranks")
    )
    if r.strongest == "marker" and run.mode not in IN_PROCESS_MODES:
        why = (
            "they were set after NCCL had read its environment (patch too late): "
            + mode_advice(run.mode)
        )
    else:
        why = (
            "the process held them at start or from the patch, yet NCCL never read them: "
            "something removed or reset them inside the process before NCCL initialised "
            "(see facts.sglang_sets)"
        )
    hint(run.hints, "nccl_silent", "NCCL logged its environment but not these variables: " + why,
          var=var, pid=proc.pid)


def _weaker_proves(run: _Run, proc: _Proc, r: _Row) -> None:
    """NCCL's silence proves nothing for this variable here, so the marker or environment suffices."""
    var = r.var
    r.status = "proven"
    if r.when == "multi_rank" and run.single_rank:
        r.notes.append(
            f"single rank: NCCL prints nothing for {var} with nranks 1, so the {r.strongest} suffices"
        )
    elif r.when == "conditional" and proc.echoed_here:
        r.notes.append(f"{r.condition}: its silence proves nothing; the {r.strongest} shows the value")
    elif r.p2p_off:
        r.notes.append("NCCL_P2P_DISABLE=1 wins over NCCL_P2P_LEVEL, which NCCL then never reads")
    if var.startswith("NCCL_IB_") and run.facts.get("infiniband") == []:
        r.notes.append("this host has no InfiniBand device: NCCL never reads it here")
        hint(
            run.hints,
            "ib_without_infiniband",
            "these variables only matter over InfiniBand, and this host has no InfiniBand "
            "device: they are set but have no effect here",
            severity="info",
            var=var,
        )


def _judge_unseen(run: _Run, proc: _Proc, r: _Row) -> None:
    """No source shows the variable: missing where the evidence shows its absence, else unconfirmed."""
    var, pid, hints, env_status, mode = r.var, proc.pid, run.hints, proc.env_status, run.mode
    absent_shown = r.would_echo or env_status == "ok"
    if absent_shown:
        r.status = "launcher_only" if r.launcher_val is not None else "missing"
        if r.would_echo:
            r.notes.append(f"NCCL logged its environment in this process without {var}")
        if r.status == "launcher_only":
            hint(
                hints,
                "env_stripped",
                "the launch path strips the environment before the workers start: " + mode_advice(mode),
                var=var,
                pid=pid,
            )
        else:
            hint(
                hints,
                "never_set",
                "the variable reached neither the launcher nor the workers: check the host's "
                "nccl_env / nccl_preset and the launch script",
                var=var,
                pid=pid,
            )
        return
    r.status = "unconfirmed"
    if env_status == "wiped":
        r.notes.append("environ wiped by setproctitle")
    elif env_status == "unreadable":
        r.notes.append("environ unreadable (permissions)")
    if r.when == "multi_rank" and run.single_rank and proc.echoed_here:
        r.notes.append(f"NCCL prints nothing for {var} with a single rank")
    elif r.when in ("conditional", "unknown") and proc.echoed_here:
        r.notes.append(str(r.condition))
    elif not proc.echoed_here:
        r.notes.append("NCCL did not echo its environment in this process")
    if r.launcher_val is not None:
        r.notes.append(f"the launcher has {r.launcher_val}; nothing shows whether the worker does")
    code, message = blind_message(run.evidence, env_status)
    hint(hints, code, message, var=var, pid=pid)


def _by_sglang(run: _Run, r: _Row) -> None:
    """A value that did not reach the worker because this release assigns the variable itself, unconditionally
    for this launch (a rule that applies, not one that may): "overridden by SGLang", not missing or different."""
    if r.status not in ("different", "missing", "unconfirmed", "launcher_only"):
        return
    hit = next((x for x in run.rules if x["var"] == r.var and x["action"] == "overrides" and x.get("applies") is True),
               None)
    if hit is None or (r.observed is not None and hit.get("value") is not None
                       and not ncclenv.same(r.var, r.observed, str(hit["value"]))):
        return
    r.status = "sglang_overrides"
    r.notes.append(f"SGLang sets {r.var}={hit.get('value')} itself ({hit['condition']}): the operator's value never "
                   "reaches the worker; an in-process patch mode (scheduler, plugin) sets it after SGLang does")


def _settle(run: _Run, proc: _Proc, r: _Row) -> None:
    """Notes on sources the verdict overrode; for a different value, who most likely changed it."""
    var, pid = r.var, proc.pid
    if r.status == "proven":
        for src in SOURCES:
            if r.sources[src] is not None and not ncclenv.same(var, r.sources[src], r.exp):
                r.notes.append(f"{src} says {r.sources[src]} (superseded by {r.strongest})")
    if r.status == "sglang_overrides":
        blame(run.hints, run.rules, var, pid, run.facts)  # names the release's write and the patch mode that wins
    if r.status == "different":
        said = ", ".join(f"{src}={r.sources[src]}" for src in SOURCES if r.sources[src] is not None)
        r.notes.append(f"expected {r.exp}; {said}" if said else f"expected {r.exp}")
        if var in proc.invalid:
            pass
        elif r.mk_how == "kept" and r.mk_val is not None and ncclenv.same(var, r.mk_val, r.observed):
            hint(
                run.hints,
                "operator_value_kept",
                "an operator value was kept (patch without force): remove it from the launch "
                "environment or patch with force",
                var=var,
                pid=pid,
            )
        else:
            blame(run.hints, run.rules, var, pid, run.facts)


def evaluate(evidence: dict[str, Any], expected: dict[str, Any]) -> Evaluation:
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
    facts: dict[str, Any] = evidence.get("facts") or {}
    nranks, nranks_source = _world(schedulers, facts)
    run = _Run(evidence=evidence, facts=facts, mode=facts.get("patch_mode"),
               rules=list(facts.get("sglang_sets") or []), nranks=nranks, launcher=evidence.get("launcher") or {})
    any_nccl = any((s.get("nccl") or {}).get("lines") for s in schedulers)
    not_recorded = server_hints(run.hints, schedulers, run.launcher, facts.get("server") or {})
    rows: list[EnvRow] = []
    for s in schedulers:
        proc = _Proc(s)
        for var in sorted(expected):
            r = _observe(run, proc, var, expected[var])
            _judge(run, proc, r)
            _by_sglang(run, r)
            _settle(run, proc, r)
            rows.append({"pid": proc.pid, "rank": s.get("rank"), "label": s.get("label"), "title": s.get("title"),
                         "var": var, "expected": r.exp, "observed": r.observed, "evidence": r.strongest,
                         "status": r.status, "sources": {**r.sources, "launcher": r.launcher_val},
                         "environ_status": proc.env_status, "note": "; ".join(r.notes)})
    used = ncclused.used(evidence, expected, nranks)
    _overridden(run.hints, rows, used)
    run_hints(run.hints, evidence, facts, expected, rows, bool(schedulers) and not any_nccl)
    census = dict(evidence.get("ranks") or {})
    gone = ranks_gone(census)
    if gone is not None:
        # The rows are of the ranks that run: proving all of them proves nothing about a server missing one.
        for g in census.get("gone") or []:
            hint(run.hints, "rank_gone", f"{gone}: the server cannot serve with a rank missing, whatever its "
                 "/health says (sgl-project/sglang#6624); the rows are those of the ranks that run. Deploy again; "
                 "`inv logs` shows the rank's last lines", pid=g.get("pid"))
    summary = {st: sum(1 for r in rows if r["status"] == st) for st in STATUSES}
    ok = bool(schedulers) and bool(rows) and all(r["status"] == "proven" for r in rows) and not not_recorded \
        and gone is None
    order = {"error": 0, "warning": 1, "info": 2}
    return {
        "ok": ok,
        "rows": rows,
        "summary": summary,
        "nranks": nranks,
        "nranks_source": nranks_source,
        "single_rank": run.single_rank,
        "schedulers": len(schedulers),
        "ranks": {**census, "verdict": gone},
        "recorded_deploy": not not_recorded,
        "hints": sorted(run.hints.values(), key=lambda h: (order.get(h["severity"], 3), h["code"])),
        "used": used,
    }


def _overridden(hints: dict[str, Hint], rows: list[EnvRow], used: dict[str, Any]) -> None:
    """A value NCCL took but its tuner went around for some size: the env row says so instead of proven."""
    for var in used.get("overridden") or []:
        where = sorted({f"{u['phase']} ({u['bytes']} B): {u['algo']}/{u['proto']}" for u in used["rows"]
                        if u["status"] == "overridden" and var in str(u["note"])})
        for r in rows:
            if r["var"] == var and r["status"] == "proven":
                r["status"] = "overridden"
                r["note"] = "; ".join(x for x in (r["note"], "NCCL took it, but used " + ", ".join(where)) if x)
        hint(hints, "tuner_overrode", f"NCCL read {var} but its TUNING lines show it used something else for "
              f"{', '.join(where)}: a tuner plugin, a symmetric-memory kernel or SGLang's own path went around "
              "it; see the 'used' rows", var=var)


# ----------------------------------------------------------------------------------------------------
# the `check_env` verb (`inv check-env`): which server to judge, by what

def check_env(req: CheckEnvRequest, sink: EventSink, gpu_queries: Queries | None = None) -> CheckEnvAnswer:
    """Judge the running server by what its deploy asked for (the record), with evidence that belongs to it (its
    launcher's pid and start time, its part of the log, its deploy id). A server that is not the recorded deploy is
    reported as such and judged only by its own processes. ``gpu_queries``: the GPU query the verb's door
    (``checkenv``) started."""
    from .. import procs
    from ..patch.modes import explain_unloaded_plugin
    from ..serve import records

    state_dir = expand(req["state_dir"])
    record = records.current(state_dir)
    rec: Mapping[str, Any] = record or {}
    asked = {str(k): str(v) for k, v in (req.get("expected") or {}).items()}
    running = bool(rec.get("pid")) and procs.alive(int(rec["pid"]), rec.get("start_ticks"))
    ev_req: GatherRequest
    if running:
        recorded = records.expected_of(rec) or records.expected_of(rec.get("request") or {})
        expected = asked if recorded is None else recorded
        ev_req = evidence_request(
            {**(rec.get("request") or {}), **rec}, deploy_id=str(rec.get("deploy_id")),
            log_path=str(rec.get("log_path")), log_offset=int(rec.get("log_offset") or 0), pid=int(rec["pid"]),
            start_ticks=rec.get("start_ticks"), expected=expected)
        ev_req["nccl_debug_file"] = req.get("nccl_debug_file") or ev_req.get("nccl_debug_file")
        differs = {} if recorded is None else {
            k: {"record": recorded.get(k), "inventory": asked.get(k)}
            for k in sorted(set(recorded) | set(asked))
            if not (recorded.get(k) == asked.get(k) or ncclenv.same(k, recorded.get(k), asked.get(k)))}
    else:
        expected, differs = asked, {}
        why = None
        if rec:
            why = (f"its launcher pid {rec.get('pid')} is gone" if rec.get("pid") else "it never started") + \
                f"; the record says {rec.get('status')}"
        # Nothing recorded runs: the log, deploy id, version and launch flags of the record say nothing about
        # whatever runs now; only the processes themselves are read.
        ev_req = {"log_path": None, "launcher_pid": None, "expected": expected,
                  "nccl_debug_file": req.get("nccl_debug_file"),
                  "server": {"recorded_deploy": rec.get("deploy_id"), "record_status": rec.get("status"),
                             "is_recorded_deploy": False if rec else None, "why": why}}
    # The recorded deploy's log is scanned from where the last check-env's saved scan stopped (``scan_log``).
    ev = gather(ev_req, sink, saved_scans=os.path.join(state_dir, "scans") if running else None,
                gpu_queries=gpu_queries)
    ev["expected_source"] = "record" if running and expected is not asked else "inventory"
    ev["inventory_differs"] = differs
    evaluation = evaluate(ev, expected)
    if running:
        request = rec.get("request") or {}
        explain_unloaded_plugin(evaluation, (request.get("patch") or {}).get("mode"),
                                ev_req.get("launcher_pid"), (request.get("summary") or {}).get("env"))
    return {"evidence": ev, "evaluation": evaluation}
