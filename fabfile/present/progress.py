"""Live progress a person can follow: one line per finished step with its time, a spinner with the elapsed time and
the server's last log line while waiting. Progress goes to stderr so ``--json`` keeps stdout machine-readable."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any, cast

from rich.console import Console, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from fabfile.present import output

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.remote.protocol import AgentEvent, StepName

# One title per step the protocol names (tests/unit/present/test_step_titles.py holds the two in step).
STEP_TITLES: dict[StepName, str] = {
    "connect": "connect", "preflight": "preflight", "lock": "lock", "patch": "patch", "stop": "stop stale servers",
    "gpu_clean": "GPU-clean gate", "port_free": "port free", "start": "start server", "wait_ready": "wait for ready",
    "first_request": "first real request", "accept_gate": "accept-length gate", "verify_env": "verify env",
    "record": "record deploy", "bench": "bench", "profile": "profile",
}


def step_title(name: str) -> str:
    """A step's title; a name this client does not know (an agent newer than it) is shown as the agent wrote it."""
    return cast("dict[str, str]", STEP_TITLES).get(name, name)  # any str from the wire may be looked up


# An HTTP server's access-log line (uvicorn's, as SGLang logs it): `127.0.0.1:51234 - "GET /ready HTTP/1.1" 503`.
ACCESS_LINE = re.compile(r'"(?:GET|POST|HEAD) /\S* HTTP/[0-9.]+" \d{3}')


def one_line(text: Text) -> Text:
    """A live line never wraps: what does not fit is cut at the end (…), so a log line keeps its start."""
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


class LineSpinner(Spinner):
    """rich's spinner, its line kept to one (rich assembles the frame and the text anew, dropping no_wrap)."""

    def render(self, time: float) -> RenderableType:
        shown = super().render(time)
        return one_line(shown) if isinstance(shown, Text) else shown


class Reporter:
    """Receives step/log/info events; the quiet variant (``enabled=False``) only keeps timings."""

    def __init__(self, host: str, *, enabled: bool = True, console: Console | None = None) -> None:
        self.host = host
        self.enabled = enabled
        self.console = console or output.console(stderr=True)
        self.timings: dict[str, float] = {}
        self.current: str | None = None
        self.current_started = 0.0
        self.last_line = ""
        self.live: Live | None = None
        self.t0 = time.monotonic()
        self.events_seen = 0
        self.failure_shown = False  # a ✗ line was printed for this host
        self.hidden: list[str] = []  # secret values to mask in log lines (set by the deploy from the plan)

    # -- rendering ----------------------------------------------------------------------------------------------
    def status_text(self) -> Text:
        """The live line beside the spinner: host, step, its clock and SGLang's last log line, cut at the end of the
        terminal (its start says what SGLang is doing: it was cut from the left, `...oad weight end.`)."""
        elapsed = time.monotonic() - self.current_started
        title = step_title(self.current or "")
        text = Text.assemble((f"{self.host} ", "bold"), f"{title} ", (f"{elapsed:5.1f}s", "cyan"))
        if self.last_line:
            text.append(f"  {self.last_line}", style="dim")
        return one_line(text)

    def _spinner(self) -> Spinner:
        return LineSpinner("dots", text=self.status_text())

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
            title = step_title(name)
            extra = f"  [dim]{detail}[/dim]" if detail and ok else ""
            if not ok and message:
                # The error itself is printed once, whole, with its hint, by the deploy's summary that follows.
                extra = "  [red]failed[/red]"
            self.console.print(f"{mark} [bold]{self.host}[/bold] {title:<18} {elapsed:6.2f}s{extra}")
        self.failure_shown = self.failure_shown or not ok
        self.current = None

    def failed_between_steps(self) -> None:
        """The ✗ line of a deploy that failed with no step in flight: its link died after one step's end reached us
        and before the next one's start did. In a parallel deploy the other hosts' lines go on; this host's failure
        is said when it happens, not only in the summary after the rollback."""
        self._stop_live()
        if self.enabled and not self.failure_shown:
            elapsed = time.monotonic() - self.t0
            # No step was current, so the time is the whole deploy's (since it began), and the line says so.
            self.console.print(f"[red]✗[/red] [bold]{self.host}[/bold] {'between steps':<18} {elapsed:6.2f}s  "
                               "[red]failed[/red] (time since the deploy began)")
        self.failure_shown = True

    def info(self, message: str) -> None:
        if self.enabled:
            self._stop_live()
            self.console.print(f"  [yellow]•[/yellow] {self.host}: {message}")
            if self.current:
                self._start_live()

    def event(self, ev: AgentEvent) -> None:
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
            # SGLang's own progress (weights, KV cache, CUDA graph capture), not the access-log lines of the tool's
            # own readiness probes (`"GET /ready HTTP/1.1" 503`, every half second while it loads).
            lines = [x for x in ev.get("lines") or [] if not ACCESS_LINE.search(str(x))]
            if lines:
                from fabfile.plan.deploy_plan import mask_secrets
                from fabfile.present.text import terminal_safe

                self.last_line = terminal_safe(mask_secrets(str(lines[-1]).strip(), self.hidden))
                self._refresh()
        elif kind == "info":
            self.info(str(ev.get("message")))
        elif kind == "lock_wait":
            self.info(lock_wait_line(ev))


