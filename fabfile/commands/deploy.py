"""The client side of ``inv deploy``: plan → connect → preflight → ship → the host-side sequence → summary.

The host-side sequence (lock, patch, stop, GPU gate, start, wait, verify, record) runs in one agent call
(``fabfile.remote.serve.deploy``); this module decides what to ask for, renders events as progress, survives a dropped
SSH session by re-attaching to the deploy's journal, and turns the outcome into a result and an exit code.
"""

from __future__ import annotations

import time
from typing import cast

from fabfile import __version__
from fabfile.errors import (
    ConnectError,
    ConnectionLost,
    FlagError,
    Interrupted,
    PreflightError,
    RemoteError,
    SpecDeployError,
    UnsafePathError,
    from_agent,
)
from fabfile.inventory.hosts import Host, Inventory
from fabfile.plan.deploy_plan import (
    Options,
    Plan,
    build,
    config_file_text,
    env_file_text,
    for_version,
    mask_secrets,
    secret_values,
)
from fabfile.present.progress import Reporter
from fabfile.present.text import first_time
from fabfile.remote.protocol import DeployRecord, DeployRequest, FactsAnswer, PatchApplyRequest, SGLangInfo
from fabfile.results.deploys import DeployResult
from fabfile.transport.session import HostSession


def preflight(session: HostSession, plan: Plan) -> FactsAnswer:
    h = plan.host
    facts = session.host_facts(paths={"model": h.model, "draft_model": h.draft_model if
                                      plan.config_name != "baseline" else None, "log_dir": h.log_dir},
                               need_gpus=h.tp, min_free_disk_gb=h.min_free_disk_gb, log_dir=h.log_dir,
                               log_path=plan.log_path)
    if facts.get("unsafe"):
        raise UnsafePathError("; ".join(facts["unsafe"]), "use a directory only the deploying user can write (the "
                              "defaults under its HOME are), or fix the owner and mode of the one named; nothing "
                              "was started", host=h.name, unsafe=facts["unsafe"])
    if facts["problems"]:
        raise PreflightError("; ".join(facts["problems"]), "fix the host or the inventory, then deploy again",
                             host=h.name, problems=facts["problems"])
    return facts


def checked_on_host(session: HostSession, plan: Plan) -> tuple[FactsAnswer, str, str, PatchApplyRequest | None,
                                                                 Plan]:
    """Preflight and every check that needs the host's answers (its SGLang version: the patch mode, what the launch
    line may say): read-only on the host. Returns the facts, the version, the patch mode and request, and the plan
    for that version; raises the tool's error (exit 2 for what the version refuses) before anything is written."""
    facts = preflight(session, plan)
    version = str(facts["sglang"]["version"])
    mode, patch = patch_request(session, plan, version, facts["sglang"])
    # where the API key can go depends on the version; the NCCL notes on the host's NCCL release
    nccl = facts.get("nccl")
    plan = for_version(plan, version, nccl["version"] if nccl else None)
    # What this version does not understand is refused here, before any file lands on the host (exit 2).
    from fabfile.plan.versioncheck import check as check_version

    check_version(list(plan.launch_argv or plan.argv)[3:], dict(plan.env), version, plan.host.name)
    if plan.strict_knobs and plan.knob_notes:
        raise FlagError(f"--strict: {plan.knob_notes[0]}" + (f" (and {len(plan.knob_notes) - 1} more)"
                                                             if len(plan.knob_notes) > 1 else ""),
                        "remove those knobs from the inventory, or deploy without --strict; nothing was touched",
                        host=plan.host.name, knob_notes=list(plan.knob_notes))
    return facts, version, mode, patch, plan


def preflight_only(inv: Inventory, host: Host, plan: Plan) -> SpecDeployError | None:
    """:func:`checked_on_host` on its own session, for a multi-host deploy: every host is checked before the
    first one is touched, so a wrong path on the last host cannot cost the first one a model load and a
    rollback. Returns the host's error, or None."""
    try:
        with HostSession.open(inv, host) as session:
            checked_on_host(session, plan)
    except SpecDeployError as e:
        if e.host is None:
            e.host = host.name
        e.message = mask_secrets(e.message, secret_values(host))
        return e
    return None


