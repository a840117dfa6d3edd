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

from fabfile.commands.bench import BenchParams, run_bench, save_local
from fabfile.errors import SpecDeployError, SweepError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.plan.deploy_plan import Options, build
from fabfile.present.progress import SweepProgress
from fabfile.present.report import level_rows
from fabfile.transport.session import HostSession


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
            progress: SweepProgress, levels: list[int] | None = None) -> dict[str, Any]:
    """Deploy one configuration and benchmark it at each concurrency level (one model load serves them all): one
    row of the sweep table. The row's top-level figures are the first level's; ``levels`` has each level's."""
    from fabfile.commands.deploy import deploy_host

    row: dict[str, Any] = {"config": cfg.name, "steps": cfg.steps, "topk": cfg.topk, "draft_tokens": cfg.draft_tokens,
                           "ok": False, "measured": True}
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
    per_level: list[dict[str, Any]] = []
    try:
        with HostSession.open(inv, host) as s:
            for c in levels or [params.concurrency]:
                progress.bench_events()
                result = run_bench(s, replace(params, concurrency=c), on_event=progress.bench_event)
                per_level.append(_level_figures(c, result, save_local(result, runs_dir)))
    except SpecDeployError as e:
        row["phase"] = "bench"
        row["error"] = e.as_dict()
        return row
    row["bench_s"] = round(time.monotonic() - t1, 2)
    row.update({k: v for k, v in per_level[0].items() if k != "concurrency"})
    row["ok"] = True
    row["levels"] = per_level
    return row


def _level_figures(concurrency: int, result: dict[str, Any], path: Path) -> dict[str, Any]:
    return {
        "concurrency": concurrency, "bench_id": result["bench_id"], "bench_path": str(path),
        "client": result.get("client"), "tok_s": result.get("output_tok_s"), "tok_s_ci": result.get("tok_s_ci"),
        "requests": result.get("completed"), "bench_duration_s": result.get("duration_s"),
        "accept_len": result.get("accept_len"),
        "accept_rate": result.get("accept_rate"), "accept_rate_meaning": result.get("accept_rate_meaning"),
        "draft_acceptance": result.get("draft_acceptance"), "cycle_ms": result.get("cycle_ms"),
        "decode_ms_per_token": result.get("decode_ms_per_token"),
        "ms_per_token": 1000.0 / result["output_tok_s"] if result.get("output_tok_s") else None,
        "ttft_ms": (result.get("ttft_ms") or {}).get("median"), "tpot_ms": (result.get("tpot_ms") or {}).get("median"),
        "itl_ms": (result.get("itl_ms") or {}).get("median"), "failed_requests": result.get("failed"),
        "accept_histogram": result.get("accept_histogram"),
        "accept_histogram_source": result.get("accept_histogram_source"),
    }


def choose(rows: list[dict[str, Any]], keep: str | None, levels: list[int] | None = None) -> dict[str, Any]:
    """The winner (highest measured tok/s) per concurrency level, the baseline, speedups, and what to leave running:
    the first level's winner (list the load you serve first) or ``keep``. Predicted rows never win: a winner was
    measured."""
    levels = levels or [next((lv["concurrency"] for r in rows for lv in r.get("levels") or []), 1)]
    winners: dict[str, str | None] = {}
    for c in levels:
        at = level_rows(rows, c) if any(r.get("levels") for r in rows) else rows
        ok = [r for r in at if r.get("ok") and r.get("tok_s") and r.get("measured", True)]
        base = next((r for r in ok if r["steps"] == 0), None)
        w = max(ok, key=lambda r: r["tok_s"]) if ok else None
        winners[str(c)] = w["config"] if w else None
        for r in rows:
            lv = next((x for x in r.get("levels") or [] if x["concurrency"] == c), None)
            if lv is not None:
                lv["speedup"] = lv["tok_s"] / base["tok_s"] if base and lv.get("tok_s") else None
    ok = [r for r in rows if r.get("ok") and r.get("tok_s") and r.get("measured", True)]
    base = next((r for r in ok if r["steps"] == 0), None)
    for r in rows:
        r["speedup"] = (r["tok_s"] / base["tok_s"]) if (base and r.get("ok") and r.get("tok_s")) else None
    winner = next((r for r in ok if r["config"] == winners[str(levels[0])]), None)
    kept = winner
    note = None
    if keep is not None:
        wanted = next((r for r in rows if r["config"] == keep), None)
        if wanted is not None and wanted.get("ok"):
            kept = wanted  # measured, or predicted only: then it is deployed now
        else:
            note = f"--keep {keep} failed during the sweep; keeping the winner instead"
    out: dict[str, Any] = {"winner": winner["config"] if winner else None,
                           "baseline_tok_s": base["tok_s"] if base else None,
                           "baseline_wins": bool(winner and base and winner is base),
                           "kept": kept["config"] if kept else None, "keep_note": note, "winners": winners}
    if winner is not None and winner.get("predicted_tok_s") is not None:
        out["winner_predicted_tok_s"] = winner["predicted_tok_s"]
        out["winner_measured_tok_s"] = winner["tok_s"]
        out["predicted_tok_s"] = winner["predicted_tok_s"]
        out["measured_tok_s"] = winner["tok_s"]
    return out


