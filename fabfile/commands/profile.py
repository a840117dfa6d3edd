"""The client side of ``inv profile``: where one speculative cycle's time goes on the running server, measured by
SGLang itself (its device timer; with ``--trace`` its profiler), under the bench's own bounded load.

The host does the work (``fabfile/remote/measure/profile.py``); this builds the one request, bounds the call, and with
``--out DIR`` fetches each rank's trace over SFTP as ``<host>-<deploy id>-TP<rank>.trace.json.gz`` (Perfetto opens
them as they are).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

from fabfile.commands.bench import BenchParams
from fabfile.errors import SpecDeployError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.remote.protocol import MAX_TRACE_STEPS, AgentEvent, ProfileDocument, ProfileRequest, ProfileResult
from fabfile.results.hosts import HostOutcome, HostsResult
from fabfile.transport.session import HostSession

DEFAULT_TRACE_STEPS = 12
FETCH_MAX_BYTES = 1024 * 1024 * 1024
# `inv explain` reuses a profile of the same deploy measured this recently (--max-age S; --fresh never reuses): each
# profile loads the server for the bench's bounded load, ~20 s, to learn what a profile a minute old already says.
REUSE_MAX_AGE_S = 300.0
PROFILES_DIR = "profiles"  # RUNS/<host>/profiles/<profile id>.json: beside the benches, never read as one


@dataclass(frozen=True)
class ProfileParams:
    load: BenchParams = field(default_factory=BenchParams)
    trace: bool = False
    trace_steps: int = DEFAULT_TRACE_STEPS  # bounded by MAX_TRACE_STEPS (tasks.py refuses more)
    out: str | None = None  # fetch the traces into this local directory
    server_args: tuple[str, ...] = ()  # the server's own args to report (/server_info's names), e.g. for `inv tune`

    def bound(self) -> float:
        # The bench's bound, plus the profiler's own writing of the traces (seconds per step of a big model).
        return self.load.bound() + (60.0 + self.trace_steps * 2.0 if self.trace else 0.0)


def new_profile_id() -> str:
    return "p" + time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def profile_request(params: ProfileParams, profile_id: str) -> ProfileRequest:
    b = params.load
    req: ProfileRequest = {"profile_id": profile_id, "concurrency": b.concurrency, "input_len": b.input_len,
                           "output_len": b.output_len, "num_prompts": b.num_prompts, "trace": params.trace,
                           "trace_steps": min(params.trace_steps, MAX_TRACE_STEPS)}
    if params.server_args:
        req["server_args"] = list(params.server_args)
    return req


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
                 on_event: Callable[[AgentEvent], None] | None = None,
                 runs_dir: Path | str | None = None) -> HostsResult[ProfileDocument]:
    """One ``profile`` call on ``host``; a failed measurement is the host's error (exit 1), bad input never
    reaches here (exit 2 in tasks.py). With ``runs_dir`` the document is saved there (:func:`save_profile`)."""
    pid = new_profile_id()
    try:
        with HostSession.open(inv, host) as s:
            answer = s.profile(profile_request(params, pid), timeout=params.bound(), on_event=on_event)
            # The result document: the host's answer, with where it ran, what was asked and when (the tool's clock).
            fetched = fetch_traces(s, answer, Path(params.out)) if params.out and params.trace else []
            # (a cast: mypy will not build a TypedDict whose optional keys the unpacked answer lacks)
            data = cast(ProfileDocument, {**answer, "host": host.name, "measured_at": time.time(), "requested": {
                **asdict(params.load), "trace": params.trace, "trace_steps": params.trace_steps}, "fetched": fetched})
    except SpecDeployError as e:
        return HostsResult([HostOutcome(host, error=e)])
    if runs_dir is not None:
        data["local_path"] = str(save_profile(data, runs_dir))
    return HostsResult([HostOutcome(host, data=data)])


def profile_hosts(inv: Inventory, hosts: list[Host], params: ProfileParams,
                  runs_dir: Path | str | None = None) -> HostsResult[ProfileDocument]:
    """``inv profile`` on several hosts at once, each under its own load from the host itself: one outcome per
    host, in the inventory's order."""
    from fabfile.commands.fanout import concurrent

    got: dict[str, HostOutcome[ProfileDocument]] = {}

    def one(h: Host) -> None:
        got[h.name] = profile_host(inv, h, params, runs_dir=runs_dir).outcomes[0]

    concurrent(hosts, one)
    return HostsResult([got[h.name] for h in hosts])


def save_profile(doc: ProfileDocument, runs_dir: Path | str) -> Path:
    """``RUNS/<host>/profiles/<profile id>.json``: what ``inv explain`` may reuse (:func:`reusable`)."""
    d = Path(runs_dir) / str(doc["host"]) / PROFILES_DIR
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{doc['profile_id']}.json"
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    return path


@dataclass(frozen=True)
class Reused:
    doc: ProfileDocument
    path: str
    age_s: float

    def sentence(self) -> str:
        return (f"reusing the profile of deploy {self.doc.get('deploy_id')} measured {self.age_s:.0f} s ago [tool] "
                f"({self.path}; --fresh measures again)")


def reusable(runs_dir: Path | str, host: str, deploy_id: str | None, params: ProfileParams, max_age_s: float,
             now: float | None = None) -> Reused | None:
    """The newest saved profile of ``host`` that says what a new one would: of the deploy running now
    (``deploy_id``), at the same concurrency, with a trace when one is asked for, measured less than ``max_age_s``
    ago by the tool's clock. None when there is none (or no deploy runs)."""
    d = Path(runs_dir) / host / PROFILES_DIR
    if not deploy_id or not d.is_dir():
        return None
    now = time.time() if now is None else now
    best: Reused | None = None
    for f in d.glob("*.json"):
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        asked = doc.get("requested") if isinstance(doc, dict) else None
        at = doc.get("measured_at") if isinstance(doc, dict) else None
        if not isinstance(asked, dict) or not isinstance(at, (int, float)) or doc.get("deploy_id") != deploy_id:
            continue
        age = now - float(at)
        if not 0 <= age < max_age_s or asked.get("concurrency") != params.load.concurrency:
            continue
        if params.trace and not asked.get("trace"):
            continue
        if best is None or age < best.age_s:
            best = Reused(doc, str(f), age)
    return best


def running_deploy(inv: Inventory, host: Host) -> str | None:
    """The deploy id of the server running on ``host`` now (None: none runs, or the host did not answer: a fresh
    profile then says why)."""
    try:
        with HostSession.open(inv, host) as s:
            st = s.status()
    except SpecDeployError:
        return None
    rec = st.get("record")
    return str(rec.get("deploy_id")) if st.get("running") and rec and rec.get("deploy_id") else None
