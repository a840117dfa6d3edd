"""Issue 40, point 7: progress that tells the truth. The sweep's time left comes from the measured deploy-and-bench
times of the configurations' own kind, and is shown only once each kind to come has one measurement (after a 19 s
baseline it said ~95 s left for five speculative loads of about 40 s); the wait-for-ready line keeps the START of
SGLang's log line (it was cut from the left). The figures are a 6-load `inv sweep --steps 0,2,3 --nccl pcie,none`
on the simulated host (18.9, 39.7, 45.0, 16.5, 39.1, 43.1 s)."""

from __future__ import annotations

import io
import re
import time

import pytest
from rich.console import Console

from fabfile.present.progress import LineSpinner, Reporter, SweepProgress
from tests.support.terminal import WIDTHS

TOOK = [(False, 18.9), (True, 39.7), (True, 45.0), (False, 16.5), (True, 39.1), (True, 43.1)]


def _finish(p: SweepProgress, i: int) -> None:
    speculative, took = TOOK[i]
    p.start(i + 1, f"c{i}", speculative=speculative)
    p.config_t0 = time.monotonic() - took  # as if it took that long (no clock in the test)
    p.finish(True, "done")


def test_no_time_left_is_said_before_a_configuration_of_each_kind_to_come_was_measured() -> None:
    p = SweepProgress("sim1", 6, enabled=False)
    p.expect([s for s, _ in TOOK])
    assert p.remaining() is None
    _finish(p, 0)
    assert p.remaining() is None  # only the baseline measured: 5 speculative ones to come
    _finish(p, 1)
    left = p.remaining()
    assert left == pytest.approx(3 * 39.7 + 18.9)
    actual = sum(t for _, t in TOOK[2:])
    assert abs(left - actual) / actual < 0.05  # 138 s against 143.7 s (the old rule: 2 × 29.3 × 4 = 117)
    for i in range(2, 6):
        _finish(p, i)
    assert p.remaining() == 0.0


@pytest.mark.parametrize("columns", WIDTHS)
def test_the_wait_for_ready_line_keeps_the_start_of_sglangs_line(columns: int) -> None:
    buf = io.StringIO()
    c = Console(file=buf, width=columns, force_terminal=True, no_color=True)
    r = Reporter("sim1", console=c, enabled=False)
    r.step_start("wait_ready")
    line = ("[2026-12-03 08:22:37 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
            "avail mem=120.43 GB, mem usage=15.12 GB. " + "x" * 200)
    r.event({"event": "log", "lines": [line]})
    c.print(LineSpinner("dots", text=r.status_text()))
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in buf.getvalue().splitlines() if ln.strip()]
    assert len(shown) == 1 and "[2026-12-03 08:22:37 TP0] Load weight end." in shown[0], shown
    assert shown[0].rstrip().endswith("…") and len(shown[0].rstrip()) <= columns
