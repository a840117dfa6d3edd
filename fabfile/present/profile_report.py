"""What ``inv profile`` prints for a person: per configuration and rank, the anatomy of one speculative cycle
(draft ms per forward × forwards, verify, draft-extend, other, cycle, accept length) with each figure's source; the
timer's and the trace's figures side by side with their difference; inside verify/decode/draft, the time by kernel
class, the all-reduces and whether the phase ran in a CUDA graph. The result dict itself is the JSON form."""

from __future__ import annotations

from typing import Any

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.text import Text

from fabfile.present.tables import DASH, Col, cell, fit_table, fits
from fabfile.present.text import terminal_safe
from fabfile.remote.protocol import KERNEL_CLASSES, ProfileDocument, ProfileRank
from fabfile.results.hosts import HostsResult

_ROWS = (("draft_step", "draft forward"), ("draft", "draft (all forwards)"), ("verify", "verify"),
         ("draft_extend", "draft-extend"), ("other", "other (scheduler/CPU)"), ("cycle", "cycle"),
         ("accept_length", "accept length (tokens/cycle)"), ("decode", "decode step"))


def _cell(fig: Any, key: str) -> str:
    if not isinstance(fig, dict):
        return DASH
    if key == "accept_length":
        return f"{fig['ms']:.2f}"
    return f"{fig['ms']:.3f} ms"


def _anatomy_table(width: int, timer: Any, traced: Any, diff: dict[str, float]) -> list[RenderableType]:
    """The anatomy table, its source column whole: beside the figures when it fits, else numbered notes under the
    table, each on a line of its own (folded into the column it read `SGLang` / `meta_info: Σ` / `completion_tok`)."""
    cols = [Col("phase"), Col("device timer", justify="right"), Col("trace", justify="right"),
            Col("trace − timer", justify="right"), Col("source (count)", style="dim")]
    rows = []
    for key, label in _ROWS:
        a = (timer or {}).get(key)
        b = (traced or {}).get(key)
        if a is None and b is None:
            continue
        if key == "draft" and isinstance(a or b, dict):
            n = max(0, int((timer or traced or {}).get("steps") or 0) - 1)
            label = f"draft ({n} forwards)" if n else label
        said = [f"{f['source']} ({f['count']}{', ' + f['note'] if f.get('note') else ''})"
                for f in (a, b) if isinstance(f, dict)]
        srcs = "; ".join(dict.fromkeys(said))  # one source measured for both columns is named once
        d = diff.get(key)
        rows.append([label, _cell(a, key), _cell(b, key), cell(d, "{:+.1f} %"), escape(srcs)])
    if fits(width, cols, rows, boxed=False):
        return [fit_table(width, cols, rows, boxed=False)]
    notes = list(dict.fromkeys(r[-1] for r in rows))
    numbered = [[*r[:-1], f"[{notes.index(r[-1]) + 1}]"] for r in rows]
    return [fit_table(width, [*cols[:-1], Col("source", style="dim")], numbered, boxed=False),
            *(Text.from_markup(f"  [dim][{i}] {n}[/dim]", emoji=False) for i, n in enumerate(notes, 1))]


def _kernels_table(width: int, kernels: dict[str, Any]) -> RenderableType:
    cols = [Col("phase"), Col("span", justify="right"),
            *[Col(c.replace("_", "/") if c != "idle_gap" else "idle", justify="right")
              for c in (*KERNEL_CLASSES, "idle_gap")],
            Col("all-reduces", justify="right"), Col("launch", key=False)]
    rows = []
    for phase in ("decode", "draft", "verify", "draft_extend", "between"):
        k = kernels.get(phase)
        if not k:
            continue
        cls = k["classes_ms"]
        ar = DASH if not k["allreduce_calls"] else \
            f"{k['allreduce_calls']:g} × {k['allreduce_mean_us']:.0f} µs"
        launch = k["launch"] if phase != "between" else DASH
        if launch == "eager":
            launch += f" ({k['kernel_launches']:g} launches, {k['launch_gap_ms']:.2f} ms gaps)"
        elif launch == "cuda graph":
            launch += f" ({k['graph_launches']:g} graph launches)"
        rows.append([phase if phase != "between" else "between phases", f"{k['span_ms']:.3f}",
                     *[f"{cls.get(c, 0.0):.3f}" for c in (*KERNEL_CLASSES, "idle_gap")], ar, launch])
    return fit_table(width, cols, rows, "inside each phase, per pass (profiler trace)", boxed=False, title_style="dim")


AGREE_PCT = 2.0  # ranks whose every phase is within this of the first rank's print as one table


def _figure(rank: ProfileRank, key: str) -> float | None:
    for anatomy in (rank.get("timer"), rank.get("trace")):
        fig = anatomy.get(key) if anatomy else None
        if isinstance(fig, dict) and isinstance(fig.get("ms"), (int, float)):
            return float(fig["ms"])
    return None


def figure_spread_pct(ranks: list[ProfileRank], key: str) -> float:
    """How far apart the ranks' figures of one phase are: (largest − smallest) / smallest, in %."""
    values = [v for v in (_figure(rank, key) for rank in ranks) if v is not None]
    if len(values) < 2 or min(values) <= 0:
        return 0.0
    return (max(values) - min(values)) / min(values) * 100


