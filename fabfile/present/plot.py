"""The sweep's optional plot (``sweep.png``, with the ``plot`` extra: matplotlib): tok/s and accept length against
steps per concurrency level, and where a cycle's time goes as stacked bars. Only the figure; the command that writes
the sweep's files saves it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabfile.plan.sweep_doc import SweepDocument, SweepRow
from fabfile.plan.sweep_plan import level_rows
from fabfile.present.sweep_report import baseline_step, concurrency_levels

if TYPE_CHECKING:
    from matplotlib.figure import Figure


_BARS = (("draft", "draft", "#4c72b0"), ("verify", "verify", "#dd8452"), ("draft_extend", "draft-extend", "#55a868"),
         ("other", "other", "#bbbbbb"))


def sweep_figure(doc: SweepDocument) -> Figure | None:
    """One panel per concurrency level: tok/s (left axis) and accept length (right axis) against steps, one line per
    topk; measured points filled, predicted ones hollow; the baseline horizontal; the level's winner circled; and
    with measured phases, a panel of stacked bars. None without matplotlib (the package's optional ``plot`` extra).
    The command that writes the sweep's files saves it (``sweep.png``)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    levels = concurrency_levels(doc) or [int((doc.get("params") or {}).get("concurrency") or 1)]
    winners = doc.get("winners") or {str(levels[0]): doc.get("winner")}
    bars = has_phases(doc)
    # The object API, not pyplot: no global figure state to close, no backend to choose before saving.
    fig = Figure(figsize=(7 * (len(levels) + bars), 4.2), dpi=110)
    axes = fig.subplots(1, len(levels) + bars, squeeze=False)
    all_rows = doc.get("rows") or []
    if bars:
        phase_bars(axes[0][-1], doc)
    for ax, c in zip(axes[0][:len(levels)], levels, strict=True):
        at = level_rows(all_rows, c) if any(r.get("levels") for r in all_rows) else all_rows
        rows = [r for r in at if r.get("ok") and r.get("tok_s")]
        spec = [r for r in rows if r["steps"] > 0]
        ax2 = ax.twinx()
        for label, rs in plot_series(spec):
            line = ax.plot([r["steps"] for r in rs], [r["tok_s"] for r in rs], label=f"tok/s ({label})")[0]
            meas = [r for r in rs if r.get("measured", True)]
            pred = [r for r in rs if not r.get("measured", True)]
            ax.scatter([r["steps"] for r in meas], [r["tok_s"] for r in meas], color=line.get_color(), zorder=4)
            if pred:
                ax.scatter([r["steps"] for r in pred], [r["tok_s"] for r in pred], facecolors="white",
                           edgecolors=line.get_color(), zorder=4, label=f"predicted ({label})")
            al = [(r["steps"], r["accept_len"]) for r in rs if r.get("accept_len") is not None]
            if al:
                ax2.plot([x for x, _ in al], [y for _, y in al], marker="s", linestyle="--", alpha=0.5,
                         label=f"accept len ({label})")
        for i, b in enumerate(r for r in rows if r["steps"] == 0):  # one per NCCL candidate
            ax.axhline(b["tok_s"], color="grey", linestyle=(":", "-.", "--")[i % 3],
                       label=f"baseline{' NCCL ' + b['nccl'] if b.get('nccl') else ''} {b['tok_s']:.1f} tok/s")
        w = next((r for r in rows if r["config"] == winners.get(str(c))), None)
        if w is not None:
            ax.scatter([w["steps"]], [w["tok_s"]], s=160, facecolors="none", edgecolors="red", zorder=5,
                       label=f"winner {w['config']}")
        ax.set_xlabel("speculative steps")
        ax.set_ylabel("output tok/s")
        ax2.set_ylabel("accept length")
        accept_axis(ax2, [a for r in spec if (a := r.get("accept_len")) is not None])
        ax.set_xticks(sorted({r["steps"] for r in rows} | {0}))
        ax.set_title(f"{doc['host']} sweep {doc['sweep_id']}, concurrency {c}")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def accept_axis(ax2: Any, accept: list[float]) -> None:
    """The accept-length axis from 0, its top above the longest: both axes autoscaled put each one's lowest point at
    the same height, so the shortest accept length's marker sat on the baseline's line, as if the baseline had one
    (it has none). From 0 the shortest (at least 1: the verified token) sits well above the bottom margin where a
    baseline below every configuration's tok/s is drawn."""
    if accept:
        ax2.set_ylim(0, max(accept) * 1.15)


def plot_series(spec: list[SweepRow]) -> list[tuple[str, list[SweepRow]]]:
    """The sweep plot's lines: one per topk (and draft tokens above topk 1) and NCCL candidate, each a label and
    its rows by step count."""
    groups: dict[tuple[int, int, str], list[SweepRow]] = {}
    for r in spec:
        key = (int(r["topk"]), int(r["draft_tokens"] or 0) if r["topk"] > 1 else 0, str(r.get("nccl") or ""))
        groups.setdefault(key, []).append(r)
    out = []
    for (k, d, nccl), rs in sorted(groups.items()):
        label = f"topk {k}" + (f", {d} draft tokens" if d else "") + (f", NCCL {nccl}" if nccl else "")
        out.append((label, sorted(rs, key=lambda r: r["steps"])))
    return out


def has_phases(doc: SweepDocument) -> bool:
    return any(((r.get("phases") or {}).get("ranks")) for r in doc.get("rows") or [] if r.get("ok"))


def phase_bars(ax: Any, doc: SweepDocument) -> None:
    """One stacked bar per speculative configuration (draft / verify / draft-extend / other, ms per cycle, measured
    by SGLang's device timer; other = the cycle − those), the baseline's decode step as a horizontal line."""
    from fabfile.plan.explain import row_anatomy, tag

    rows = [r for r in doc.get("rows") or [] if r.get("ok") and r.get("steps") and (r.get("phases") or {}).get("ranks")]
    names = [r["config"] for r in rows]
    bottoms = [0.0] * len(rows)
    for key, label, color in _BARS:
        heights = [float((row_anatomy(r).get(key) or {}).get("ms") or 0.0) for r in rows]
        ax.bar(names, heights, bottom=bottoms, label=label, color=color)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    base = baseline_step(doc)
    if base:
        ax.axhline(float(base["ms"]), color="black", linestyle="--",
                   label=f"baseline decode {float(base['ms']):.2f} ms [{tag(str(base.get('source')))}]")
    # Short: the long label ran past the figure's top and bottom, cut at both ends; the sources go in the title.
    ax.set_ylabel("ms per cycle")
    ax.set_title("where a cycle's time goes\n(phases: SGLang device timer; other: cycle − phases)", fontsize=10)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    ax.legend(fontsize=7, loc="best")
