"""What ``inv profile`` prints for a person: per configuration and rank, the anatomy of one speculative cycle
(draft ms per forward × forwards, verify, draft-extend, other, cycle, accept length) with each figure's source; the
timer's and the trace's figures side by side with their difference; inside verify/decode/draft, the time by kernel
class, the all-reduces and whether the phase ran in a CUDA graph. The result dict itself is the JSON form."""

from __future__ import annotations

from typing import Any

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.text import Text

from fabfile.present.output import terminal_safe
from fabfile.present.tables import DASH, Col, cell, fit_table, fits
from fabfile.remote.protocol import KERNEL_CLASSES
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
            *(Text.from_markup(f"  [dim][{i}] {n}[/dim]") for i, n in enumerate(notes, 1))]


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


def print_profile(r: dict[str, Any], console: Console) -> None:
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
    for rank in r.get("ranks") or []:
        timer, traced = rank.get("timer"), rank.get("trace")
        if not timer and not traced:
            continue
        console.print(f"  [bold]rank {rank.get('rank')}[/bold]")
        for part in _anatomy_table(console.width, timer, traced, rank.get("difference_pct") or {}):
            console.print(part, soft_wrap=isinstance(part, Text))
        kernels = (traced or {}).get("kernels") or {}
        if kernels:
            console.print(_kernels_table(console.width, kernels), soft_wrap=False)
        if rank.get("local_file") or rank.get("trace_file"):
            console.print(f"  [dim]trace: {rank.get('local_file') or rank.get('trace_file')} "
                          f"({rank.get('trace_bytes') or 0} bytes; opens in Perfetto)[/dim]")
    derived = r.get("derived")
    if derived:
        console.print("  [bold]derived[/bold] (no measured phases on this server):")
        for part in _anatomy_table(console.width, derived, None, {}):
            console.print(part, soft_wrap=isinstance(part, Text))
    console.print("  [dim]all-reduce kernel names say which implementation ran, never NCCL's algorithm or "
                  "protocol (NCCL 2.19+ names every all-reduce kernel RING_LL)[/dim]")


def print_result(result: HostsResult, console: Console) -> None:
    for o in result.outcomes:
        if o.ok:
            print_profile(o.data, console)
