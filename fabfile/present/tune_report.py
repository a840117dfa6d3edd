"""``inv tune``'s output: the path as a table (iteration, finding with its figures and sources, change, evidence it
engaged, before/after with each side's spread, kept or reverted and why), the final configuration as an inventory
diff, why the loop stopped, and the objective per iteration with spread bars (``tune.png``, with the ``plot``
extra)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _arm(values: list[float], spread: float) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} tok/s [tool] (n={len(values)}, spread {spread * 100:.1f} %)"


def path_rows(doc: dict[str, Any]) -> list[dict[str, str]]:
    return [{"iter": str(s["iteration"]), "finding": f"{s['rule']}: {s['finding']}",
             "change": " ".join(s["change"]) + f" (predicted −{s['predicted_ms']:.2f} ms/cycle [derived])",
             "engaged": s.get("evidence") or "-", "before": _arm(s.get("before") or [], s.get("before_spread", 0.0)),
             "after": _arm(s.get("after") or [], s.get("after_spread", 0.0)),
             "outcome": f"{s['outcome']}: {s['why']}"} for s in doc.get("steps") or []]


def render(doc: dict[str, Any]) -> str:
    lines = []
    for r in path_rows(doc):
        lines.append(f"#{r['iter']}  {r['finding']}")
        for k in ("change", "engaged", "before", "after", "outcome"):
            lines.append(f"    {k:8} {r[k]}")
    diff = doc.get("diff") or []
    lines.append("final configuration (inventory diff): " + (" ".join(diff) if diff else "unchanged"))
    lines.append(f"stopped: {doc.get('stop')}" + (f" — {doc['stop_reason']}" if doc.get("stop_reason") else ""))
    if sla := doc.get("sla"):
        met = "met" if sla.get("best_met") else "missed (" + ", ".join(sla.get("best_broken") or []) + ")"
        lines.append(f"SLA {sla['describe']} [tool: bench timings, medians]: {met} by the final configuration's "
                     f"latest deploys" + (" (the objective)" if doc.get("objective") == "sla" else " (a guard)"))
    if doc.get("restored"):
        lines.append(doc["restored"])
    lines.append(f"model loads: {doc.get('loads', 0)}")
    for o in doc.get("others") or []:
        if "error" in o:
            lines.append(f"{o['host']} (not tuned, not deployed): could not read what it runs: {o['error']}")
            continue
        change = " ".join(o["changes"]) or "nothing: it runs the final configuration"
        lines.append(f"{o['host']} (not tuned, not deployed) would get: {change} — against {o['source']}")
    return "\n".join(lines)


def inventory_diff(doc: dict[str, Any]) -> dict[str, Any]:
    """What ``--write`` writes: the final configuration's flags and env against the start's. A speculative flag
    (steps, topk, draft tokens) is the host's ``speculative`` field, as the tune deployed it: the inventory refuses
    it in ``sglang_args``."""
    from fabfile.inventory.launch_flags import row_of

    start, best = doc["start"], doc["best"]

    def field(flag: str) -> str | None:
        row = row_of(flag)
        return row.field.partition(".")[2] if row is not None and row.field.startswith("speculative.") else None

    changed = {k: v for k, v in best["flags"].items() if start["flags"].get(k, object()) != v}
    out: dict[str, Any] = {"sglang_args": {k: v for k, v in changed.items() if field(k) is None},
                           "remove_sglang_args": sorted(k for k in set(start["flags"]) - set(best["flags"])
                                                        if field(k) is None),
                           "env": {k: v for k, v in best["env"].items() if start["env"].get(k) != v}}
    if spec := {f: int(v) for k, v in changed.items() if (f := field(k)) is not None and v is not None}:
        out["speculative"] = spec
    return out


def tune_figure(doc: dict[str, Any]) -> Figure | None:
    """The objective per iteration: each arm's median with its min–max bar, kept changes filled. None without
    matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    steps = [s for s in doc.get("steps") or [] if s.get("before")]
    fig = Figure(figsize=(max(5, 1.2 * len(steps) + 3), 4), dpi=110)
    ax = fig.subplots()
    for s in steps:
        i = s["iteration"]
        for values, dx, color in ((s["before"], -0.12, "#4c72b0"), (s.get("after") or [], 0.12, "#dd8452")):
            if not values:
                continue
            med = statistics.median(values)
            ax.errorbar([i + dx], [med], yerr=[[med - min(values)], [max(values) - med]], fmt="o", color=color,
                        mfc=color if s["outcome"] == "kept" or dx < 0 else "white", capsize=4)
    ax.set_xlabel("iteration (blue: incumbent, orange: candidate; filled: kept)")
    ax.set_ylabel("tok/s [tool] (median, min–max over deploys)")
    ax.set_xticks([s["iteration"] for s in steps], [s["remedy"] for s in steps], rotation=20)
    fig.tight_layout()
    return fig
