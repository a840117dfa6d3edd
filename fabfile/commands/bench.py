"""The client side of ``inv bench``: ask the host's agent to benchmark the running server from the host itself, keep
the result on the host (``STATE/bench/<id>.json``) and locally (``RUNS/<host>/<id>.json``), print it.

The load comes from the host, not from this machine, so the numbers are the server's and not the SSH link's: SGLang's
own ``sglang.bench_serving`` (``--dataset-name random-ids``, no download) when the host's SGLang has it, else the
agent's stdlib load generator (``fabfile/remote/loadgen.py``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fabfile.inventory.hosts import Host, Inventory
from fabfile.remote.protocol import BenchRequest
from fabfile.transport.session import HostSession

CLIENTS = ("auto", "sglang", "builtin")


@dataclass(frozen=True)
class BenchParams:
    concurrency: int = 1
    input_len: int = 256
    output_len: int = 128
    num_prompts: int = 16
    client: str = "auto"          # auto | sglang (sglang.bench_serving) | builtin (the agent's load generator)
    warmup: int = 1
    timeout: float | None = None  # bound on the whole benchmark; default from the size of the run
    # Adaptive length: stop once the 95 % interval of tok/s is within ±target_ci (relative), after at least
    # min_requests; num_prompts is then the most it sends. None: exactly num_prompts.
    target_ci: float | None = None
    min_requests: int = 8
    need_histogram: bool = False  # the accepted-drafts histogram is wanted (sweep --predict): builtin client

    def bound(self) -> float:
        if self.timeout is not None:
            return self.timeout
        # Generous: 100 ms per generated token per request in flight, plus start-up.
        rounds = -(-self.num_prompts // max(1, self.concurrency))
        return 120.0 + rounds * (self.output_len * 0.1 + self.input_len * 0.002)


def new_bench_id() -> str:
    return "b" + time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def bench_request(host: Host, params: BenchParams, bench_id: str) -> BenchRequest:
    return {"bench_id": bench_id, "concurrency": params.concurrency, "input_len": params.input_len,
            "output_len": params.output_len, "num_prompts": params.num_prompts, "client": params.client,
            "warmup": params.warmup, "target_ci": params.target_ci, "min_requests": params.min_requests,
            "need_histogram": params.need_histogram}


def run_bench(session: HostSession, params: BenchParams, *, bench_id: str | None = None,
              on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """One ``bench`` agent call on an open session; the result document (with ``host`` and ``params``)."""
    bid = bench_id or new_bench_id()
    data = session.call("bench", bench_request(session.host, params, bid), timeout=params.bound(), on_event=on_event)
    data["host"] = session.host.name
    data["requested"] = asdict(params)
    return data


def save_local(result: dict[str, Any], runs_dir: Path | str) -> Path:
    """``RUNS/<host>/<bench_id>.json``."""
    d = Path(runs_dir) / str(result["host"])
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{result['bench_id']}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    return path


def bench_host(inv: Inventory, host: Host, params: BenchParams, runs_dir: Path | str,
               on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    with HostSession.open(inv, host) as s:
        result = run_bench(s, params, on_event=on_event)
    result["local_path"] = str(save_local(result, runs_dir))
    return result


def _ms(d: dict[str, Any] | None, key: str) -> str:
    v = (d or {}).get(key)
    return "-" if v is None else f"{v:.1f}"


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


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
    console.print(f"  saved: {r.get('local_path')} (host: {r.get('host_path')})", markup=False)
