"""What a sweep will run: its configurations (each validated by building its plan), in which order, and the
prediction for the ones it holds back (``--predict``), from the rows measured so far. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from fabfile import flags
from fabfile.errors import FlagError
from fabfile.inventory.hosts import Host
from fabfile.inventory.launch_flags import FLAG_OF
from fabfile.plan import ranking
from fabfile.plan.argv import value_of
from fabfile.plan.deploy_plan import Options, build
from fabfile.plan.sweep_doc import LevelFigures, SweepDocument, SweepRow
from fabfile.plan.sweep_nccl import NcclCandidate, apply

if TYPE_CHECKING:
    from fabfile.plan.predict import PhaseCosts


@dataclass(frozen=True)
class Config:
    name: str
    steps: int
    topk: int
    draft_tokens: int | None
    opts: Options
    nccl: str = ""  # the NCCL candidate's name (sweep_nccl), "" for the host's own settings
    host: Host | None = None  # the host with that candidate's NCCL values (None: the host as inventoried)
    adaptive: bool = False  # SGLang's --speculative-adaptive: it moves the step count itself (steps = the start)
    plan_hash: str = ""  # the deploy plan's identity (same inventory and flags, same hash): what --resume checks


ADAPTIVE_FLAG = "--speculative-adaptive"


def adaptive_host(host: Host) -> Host:
    """``host`` launching with ``--speculative-adaptive`` (and ``--enable-metrics``, whose ``sglang:spec_num_steps``
    says which step count SGLang settled on)."""
    extra = [f for f in (ADAPTIVE_FLAG, "--enable-metrics") if f not in host.sglang_args]
    return replace(host, sglang_args=(*host.sglang_args, *extra))


def refusals(*, predict: bool, adaptive: bool, client: str | None, adaptive_length: bool) -> list[FlagError]:
    """What a sweep cannot measure as asked, one sentence per flag (all said at once with the other bad flags):
    ``--predict`` models a fixed step count from each request's accepted drafts; ``client`` None: not read yet."""
    found: list[FlagError] = []
    if predict and adaptive:
        found.append(FlagError("--adaptive: SGLang's adaptive mode moves its own step count, which --predict "
                               "cannot model; leave one of them out"))
    if predict and client == "sglang":
        found.append(FlagError("--client: --predict needs each request's meta_info and stream, which "
                               "sglang.bench_serving does not keep; use --client builtin or auto"))
    if adaptive_length and client == "sglang":
        found.append(FlagError("--client: an adaptive length needs the builtin client; give --num-prompts for "
                               "sglang.bench_serving"))
    return found


def check_keep(cfgs: list[Config], keep: str | None) -> None:
    """``--keep NAME`` names one of the sweep's configurations (FlagError, before any host is touched)."""
    if keep is not None and keep not in {c.name for c in cfgs}:
        raise FlagError(f"--keep: {flags.quote(keep, as_repr=True)} is not one of this sweep's configurations: "
                        f"{', '.join(c.name for c in cfgs)}")


def configs(host: Host, base: Options, steps: list[int], topks: list[int] | None,
            drafts: list[int] | None, nccl: list[NcclCandidate] | None = None, adaptive: bool = False) -> list[Config]:
    """The sweep's configurations, baseline first, each validated by building its plan (FlagError if invalid).

    With topk 1 SGLang forces draft tokens to steps+1, so ``drafts`` only multiplies topk > 1 configurations.
    With NCCL candidates every configuration is crossed with each (``name@candidate``): each its own server start.
    """
    out: list[Config] = []
    seen: set[str] = set()

    def add(opts: Options) -> None:
        cands: list[NcclCandidate | None] = list(nccl) if nccl else [None]
        for cand in cands:
            h = apply(host, cand) if cand is not None else host
            plan = build(h, opts)
            name = f"{plan.config_name}@{cand.name}" if cand is not None else plan.config_name
            if name in seen:
                continue
            seen.add(name)
            spec = _spec_of(plan.argv)
            out.append(Config(name, spec[0], spec[1], spec[2], opts, cand.name if cand else "",
                              h if cand is not None else None, plan_hash=plan.plan_hash))

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
    if adaptive:
        start = max([s for s in steps if s > 0] or [3])
        for cand in list(nccl) if nccl else [None]:
            h = adaptive_host(apply(host, cand) if cand is not None else host)
            opts = replace(base, steps=start, topk=1)
            plan = build(h, opts)  # validated like every configuration
            name = "eagle3-adaptive" + (f"@{cand.name}" if cand is not None else "")
            out.append(Config(name, start, 1, None, opts, cand.name if cand else "", h, adaptive=True,
                              plan_hash=plan.plan_hash))
    return out


