"""What ``inv bench`` prints for a person: throughput with its interval, the latency percentiles, the accept length
and where the result was saved. The result dict itself is the JSON form."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from fabfile.present.tables import Col, cell, print_table
from fabfile.remote.protocol import SavedBench


def print_phases(phases: dict[str, Any] | None, console: Console) -> None:
    """The run's phases per rank, as SGLang's device timer measured them (each figure with its source), or why there
    are none."""
    from fabfile.present.explain_report import phase_line

    if not phases:
        return
    if phases.get("missing"):
        console.print(f"  phases: not measured ({phases['missing']})", markup=False)
        return
    graph = phases.get("cuda_graph")
    how = "" if graph is None else " (CUDA graphs)" if graph else " (eager, no CUDA graphs)"
    for a in phases.get("ranks") or []:
        console.print(f"  phases rank {a.get('rank', 0)}{how}: {phase_line(a)}", markup=False)


def print_result(r: SavedBench, console: Console) -> None:
    """A person's summary of one benchmark."""
    p = r.get("params") or {}
    console.print(f"[bold]{r['host']}[/bold] config [bold]{r.get('config_name')}[/bold] "
                  f"(SGLang {r.get('sglang_version')})  client {r.get('client')}  "
                  f"concurrency {p.get('concurrency')}  in/out {p.get('input_len')}/"
                  f"{p.get('output_len')}  prompts {r.get('completed')}/{p.get('num_prompts')}"
                  + (f"  [red]{r.get('failed')} failed[/red]" if r.get("failed") else ""))
    ci = r.get("tok_s_ci")
    console.print(f"  output [bold]{r.get('output_tok_s', 0):.1f} tok/s[/bold]"
                  + (f" ±{ci:.1%} (95 % interval)" if ci is not None else "")
                  + f" over {r.get('completed')} requests in {r.get('duration_s', 0):.2f} s (measured by the client; "
                  "`inv status` shows SGLang's gen tok/s of one Decode window)")
    cols = [Col(c, justify="right") for c in ("ms", "mean", "median", "p95", "p99", "max")]
    stats = ("mean", "median", "p95", "p99", "max")
    rows = (("TTFT", r.get("ttft_ms")), ("TPOT", r.get("tpot_ms")), ("ITL", r.get("itl_ms")), ("E2E", r.get("e2e_ms")))
    print_table(console, cols, [[label, *(cell((dist or {}).get(k), "{:.1f}") for k in stats)]
                                for label, dist in rows], boxed=False)
    if r.get("accept_len") is not None:
        chosen = r.get("accept_len_source")
        windows = r.get("accept_len_windows") or {}
        over = f" over {windows[chosen]}" if chosen in windows else ""
        # each other source's figure with its own window: one server, several windows, several figures
        others = "; ".join(f"{k} {v:.2f}" + (f" over {windows[k]}" if k in windows else "")
                           for k, v in (r.get("accept_len_sources") or {}).items() if v is not None and k != chosen)
        console.print(f"  accept length [bold]{r['accept_len']:.2f}[/bold]{escape(over)} from {chosen}"
                      + (f"  [dim](also {escape(others)})[/dim]" if others else ""))
        console.print(f"  accept rate {cell(r.get('accept_rate'), '{:.2f}')}  [dim]meaning on this version: "
                      f"{r.get('accept_rate_meaning')}[/dim]")
        console.print(f"  drafted tokens accepted {cell(r.get('draft_acceptance'), '{:.0%}')}  "
                      f"draft+verify cycle {cell(r.get('cycle_ms'), '{:.1f} ms')}")
    else:
        console.print(f"  no speculation; decode {cell(r.get('decode_ms_per_token'), '{:.1f} ms')} per token")
    print_phases(r.get("phases"), console)
    cost = r.get("timer_cost")
    if cost:
        console.print(f"  device timer cost {cost['pct']:.1f} % of served tok/s ({cost['timer_on_tok_s']:.1f} with, "
                      f"{cost['timer_off_tok_s']:.1f} without; measured by the tool against {cost['against']})",
                      markup=False)
    console.print(f"  saved: {r.get('local_path')} (host: {r.get('host_path')})", markup=False)


def print_comparison(results: list[SavedBench], failed: list[str], console: Console) -> None:
    """``inv bench --host all``'s last table: one row per host, side by side (each host's own block above has the
    rest), then the line naming each column's source; a host that failed is named, its error said below."""
    cols = [Col("host"), Col("config"), Col("SGLang"), Col("tok/s", justify="right"), Col("±95 %", justify="right"),
            Col("TTFT p50 ms", justify="right"), Col("TPOT p50 ms", justify="right"),
            Col("accept len", justify="right"), Col("requests", justify="right")]
    rows = []
    for r in results:
        ci = r.get("tok_s_ci")
        rows.append([str(r["host"]), cell(r.get("config_name")), cell(r.get("sglang_version")),
                     cell(r.get("output_tok_s"), "{:.1f}"), cell(ci, "{:.1%}"),
                     cell((r.get("ttft_ms") or {}).get("median"), "{:.1f}"),
                     cell((r.get("tpot_ms") or {}).get("median"), "{:.1f}"), cell(r.get("accept_len"), "{:.2f}"),
                     f"{r.get('completed')}/{(r.get('params') or {}).get('num_prompts')}"])
    rows += [[name, "[red]failed[/red]", *([""] * 6), "error below"] for name in failed]
    print_table(console, cols, rows, title="hosts side by side")
    accept = ", ".join(f"{r['host']}: {r.get('accept_len_source')}" for r in results if r.get("accept_len") is not None)
    console.print("  sources: tok/s, ±95 %, TTFT, TPOT: the load client on each host [tool]"
                  + (f"; accept len: SGLang's, as each host's block above chose ({accept})" if accept else ""),
                  markup=False)
