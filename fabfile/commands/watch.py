"""``inv watch``: a live view of each server's tok/s, accept length, running and queued requests and health, with
thresholds that print an alarm line and exit non-zero when crossed (for cron and CI).

Each round asks every selected host for one bounded sample (the ``watch`` agent verb: ``/metrics`` when enabled,
else SGLang's last ``Decode batch`` line; fabfile/remote/measure/watch.py), all hosts at once, each bounded by its
``timeouts.host``. A threshold is crossed when a host's figure stays below it for ``--for`` seconds (0: at once);
a server that is not running or not healthy is an alarm too.

One rule for stale data, whatever the source: a sample's age is its own (the Decode batch line's time; a
``/metrics`` gauge is set with that line, so it is the gauge's too), never the moment it was read. A sample older
than ``stale_s``, or one nothing dates, is no data (SGLang writes Decode lines, and sets those gauges, only while it
decodes): it is said ("stale (85 s old)"), counted per host, and no threshold is judged on it, neither passed nor
alarmed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fabfile.commands.fanout import for_each_host
from fabfile.commands.result import CommandResult
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


def no_data(row: dict[str, Any], o: WatchOptions) -> str | None:
    """Why a running, healthy server's sample is no data ("stale (85 s old)"), or None when it is fresh: the one
    rule for both sources (``/metrics`` and the log)."""
    if not row.get("running") or (row.get("health") or {}).get("status") != 200:
        return None  # an alarm of its own (breach), not a question of figures
    age = row.get("age_s")
    if age is None:
        if row.get("tok_s") is None and row.get("accept_len") is None:
            return "no data (no Decode batch line yet)"
        return "stale (age unknown: no Decode batch line dates it)"
    if age > o.stale_s:
        return f"stale ({age:.0f} s old)"
    return None


def thresholds(o: WatchOptions) -> list[str]:
    """The thresholds set, as flags ("--min-tok-s 200")."""
    return [f"{flag} {value:g}" for flag, value in (("--min-accept", o.min_accept), ("--min-tok-s", o.min_tok_s))
            if value is not None]


def breach(row: dict[str, Any], o: WatchOptions) -> str | None:
    """Why this sample crosses a threshold (a sentence), or None; a stale sample (:func:`no_data`) crosses none."""
    if not row.get("running"):
        return "no server running"
    status = (row.get("health") or {}).get("status")
    if status != 200:
        return f"not healthy ({(row.get('health') or {}).get('path')} answered {status or 'nothing'})"
    if no_data(row, o) is not None:
        return None
    acc, tok, age = row.get("accept_len"), row.get("tok_s"), row.get("age_s")
    source = f"from {row.get('source')}, {age:.0f} s old"
    if o.min_accept is not None and acc is not None and acc < o.min_accept:
        return f"accept length {acc:.2f} < --min-accept {o.min_accept:g} ({source})"
    if o.min_tok_s is not None and tok is not None and tok < o.min_tok_s:
        return f"{tok:.1f} tok/s < --min-tok-s {o.min_tok_s:g} ({source})"
    return None


def _sample(inv: Inventory, hosts: list[Host]) -> list[dict[str, Any]]:
    outcomes = for_each_host(inv, hosts, lambda s: s.watch(), host_timeout=max(h.timeouts.host for h in hosts),
                             read_only=True)
    rows = []
    for o in outcomes:
        if o.error is not None:
            rows.append({"host": o.host.name, "running": False, "error": o.error.message})
        else:
            rows.append({"host": o.host.name, **o.answer})
    return rows


def watch(inv: Inventory, hosts: list[Host], o: WatchOptions) -> CommandResult:
    """Samples printed as they come (one JSON line each with --json): a stream, so its result is only its exit code
    (1: an alarm fired)."""
    return CommandResult.printed(_watch(inv, hosts, o))


def _watch(inv: Inventory, hosts: list[Host], o: WatchOptions) -> int:
    from fabfile.present.watch_report import WatchView

    since: dict[str, float] = {}
    samples = 0
    stale_count: dict[str, int] = {}
    last_stale: dict[str, str] = {}
    t0 = time.monotonic()
    view = WatchView(as_json=o.as_json, once=o.once)
    try:
        while True:
            rows = _sample(inv, hosts)
            samples += 1
            now = time.monotonic()
            pending: dict[str, str] = {}
            fired: dict[str, str] = {}
            stale: dict[str, str] = {}
            for r in rows:
                r["stale"] = nd = no_data(r, o)
                if nd is not None:
                    stale[r["host"]] = last_stale[r["host"]] = nd
                    stale_count[r["host"]] = stale_count.get(r["host"], 0) + 1
                why = breach(r, o)
                if why is None:
                    since.pop(r["host"], None)
                    continue
                start = since.setdefault(r["host"], now)
                pending[r["host"]] = why
                if o.once or now - start >= o.for_s:
                    fired[r["host"]] = why + (f" for {now - start:.0f} s" if o.for_s and not o.once else "")
            view.sample(rows, pending, fired, stale, dict(stale_count))
            if fired:
                view.alarms(fired)
                view.stale_summary(stale_count, last_stale, samples, thresholds(o))
                return 1
            if o.once or (o.duration is not None and now - t0 >= o.duration):
                view.stale_summary(stale_count, last_stale, samples, thresholds(o))
                return 0
            time.sleep(max(0.0, o.interval - (time.monotonic() - now)))
    except KeyboardInterrupt:
        return 0
    finally:
        view.close()