def _spec_of(argv: tuple[str, ...]) -> tuple[int, int, int | None]:
    def flag(name: str) -> int | None:
        value = value_of(argv, name)
        return int(value) if value is not None else None

    steps = flag(FLAG_OF["speculative.steps"]) or 0
    return steps, flag(FLAG_OF["speculative.topk"]) or 1, flag(FLAG_OF["speculative.draft_tokens"])


def level_rows(rows: list[SweepRow], concurrency: int) -> list[SweepRow]:
    """The rows as measured at one concurrency (a flat row per configuration, like the first level's)."""
    out: list[SweepRow] = []
    for r in rows:
        lv = next((x for x in r.get("levels") or [] if x["concurrency"] == concurrency), None)
        base = r.copy()
        base.pop("levels", None)
        if lv is not None:
            figures = lv.copy()
            figures.pop("concurrency", None)
            base = {**base, **figures}
        elif r.get("ok"):
            base["ok"], base["tok_s"] = False, None
        out.append(base)
    return out


def measurement_order(cfgs: list[Config], predict: bool) -> tuple[list[Config], list[Config], list[str]]:
    """What to deploy up front, what to hold back for the prediction, and notes for the output.

    Without ``predict``: every configuration in order. With it: the baseline, the configurations the model cannot
    predict (each with why), then the largest chain step count (its histogram covers every count below it); the
    other chain configurations wait for the prediction (``next_loads``): with measured phases it names the winner
    to load (three loads in all); without them (no device timer) the smallest count is measured too, for the cycle
    fit, and then the winner (four)."""
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
    hi = plan[1]
    cands = sorted({c.nccl for c in cfgs})
    if len(cands) > 1:
        notes.append(f"{len(cands)} NCCL candidates: each measured at the baseline and at {hi} steps, its other step "
                     "counts predicted from its own measured phases; only the predicted winner across candidates "
                     "is loaded to confirm")
    return base + other + [c for c in chain if c.steps == hi], [c for c in chain if c.steps != hi], notes


def level_phases(level: LevelFigures) -> dict[str, float]:
    """The device timer's ms per decode forward, draft forward and verify pass in one level's figures (``phases``
    as bench reports them, averaged over the ranks); empty when the server ran without the timer."""
    ranks = [r for r in ((level.get("phases") or {}).get("ranks") or []) if isinstance(r, dict)]
    out: dict[str, float] = {}
    for key in ("decode", "draft_step", "verify"):
        vals = [float(r[key]["ms"]) for r in ranks if isinstance(r.get(key), dict) and r[key].get("ms")]
        if vals:
            out[key] = sum(vals) / len(vals)
    return out


def _phase_costs(at: list[SweepRow], spec: list[SweepRow]) -> PhaseCosts | None:
    """PhaseCosts at one level when every measured chain row has its draft forward and verify pass timed and
    either two step counts were measured or the baseline's decode forward was; None otherwise."""
    from fabfile.plan.predict import PhaseCosts

    runs = []
    for r in spec:
        ph = level_phases(r)
        if "draft_step" not in ph or "verify" not in ph:
            return None
        runs.append((int(r["steps"]), ph["draft_step"], ph["verify"], float(r.get("cycle_ms") or 0.0)))
    base = next((r for r in at if r.get("ok") and r.get("steps") == 0), None)
    decode = level_phases(base).get("decode") if base is not None else None
    if not runs or (len({s for s, *_ in runs}) < 2 and decode is None):
        return None
    return PhaseCosts(decode_ms=decode, runs=tuple(runs))


def predict_from_rows(rows: list[SweepRow], held_back: list[Config], levels: list[int],
                      output_len: int) -> dict[str, Any]:
    """The prediction for the held-back chain configurations at each level, and the predicted winner per level
    (over measured rows and predictions). ``method`` names the cycle model (measured phases, or the derived
    cycle fit); ``error`` says why there is none, and ``need`` then names the held-back configuration to measure
    first (the derived path's second step count).

    With NCCL candidates each candidate is predicted from its own rows (NCCL's choice moves decode, draft and
    verify alike: its device-timed phases hold it) and the winner per level is the best across candidates."""
    cands = sorted({str(r.get("nccl") or "") for r in rows} | {h.nccl for h in held_back})
    if len(cands) < 2:
        return _predict_one(rows, held_back, levels, output_len)
    parts = {n: _predict_one([r for r in rows if str(r.get("nccl") or "") == n],
                             [h for h in held_back if h.nccl == n], levels, output_len) for n in cands}
    bad = {n: p for n, p in parts.items() if p.get("error")}
    if bad:
        n, p = next(iter(bad.items()))
        need = [str(q["need"]) for q in bad.values() if q.get("need")]
        return {"error": f"NCCL candidate {n}: {p['error']}", "need": need[0] if need else None,
                "needs": need}
    first = parts[cands[0]]
    out: dict[str, Any] = {"histogram": first["histogram"], "histogram_source": first["histogram_source"],
                           "histogram_config": first["histogram_config"], "rows": [], "winners": {}, "fits": {},
                           "methods": {}, "by_nccl": {n: {"winners": p["winners"], "histogram_config":
                                                          p["histogram_config"]} for n, p in parts.items()}}
    for n, p in parts.items():
        out["rows"] += p["rows"]
        out["methods"].update(p["methods"])
        out["fits"].update({f"{c}@{n}": f for c, f in p["fits"].items()})
    for c in levels:
        best = [(float(p["winner_tok_s"][str(c)]), p["winners"][str(c)]) for p in parts.values()]
        out["winners"][str(c)] = max(best)[1]
    return out


