"""The sweep's winner rule, pure: per concurrency level the fastest measured configuration beyond its interval (a tie
broken by ``plan.ranking``; among those meeting the limits, with ``--max-ttft`` and the like), the baseline and each
row's speedup over it, and which configuration to leave running. ``commands/sweep`` measures; this decides, on
rows shaped as its ``measure`` writes them."""

from __future__ import annotations

from fabfile.plan import ranking
from fabfile.plan.sla import Limits, broken
from fabfile.plan.sweep_doc import Choice, Decision, SweepRow
from fabfile.plan.sweep_plan import level_rows


def _mark_limits(rows: list[SweepRow], at: list[SweepRow], c: int, limits: Limits) -> None:
    """Write each measured configuration's broken limits at level ``c`` on its level entry and (first level) row."""
    for r in at:
        if not (r.get("ok") and r.get("measured", True)):
            continue
        broke = broken(r, limits)
        row = next((x for x in rows if x["config"] == r["config"]), None)
        lv = next((x for x in (row.get("levels") or [] if row else []) if x["concurrency"] == c), None)
        if lv is not None:
            lv["sla_broke"] = broke
        if row is not None and (lv is None or row["levels"][0] is lv):
            row["sla_broke"] = broke


def choose(rows: list[SweepRow], keep: str | None, levels: list[int] | None = None,
           limits: Limits | None = None, running: str | None = None) -> Choice:
    """The winner per concurrency level, the baseline, speedups, and what to leave running: the first level's
    winner (list the load you serve first) or ``keep``. Predicted rows never win: a winner was measured. The winner
    is the fastest only beyond its interval; rows within it are a tie, broken by ``plan.ranking``'s stated rule
    (``running``: what the sweep left running, the second tie-break), each level's decision in ``ranking``. With
    ``limits``, a winner is chosen among the configurations meeting them at that level (None: none did)."""
    levels = levels or [next((lv["concurrency"] for r in rows for lv in r.get("levels") or []), 1)]
    limits = limits or Limits()
    winners: dict[str, str | None] = {}
    decisions: dict[str, Decision | None] = {}
    for c in levels:
        at = level_rows(rows, c) if any(r.get("levels") for r in rows) else rows
        ok = [r for r in at if r.get("ok") and r.get("tok_s") and r.get("measured", True)]
        base = next((r for r in ok if r["steps"] == 0), None)
        if limits.any:
            _mark_limits(rows, at, c, limits)
        meeting = [r for r in ok if not broken(r, limits)] if limits.any else ok
        decision = ranking.rank(meeting, running)
        decisions[str(c)] = decision
        winners[str(c)] = decision["winner"] if decision else None
        for r in rows:
            lv = next((x for x in r.get("levels") or [] if x["concurrency"] == c), None)
            if lv is not None:
                lv["speedup"] = ranking.tok_s(lv) / ranking.tok_s(base) if base and lv.get("tok_s") else None
    ok = [r for r in rows if r.get("ok") and r.get("tok_s") and r.get("measured", True)]
    base = next((r for r in ok if r["steps"] == 0), None)
    for r in rows:
        r["speedup"] = (ranking.tok_s(r) / ranking.tok_s(base)) if (base and r.get("ok") and r.get("tok_s")) else None
    winner = next((r for r in ok if r["config"] == winners[str(levels[0])]), None)
    kept = winner
    note = None
    if limits.any and winner is None and ok:
        # none meets the limits: a clear result (exit 1); the fastest stays up rather than nothing
        kept = max(ok, key=ranking.tok_s)
        note = f"no configuration meets {limits.describe()}; left running the fastest, {kept['config']}"
    if keep is not None:
        wanted = next((r for r in rows if r["config"] == keep), None)
        if wanted is not None and wanted.get("ok"):
            kept = wanted  # measured, or predicted only: then it is deployed now
        else:
            note = f"--keep {keep} failed during the sweep; keeping the winner instead"
    out: Choice = {"winner": winner["config"] if winner else None,
                   "baseline_tok_s": base["tok_s"] if base else None,
                   "baseline_wins": bool(winner and base and winner is base),
                   "kept": kept["config"] if kept else None, "keep_note": note, "winners": winners,
                   "ranking": decisions}
    if limits.any:
        out["sla"] = {**limits.as_dict(), "describe": limits.describe(),
                      "unmet_levels": [c for c in levels if winners[str(c)] is None]}
    predicted = winner.get("predicted_tok_s") if winner is not None else None
    if winner is not None and predicted is not None:
        out["winner_predicted_tok_s"] = out["predicted_tok_s"] = predicted
        out["winner_measured_tok_s"] = out["measured_tok_s"] = winner["tok_s"]
    return out
