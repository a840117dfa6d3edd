"""``inv watch``: a live view of each server's tok/s, accept length, running and queued requests and health, with
thresholds that print an alarm line and exit non-zero when crossed (for cron and CI).

Each round asks every selected host for one bounded sample (the ``watch`` agent verb: ``/metrics`` when enabled,
else SGLang's last ``Decode batch`` line; fabfile/remote/measure/watch.py), all hosts at once, each bounded by its
``timeouts.host``. A threshold is crossed when a host's figure stays below it for ``--for`` seconds (0: at once);
a server that is not running or not healthy is an alarm too. Figures older than ``stale_s`` (SGLang prints Decode
lines only while it decodes) count as idle, not as a breach.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fabfile.commands.fanout import for_each_host
from fabfile.inventory.hosts import Host, Inventory
from fabfile.results.hosts import HostOutcome


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
    outcomes: list[HostOutcome] = for_each_host(inv, hosts, lambda s: s.watch(),
                                                host_timeout=max(h.timeouts.host for h in hosts))
    rows = []
    for o in outcomes:
        if o.error is not None:
            rows.append({"host": o.host.name, "running": False, "error": o.error.message})
        else:
            rows.append({"host": o.host.name, **o.data})
    return rows


def watch(inv: Inventory, hosts: list[Host], o: WatchOptions) -> int:
    from fabfile.present.watch_report import WatchView

    since: dict[str, float] = {}
    t0 = time.monotonic()
    view = WatchView(as_json=o.as_json, once=o.once)
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
            view.sample(rows, pending, fired)
            if fired:
                view.alarms(fired)
                return 1
            if o.once or (o.duration is not None and now - t0 >= o.duration):
                return 0
            time.sleep(max(0.0, o.interval - (time.monotonic() - now)))
    except KeyboardInterrupt:
        return 0
    finally:
        view.close()
