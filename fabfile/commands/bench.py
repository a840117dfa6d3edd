"""The client side of ``inv bench``: ask the host's agent to benchmark the running server from the host itself, keep
the result on the host (``STATE/bench/<id>.json``) and locally (``RUNS/<host>/<id>.json``), print it.

The load comes from the host, not from this machine, so the numbers are the server's and not the SSH link's: SGLang's
own ``sglang.bench_serving`` (``--dataset-name random-ids``, no download) when the host's SGLang has it, else the
agent's stdlib load generator (``fabfile/remote/measure/loadgen.py``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

from fabfile.commands.result import CommandResult
from fabfile.errors import SpecDeployError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.remote.protocol import AgentEvent, BenchDocument, BenchRequest, SavedBench, TimerCost
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
              on_event: Callable[[AgentEvent], None] | None = None) -> BenchDocument:
    """One ``bench`` agent call on an open session; the result document (with ``host`` and ``params``)."""
    bid = bench_id or new_bench_id()
    data = session.bench(bench_request(session.host, params, bid), timeout=params.bound(), on_event=on_event)
    # The result document: the host's answer, with where it ran and what was asked.
    return {**data, "host": session.host.name, "requested": asdict(params)}


def bench_path(result: BenchDocument, runs_dir: Path | str) -> Path:
    """``RUNS/<host>/<bench_id>.json``."""
    return Path(runs_dir) / str(result["host"]) / f"{result['bench_id']}.json"


def save_local(result: BenchDocument, runs_dir: Path | str) -> Path:
    """Saved at :func:`bench_path`."""
    path = bench_path(result, runs_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    return path


def saved(runs_dir: Path | str, host: str) -> list[tuple[BenchDocument, str]]:
    """Every bench result saved for ``host`` (``RUNS/<host>/*.json``) with its path, oldest first."""
    d = Path(runs_dir) / host
    out: list[tuple[BenchDocument, str]] = []
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if isinstance(doc, dict) and "bench_id" in doc and "rows" not in doc:
            out.append((cast(BenchDocument, doc), str(f)))  # a bench's own saved document (``save_local``)
    return sorted(out, key=lambda t: str(t[0].get("started_at") or ""))


def _timed(doc: BenchDocument) -> bool | None:
    """Whether the run had SGLang's device timer on (None: it does not say, or its version has no timer)."""
    ph = doc.get("phases")
    if not isinstance(ph, dict):
        return None
    if ph.get("ranks"):
        return True
    return False if "without the device timer" in str(ph.get("missing") or "") else None


def timer_cost(result: BenchDocument, runs_dir: Path | str) -> TimerCost | None:
    """The device timer's cost on served tok/s, measured by the tool: this run against the newest saved run of the
    same configuration, SGLang version, client and load with the timer the other way (``inv bench`` after
    ``inv deploy --measure`` and after ``inv deploy --no-measure``)."""
    mine = _timed(result)
    if mine is None or not result.get("output_tok_s"):
        return None
    same = ("config_name", "sglang_version", "client")
    load = ("concurrency", "input_len", "output_len")
    other = [(d, p) for d, p in saved(runs_dir, str(result.get("host") or ""))
             if _timed(d) is (not mine) and d.get("output_tok_s") and all(d.get(k) == result.get(k) for k in same)
             and all((d.get("params") or {}).get(k) == (result.get("params") or {}).get(k) for k in load)]
    if not other:
        return None
    doc, path = other[-1]
    on, off = (result, doc) if mine else (doc, result)
    pct = (float(off["output_tok_s"]) - float(on["output_tok_s"])) / float(off["output_tok_s"]) * 100
    return {"pct": round(pct, 2), "timer_on_tok_s": on["output_tok_s"], "timer_off_tok_s": off["output_tok_s"],
            "against": path, "source": "the tool: this bench against the newest one of the same configuration and "
                                       "load with the timer the other way"}


def bench_host(inv: Inventory, host: Host, params: BenchParams, runs_dir: Path | str,
               on_event: Callable[[AgentEvent], None] | None = None) -> SavedBench:
    with HostSession.open(inv, host) as s:
        result = run_bench(s, params, on_event=on_event)
    doc: SavedBench = {**result, "timer_cost": timer_cost(result, runs_dir),
                       "local_path": str(bench_path(result, runs_dir))}
    save_local(doc, runs_dir)
    return doc


def host_document(host: Host, result: BenchDocument | None, error: SpecDeployError | None) -> dict[str, object]:
    """One host's part of ``bench --json``: its result, or the error that ended its benchmark."""
    if error is not None or result is None:
        return {"host": host.name, "ok": False, "error": error.as_dict() if error is not None else None}
    return {"ok": True, **result}


def bench_hosts(inv: Inventory, hosts: list[Host], params: BenchParams, runs_dir: Path | str) -> CommandResult:
    """``inv bench`` on several hosts at once, each from the host itself (so the loads do not share a link): one
    result per host, printed host by host when all have ended; the exit code of the worst."""
    from fabfile.commands.fanout import concurrent
    from fabfile.present.bench_report import print_comparison, print_result
    from fabfile.present.output import out, print_error
    from fabfile.results.hosts import hosts_document

    done: dict[str, SavedBench] = {}
    failed: dict[str, SpecDeployError] = {}

    def one(h: Host) -> None:
        try:
            done[h.name] = bench_host(inv, h, params, runs_dir)
        except SpecDeployError as e:
            e.host = e.host or h.name
            failed[h.name] = e

    concurrent(hosts, one)
    docs = [host_document(h, done.get(h.name), failed.get(h.name)) for h in hosts]

    def for_people() -> None:
        for h in hosts:
            if h.name in done:
                print_result(done[h.name], out)
        # one table across hosts at the end, then each failed host's error (not cut into a cell)
        print_comparison([done[h.name] for h in hosts if h.name in done], [h.name for h in hosts if h.name in failed],
                         out)
        for h in hosts:
            if h.name in failed:
                print_error(failed[h.name])

    return CommandResult(hosts_document(docs), for_people,
                         max((e.exit_code for e in failed.values()), default=0))