def patch_request(session: HostSession, plan: Plan, version: str,
                  sglang: SGLangInfo) -> tuple[str, PatchApplyRequest | None]:
    from fabfile.errors import PatchModeError
    from fabfile.render.patchset import build_patch_request, resolve_mode

    try:
        mode = resolve_mode(plan.patch_mode, version)
    except PatchModeError as e:
        raise FlagError(str(e), "choose another --patch-mode (auto picks one this version supports)",
                        host=plan.host.name) from None
    if not plan.nccl_values:
        mode = "env"  # nothing to carry in-process
    # Even in env mode a patch request goes to the host: applying "env" takes back patches an earlier deploy left
    # (the host then runs exactly the mode asked for, and a rollback can restore any earlier mode).
    values = dict(plan.nccl_values)
    # NCCL's logging values are carried by the patch too, so the evidence survives a launch path that strips the
    # environment (the same values the launch environment has: plan.nccl_settings).
    values.update(plan.nccl_logging)
    site = sglang["site_packages"]  # preflight refused a host without SGLang
    req = build_patch_request(mode, values, plan.force_env, version, session.resolve(plan.host.state_dir), site,
                              __version__, python=plan.host.python)
    return mode, req


def deploy_request(session: HostSession, plan: Plan, patch: PatchApplyRequest | None,
                   version: str) -> DeployRequest:
    """The ``deploy`` request: the one place it is built (its shape is ``protocol.DeployRequest``, read by
    ``fabfile.remote.serve.deploy.run``)."""
    h = plan.host
    t = h.timeouts
    req: DeployRequest = {
        "deploy_id": plan.deploy_id, "client": plan.client, "tool_version": __version__,
        "state_dir": session.resolve(h.state_dir), "journal": None, "config_name": plan.config_name,
        "plan_hash": plan.plan_hash, "script": session.resolve(plan.script_path),
        "log_path": session.resolve(plan.log_path), "cwd": session.resolve(h.log_dir), "listen": h.listen,
        "port": h.port, "sglang_version": version,
        "target_gpus": list(range(h.tp)), "gpu_idle_mib": h.gpu_idle_mib,
        "timeouts": {"ready": plan.ready_timeout, "stall": t.stall, "stop_grace": t.stop_grace,
                     "gpu_clean": t.gpu_clean, "lock_wait": t.lock_wait},
        "patch": patch,
        # What this deploy asks NCCL for: kept in the record, so check-env judges the running deploy by it.
        "expected": plan.expected, "nccl_debug": h.nccl_debug,
        "verify": {"expected": plan.expected, "settle_s": 3.0} if ("verify_env" in plan.steps and plan.expected)
        else None,
        "summary": {"argv": plan.masked_argv(), "env": plan.masked_env()},
        # Several heartbeats fit in the client's silence bound, so only a dead link can exhaust it.
        "heartbeat_s": max(0.5, min(5.0, t.silence / 4)),
        "node": None if h.node is None else {
            "cluster": h.node.cluster, "rank": h.node.rank, "nnodes": h.node.nnodes, "total_tp": h.node.total_tp,
            "dist_init_addr": h.node.dist_init_addr},
        # Ready means it answers: a real request (and the accept-length gate) after the readiness endpoint's 200.
        "gates": {"timeout": t.first_request, "accept_gate": plan.accept_gate} if "first_request" in plan.steps
        else None,
        "profile_dir": session.resolve(plan.profile_dir), "measure": plan.measure,
    }
    if plan.tune_id:
        req["tune_id"] = plan.tune_id
    return req


def upload_launch_files(session: HostSession, plan: Plan) -> None:
    """The launch script and the private files it reads (the env file, SGLang's --config file), each written
    atomically with its mode set before any byte lands."""
    if plan.env_file:
        session.transport.put(env_file_text(plan.file_env).encode(), plan.env_file, 0o600)
    if plan.config_file:
        session.transport.put(config_file_text(plan.secret_config).encode(), plan.config_file, 0o600)
    session.transport.put(plan.script.encode(), plan.script_path, 0o700)


def deadline_for(plan: Plan) -> float:
    t = plan.host.timeouts
    return plan.ready_timeout + 3 * t.stop_grace + t.gpu_clean + t.lock_wait + 2 * t.first_request + 60.0