def lock_wait_line(ev: AgentEvent) -> str:
    """Waiting for another deploy's lock: which deploy holds the host, which step it is on, how long we still wait."""
    h = ev.get("holder") or {}
    left = f"waiting up to {float(ev.get('left_s') or 0):.0f} s more"
    if not h:
        return f"another command holds this host's deploy lock; {left}"
    step = step_title(str(h.get("step") or "?"))
    return (f"deploy {h.get('deploy_id')} (from {h.get('client')}, started {h.get('since')}) holds this host, "
            f"now at step '{step}'; {left} (`inv status` follows it, `inv cancel` stops it)")


class BenchProgress:
    """A benchmark's live line on stderr: requests done of total, elapsed, and the estimated time left."""

    def __init__(self, host: str, *, enabled: bool = True, console: Console | None = None,
                 prefix: str = "") -> None:
        self.host = host
        self.enabled = enabled
        self.console = console or output.console(stderr=True)
        self.prefix = prefix
        self.t0 = time.monotonic()
        self.done = 0
        self.total = 0
        self.last_line = ""
        self.live: Live | None = None

    def text(self) -> Text:
        elapsed = time.monotonic() - self.t0
        text = Text.assemble((f"{self.host} ", "bold"), self.prefix, "bench ", (f"{elapsed:5.1f}s", "cyan"))
        if self.total:
            text.append(f"  {self.done}/{self.total} requests")
            if self.done:
                text.append(f", ~{elapsed / self.done * (self.total - self.done):.0f}s left", style="dim")
        if self.last_line:
            text.append(f"  {self.last_line}", style="dim")
        return one_line(text)

    def event(self, ev: AgentEvent) -> None:
        kind = ev.get("event")
        if kind == "progress":
            self.done, self.total = int(ev.get("done") or 0), int(ev.get("total") or 0)
        elif kind == "log":
            lines = ev.get("lines") or []
            if lines:
                self.last_line = str(lines[-1]).strip()
        elif kind == "info" and self.enabled and self.live is None:
            self.console.print(f"  [yellow]•[/yellow] {self.host}: {ev.get('message')}")
        if self.enabled and self.console.is_terminal:
            if self.live is None:
                self.live = Live(LineSpinner("dots", text=self.text()), console=self.console, refresh_per_second=10,
                                 transient=True)
                self.live.start()
            self.live.update(LineSpinner("dots", text=self.text()))

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


