"""``inv watch``: a live view of each server's tok/s, accept length, running and queued requests and health, with
thresholds that print an alarm line and exit non-zero when crossed (for cron and CI).

Each round asks every selected host for one bounded sample (the ``watch`` agent verb: ``/metrics`` when enabled,
else SGLang's last ``Decode batch`` line; fabfile/remote/watch.py), all hosts at once, each bounded by its
``timeouts.host``. A threshold is crossed when a host's figure stays below it for ``--for`` seconds (0: at once);
a server that is not running or not healthy is an alarm too. Figures older than ``stale_s`` (SGLang prints Decode
lines only while it decodes) count as idle, not as a breach.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from fabfile.commands.fanout import HostOutcome, for_each_host
from fabfile.inventory.hosts import Host, Inventory


@dataclass(frozen=True)
class WatchOptions:
    interval: float = 2.0
    once: bool = False
    min_accept: float | None = None
    min_tok_s: float | None = None
    for_s: float = 0.0
    duration: float | None = None   # stop (exit 0 unless an alarm fired) after this long
    as_json: bool = False

    @property
    def stale_s(self) -> float:
        return max(30.0, 3 * self.interval)


def breach(row: dict[str, Any], o: WatchOptions) -> str | None:
    """Why this sample crosses a threshold (a sentence), or None."""
    if not row.get("running"):
        return "no server running"
    status = (row.get("health") or {}).get("status")
    if status != 200:
        return f"not healthy ({(row.get('health') or {}).get('path')} answered {status or 'nothing'})"
    age = row.get("age_s")
    fresh = age is not None and age <= o.stale_s
    acc, tok = row.get("accept_len"), row.get("tok_s")
    if o.min_accept is not None and fresh and acc is not None and acc < o.min_accept:
        return f"accept length {acc:.2f} < --min-accept {o.min_accept:g} (from {row.get('source')})"
    if o.min_tok_s is not None and fresh and tok is not None and tok < o.min_tok_s:
        return f"{tok:.1f} tok/s < --min-tok-s {o.min_tok_s:g} (from {row.get('source')})"
    return None


def _sample(inv: Inventory, hosts: list[Host]) -> list[dict[str, Any]]:
    outcomes: list[HostOutcome] = for_each_host(inv, hosts, lambda s: s.call("watch", {}),
                                                host_timeout=max(h.timeouts.host for h in hosts))
    rows = []
    for o in outcomes:
        if o.error is not None:
            rows.append({"host": o.host.name, "running": False, "error": o.error.message})
        else:
            rows.append({"host": o.host.name, **o.data})
    return rows


def _fmt(v: Any, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def _table(rows: list[dict[str, Any]], alarms: dict[str, str]) -> Any:
    from rich.table import Table

    t = Table(header_style="bold", title=time.strftime("%H:%M:%S"))
    for col in ("host", "config", "health", "tok/s", "accept len", "running", "queued", "source", "age", "alarm"):
        t.add_column(col)
    for r in rows:
        h = r.get("health") or {}
        health = "—" if not r.get("running") else (f"{h.get('status') or 'no answer'} "
                                                     f"{_fmt(h.get('latency_s'), '.2f')}s")
        t.add_row(r["host"], str(r.get("config_name") or r.get("error") or "not running"), health,
                  _fmt(r.get("tok_s"), ".1f"), _fmt(r.get("accept_len"), ".2f"), _fmt(r.get("running_req"), ".0f"),
                  _fmt(r.get("queue_req"), ".0f"), str(r.get("source") or "—"),
                  "—" if r.get("age_s") is None else f"{r['age_s']:.0f}s", alarms.get(r["host"], ""))
    return t


def watch(inv: Inventory, hosts: list[Host], o: WatchOptions) -> int:
    from rich.live import Live

    from fabfile.present.output import err, out

    since: dict[str, float] = {}
    t0 = time.monotonic()
    live: Live | None = None
    if not o.as_json and not o.once and sys.stdout.isatty():
        live = Live(console=out, auto_refresh=False)
        live.start()
    try:
        while True:
            rows = _sample(inv, hosts)
            now = time.monotonic()
            pending: dict[str, str] = {}
            fired: dict[str, str] = {}
            for r in rows:
                why = breach(r, o)
                if why is None:
                    since.pop(r["host"], None)
                    continue
                start = since.setdefault(r["host"], now)
                pending[r["host"]] = why
                if o.once or now - start >= o.for_s:
                    fired[r["host"]] = why + (f" for {now - start:.0f} s" if o.for_s and not o.once else "")
            if o.as_json:
                print(json.dumps({"time": time.time(), "hosts": rows, "alarms": fired}), flush=True)
            elif live is not None:
                live.update(_table(rows, pending), refresh=True)
            else:
                out.print(_table(rows, pending))
            if fired:
                if live is not None:
                    live.stop()
                    live = None
                for host, why in fired.items():
                    err.print(f"[red]ALARM[/red] {host}: {why}")
                return 1
            if o.once or (o.duration is not None and now - t0 >= o.duration):
                return 0
            time.sleep(max(0.0, o.interval - (time.monotonic() - now)))
    except KeyboardInterrupt:
        return 0
    finally:
        if live is not None:
            live.stop()