def run_sweep(inv: Inventory, host: Host, cfgs: list[Config], params: BenchParams, *, keep: str | None,
              runs_dir: Path | str, as_json: bool, levels: list[int] | None = None, predict: bool = False) -> int:
    from fabfile.plan.analysis import analyze_sweep
    from fabfile.present.report import print_sweep, write_outputs

    levels = levels or [params.concurrency]
    sweep_id = new_sweep_id()
    runs = Path(runs_dir)
    out_dir = runs / host.name / f"sweep-{sweep_id}"
    order, held_back, notes = measurement_order(cfgs, predict)
    progress = SweepProgress(host.name, len(order))
    doc: dict[str, Any] = {"sweep_id": sweep_id, "host": host.name, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "params": asdict(params), "configs": [c.name for c in cfgs], "rows": [],
                           "concurrency_levels": levels, "predict": predict, "grid_loads": len(cfgs),
                           "model_loads": 0, "notes": notes}
    rows: list[dict[str, Any]] = doc["rows"]
    t0 = time.monotonic()
    current: Config | None = None
    index = [0]

    def run_one(cfg: Config) -> dict[str, Any]:
        nonlocal current
        current = cfg
        index[0] += 1
        progress.total = max(progress.total, index[0])
        progress.start(index[0], cfg.name)
        row = measure(inv, host, cfg, params, runs, progress, levels)
        doc["model_loads"] += 1
        rows.append(row)
        progress.finish(row["ok"], _row_summary(row))
        _save(out_dir, doc)
        return row

    try:
        for cfg in order:
            run_one(cfg)
        if held_back:
            pred = predict_from_rows(rows, held_back, levels, params.output_len)
            doc["prediction"] = pred
            if pred.get("error"):
                doc["notes"].append(f"no prediction ({pred['error']}): the other configurations are measured")
                confirm = held_back
            else:
                names = [w for w in pred["winners"].values()]
                confirm = [c for c in held_back if c.name in names]
                # The first level's winner last, so that it is the one left running.
                first = pred["winners"].get(str(levels[0]))
                confirm.sort(key=lambda c: c.name == first)
            progress.total = index[0] + len(confirm)
            for cfg in confirm:
                run_one(cfg)
        current = None
        progress.close()
        running = _running_config(rows)  # before the predicted rows join the table
        add_predictions(doc, cfgs)
        doc.update(choose(rows, keep, levels))
        if doc["kept"] is None:
            doc["elapsed_s"] = round(time.monotonic() - t0, 2)
            _save(out_dir, doc)
            raise SweepError("no configuration could be deployed and measured",
                             f"see the errors in {out_dir / 'sweep.json'}; `inv logs` shows the last server log",
                             host=host.name, sweep_dir=str(out_dir))
        if doc["kept"] != running:
            cfg = next(c for c in cfgs if c.name == doc["kept"])
            progress.start_keep(cfg.name)
            from fabfile.commands.deploy import deploy_host

            res = deploy_host(inv, host, cfg.opts, progress.deploy_reporter())
            doc["model_loads"] += 1
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
    doc["bench_s"] = round(sum(float(r.get("bench_s") or 0) for r in rows), 2)
    doc["analysis"] = analyze_sweep(rows)
    doc["paths"] = write_outputs(out_dir, doc)
    _save(out_dir, doc)
    print_sweep(doc, as_json=as_json)
    failed = [r for r in rows if not r.get("ok")]
    return 1 if failed or doc.get("running") is None else 0


def measurement_order(cfgs: list[Config], predict: bool) -> tuple[list[Config], list[Config], list[str]]:
    """What to deploy up front, what to hold back for the prediction, and notes for the output.

    Without ``predict``: every configuration in order. With it: the baseline, the configurations the model cannot
    predict (each with why), then the smallest and the largest chain step count, the largest last so that, if it
    wins, it is already running; the other chain configurations wait for the prediction."""
    from fabfile.plan.predict import plan_runs, unpredictable_reason

    if not predict:
        return list(cfgs), [], []
    notes: list[str] = []
    base = [c for c in cfgs if c.steps == 0]
    other = []
    chain = []
    for c in cfgs:
        if c.steps == 0:
            continue
        why = unpredictable_reason(c.steps, c.topk, c.draft_tokens)
        if why is None:
            chain.append(c)
        else:
            other.append(c)
            notes.append(f"{c.name} is measured, not predicted: {why}")
    plan = plan_runs([c.steps for c in chain])
    if plan is None:
        notes.append(f"{len(chain)} chain configuration(s): measuring them all costs no more than predicting")
        return base + other + chain, [], notes
    lo, hi = plan
    first = [c for c in chain if c.steps == lo]
    last = [c for c in chain if c.steps == hi]
    held = [c for c in chain if c.steps not in (lo, hi)]
    return base + other + first + last, held, notes


