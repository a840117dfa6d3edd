"""Whether a deploy measures where a cycle's time goes, and what that costs: pure values, no I/O.

Measurement is SGLang's own per-phase GPU timer: ``--enable-metrics`` and ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``
(the releases whose wheels have it: ``versioncheck.device_timer_releases``). It times every forward with CUDA events,
a fixed cost per forward that weighs on a small fast model and little on one whose verify takes tens of ms, so it is
not on by default everywhere: the inventory's ``measure`` or ``--measure/--no-measure`` decide; left unset, it is on
for the deploys of commands that measure (``inv sweep``) where the version has it, and on a plain deploy only once a
recorded cost for that release is under ``DEFAULT_ON_BELOW_PCT``.

The profiler (``/start_profile``) needs no restart and no flag, only a directory: every deploy points
``SGLANG_TORCH_PROFILER_DIR`` at ``<state_dir>/profiles`` (SGLang's default is ``/tmp``, shared with every account on
the host), which the agent creates 0700 and never through a symlink before the server starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabfile.plan import versioncheck
from fabfile.remote import versions

TIMER_ENV = versioncheck.DEVICE_TIMER_ENV

PROFILER_DIR_ENV = "SGLANG_TORCH_PROFILER_DIR"
PROFILES_DIR = "profiles"  # under the host's state_dir; `inv profile` (the agent's profile verb) reads it
METRICS_FLAG = "--enable-metrics"
# A plain deploy turns the timer on by itself only when it is known to cost less than this share of served tok/s.
DEFAULT_ON_BELOW_PCT = 3.0


def profile_dir(state_dir: str) -> str:
    return f"{state_dir.rstrip('/')}/{PROFILES_DIR}"


@dataclass(frozen=True)
class TimerCost:
    """One measured cost of the timer on served tok/s: pairs of runs with it on and off, on one setup."""

    release: str            # the SGLang release it was measured on (it holds for later ones until measured again)
    setup: str              # GPU, model, CUDA graphs: what the figure is true of
    pairs: tuple[tuple[float, float], ...]  # (tok/s timer on, tok/s timer off), one pair per run
    measured_by: str        # who measured and where it is written down
    label: str = ""         # the setup in a few words, for the plan's one-line note (default: ``setup``)

    @property
    def cost_pct(self) -> tuple[float, float]:
        """The smallest and largest cost of the pairs, in % of the timer-off tok/s."""
        costs = [(off - on) / off * 100 for on, off in self.pairs if off > 0]
        return min(costs), max(costs)

    def span(self) -> str:
        lo, hi = self.cost_pct
        if lo < 0 < hi:
            # Pairs on both sides of zero ("−41.6–28.7 %"): a fresh deploy moved tok/s more than the timer did.
            return "not measurable against the deploy-to-deploy spread"
        return f"{lo:.1f} %" if abs(hi - lo) < 0.05 else f"{lo:.1f}–{hi:.1f} %"

    def sentence(self) -> str:
        where = f"in {len(self.pairs)} on/off pair(s) on SGLang {self.release}, {self.setup} ({self.measured_by})"
        span = self.span()
        if span.startswith("not "):
            return f"the device timer's cost was {span} {where}"
        return f"the device timer cost {span} of served tok/s {where}"

    def cites(self) -> list[str]:
        """The files of this repository the figure is written down in."""
        return re.findall(r"[\w./-]+\.(?:md|py|log)", self.measured_by)


# Where the measured costs go (newest last). The figures below were measured on one H200 with real SGLang 0.5.16 and
# the project's synthetic models, written down in docs/measured.md ("The device timer's cost"); the tool's own runs
# on the GPU (issue 26, docs/real-sglang.md) add their rows here. A sentence cites only files in this repository.
MEASURED_COSTS: tuple[TimerCost, ...] = (
    TimerCost("0.5.16", "one H200, synthetic target + EAGLE-3 draft, CUDA graphs off",
              ((280.5, 302.6), (315.1, 319.8)), "measured by hand, docs/measured.md",
              "by hand, CUDA graphs off"),
    TimerCost("0.5.16", "one H200, synthetic target + EAGLE-3 draft, CUDA graphs on",
              ((1268.7, 1306.2), (1216.8, 1409.9)), "measured by hand, docs/measured.md",
              "by hand, CUDA graphs on"),
    # The tool's own run (bench/real_sglang/real_run.py --phase profileb, 2026-12-01): three alternated pairs of a
    # fresh deploy each, 16 requests of 256 tokens at concurrency 1; mean 1002.6 on against 1064.1 off (5.8 %), the
    # pairs themselves spread from -41 % to +29 % (docs/real-sglang.md): noisy on a model this small.
    TimerCost("0.5.16", "one H200, synthetic target + EAGLE-3 draft (steps 3), CUDA graphs on, the tool's bench",
              ((1149.2, 811.7), (932.4, 1307.1), (926.2, 1073.6)),
              "measured by the tool, bench/real_sglang/real_run.py --phase profileb (docs/real-sglang.md)",
              "the tool's bench, CUDA graphs on"),
)


def recorded_costs(version: str | None) -> list[TimerCost]:
    """The costs measured on the newest release not newer than ``version`` that has any (None: the newest)."""
    releases = {c.release for c in MEASURED_COSTS}
    read = max(releases, key=versions.key) if version is None else versions.newest_not_newer(version, releases)
    return [c for c in MEASURED_COSTS if c.release == read]


@dataclass(frozen=True)
class Choice:
    on: bool
    why: str  # a sentence: who decided (flag, inventory, the command, the recorded cost)


def decide(wanted: bool | None, wanted_by: str, measuring: bool, has_timer: bool, releases: str,
           version: str | None) -> Choice:
    """Whether the deploy turns the timer on. ``wanted``: the flag's or the inventory's value (``wanted_by`` names
    which); ``measuring``: the deploy is a sweep's; ``has_timer``: the version has the per-phase timer (a version
    without it and ``wanted`` true is refused by ``versioncheck.check``, exit 2)."""
    name = f"SGLang {version}" if version else "the host's SGLang"
    if wanted is True:
        return Choice(True, f"measurement on ({wanted_by})")
    if wanted is False:
        return Choice(False, f"measurement off ({wanted_by})")
    if not has_timer:
        return Choice(False, f"measurement off: {name} has no per-phase device timer (releases that have it: "
                             f"{releases})")
    if measuring:
        return Choice(True, "measurement on: this deploy is measured (inv sweep); --no-measure or measure: false "
                            "turns it off")
    costs = recorded_costs(version)
    worst = max((c.cost_pct[1] for c in costs), default=None)
    if worst is not None and worst < DEFAULT_ON_BELOW_PCT:
        return Choice(True, f"measurement on: its recorded cost is under {DEFAULT_ON_BELOW_PCT:g} % of served tok/s")
    return Choice(False, "measurement off (the default for a deploy that is not measured: --measure or measure: "
                         "true turns SGLang's device timer on)")


def cost_note(version: str | None) -> str:
    """What the plan says about the timer's price on this release, in one clause: each recorded setup's span and
    the files they are written down in (the sentences of :meth:`TimerCost.sentence` ran to ~900 characters, said on
    every deploy that turned the timer on; an inventory's ``notes: {quiet: [timer_cost]}`` silences it)."""
    costs = recorded_costs(version)
    if not costs:
        return ("its cost on served tok/s is not measured for this release yet: `inv bench` against a deploy with "
                "and one without --measure measures it")
    spans = ", ".join(f"{c.span()} ({c.label or c.setup})" for c in costs)
    cited = ", ".join(dict.fromkeys(f for c in costs for f in c.cites() if f.endswith(".md")))  # the write-ups
    return f"its recorded cost in % of served tok/s on SGLang {costs[0].release}: {spans} ({cited})"


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    on: bool
    added: tuple[str, ...]  # what this decision added (taken back when the plan is decided again)
    notes: list[str]


def launch(argv: list[str], env: dict[str, str], added_before: tuple[str, ...], wanted: bool | None,
           wanted_by: str, measuring: bool, version: str | None, quiet_cost: bool = False) -> Launch:
    """The launch's argv and environment with the device timer on or off for ``version``: what an earlier decision
    added is taken back first (a plan is rendered before preflight, with the newest release assumed, and again for
    the host's version), a flag or variable the operator gave is never removed. ``quiet_cost``: the inventory's
    ``notes: {quiet: [timer_cost]}``, the note says who turned the timer on and not its recorded cost."""
    if METRICS_FLAG in added_before and METRICS_FLAG in argv:
        argv.remove(METRICS_FLAG)
    if TIMER_ENV in added_before:
        env.pop(TIMER_ENV, None)
    choice = decide(wanted, wanted_by, measuring, versioncheck.has_device_timer(version),
                    versioncheck.device_timer_releases(), version)
    added: list[str] = []
    if choice.on:
        if METRICS_FLAG not in argv:
            argv.append(METRICS_FLAG)
            added.append(METRICS_FLAG)
        if TIMER_ENV not in env:
            env[TIMER_ENV] = "1"
            added.append(TIMER_ENV)
    # Said when it is on (what it costs), or when a measured deploy cannot have it; a deploy left off says nothing.
    notes = [choice.why if quiet_cost else f"{choice.why}; {cost_note(version)}"] if choice.on else \
        [choice.why] if measuring and wanted is None else []
    return Launch(argv, env, choice.on, tuple(added), notes)


def profiler_notes(loopback: bool, listen: str, port: int, sglang_args: tuple[str, ...], directory: str) -> list[str]:
    """SGLang's ``/start_profile`` is ``ADMIN_OPTIONAL``: open to anyone who reaches the port unless the server has
    ``--admin-api-key``. Beyond loopback without one, the plan says so (as it does for the listen address)."""
    if loopback or any(a.split("=", 1)[0] == "--admin-api-key" for a in sglang_args):
        return []
    return [f"/start_profile on port {port} is open to anyone who reaches it (listen {listen}, no --admin-api-key): "
            "they can start SGLang's profiler, which slows every request and writes traces into "
            f"{directory}; add --admin-api-key to sglang_args or listen on 127.0.0.1"]