def _predict_one(rows: list[SweepRow], held_back: list[Config], levels: list[int],
                 output_len: int) -> dict[str, Any]:
    from fabfile.plan.analysis import fit_cycle
    from fabfile.plan.predict import Measured, blend, predict_level
    from fabfile.remote.measure.metrics import add_histograms

    chain = [r for r in rows if r.get("ok") and r.get("measured", True) and r["steps"] > 0 and r.get("topk") == 1
             and (r.get("draft_tokens") in (None, r["steps"] + 1))]
    if not chain:
        return {"error": "no chain configuration was measured"}
    top = max(chain, key=lambda r: r["steps"])
    hist: list[int] = []
    source = None
    for lv in top.get("levels") or []:  # acceptance does not depend on the load: pool every level's passes
        if lv.get("accept_histogram"):
            hist = add_histograms(hist, list(lv.get("accept_histogram") or []))
            source = source or lv.get("accept_histogram_source")
    if not hist or sum(hist) == 0:
        return {"error": f"{top['config']} reported no accepted-drafts histogram (neither meta_info nor the stream)"}
    out: dict[str, Any] = {"histogram": hist, "histogram_source": source, "histogram_config": top["config"],
                           "rows": [], "winners": {}, "fits": {}, "methods": {}}
    names = {x["config"] for x in chain}
    for c in levels:
        at = level_rows(rows, c)
        # Below, each of ``spec`` has its tok/s and cycle (read with ``or 0.0`` only for the type's sake).
        spec = [r for r in at if r.get("ok") and r.get("tok_s") and r.get("cycle_ms") and r["config"] in names]
        costs = _phase_costs(at, spec)
        cycle_at: Callable[[int], float]
        if costs is not None:
            cycle_at = costs.cycle_at
            out["methods"][str(c)] = f"measured phases (SGLang device timer): {costs.model}"
            out["fits"][str(c)] = {"decode_ms": costs.decode_ms, "runs": [list(r) for r in costs.runs]}
        else:
            fit = fit_cycle([(int(r["steps"]), float(r.get("cycle_ms") or 0.0)) for r in spec])
            if fit is None:
                lo = min(held_back, key=lambda h: h.steps, default=None)
                return {"error": f"no device-timer phases and one chain step count at concurrency {c}: the cycle "
                                 "fit (derived) needs a second", "need": lo.name if lo is not None else None}
            cycle_at = fit.at
            out["methods"][str(c)] = "derived: cycle fit a + b·steps over the measured chain runs (no device timer)"
            out["fits"][str(c)] = {"base_ms": fit.base_ms, "per_step_ms": fit.per_step_ms}
        measured = [Measured(steps=int(r["steps"]), tok_s=ranking.tok_s(r), cycle_ms=float(r.get("cycle_ms") or 0.0),
                             ttft_ms=float(r.get("ttft_ms") or 0.0)) for r in spec]
        want = sorted({h.steps for h in held_back} | {m.steps for m in measured})
        preds, calib = predict_level(hist, int(top["steps"]), cycle_at, measured, want, output_len=output_len,
                                     concurrency=c)
        low: dict[int, float] = {}
        if costs is not None and not costs.two_counts:  # one measured count: a range, the point figure between
            lows, _ = predict_level(hist, int(top["steps"]), partial(costs.cycle_at, pessimistic=True), measured,
                                    want, output_len=output_len, concurrency=c)
            low = {p.steps: p.tok_s for p in lows}
        out["fits"][str(c)]["calibration"] = calib
        name_of = {h.steps: h.name for h in held_back} | {int(r["steps"]): r["config"] for r in spec}
        held_names = {h.name for h in held_back}
        measured_tok_s = {str(r["config"]): ranking.tok_s(r) for r in at if r.get("ok") and r.get("tok_s") and
                          r.get("measured", True)}
        figures: list[tuple[float, float, float, str]] = []  # (point, optimistic, pessimistic, name)
        for p in preds:
            name = name_of[p.steps]
            row: dict[str, Any] = {"config": name, **p.as_dict()}
            if p.steps in low:
                row.update(tok_s_high=p.tok_s, tok_s_low=low[p.steps], tok_s=blend(p.tok_s, low[p.steps]))
            out["rows"].append(row)
            if name in held_names:
                figures.append((row["tok_s"], p.tok_s, low.get(p.steps, p.tok_s), name))
        best_measured = max(measured_tok_s.values(), default=0.0)
        floor = max([best_measured] + [f[2] for f in figures])
        # The predicted winner is the best point figure over the measured rows and the held-back ones: "every step
        # count loses to the baseline" is a prediction too, and then nothing more is loaded. A held-back figure
        # within the best measured row's own interval (its tok/s ± CI, measured by the tool) cannot be told from
        # it by prediction: it counts as a candidate. A candidate must also be able to win at all (its optimistic
        # figure beats every pessimistic one).
        tie = best_measured * (1.0 - _measured_ci(at, measured_tok_s))
        can_win = [f for f in figures if f[1] >= floor and f[0] >= tie]
        win = max(can_win) if can_win else None
        out["winners"][str(c)] = win[3] if win else max(measured_tok_s, key=lambda n: measured_tok_s[n])
        out.setdefault("winner_tok_s", {})[str(c)] = win[0] if win else best_measured
    return out


