"""What ``inv bench`` prints for a person: throughput with its interval, the latency percentiles, the accept length
and where the result was saved. The result dict itself is the JSON form."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _ms(d: dict[str, Any] | None, key: str) -> str:
    v = (d or {}).get(key)
    return "-" if v is None else f"{v:.1f}"


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


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


def print_result(r: dict[str, Any], console: Console) -> None:
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
                  + f" over {r.get('duration_s', 0):.2f} s")
    t = Table(header_style="bold", box=None, pad_edge=False)
    for col in ("ms", "mean", "median", "p95", "p99", "max"):
        t.add_column(col, justify="right")
    for label, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms")):
        d = r.get(key) or {}
        t.add_row(label, _ms(d, "mean"), _ms(d, "median"), _ms(d, "p95"), _ms(d, "p99"), _ms(d, "max"))
    console.print(t)
    if r.get("accept_len") is not None:
        chosen = r.get("accept_len_source")
        others = ", ".join(f"{k} {v:.2f}" for k, v in (r.get("accept_len_sources") or {}).items()
                           if v is not None and k != chosen)
        console.print(f"  accept length [bold]{r['accept_len']:.2f}[/bold] from {chosen}"
                      + (f"  [dim](also {others})[/dim]" if others else ""))
        console.print(f"  accept rate {_num(r.get('accept_rate'))}  [dim]meaning on this version: "
                      f"{r.get('accept_rate_meaning')}[/dim]")
        console.print(f"  drafted tokens accepted {_num(r.get('draft_acceptance'), '{:.0%}')}  "
                      f"draft+verify cycle {_num(r.get('cycle_ms'), '{:.1f} ms')}")
    else:
        console.print(f"  no speculation; decode {_num(r.get('decode_ms_per_token'), '{:.1f} ms')} per token")
    print_phases(r.get("phases"), console)
    cost = r.get("timer_cost")
    if cost:
        console.print(f"  device timer cost {cost['pct']:.1f} % of served tok/s ({cost['timer_on_tok_s']:.1f} with, "
                      f"{cost['timer_off_tok_s']:.1f} without; measured by the tool against {cost['against']})",
                      markup=False)
    console.print(f"  saved: {r.get('local_path')} (host: {r.get('host_path')})", markup=False)
