"""What ``inv watch`` shows each round: one JSON line per sample (``--json``), a table redrawn in place (a terminal),
or a table per round (piped, or ``--once``); then the alarm lines on stderr."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.markup import escape

from fabfile.present.output import err, out
from fabfile.present.tables import DASH, Col, cell, fit_table


class WatchView:
    """The one switch of ``inv watch``: a stream of samples, so JSON lines rather than one document."""

    def __init__(self, *, as_json: bool, once: bool) -> None:
        from rich.live import Live

        self.as_json = as_json
        self.live: Live | None = None
        if not as_json and not once and sys.stdout.isatty():
            self.live = Live(console=out, auto_refresh=False)
            self.live.start()

    def sample(self, rows: list[dict[str, Any]], pending: dict[str, str], fired: dict[str, str],
               stale: dict[str, str], stale_samples: dict[str, int]) -> None:
        """``stale``: this round's hosts whose sample is no data, and why; ``stale_samples``: how many of the run's
        samples each host has had so."""
        if self.as_json:
            out.file.write(json.dumps({"time": time.time(), "hosts": rows, "alarms": fired, "stale": stale,
                                       "stale_samples": stale_samples}) + "\n")
            out.file.flush()
        elif self.live is not None:
            self.live.update(_table(rows, {**stale, **pending}), refresh=True)
        else:
            out.print(_table(rows, {**stale, **pending}))

    def stale_summary(self, counts: dict[str, int], why: dict[str, str], samples: int, judged: list[str]) -> None:
        """At the end of a run with a threshold, each host whose samples were no data, counted: a threshold not
        judged is said, never passed in silence."""
        if not judged:
            return
        self.close()
        for host, n in counts.items():
            err.print(f"[yellow]NO DATA[/yellow] {escape(host)}: {n} of {samples} sample{'s' if samples != 1 else ''}"
                      f" {escape(why[host])}: {', '.join(judged)} not judged on {'it' if n == 1 else 'them'}")

    def alarms(self, fired: dict[str, str]) -> None:
        self.close()
        for host, why in fired.items():
            err.print(f"[red]ALARM[/red] {host}: {why}")

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def _table(rows: list[dict[str, Any]], alarms: dict[str, str]) -> Any:
    """The round's table within the terminal's width: host, config and the figures whole (at 80 columns rich cut
    them to `conf…`, `heal…`, `eagl…`), the alarm text wrapped; narrower still, one block per host."""
    # The figures stay in the narrow layout without a value ("accept len: -"): a row that changes its shape from one
    # round to the next is hard to follow.
    cols = [Col("host"), Col("config"), Col("health", always=True), Col("gen tok/s", justify="right", always=True),
            Col("accept len", justify="right", always=True), Col("running", justify="right", always=True),
            Col("queued", justify="right", always=True), Col("source"), Col("age", justify="right"),
            Col("alarm", key=False)]
    cells = []
    for r in rows:
        h = r.get("health") or {}
        health = DASH if not r.get("running") else (f"{h.get('status') or 'no answer'} "
                                                    f"{cell(h.get('latency_s'), '{:.2f}')}s")
        cells.append([escape(r["host"]), escape(str(r.get("config_name") or r.get("error") or "not running")),
                      health, cell(r.get("tok_s"), "{:.1f}"), cell(r.get("accept_len"), "{:.2f}"),
                      cell(r.get("running_req"), "{:.0f}"), cell(r.get("queue_req"), "{:.0f}"),
                      escape(cell(r.get("source"))), cell(r.get("age_s"), "{:.0f}s"),
                      escape(alarms.get(r["host"], ""))])
    return fit_table(out.width, cols, cells, title=time.strftime("%H:%M:%S"))