# The interval taken for a measured row that reports none (a fixed --num-prompts): the adaptive length's default.
DEFAULT_CI = 0.02


def _measured_ci(at: list[SweepRow], measured_tok_s: dict[str, float]) -> float:
    """The relative 95 % interval of the best measured row's tok/s (``tok_s_ci``, the tool's), else DEFAULT_CI."""
    if not measured_tok_s:
        return 0.0
    best = max(measured_tok_s, key=lambda n: measured_tok_s[n])
    ci = next((r.get("tok_s_ci") for r in at if r.get("config") == best), None)
    return float(ci) if isinstance(ci, (int, float)) and 0 <= ci < 1 else DEFAULT_CI


def next_loads(pred: dict[str, Any], held_back: list[Config], first_level: int) -> list[Config]:
    """The held-back configurations to load next: the derived path's second step count, or the predicted winners
    not measured yet (the first level's last, so that it is the one left running); none when every winner was
    measured. After an error without ``need``, every held-back configuration (nothing can be predicted)."""
    if pred.get("error"):
        need = set(pred.get("needs") or ([pred["need"]] if pred.get("need") else []))
        return [c for c in held_back if c.name in need] if need else list(held_back)
    names = set(pred["winners"].values())
    out = [c for c in held_back if c.name in names]
    out.sort(key=lambda c: c.name == pred["winners"].get(str(first_level)))
    return out


def add_predictions(doc: SweepDocument, cfgs: list[Config]) -> None:
    """Table rows for the configurations predicted and not measured, and each measured row's prediction."""
    pred = doc.get("prediction") or {}
    if not pred.get("rows"):
        return
    levels = doc["concurrency_levels"]
    by = {(p["config"], p["concurrency"]): p for p in pred["rows"]}
    measured = {r["config"] for r in doc["rows"] if r.get("measured")}
    before = pred.get("before_load") or {}  # a measured row's prediction as made before it was loaded
    for r in doc["rows"]:
        if r["config"] in before:
            r["predicted_tok_s"] = before[r["config"]].get(str(levels[0]))
            for lv in r.get("levels") or []:
                lv["predicted_tok_s"] = before[r["config"]].get(str(lv["concurrency"]))
            continue
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
        predicted: list[LevelFigures] = [
            {"concurrency": lvl, "tok_s": by[(c.name, lvl)]["tok_s"], "predicted_tok_s": by[(c.name, lvl)]["tok_s"],
             "accept_len": by[(c.name, lvl)]["accept_len"], "cycle_ms": by[(c.name, lvl)]["cycle_ms"]}
            for lvl in levels if (c.name, lvl) in by]
        first = predicted[0]
        doc["rows"].append({"config": c.name, "steps": c.steps, "topk": c.topk, "draft_tokens": c.draft_tokens,
                            "ok": True, "measured": False, "tok_s": first.get("tok_s"),
                            "predicted_tok_s": first.get("tok_s"), "accept_len": first.get("accept_len"),
                            "cycle_ms": first.get("cycle_ms"), "levels": predicted})
    order = {n: i for i, n in enumerate(doc["configs"])}
    doc["rows"].sort(key=lambda r: order.get(r["config"], 1 << 30))
