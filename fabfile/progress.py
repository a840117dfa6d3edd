"""Live progress a person can follow: one line per finished step with its time, a spinner with the elapsed time and
the server's last log line while waiting. Progress goes to stderr so ``--json`` keeps stdout machine-readable."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

STEP_TITLES = {
    "connect": "connect", "preflight": "preflight", "lock": "lock", "patch": "patch", "stop": "stop stale servers",
    "gpu_clean": "GPU-clean gate", "start": "start server", "wait_ready": "wait for ready", "verify_env": "verify env",
    "record": "record deploy",
}


class Reporter:
    """Receives step/log/info events; the quiet variant (``enabled=False``) only keeps timings."""

    def __init__(self, host: str, *, enabled: bool = True, console: Console | None = None) -> None:
        self.host = host
        self.enabled = enabled
        self.console = console or Console(stderr=True, highlight=False)
        self.timings: dict[str, float] = {}
        self.current: str | None = None
        self.current_started = 0.0
        self.last_line = ""
        self.live: Live | None = None
        self.t0 = time.monotonic()
        self.events_seen = 0

    # -- rendering ----------------------------------------------------------------------------------------------
    def _spinner(self) -> Spinner:
        elapsed = time.monotonic() - self.current_started
        title = STEP_TITLES.get(self.current or "", self.current or "")
        text = Text.assemble((f"{self.host} ", "bold"), f"{title} ", (f"{elapsed:5.1f}s", "cyan"))
        if self.last_line:
            text.append(f"  {self.last_line[-100:]}", style="dim")
        return Spinner("dots", text=text)

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._spinner())

    def _start_live(self) -> None:
        if self.enabled and self.live is None and self.console.is_terminal:
            self.live = Live(self._spinner(), console=self.console, refresh_per_second=10, transient=True)
            self.live.start()

    def _stop_live(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def close(self) -> None:
        self._stop_live()

    # -- events -------------------------------------------------------------------------------------------------
    def step_start(self, name: str) -> None:
        self.current = name
        self.current_started = time.monotonic()
        self.last_line = ""
        self._start_live()
        self._refresh()

    def step_end(self, name: str, ok: bool, elapsed: float | None = None, detail: Any = None,
                 message: str | None = None) -> None:
        if elapsed is None:
            elapsed = time.monotonic() - self.current_started
        self.timings[name] = round(elapsed, 3)
        self._stop_live()
        if self.enabled:
            mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
            title = STEP_TITLES.get(name, name)
            extra = f"  [dim]{detail}[/dim]" if detail and ok else ""
            if not ok and message:
                extra = f"  [red]{message}[/red]"
            self.console.print(f"{mark} [bold]{self.host}[/bold] {title:<18} {elapsed:6.2f}s{extra}")
        self.current = None

    def info(self, message: str) -> None:
        if self.enabled:
            self._stop_live()
            self.console.print(f"  [yellow]•[/yellow] {self.host}: {message}")
            if self.current:
                self._start_live()

    def event(self, ev: dict[str, Any]) -> None:
        """An agent event (``step``/``log``/``info``/``started``; ``replay`` wraps one after a reconnect)."""
        self.events_seen += 1
        if ev.get("event") == "replay":
            ev = ev.get("original") or {}
        kind = ev.get("event")
        if kind == "step":
            if ev.get("status") == "start":
                self.step_start(str(ev.get("name")))
            else:
                self.step_end(str(ev.get("name")), ev.get("status") == "ok", ev.get("elapsed"), ev.get("detail"),
                              ev.get("message"))
        elif kind == "log":
            lines = ev.get("lines") or []
            if lines:
                self.last_line = str(lines[-1]).strip()
                self._refresh()
        elif kind == "info":
            self.info(str(ev.get("message")))