def _agrees(rank: ProfileRank, first: ProfileRank) -> bool:
    has_kernels = bool((rank.get("trace") or {}).get("kernels")) or bool((first.get("trace") or {}).get("kernels"))
    return not has_kernels and all(figure_spread_pct([first, rank], key) <= AGREE_PCT for key, _ in _ROWS) \
        and all((_figure(rank, key) is None) == (_figure(first, key) is None) for key, _ in _ROWS)


def ranks_apart(ranks: list[ProfileRank], *, verbose: bool) -> tuple[list[ProfileRank],
                                                                      dict[int, list[ProfileRank]]]:
    """Which ranks get a table of their own: the first, and each rank whose figures differ from it by more than
    :data:`AGREE_PCT` (or all, with ``verbose``); the ranks that agree are named under the first's table. (A traced
    rank keeps its own kernel table.) Returns the ranks shown and, by the shown rank's ``id``, those it stands for."""
    if verbose or len(ranks) < 2:
        return list(ranks), {}
    first, *rest = ranks
    together = [rank for rank in rest if _agrees(rank, first)]
    shown = [first, *(rank for rank in rest if rank not in together)]
    return shown, ({id(first): together} if together else {})


def rank_span(ranks: list[Any]) -> str:
    """``0–7`` for a run of ranks, ``0, 2, 5`` otherwise."""
    numbers = [int(x) for x in ranks if isinstance(x, int)]
    if len(numbers) > 2 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"{numbers[0]}–{numbers[-1]}"
    return ", ".join(str(x) for x in ranks)


def print_profile(r: ProfileDocument, console: Console, *, verbose: bool = False) -> None:
    spec = r.get("speculative") or {}
    graph = r.get("cuda_graph")
    b = r.get("bench") or {}
    console.print(f"[bold]{r.get('host')}[/bold] config [bold]{terminal_safe(str(r.get('config_name')))}[/bold] "
                  f"(SGLang {r.get('sglang_version')}, deploy {r.get('deploy_id')})  "
                  + (f"{spec.get('algorithm')} steps {spec.get('steps')} topk {spec.get('topk')} draft tokens "
                     f"{spec.get('draft_tokens')}" if spec.get("algorithm") else "baseline (no speculation)")
                  + f"  CUDA graphs {'on' if graph else 'off' if graph is False else 'unknown'}")
    if b:
        console.print(f"  load: {b.get('completed')} requests, {b.get('output_tok_s') or 0:.1f} tok/s over "
                      f"{b.get('duration_s') or 0:.2f} s [dim](the tool's load generator; the host's own profile "
                      f"took {r.get('wall_s', 0):.2f} s)[/dim]")
    if not r.get("timer"):
        console.print(f"  [yellow]no device timer[/yellow]: {r.get('timer_missing')}")
    ranks = [rank for rank in r.get("ranks") or [] if rank.get("timer") or rank.get("trace")]
    shown, agree = ranks_apart(ranks, verbose=verbose)
    for rank in ranks:
        if rank not in shown:
            continue
        timer, traced = rank.get("timer"), rank.get("trace")
        others = agree.get(id(rank))
        if others:
            label = rank_span([rank.get("rank"), *(o.get("rank") for o in others)])
            spread = max((figure_spread_pct([rank, *others], key) for key, _ in _ROWS), default=0.0)
            console.print(f"  [bold]ranks {label}[/bold] agree within {spread:.1f} % "
                          f"[dim](every phase of each rank within {AGREE_PCT:g} % of rank {rank.get('rank')}'s, "
                          "which is shown; --verbose prints every rank)[/dim]")
        else:
            console.print(f"  [bold]rank {rank.get('rank')}[/bold]")
        for part in _anatomy_table(console.width, timer, traced, rank.get("difference_pct") or {}):
            console.print(part, soft_wrap=isinstance(part, Text))
        kernels = (traced or {}).get("kernels") or {}
        if kernels:
            console.print(_kernels_table(console.width, kernels), soft_wrap=False)
        for each in [rank, *(others or [])]:
            if each.get("local_file") or each.get("trace_file"):
                console.print(f"  [dim]trace TP{each.get('rank')}: {each.get('local_file') or each.get('trace_file')} "
                              f"({each.get('trace_bytes') or 0} bytes; opens in Perfetto)[/dim]", soft_wrap=True)
    derived = r.get("derived")
    if derived:
        console.print("  [bold]derived[/bold] (no measured phases on this server):")
        for part in _anatomy_table(console.width, derived, None, {}):
            console.print(part, soft_wrap=isinstance(part, Text))
    console.print("  [dim]all-reduce kernel names say which implementation ran, never NCCL's algorithm or "
                  "protocol (NCCL 2.19+ names every all-reduce kernel RING_LL)[/dim]")


def print_result(result: HostsResult[ProfileDocument], console: Console, *, verbose: bool = False) -> None:
    for o in result.outcomes:
        if o.ok:
            print_profile(o.answer, console, verbose=verbose)
