"""``inv sweep``: deploy each configuration in turn (baseline included) with the ordinary deploy, benchmark it the
same way ``inv bench`` does, pick the fastest, leave it (or ``--keep``) running, and write the report.

Every configuration is validated (a Plan is built for it) before the first deploy, so a bad combination is refused
with nothing touched. A configuration that fails to deploy or to measure is a result (a row with its error), not the
end of the sweep. Ctrl-C: the deploy in flight finishes or tears itself down on the host (the agent holds the lock
and ignores the lost session); the sweep waits for that outcome, says what is running on the host, keeps the partial
results, and exits 130.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from fabfile.bench import BenchParams, run_bench, save_local
from fabfile.errors import SpecDeployError, SweepError
from fabfile.inventory import Host, Inventory
from fabfile.plan import Options, build
from fabfile.progress import SweepProgress
from fabfile.session import HostSession


@dataclass(frozen=True)
class Config:
    name: str
    steps: int
    topk: int
    draft_tokens: int | None
    opts: Options


def configs(host: Host, base: Options, steps: list[int], topks: list[int] | None,
            drafts: list[int] | None) -> list[Config]:
    """The sweep's configurations, baseline first, each validated by building its plan (FlagError if invalid).

    With topk 1 SGLang forces draft tokens to steps+1, so ``drafts`` only multiplies topk > 1 configurations.
    """
    out: list[Config] = []
    seen: set[str] = set()

    def add(opts: Options) -> None:
        plan = build(host, opts)
        if plan.config_name in seen:
            return
        seen.add(plan.config_name)
        spec = _spec_of(plan.argv)
        out.append(Config(plan.config_name, spec[0], spec[1], spec[2], opts))

    add(replace(base, steps=0))
    for s in steps:
        if s == 0:
            continue
        for k in topks or [host.speculative.topk]:
            if k > 1 and drafts:
                for d in drafts:
                    add(replace(base, steps=s, topk=k, draft_tokens=d))
            else:
                add(replace(base, steps=s, topk=k))
    return out


def _spec_of(argv: tuple[str, ...]) -> tuple[int, int, int | None]:
    def flag(name: str) -> int | None:
        return int(argv[argv.index(name) + 1]) if name in argv else None

    steps = flag("--speculative-num-steps") or 0
    return steps, flag("--speculative-eagle-topk") or 1, flag("--speculative-num-draft-tokens")


def new_sweep_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(2)


def measure(inv: Inventory, host: Host, cfg: Config, params: BenchParams, runs_dir: Path,
            progress: SweepProgress) -> dict[str, Any]:
    """Deploy one configuration and benchmark it: one row of the sweep table."""
    from fabfile.deploy import deploy_host

    row: dict[str, Any] = {"config": cfg.name, "steps": cfg.steps, "topk": cfg.topk, "draft_tokens": cfg.draft_tokens,
                           "ok": False}
    t0 = time.monotonic()
    res = deploy_host(inv, host, cfg.opts, progress.deploy_reporter())
    row["deploy_s"] = round(time.monotonic() - t0, 2)
    row["deploy_id"] = res.plan.deploy_id
    row["sglang_version"] = res.sglang_version
    if not res.ok:
        row["phase"] = "deploy"
        row["error"] = res.error.as_dict() if res.error else {"message": "deploy failed"}
        return row
    progress.set_phase("bench")
    t1 = time.monotonic()
    try:
        with HostSession.open(inv, host) as s:
            progress.bench_events()
            result = run_bench(s, params, on_event=progress.bench_event)
    except SpecDeployError as e:
        row["phase"] = "bench"
        row["error"] = e.as_dict()
        return row
    row["bench_s"] = round(time.monotonic() - t1, 2)
    row["bench_path"] = str(save_local(result, runs_dir))
    row.update({
        "ok": True, "bench_id": result["bench_id"], "client": result.get("client"),
        "tok_s": result.get("output_tok_s"), "accept_len": result.get("accept_len"),
        "accept_rate": result.get("accept_rate"), "accept_rate_meaning": result.get("accept_rate_meaning"),
        "draft_acceptance": result.get("draft_acceptance"), "cycle_ms": result.get("cycle_ms"),
        "decode_ms_per_token": result.get("decode_ms_per_token"),
        "ms_per_token": 1000.0 / result["output_tok_s"] if result.get("output_tok_s") else None,
        "ttft_ms": (result.get("ttft_ms") or {}).get("median"), "tpot_ms": (result.get("tpot_ms") or {}).get("median"),
        "itl_ms": (result.get("itl_ms") or {}).get("median"), "failed_requests": result.get("failed"),
    })
    return row


def choose(rows: list[dict[str, Any]], keep: str | None) -> dict[str, Any]:
    """The winner (highest tok/s), the baseline, speedups, and what to leave running."""
    ok = [r for r in rows if r.get("ok") and r.get("tok_s")]
    base = next((r for r in ok if r["steps"] == 0), None)
    for r in rows:
        r["speedup"] = (r["tok_s"] / base["tok_s"]) if (base and r.get("ok") and r.get("tok_s")) else None
    winner = max(ok, key=lambda r: r["tok_s"]) if ok else None
    kept = winner
    note = None
    if keep is not None:
        wanted = next((r for r in rows if r["config"] == keep), None)
        if wanted is not None and wanted.get("ok"):
            kept = wanted
        else:
            note = f"--keep {keep} failed during the sweep; keeping the winner instead"
    return {"winner": winner["config"] if winner else None, "baseline_tok_s": base["tok_s"] if base else None,
            "baseline_wins": bool(winner and base and winner is base),
            "kept": kept["config"] if kept else None, "keep_note": note}


def run_sweep(inv: Inventory, host: Host, cfgs: list[Config], params: BenchParams, *, keep: str | None,
              runs_dir: Path | str, as_json: bool) -> int:
    from fabfile.analysis import analyze_sweep
    from fabfile.report import print_sweep, write_outputs

    sweep_id = new_sweep_id()
    runs = Path(runs_dir)
    out_dir = runs / host.name / f"sweep-{sweep_id}"
    progress = SweepProgress(host.name, len(cfgs))
    doc: dict[str, Any] = {"sweep_id": sweep_id, "host": host.name, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "params": asdict(params), "configs": [c.name for c in cfgs], "rows": []}
    rows: list[dict[str, Any]] = doc["rows"]
    t0 = time.monotonic()
    current: Config | None = None
    try:
        for i, cfg in enumerate(cfgs, 1):
            current = cfg
            progress.start(i, cfg.name)
            row = measure(inv, host, cfg, params, runs, progress)
            rows.append(row)
            progress.finish(row["ok"], _row_summary(row))
            _save(out_dir, doc)
        current = None
        progress.close()
        doc.update(choose(rows, keep))
        if doc["kept"] is None:
            doc["elapsed_s"] = round(time.monotonic() - t0, 2)
            _save(out_dir, doc)
            raise SweepError("no configuration could be deployed and measured",
                             f"see the errors in {out_dir / 'sweep.json'}; `inv logs` shows the last server log",
                             host=host.name, sweep_dir=str(out_dir))
        running = _running_config(rows)
        if doc["kept"] != running:
            cfg = next(c for c in cfgs if c.name == doc["kept"])
            progress.start_keep(cfg.name)
            from fabfile.deploy import deploy_host

            res = deploy_host(inv, host, cfg.opts, progress.deploy_reporter())
            progress.finish(res.ok, "left running" if res.ok else
                            f"redeploy failed: {res.error.message if res.error else '?'}", counted=False)
            progress.close()
            doc["final_deploy"] = res.as_dict()
            if not res.ok:
                doc["kept"] = None
        doc["running"] = doc["kept"]
    except KeyboardInterrupt:
        progress.close()
        doc["interrupted"] = {"during": current.name if current else "the final redeploy",
                              "host_state": interrupted_state(inv, host, progress)}
        doc["elapsed_s"] = round(time.monotonic() - t0, 2)
        _save(out_dir, doc)
        raise
    doc["elapsed_s"] = round(time.monotonic() - t0, 2)
    doc["analysis"] = analyze_sweep(rows)
    doc["paths"] = write_outputs(out_dir, doc)
    _save(out_dir, doc)
    print_sweep(doc, as_json=as_json)
    failed = [r for r in rows if not r.get("ok")]
    return 1 if failed or doc.get("running") is None else 0


def _running_config(rows: list[dict[str, Any]]) -> str | None:
    """What the sweep left running: the last configuration, if its deploy succeeded (a failed one is torn down)."""
    if not rows:
        return None
    last = rows[-1]
    return str(last["config"]) if last.get("ok") or last.get("phase") == "bench" else None


def _row_summary(row: dict[str, Any]) -> str:
    if not row.get("ok"):
        return f"[red]{row.get('phase')} failed:[/red] {(row.get('error') or {}).get('message', '')[:100]}"
    text = f"{row['tok_s']:.1f} tok/s"
    if row.get("accept_len") is not None:
        text += f", accept len {row['accept_len']:.2f}"
    if row.get("cycle_ms"):
        text += f", cycle {row['cycle_ms']:.1f} ms"
    elif row.get("decode_ms_per_token"):
        text += f", {row['decode_ms_per_token']:.1f} ms/token"
    return text


def _save(out_dir: Path, doc: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def interrupted_state(inv: Inventory, host: Host, progress: SweepProgress,
                      wait_s: float | None = None) -> dict[str, Any]:
    """After Ctrl-C: wait (bounded; a second Ctrl-C stops waiting) for a deploy still finishing on the host, then say
    what runs there."""
    err = progress.console
    err.print(f"[yellow]interrupted[/yellow]: {host.name}: checking what is running "
              "(a deploy already started finishes or tears itself down on the host; Ctrl-C again to stop waiting)")
    limit = wait_s if wait_s is not None else min(host.timeouts.ready, 120.0) + 3 * host.timeouts.stop_grace
    state: dict[str, Any] = {"known": False}
    try:
        with HostSession.open(inv, host) as s:
            end = time.monotonic() + limit
            while True:
                st = s.call("status", {}, timeout=30)
                state = {"known": True, "running": bool(st.get("running")),
                         "config": (st.get("record") or {}).get("config_name"),
                         "pid": (st.get("record") or {}).get("pid"),
                         "deploy_id": (st.get("record") or {}).get("deploy_id"),
                         "status": (st.get("record") or {}).get("status"),
                         "deploy_in_progress": st.get("deploy_in_progress")}
                if not st.get("deploy_in_progress") or time.monotonic() > end:
                    break
                time.sleep(0.5)
    except KeyboardInterrupt:
        state["waited"] = "stopped waiting (second Ctrl-C)"
    except SpecDeployError as e:
        state["error"] = e.message
    err.print(f"{host.name}: " + describe_state(state))
    return state


def describe_state(state: dict[str, Any]) -> str:
    if not state.get("known"):
        return "could not tell what is running (" + str(state.get("error") or state.get("waited") or "no answer") + \
            "); run `inv status`"
    if state.get("deploy_in_progress"):
        holder = state["deploy_in_progress"] or {}
        return (f"a deploy ({holder.get('deploy_id', '?')}) is still finishing on the host; it ends running or torn "
                "down; `inv status` shows which")
    if state.get("running"):
        return f"now running: {state.get('config')} (pid {state.get('pid')}, deploy {state.get('deploy_id')})"
    return f"no server is running (last deploy {state.get('deploy_id')}: {state.get('status')})"