def run_remote_deploy(session: HostSession, req: DeployRequest, deadline: float,
                      reporter: Reporter) -> DeployRecord:
    """One agent call; if the SSH session drops, reconnect and follow the deploy's journal to its end."""
    req = req.copy()
    req["journal"] = f"{req['state_dir']}/deploys/{req['deploy_id']}.events"
    try:
        return session.deploy(req, deadline, on_event=reporter.event, idle_timeout=session.host.timeouts.silence)
    except ConnectionLost:
        reporter.info("SSH session dropped; the deploy continues on the host, reconnecting to follow it")
    t_end = time.monotonic() + deadline
    while True:
        try:
            try:
                session.transport.reconnect()
            except ConnectError as e:
                raise ConnectError(
                    f"lost the SSH session during the deploy and could not reconnect ({e.message}); the deploy "
                    "goes on without us on the host: it finishes, or tears its server down if it fails",
                    "run `inv status` once the host is reachable to see the outcome", host=session.host.name) \
                    from None
            data = session.attach(req["deploy_id"], skip=reporter.events_seen,
                                  timeout=max(5.0, t_end - time.monotonic()), on_event=reporter.event,
                                  idle_timeout=session.host.timeouts.silence)
            break
        except ConnectionLost:
            if time.monotonic() > t_end:
                raise
            reporter.info("still cannot reach the host; retrying")
    final = data["result"]
    if not final.get("ok"):
        raise from_agent(final.get("error") or {}, session.host.name)
    result = final.get("data")
    if not isinstance(result, dict):
        raise RemoteError("the re-attached deploy reported no data", host=session.host.name)
    return cast(DeployRecord, result)  # the deploy's own answer, replayed from its journal


def deploy_host(inv: Inventory, host: Host, opts: Options, reporter: Reporter,
                plan: Plan | None = None) -> DeployResult:
    plan = plan or build(host, opts)
    result = DeployResult(host=host.name, ok=False, plan=plan)
    reporter.hidden = secret_values(host)
    session: HostSession | None = None
    try:
        reporter.step_start("connect")
        session = HostSession.open(inv, host)
        reporter.step_end("connect", True)
        reporter.step_start("preflight")
        facts, version, mode, patch, plan = checked_on_host(session, plan)
        result.sglang_version, result.patch_mode, result.plan = version, mode, plan
        for note in plan.notes:
            if first_time(note):  # once per command: not again for the next host or the next sweep deploy
                reporter.info(note)
        for note in plan.knob_notes:  # before anything is written on the host
            if first_time(f"knob: {note}"):
                reporter.info(f"knob: {note}")
        upload_launch_files(session, plan)
        reporter.step_end("preflight", True, detail=f"SGLang {version}, {len(facts['gpu']['gpus'])} GPU(s), "
                                                    f"patch mode {mode}")
        req = deploy_request(session, plan, patch, version)
        result.remote_started = True
        result.record = run_remote_deploy(session, req, deadline_for(plan), reporter)
        result.ok = True
    except KeyboardInterrupt:
        step = reporter.current
        reporter.close()
        raise Interrupted(host.name, step, old_stopped="stop" in reporter.timings,
                          started=result.remote_started) from None
    except SpecDeployError as e:
        if reporter.current:
            reporter.step_end(reporter.current, False, message=e.message)
        else:
            reporter.failed_between_steps()
        if e.host is None:
            e.host = host.name
        hidden = secret_values(host)
        e.message = mask_secrets(e.message, hidden)
        if isinstance(e.details.get("excerpt"), list):
            e.details["excerpt"] = [mask_secrets(str(line), hidden) for line in e.details["excerpt"]]
        result.error = e
    finally:
        reporter.close()
        if session is not None:
            st = session.transport.stats
            result.stats = {"connections": st.connections, "commands": st.commands, "uploads": st.uploads,
                            "reconnects": st.reconnects}
            session.close()
    result.timings = dict(reporter.timings)
    return result


def deploy_behind_routers(inv: Inventory, host: Host, opts: Options, reporter: Reporter) -> DeployResult:
    """:func:`deploy_host`, with the host taken out of every router of the inventory that fronts it first (so no
    client request goes to a server being restarted) and put back once its new server answers; a deploy that
    failed without touching the old server puts it back too."""
    from fabfile.commands.router import drain, routers_of

    if not routers_of(inv, host):
        return deploy_host(inv, host, opts, reporter)
    notes = drain(inv, host, back=False)
    for n in notes:
        reporter.info(n)
    r = deploy_host(inv, host, opts, reporter)
    if r.ok or (r.error is not None and r.error.details.get("changed") is False) or not r.remote_started:
        back = drain(inv, host, back=True)
        for n in back:
            reporter.info(n)
        notes += back
    r.router_notes = notes
    return r
