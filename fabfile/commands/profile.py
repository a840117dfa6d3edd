"""The client side of ``inv profile``: where one speculative cycle's time goes on the running server, measured by
SGLang itself (its device timer; with ``--trace`` its profiler), under the bench's own bounded load.

The host does the work (``fabfile/remote/measure/profile.py``); this builds the one request, bounds the call, and with
``--out DIR`` fetches each rank's trace over SFTP as ``<host>-<deploy id>-TP<rank>.trace.json.gz`` (Perfetto opens
them as they are).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fabfile.commands.bench import BenchParams
from fabfile.errors import SpecDeployError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.remote.protocol import MAX_TRACE_STEPS, AgentEvent, ProfileDocument, ProfileRequest, ProfileResult
from fabfile.results.hosts import HostOutcome, HostsResult
from fabfile.transport.session import HostSession

DEFAULT_TRACE_STEPS = 12
FETCH_MAX_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class ProfileParams:
    load: BenchParams = field(default_factory=BenchParams)
    trace: bool = False
    trace_steps: int = DEFAULT_TRACE_STEPS  # bounded by MAX_TRACE_STEPS (tasks.py refuses more)
    out: str | None = None  # fetch the traces into this local directory

    def bound(self) -> float:
        # The bench's bound, plus the profiler's own writing of the traces (seconds per step of a big model).
        return self.load.bound() + (60.0 + self.trace_steps * 2.0 if self.trace else 0.0)


def new_profile_id() -> str:
    return "p" + time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def profile_request(params: ProfileParams, profile_id: str) -> ProfileRequest:
    b = params.load
    return {"profile_id": profile_id, "concurrency": b.concurrency, "input_len": b.input_len,
            "output_len": b.output_len, "num_prompts": b.num_prompts, "trace": params.trace,
            "trace_steps": min(params.trace_steps, MAX_TRACE_STEPS)}


def trace_name(host: str, deploy_id: str | None, rank: int) -> str:
    return f"{host}-{deploy_id or 'unrecorded'}-TP{rank}.trace.json.gz"


def fetch_traces(session: HostSession, data: ProfileResult, out: Path) -> list[str]:
    """Copy every rank's trace into ``out``; the local paths."""
    got = []
    for r in data.get("ranks") or []:
        path = r.get("trace_file")
        if not path:
            continue
        dest = out / trace_name(session.host.name, data.get("deploy_id"), int(r.get("rank") or 0))
        session.transport.get(str(path), dest, FETCH_MAX_BYTES)
        r["local_file"] = str(dest)
        got.append(str(dest))
    return got


def profile_host(inv: Inventory, host: Host, params: ProfileParams,
                 on_event: Callable[[AgentEvent], None] | None = None) -> HostsResult[ProfileDocument]:
    """One ``profile`` call on ``host``; a failed measurement is the host's error (exit 1), bad input never
    reaches here (exit 2 in tasks.py)."""
    pid = new_profile_id()
    try:
        with HostSession.open(inv, host) as s:
            answer = s.profile(profile_request(params, pid), timeout=params.bound(), on_event=on_event)
            # The result document: the host's answer, with where it ran and what was asked.
            fetched = fetch_traces(s, answer, Path(params.out)) if params.out and params.trace else []
            data: ProfileDocument = {**answer, "host": host.name, "requested": {
                **asdict(params.load), "trace": params.trace, "trace_steps": params.trace_steps}, "fetched": fetched}
    except SpecDeployError as e:
        return HostsResult([HostOutcome(host, error=e)])
    return HostsResult([HostOutcome(host, data=data)])
