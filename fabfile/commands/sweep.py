"""``inv sweep``: deploy each configuration in turn (baseline included) with the ordinary deploy, benchmark it the
same way ``inv bench`` does, pick the fastest, leave it (or ``--keep``) running, and write the report.

Every configuration is validated (a Plan is built for it) before the first deploy, so a bad combination is refused
with nothing touched. A configuration that fails to deploy or to measure is a result (a row with its error), not the
end of the sweep. Ctrl-C: the deploy in flight finishes or tears itself down on the host (the agent holds the lock
and ignores the lost session); the sweep waits for that outcome, says what is running on the host, keeps the partial
results, and exits 130.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from fabfile.commands.bench import BenchParams, run_bench, save_local
from fabfile.commands.result import CommandResult
from fabfile.commands.sweep_files import load_resume, resume_dir, resumed, write_outputs
from fabfile.commands.sweep_files import save as save_doc
from fabfile.errors import SpecDeployError, SweepError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.plan.nccl_skip import Skip, skips
from fabfile.plan.sla import Limits
from fabfile.plan.sweep_doc import LevelFigures, SweepDocument, SweepRow
from fabfile.plan.sweep_nccl import nccl_tuning
from fabfile.plan.sweep_plan import (
    Config,
    add_predictions,
    measurement_order,
    next_loads,
    predict_from_rows,
)
from fabfile.plan.sweep_winner import choose
from fabfile.present.progress import SweepProgress
from fabfile.remote.protocol import BenchDocument
from fabfile.results.documents import SweepResult
from fabfile.transport.session import HostSession

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.plan.deploy_plan import Options
    from fabfile.remote import protocol as p


def new_sweep_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(2)


def measure(inv: Inventory, host: Host, cfg: Config, params: BenchParams, runs_dir: Path,
            progress: SweepProgress, levels: list[int] | None = None, trace: bool = False) -> SweepRow:
    """Deploy one configuration and benchmark it at each concurrency level (one model load serves them all): one
    row of the sweep table. The row's top-level figures are the first level's; ``levels`` has each level's. With
    ``trace`` (the first NCCL candidate's loads of a --predict sweep at TP ≥ 2) a short profile with SGLang's
    profiler follows on the same load: ``row["allreduce"]``, what the NCCL skip rule reads."""
    from fabfile.commands.deploy import deploy_host

    row: SweepRow = {"config": cfg.name, "steps": cfg.steps, "topk": cfg.topk, "draft_tokens": cfg.draft_tokens,
                     "ok": False, "measured": True}
    if cfg.nccl:
        row["nccl"] = cfg.nccl
        # how many NCCL variables the candidate sets: the tie-break's "fewer changed variables" (plan.ranking)
        row["nccl_vars"] = len(nccl_tuning(cfg.host or host))
    if cfg.adaptive:
        row["adaptive"] = True
    host = cfg.host or host
    t0 = time.monotonic()
    res = deploy_host(inv, host, cfg.opts, progress.deploy_reporter())
    row["deploy_s"] = round(time.monotonic() - t0, 2)
    row["deploy_id"] = res.plan.deploy_id
    row["measure"] = res.plan.measure  # SGLang's device timer on (a sweep measures where the version has it)
    row["sglang_version"] = res.sglang_version
    if not res.ok:
        row["phase"] = "deploy"
        row["error"] = res.error.as_dict() if res.error else {"message": "deploy failed"}
        return row
    progress.set_phase("bench")
    t1 = time.monotonic()
    per_level: list[LevelFigures] = []
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
    first = per_level[0].copy()
    del first["concurrency"]
    row = {**row, **first}
    row["ok"] = True
    row["levels"] = per_level
    if trace:
        progress.set_phase("trace")
        _trace_allreduce(inv, host, cfg, params, levels or [params.concurrency], row)
    return row


TRACE_OUTPUT_LEN = 128  # the trace's load: one request per slot, at most this long: passes at the bench's batch


def _trace_allreduce(inv: Inventory, host: Host, cfg: Config, params: BenchParams, levels: list[int],
                     row: SweepRow) -> None:
    """A short ``inv profile --trace`` (the same verb and request) at the first level's concurrency: the
    all-reduce ms and GPU span of verify's (or the baseline's decode) pass, for the NCCL skip. A failed trace is
    said in the row (``allreduce_error``): the rule then keeps every candidate."""
    from fabfile.commands.profile import ProfileParams, new_profile_id, profile_request
    from fabfile.plan.nccl_model import allreduce_figures

    c = levels[0]
    pp = ProfileParams(load=BenchParams(concurrency=c, input_len=params.input_len,
                                        output_len=min(params.output_len, TRACE_OUTPUT_LEN), num_prompts=c), trace=True)
    try:
        with HostSession.open(inv, host) as s:
            answer = s.profile(profile_request(pp, new_profile_id()), timeout=pp.bound())
    except SpecDeployError as e:
        row["allreduce_error"] = e.message
        return
    figs = allreduce_figures(dict(answer), cfg.steps > 0, cfg.draft_tokens or (cfg.steps + 1 if cfg.steps else None),
                             period_ms=row.get("tpot_ms"))
    if figs is None:
        row["allreduce_error"] = "the profiler's trace shows no " + ("verify" if cfg.steps else "decode") + " pass"
        return
    row["allreduce"] = figs
    row["allreduce_context"] = dict(answer.get("allreduce_context") or {})


def _level_figures(concurrency: int, result: BenchDocument, path: Path) -> LevelFigures:
    return {
        "concurrency": concurrency, "bench_id": result["bench_id"], "bench_path": str(path),
        "client": result.get("client"), "tok_s": result.get("output_tok_s"), "tok_s_ci": result.get("tok_s_ci"),
        "requests": result.get("completed"), "bench_duration_s": result.get("duration_s"),
        "accept_len": result.get("accept_len"),
        "accept_rate": result.get("accept_rate"), "accept_rate_meaning": result.get("accept_rate_meaning"),
        "draft_acceptance": result.get("draft_acceptance"), "cycle_ms": result.get("cycle_ms"),
        "decode_ms_per_token": result.get("decode_ms_per_token"),
        "phases": result.get("phases"), "cycle_ms_source": result.get("cycle_ms_source"),  # measured by SGLang
        "ms_per_token": 1000.0 / result["output_tok_s"] if result.get("output_tok_s") else None,
        "ttft_ms": (result.get("ttft_ms") or {}).get("median"), "tpot_ms": (result.get("tpot_ms") or {}).get("median"),
        "itl_ms": (result.get("itl_ms") or {}).get("median"), "failed_requests": result.get("failed"),
        "accept_histogram": result.get("accept_histogram"),
        "accept_histogram_source": result.get("accept_histogram_source"),
        "spec_num_steps": (result.get("prometheus") or {}).get("num_steps"),  # SGLang's active step count
    }


@dataclass
class _Run:
    """One sweep in progress: what it measures with, the document it fills (saved after every configuration), and
    the configuration being deployed or measured now (what an interruption names)."""
    inv: Inventory
    host: Host
    params: BenchParams
    runs: Path
    out_dir: Path
    levels: list[int]
    progress: SweepProgress
    doc: SweepDocument
    t0: float = field(default_factory=time.monotonic)
    current: Config | None = None
    index: int = 0
    trace_nccl: str | None = None  # the NCCL candidate whose loads are traced (the skip rule's first candidate)

    @property
    def rows(self) -> list[SweepRow]:
        return self.doc["rows"]

    def one(self, cfg: Config) -> SweepRow:
        self.current = cfg
        self.index += 1
        self.progress.total = max(self.progress.total, self.index)
        self.progress.start(self.index, cfg.name, speculative=cfg.steps > 0)
        row = measure(self.inv, self.host, cfg, self.params, self.runs, self.progress, self.levels,
                      trace=bool(self.trace_nccl) and cfg.nccl == self.trace_nccl)
        self.doc["model_loads"] += 1
        self.rows.append(row)
        self.progress.finish(row["ok"], _row_summary(row))
        self.save()
        return row

    def save(self) -> None:
        save_doc(self.out_dir, self.doc)

    def elapsed(self) -> float:
        return round(time.monotonic() - self.t0, 2)


def sweep_command(inv: Inventory, host: str | None, base: Options, params: BenchParams, *, steps: list[int],
                  topks: list[int] | None, draft_tokens: list[int] | None, nccl: str | None, nccl_env: str | None,
                  adaptive: bool, keep: str | None, runs_dir: Path | str, levels: list[int], predict: bool,
                  limits: Limits | None, resume: Path | None, explain: bool) -> CommandResult:
    """``inv sweep`` as its task hands it over: the one host, its grid of configurations (each validated by its plan,
    NCCL candidates crossed in), ``--keep`` checked against it, then the sweep."""
    from fabfile.inventory.hosts import one_host
    from fabfile.plan.sweep_nccl import candidates
    from fabfile.plan.sweep_plan import check_keep, configs

    h = one_host(inv, host, "sweep")
    cfgs = configs(h, base, steps, topks, draft_tokens, candidates(nccl, nccl_env, inv.nccl_presets), adaptive)
    check_keep(cfgs, keep)
    return run_sweep(inv, h, cfgs, params, keep=keep, runs_dir=runs_dir, levels=levels, predict=predict,
                     limits=limits, resume=resume, explain=explain)


def run_sweep(inv: Inventory, host: Host, cfgs: list[Config], params: BenchParams, *, keep: str | None,
              runs_dir: Path | str, levels: list[int] | None = None, predict: bool = False,
              limits: Limits | None = None, resume: Path | None = None, explain: bool = False) -> CommandResult:
    from fabfile.plan.analysis import analyze_sweep
    from fabfile.present.sweep_report import print_sweep

    levels = levels or [params.concurrency]
    saved = load_resume(resume, host, cfgs, params, levels, predict) if resume is not None else None
    _check_adaptive(inv, host, cfgs)
    sweep_id = saved["sweep_id"] if saved else new_sweep_id()
    runs = Path(runs_dir)
    order, held_back, notes = measurement_order(cfgs, predict)
    skipped = _tp1_skips(host, cfgs) if predict else []
    if skipped:  # at TP 1 no NCCL communicator exists: the other candidates cannot differ (plan/nccl_skip)
        gone = {s.candidate for s in skipped}
        order = [c for c in order if c.nccl not in gone]
        held_back = [c for c in held_back if c.nccl not in gone]
        notes.append("NCCL candidate(s) " + ", ".join(sorted(gone)) + f" skipped: {skipped[0].reason}")
    first_nccl = _first_traced(host, cfgs, order, notes) if predict else None
    doc: SweepDocument = {"sweep_id": sweep_id, "host": host.name, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "params": asdict(params), "configs": [c.name for c in cfgs], "rows": [],
                           "concurrency_levels": levels, "predict": predict, "grid_loads": len(cfgs),
                           "model_loads": 0, "notes": notes,
                           "nccl_skipped": [{**x.as_dict(), "configs": [c.name for c in cfgs if c.nccl == x.candidate]}
                                            for x in skipped],
                           "plan_hashes": {c.name: c.plan_hash for c in cfgs}}
    kept = resumed(doc, saved, resume) if saved else set()
    todo = [c for c in order if c.name not in kept]
    out_dir = resume_dir(resume) if resume is not None else runs / host.name / f"sweep-{sweep_id}"
    if predict:
        # Said before the first load, from the one count the end says again (``load_count``): how many loads
        # prediction (and the NCCL skip) can save here.
        least, most = load_count(order, held_back, levels, first_nccl)
        doc["planned_loads"] = {"least": least, "most": most}
        notes.insert(0, "--predict: " + planned_loads_sentence(least, most, len(cfgs), len(held_back)))
    progress = SweepProgress(host.name, len(todo) + min(len(held_back), len(levels) + 1))
    # The counter counts up to the most loads this sweep can take ([3/≤4]), never past its total ([3/3] → [4/4]).
    progress.at_most = bool(held_back)
    progress.expect([c.steps > 0 for c in todo if first_nccl is None or c.nccl == first_nccl]
                    + [c.steps > 0 for c in todo if first_nccl is not None and c.nccl != first_nccl])
    run = _Run(inv, host, params, runs, out_dir, levels, progress, doc, trace_nccl=first_nccl)
    for note in notes:  # what --predict measures and what it cannot save, said before the first load (stderr)
        run.progress.console.print(note if note.startswith("--predict:") else f"{host.name}: {note}", markup=False,
                                   highlight=False, soft_wrap=False)
    try:
        for cfg in [c for c in todo if first_nccl is None or c.nccl == first_nccl]:
            run.one(cfg)
        if first_nccl is not None:
            gone = _skip_after_first(run, cfgs, first_nccl)
            todo = [c for c in todo if c.nccl not in gone]
            held_back = [c for c in held_back if c.nccl not in gone]
        for cfg in [c for c in todo if first_nccl is not None and c.nccl != first_nccl]:
            run.one(cfg)
        if held_back:
            _measure_predicted_winners(run, held_back)
        run.current = None
        run.progress.close()
        _keep_one(run, cfgs, keep, limits)
    except KeyboardInterrupt:
        run.progress.close()
        doc["interrupted"] = {"during": run.current.name if run.current else "the final redeploy",
                              "host_state": interrupted_state(inv, host, run.progress)}
        doc["elapsed_s"] = run.elapsed()
        run.save()
        raise
    doc["elapsed_s"] = run.elapsed()
    doc["bench_s"] = round(sum(float(r.get("bench_s") or 0) for r in run.rows), 2)
    _timer_note(doc)
    doc["analysis"] = analyze_sweep(run.rows)
    doc["paths"] = write_outputs(run.out_dir, doc)
    pairs = _explain(doc) if explain else None
    run.save()

    def for_people() -> None:
        print_sweep(doc)
        if pairs is not None:
            from fabfile.present.explain_report import print_explained
            from fabfile.present.output import out

            print_explained(pairs, out)

    return CommandResult(doc, for_people, SweepResult(doc).exit_code)


def _tp1_skips(host: Host, cfgs: list[Config]) -> list[Skip]:
    """At TP 1 every NCCL candidate but the first is skipped (nothing measured is needed to know it)."""
    cands = list(dict.fromkeys(c.nccl for c in cfgs if c.nccl))
    if len(cands) < 2 or host.tp > 1:
        return []
    return skips([], cands[1:], tp=host.tp)


def load_count(order: list[Config], held_back: list[Config], levels: list[int],
                first_nccl: str | None) -> tuple[int, int]:
    """The fewest and most model loads the sweep takes to measure (the final redeploy of the winner, which a grid
    needs as much, apart): the loads up front (only the first NCCL candidate's when the others may be skipped),
    then at most one predicted winner per level and one more if the refit names another."""
    least = len([c for c in order if first_nccl is None or c.nccl == first_nccl])
    return least, len(order) + min(len(held_back), len(levels) + 1)


def planned_loads_sentence(least: int, most: int, grid: int, predicted: int) -> str:
    """The plan's count, said before the first load (``load_count``); ``loads_sentence`` says the end's."""
    if least == most == grid:
        return (f"nothing to predict or skip among these configurations: all {grid} are measured, {grid} model "
                "loads as without --predict")
    span = f"{least} to {most}" if least != most else f"{most}"
    text = (f"{span} model loads to measure (the full grid: {grid}; {predicted} configuration(s) predicted, a "
            "predicted winner is measured too")
    return text + ("); here prediction may save none" if most >= grid else ")")


def _first_traced(host: Host, cfgs: list[Config], order: list[Config], notes: list[str]) -> str | None:
    """The NCCL candidate measured (and traced) first when others may be skipped (at TP ≥ 2, with two or more):
    its configurations are moved to the front of ``order`` (the others are loaded after them, if they can win)."""
    cands = list(dict.fromkeys(c.nccl for c in cfgs if c.nccl))
    if host.tp < 2 or len(cands) < 2:
        return None
    order[:] = [c for c in order if c.nccl == cands[0]] + [c for c in order if c.nccl != cands[0]]
    notes.append(f"NCCL candidates at TP {host.tp}: {cands[0]}'s configurations are measured first, each with a "
                 "short trace by SGLang's profiler (its all-reduce time per pass); another candidate is loaded only "
                 "if it can win (plan/nccl_skip)")
    return cands[0]


def _skip_after_first(run: _Run, cfgs: list[Config], first: str) -> set[str]:
    """After the first candidate's loads (or their saved rows, on --resume: the rule is recomputed from them):
    the candidates that cannot win, said in the notes and ``nccl_skipped`` (with the configurations not loaded)."""
    from fabfile.plan.nccl_model import CandidateModel
    from fabfile.plan.ncclsettings import nccl_settings

    rows = [r for r in run.rows if r.get("nccl") == first and r.get("measured", True)]
    tuning = {c.nccl: nccl_settings(c.host or run.host).tuning for c in cfgs if c.nccl}
    others = [n for n in dict.fromkeys(c.nccl for c in cfgs if c.nccl) if n != first]
    ctx: dict[str, Any] = next((r["allreduce_context"] for r in rows if r.get("allreduce_context")), {})
    model = CandidateModel(tuning[first], {n: tuning[n] for n in others}, ctx)
    found = skips(rows, others, run.host.tp, model)
    doc = run.doc
    if not found:
        missing = [r for r in rows if r.get("ok") and not r.get("allreduce")]
        why = (f"no all-reduce figures for {', '.join(r['config'] for r in missing)} "
               f"({missing[0].get('allreduce_error') or 'no trace'})" if missing else
               "each could beat the best measured row" if any(r.get("ok") for r in rows) else
               f"none of {first}'s configurations was measured")
        doc["notes"].append(f"no NCCL candidate could be ruled out, so every one is loaded: {why}")
    for sk in found:
        entry = sk.as_dict()
        entry["configs"] = [c.name for c in cfgs if c.nccl == sk.candidate]
        if not sk.modelled and sk.candidate in model.why:
            entry["no_model"] = model.why[sk.candidate]
        doc["nccl_skipped"].append(entry)
        doc["notes"].append(f"NCCL candidate {sk.candidate} skipped ({len(entry['configs'])} model loads saved): "
                            f"{sk.reason}")
        run.progress.console.print(f"{run.host.name}: NCCL candidate {sk.candidate} skipped: {sk.reason}",
                                   markup=False, highlight=False, soft_wrap=False)
    for n in others:
        if n in model.why and n not in {s.candidate for s in found}:
            doc["notes"].append(f"NCCL candidate {n}: no all-reduce model ({model.why[n]}); bounded by zero "
                                "all-reduce time")
    gone = {s.candidate for s in found}
    run.trace_nccl = None  # decided: a later load (a predicted winner) needs no trace
    run.progress.total = max(run.index, run.progress.total - sum(1 for c in cfgs if c.nccl in gone))
    run.save()
    return gone


def _check_adaptive(inv: Inventory, host: Host, cfgs: list[Config]) -> None:
    """Before anything starts: the host's SGLang must have --speculative-adaptive (FlagError, exit 2, naming the
    releases that have it, from the table read off the wheels), else the sweep would run half its candidates."""
    cfg = next((c for c in cfgs if c.adaptive), None)
    if cfg is None:
        return
    from fabfile.commands.deploy import preflight
    from fabfile.plan.deploy_plan import build
    from fabfile.plan.versioncheck import check

    plan = build(cfg.host or host, cfg.opts)
    with HostSession.open(inv, host) as s:
        version = str(preflight(s, plan)["sglang"]["version"])
    check(list(plan.argv)[3:], dict(plan.env), version, host.name)


def _timer_note(doc: SweepDocument) -> None:
    kept = next((r for r in doc["rows"] if r["config"] == doc.get("running") and r.get("measure")), None)
    if kept is not None:
        doc["notes"].append(f"{kept['config']} is left running with SGLang's device timer on (the sweep measured "
                            "with it; it costs a little of every forward): `inv deploy` it again without --measure "
                            "to turn it off")


def _explain(doc: SweepDocument) -> list[Any]:
    """``--explain``: the rule table over every configuration against this sweep's own baseline (kept in the
    document as ``explain``; the findings are returned to be printed under the table)."""
    from fabfile.commands.explain import explained
    from fabfile.present.explain_report import document

    pairs = explained(doc)
    doc["explain"] = document(pairs)
    return pairs


def _measure_predicted_winners(run: _Run, held_back: list[Config]) -> None:
    """After the measured configurations: predict the held-back ones and measure only those predicted to win.

    Each load is a new measurement the next prediction uses (with measured phases the third load, the predicted
    winner, gives the verify model its second point); the loop ends when every predicted winner was measured. The
    prediction each configuration was loaded on is kept (``before_load``): what the report holds against its
    measurement."""
    pending = list(held_back)
    before: dict[str, dict[str, float]] = {}
    confirmed = False  # a round of predicted winners was loaded already: another one is the refit's
    while True:
        pred = predict_from_rows(run.rows, pending, run.levels, run.params.output_len)
        confirm = next_loads(pred, pending, run.levels[0])
        if pred.get("error") and not pred.get("need"):
            run.doc["notes"].append(f"no prediction ({pred['error']}): the other configurations are measured")
        elif pred.get("error"):
            run.doc["notes"].append(f"{pred['error']}: measuring {pred['need']} too")
        if not confirm:
            break
        for c in confirm:
            got = {str(p["concurrency"]): float(p["tok_s"]) for p in pred.get("rows") or [] if p["config"] == c.name}
            if got:
                before[c.name] = got
        if confirmed and not pred.get("error"):
            run.doc["notes"].append("the prediction refit on the measured winner named "
                                    f"{', '.join(c.name for c in confirm)}: measured too")
        confirmed = confirmed or not pred.get("error")
        run.progress.total = run.index + len(confirm)
        for cfg in confirm:
            run.one(cfg)
            pending.remove(cfg)
    run.progress.at_most = False
    pred["before_load"] = before
    run.doc["prediction"] = pred


def _keep_one(run: _Run, cfgs: list[Config], keep: str | None, limits: Limits | None = None) -> None:
    """Choose the winner (or ``--keep``) and leave it running: deployed again unless it is what runs already."""
    doc = run.doc
    # before the predicted rows join the table; a resumed sweep that measured nothing new cannot tell what runs
    running = _running_config(run.rows) if run.index else None
    add_predictions(doc, cfgs)
    chosen: SweepDocument = {**doc, **choose(run.rows, keep, run.levels, limits, running)}
    doc.update(chosen)
    if keep is not None and keep in {n for sk in doc.get("nccl_skipped") or [] for n in sk.get("configs") or []}:
        doc["keep_note"] = (f"--keep {keep} was not loaded: its NCCL candidate cannot win (nccl_skipped); keeping "
                            "the winner instead")
    if doc["kept"] is None:
        doc["elapsed_s"] = run.elapsed()
        run.save()
        raise SweepError("no configuration could be deployed and measured",
                         f"see the errors in {run.out_dir / 'sweep.json'}; `inv logs` shows the last server log",
                         host=run.host.name, sweep_dir=str(run.out_dir))
    if doc["kept"] != running:
        cfg = next(c for c in cfgs if c.name == doc["kept"])
        run.progress.start_keep(cfg.name)
        from fabfile.commands.deploy import deploy_host

        res = deploy_host(run.inv, cfg.host or run.host, cfg.opts, run.progress.deploy_reporter())
        doc["model_loads"] += 1
        doc["redeploy_loads"] = 1  # the winner was not the last loaded: a grid in this order would load it too
        run.progress.finish(res.ok, "left running" if res.ok else
                            f"redeploy failed: {res.error.message if res.error else '?'}", counted=False)
        run.progress.close()
        doc["final_deploy"] = res.as_dict()
        if not res.ok:
            doc["kept"] = None
    doc["running"] = doc["kept"]


def _running_config(rows: list[SweepRow]) -> str | None:
    """What the sweep left running: the last configuration, if its deploy succeeded (a failed one is torn down)."""
    if not rows:
        return None
    last = rows[-1]
    return str(last["config"]) if last.get("ok") or last.get("phase") == "bench" else None


def _row_summary(row: SweepRow) -> str:
    if not row.get("ok"):
        return f"[red]{row.get('phase')} failed:[/red] {str((row.get('error') or {}).get('message', ''))[:100]}"
    text = f"{row.get('tok_s') or 0:.1f} tok/s"
    if row.get("accept_len") is not None:
        text += f", accept len {row['accept_len']:.2f}"
    if row.get("cycle_ms"):
        text += f", cycle {row['cycle_ms']:.1f} ms"
    elif row.get("decode_ms_per_token"):
        text += f", {row['decode_ms_per_token']:.1f} ms/token"
    return text


class HostState(TypedDict, total=False):
    """What runs on the host after a Ctrl-C (``interrupted_state``), as far as it answered."""

    known: bool
    running: bool
    config: str | None
    pid: int | None
    deploy_id: str | None
    status: str | None
    deploy_in_progress: p.Holder | None
    waited: str
    error: str


def interrupted_state(inv: Inventory, host: Host, progress: SweepProgress,
                      wait_s: float | None = None) -> HostState:
    """After Ctrl-C: wait (bounded; a second Ctrl-C stops waiting) for a deploy still finishing on the host, then say
    what runs there."""
    err = progress.console
    err.print(f"[yellow]interrupted[/yellow]: {host.name}: checking what is running "
              "(a deploy already started finishes or tears itself down on the host; Ctrl-C again to stop waiting)")
    limit = wait_s if wait_s is not None else min(host.timeouts.ready, 120.0) + 3 * host.timeouts.stop_grace
    state: HostState = {"known": False}
    try:
        with HostSession.open(inv, host) as s:
            end = time.monotonic() + limit
            while True:
                st = s.status(timeout=30)
                rec = st["record"]
                state = {"known": True, "running": bool(st["running"]),
                         "config": rec["config_name"] if rec else None, "pid": rec.get("pid") if rec else None,
                         "deploy_id": rec["deploy_id"] if rec else None, "status": rec["status"] if rec else None,
                         "deploy_in_progress": st["deploy_in_progress"]}
                if not st.get("deploy_in_progress") or time.monotonic() > end:
                    break
                time.sleep(0.5)
    except KeyboardInterrupt:
        state["waited"] = "stopped waiting (second Ctrl-C)"
    except SpecDeployError as e:
        state["error"] = e.message
    err.print(f"{host.name}: " + describe_state(state))
    return state


def describe_state(state: HostState) -> str:
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