def predict_from_rows(rows: list[dict[str, Any]], held_back: list[Config], levels: list[int],
                      output_len: int) -> dict[str, Any]:
    """The prediction for the held-back chain configurations at each level, and the predicted winner per level
    (over measured rows and predictions). ``error`` says why there is none."""
    from fabfile.plan.analysis import fit_cycle
    from fabfile.plan.predict import Measured, predict_level
    from fabfile.remote.metrics import add_histograms

    chain = [r for r in rows if r.get("ok") and r["steps"] > 0 and r.get("topk") == 1 and
             (r.get("draft_tokens") in (None, r["steps"] + 1))]
    if len(chain) < 2:
        return {"error": "fewer than two chain configurations were measured"}
    top = max(chain, key=lambda r: r["steps"])
    hist: list[int] = []
    source = None
    for lv in top.get("levels") or []:  # acceptance does not depend on the load: pool every level's passes
        if lv.get("accept_histogram"):
            hist = add_histograms(hist, list(lv["accept_histogram"]))
            source = source or lv.get("accept_histogram_source")
    if not hist or sum(hist) == 0:
        return {"error": f"{top['config']} reported no accepted-drafts histogram (neither meta_info nor the stream)"}
    out: dict[str, Any] = {"histogram": hist, "histogram_source": source, "histogram_config": top["config"],
                           "rows": [], "winners": {}, "fits": {}}
    for c in levels:
        at = level_rows(rows, c)
        names = {x["config"] for x in chain}
        spec = [r for r in at if r.get("ok") and r.get("tok_s") and r.get("cycle_ms") and r["config"] in names]
        fit = fit_cycle([(int(r["steps"]), float(r["cycle_ms"])) for r in spec])
        if fit is None:
            return {"error": f"no cycle fit at concurrency {c}"}
        measured = [Measured(steps=int(r["steps"]), tok_s=float(r["tok_s"]), cycle_ms=float(r["cycle_ms"]),
                             ttft_ms=float(r.get("ttft_ms") or 0.0)) for r in spec]
        want = sorted({h.steps for h in held_back} | {m.steps for m in measured})
        preds, calib = predict_level(hist, int(top["steps"]), fit, measured, want, output_len=output_len,
                                     concurrency=c)
        out["fits"][str(c)] = {"base_ms": fit.base_ms, "per_step_ms": fit.per_step_ms, "calibration": calib}
        name_of = {h.steps: h.name for h in held_back} | {int(r["steps"]): r["config"] for r in spec}
        candidates: list[tuple[float, str]] = []
        for p in preds:
            out["rows"].append({"config": name_of[p.steps], **p.as_dict()})
            candidates.append((p.tok_s if name_of[p.steps] in {h.name for h in held_back} else
                               next(float(r["tok_s"]) for r in spec if r["config"] == name_of[p.steps]),
                               name_of[p.steps]))
        candidates += [(float(r["tok_s"]), r["config"]) for r in at if r.get("ok") and r.get("tok_s") and
                       all(r["config"] != n for _, n in candidates)]
        out["winners"][str(c)] = max(candidates)[1]
    return out


def add_predictions(doc: dict[str, Any], cfgs: list[Config]) -> None:
    """Table rows for the configurations predicted and not measured, and each measured row's prediction."""
    pred = doc.get("prediction") or {}
    if not pred.get("rows"):
        return
    levels = doc["concurrency_levels"]
    by = {(p["config"], p["concurrency"]): p for p in pred["rows"]}
    measured = {r["config"] for r in doc["rows"] if r.get("measured")}
    for r in doc["rows"]:
        p = by.get((r["config"], levels[0]))
        if p is not None:
            r["predicted_tok_s"] = p["tok_s"]
        for lv in r.get("levels") or []:
            q = by.get((r["config"], lv["concurrency"]))
            if q is not None:
                lv["predicted_tok_s"] = q["tok_s"]
    for c in cfgs:
        if c.name in measured or (c.name, levels[0]) not in by:
            continue
        lv = [{"concurrency": lvl, "tok_s": by[(c.name, lvl)]["tok_s"], "predicted_tok_s": by[(c.name, lvl)]["tok_s"],
               "accept_len": by[(c.name, lvl)]["accept_len"], "cycle_ms": by[(c.name, lvl)]["cycle_ms"]}
              for lvl in levels if (c.name, lvl) in by]
        doc["rows"].append({"config": c.name, "steps": c.steps, "topk": c.topk, "draft_tokens": c.draft_tokens,
                            "ok": True, "measured": False, "tok_s": lv[0]["tok_s"], "predicted_tok_s": lv[0]["tok_s"],
                            "accept_len": lv[0]["accept_len"], "cycle_ms": lv[0]["cycle_ms"], "levels": lv})
    order = {n: i for i, n in enumerate(doc["configs"])}
    doc["rows"].sort(key=lambda r: order.get(r["config"], 1 << 30))


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
