"""Which measured configuration wins, and when it does not: a winner is named only when its tok/s beats every other
one beyond both intervals (each row's 95 % interval, the tool's ``tok_s_ci``; DEFAULT_CI where a fixed
``--num-prompts`` gave none). Otherwise the rows whose intervals overlap the fastest one's are a tie, and the tie is
broken by a stated rule, in this order: fewer changed variables (no speculation and no NCCL variable set is fewest:
a change that is not shown to help is not made), the configuration already running (no model load to keep it),
fewer draft tokens (less verify work per cycle), and only then the higher measured tok/s.

The sweep's table, conclusion and JSON, its NCCL-candidate line and ``inv analyze --sweep`` all read ``rank``. Pure."""

from __future__ import annotations

from fabfile.plan.sweep_doc import Decision, LevelFigures, SweepRow

DEFAULT_CI = 0.02  # as sweep_plan and nccl_skip take a row without its interval

# the spec flags a speculative configuration sets over the baseline: algorithm, steps, topk, draft tokens
SPEC_VARIABLES = 4

TIE_BREAKS = ("fewer changed variables", "the configuration already running", "fewer draft tokens",
              "the higher measured tok/s")


def tok_s(row: LevelFigures) -> float:
    """The row's measured tok/s (0 for a row without one: the callers rank only rows that have it)."""
    return float(row.get("tok_s") or 0.0)


def ci_of(row: SweepRow) -> float:
    ci = row.get("tok_s_ci")
    return float(ci) if isinstance(ci, (int, float)) and 0 <= ci < 1 else DEFAULT_CI


def changed_variables(row: SweepRow) -> int:
    """How many launch settings the configuration changes from a plain server: the speculative flags (none for the
    baseline) and the NCCL variables its candidate sets (``nccl_vars``, written by the sweep)."""
    return (SPEC_VARIABLES if row.get("steps") else 0) + int(row.get("nccl_vars") or 0)


def draft_tokens(row: SweepRow) -> int:
    if not row.get("steps"):
        return 0
    return int(row.get("draft_tokens") or int(row["steps"]) + 1)


def ties_with(best: SweepRow, row: SweepRow) -> bool:
    """Overlapping intervals: ``row``'s upper end reaches ``best``'s lower end."""
    return tok_s(row) * (1 + ci_of(row)) >= tok_s(best) * (1 - ci_of(best))


def rank(rows: list[SweepRow], running: str | None = None) -> Decision | None:
    """The decision among ``rows`` (measured, each with ``tok_s``): ``winner`` (the fastest when ``clear``, else
    the tie-break's choice), ``fastest``, ``tied`` (the names within the fastest one's interval, fastest first),
    ``within`` (the widest interval among them, a fraction), ``tie_break`` (the rule that chose, None when
    clear) and ``tok_s`` (the tied rows' measured figures). None without a row."""
    rows = [r for r in rows if r.get("tok_s")]
    if not rows:
        return None
    best = max(rows, key=tok_s)
    tied = sorted((r for r in rows if r is best or ties_with(best, r)), key=lambda r: -tok_s(r))
    if len(tied) == 1:
        return {"winner": best["config"], "fastest": best["config"], "clear": True, "tied": [best["config"]],
                "within": ci_of(best), "tie_break": None, "tok_s": {best["config"]: tok_s(best)}}

    def key(r: SweepRow) -> tuple[float, ...]:
        return (changed_variables(r), r["config"] != running, draft_tokens(r), -tok_s(r))

    order = sorted(tied, key=key)
    first, second = key(order[0]), key(order[1])
    rule = next(i for i in range(len(first)) if first[i] != second[i]) if first != second else len(first) - 1
    return {"winner": order[0]["config"], "fastest": best["config"], "clear": False,
            "tied": [r["config"] for r in tied], "within": max(ci_of(r) for r in tied), "tie_break": TIE_BREAKS[rule],
            "tok_s": {r["config"]: tok_s(r) for r in tied}}


def sentence(decision: Decision) -> str:
    """``tie within ±2.0 %: a 102.0, b 99.8 tok/s; chose a (tie-break: fewer draft tokens)`` or ``winner: a,
    102.0 tok/s, beyond its ±1.9 % interval``."""
    tok_s = decision.get("tok_s") or {}
    if decision["clear"]:
        w = decision["winner"]
        return f"winner: {w}, {tok_s[w]:.1f} tok/s, beyond its ±{decision['within']:.1%} interval"
    names = ", ".join(f"{n} {tok_s[n]:.1f}" for n in decision["tied"])
    return (f"tie within ±{decision['within']:.1%}: {names} tok/s; chose {decision['winner']} "
            f"(tie-break: {decision['tie_break']})")