class SweepProgress:
    """A sweep's progress on stderr: which configuration, which phase, elapsed, and the estimated time left
    (the mean time per finished configuration times those left). One line per finished configuration."""

    def __init__(self, host: str, total: int, *, enabled: bool = True, console: Console | None = None) -> None:
        self.host = host
        self.total = total
        self.at_most = False  # total is an upper bound (--predict: predicted winners may still be measured)
        self.enabled = enabled
        self.console = console or output.console(stderr=True)
        self.t0 = time.monotonic()
        self.index = 0
        self.config = ""
        self.phase = ""
        self.finished: list[float] = []
        self.kinds: list[bool] = []  # per finished configuration: speculative (True) or the baseline
        self.upcoming: list[bool] = []
        self.speculative = True
        self.config_t0 = self.t0
        self.live: Live | None = None
        self.bench: BenchProgress | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    @property
    def of(self) -> str:
        """The counter's total: ``≤4`` while predicted winners may still be measured."""
        return f"≤{self.total}" if self.at_most else str(self.total)

    def expect(self, speculative: list[bool]) -> None:
        """The kinds of the configurations to come, in order (a baseline loads no draft model and benchmarks
        faster); those past the list (predicted winners) are speculative."""
        self.upcoming = list(speculative)

    def remaining(self) -> float | None:
        """Seconds left: each configuration to come (the current one included, less its time so far) at the mean
        measured deploy-and-bench time of its kind. None until each kind to come has one measurement: a
        baseline's 19 s said ~95 s left for five speculative loads of 40 s each."""
        done = len(self.finished)
        left = [self.upcoming[i] if i < len(self.upcoming) else True for i in range(done, self.total)]
        times: dict[bool, list[float]] = {}
        for took, kind in zip(self.finished, self.kinds, strict=True):
            times.setdefault(kind, []).append(took)
        means = {k: sum(v) / len(v) for k, v in times.items()}
        if not left or any(k not in means for k in left):
            return None if left else 0.0
        current = time.monotonic() - self.config_t0 if self.config else 0.0
        first = max(0.0, means[left[0]] - current) if self.config else means[left[0]]
        return first + sum(means[k] for k in left[1:])

    def _text(self) -> Text:
        rem = self.remaining()
        text = Text.assemble((f"{self.host} ", "bold"), f"sweep [{self.index}/{self.of}] ", (self.config, "bold"),
                             f" {self.phase} ", (f"{time.monotonic() - self.config_t0:5.1f}s", "cyan"),
                             f"  elapsed {self.elapsed():.0f}s")
        if rem is not None:
            text.append(f", ~{rem:.0f}s left", style="dim")
        if self.bench is not None and self.bench.total:
            text.append(f"  {self.bench.done}/{self.bench.total} requests", style="dim")
        return text

    def _refresh(self) -> None:
        if not (self.enabled and self.console.is_terminal):
            return
        if self.live is None:
            self.live = Live(LineSpinner("dots", text=self._text()), console=self.console, refresh_per_second=10,
                             transient=True)
            self.live.start()
        self.live.update(LineSpinner("dots", text=self._text()))

    def _print(self, message: str) -> None:
        if not self.enabled:
            return
        live = self.live
        if live is not None:
            live.stop()
            self.live = None
        self.console.print(message)
        if live is not None:
            self._refresh()

    def start(self, index: int, config: str, speculative: bool = True) -> None:
        self.index, self.config, self.config_t0 = index, config, time.monotonic()
        self.speculative = speculative
        self.set_phase("deploy")
        rem = self.remaining()
        self._print(f"[bold]{self.host}[/bold] [{index}/{self.of}] [bold]{config}[/bold]: deploying "
                    f"[dim](elapsed {self.elapsed():.1f}s" + (f", ~{rem:.0f}s left)" if rem is not None else ")")
                    + "[/dim]")

    def start_keep(self, config: str) -> None:
        """The final redeploy of the configuration to leave running (not counted as a configuration)."""
        self.config, self.config_t0 = config, time.monotonic()
        self.set_phase("redeploy to keep")
        self._print(f"[bold]{self.host}[/bold] keeping [bold]{config}[/bold]: redeploying "
                    f"[dim](elapsed {self.elapsed():.1f}s)[/dim]")

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self._refresh()

    def finish(self, ok: bool, summary: str, counted: bool = True) -> None:
        took = time.monotonic() - self.config_t0
        if counted:
            self.finished.append(took)
            self.kinds.append(self.speculative)
        mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
        where = f"[{self.index}/{self.of}] " if counted else ""
        self._print(f"{mark} [bold]{self.host}[/bold] {where}[bold]{self.config}[/bold] "
                    f"{summary}  [dim]({took:.1f}s)[/dim]")
        self.config = ""

    def note(self, message: str) -> None:
        self._print(f"  [yellow]•[/yellow] {self.host}: {message}")

    def deploy_reporter(self) -> Reporter:
        return _SweepDeployReporter(self)

    def bench_events(self) -> BenchProgress:
        self.bench = BenchProgress(self.host, enabled=False)
        return self.bench

    def bench_event(self, ev: AgentEvent) -> None:
        if self.bench is not None:
            self.bench.event(ev)
        self._refresh()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


class _SweepDeployReporter(Reporter):
    """The deploy's step events feed the sweep's one progress line instead of printing a line per step."""

    def __init__(self, sweep: SweepProgress) -> None:
        super().__init__(sweep.host, enabled=False, console=sweep.console)
        self.sweep = sweep

    def step_start(self, name: str) -> None:
        super().step_start(name)
        self.sweep.set_phase("deploy: " + step_title(name))

    def info(self, message: str) -> None:
        self.sweep.note(message)
