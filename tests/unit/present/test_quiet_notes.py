"""Issue 40, point 4: a note the tool raises about its own built-in preset (NCCL_PROTO=LL's, ~600 characters once)
and the device timer's recorded cost are said once per command, short, whatever the number of hosts, and not at
all under the inventory's `notes: {quiet: [nccl_preset, timer_cost]}`. `inv render` of two hosts at 80 and 200
columns, on a pty and in a pipe beside one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.terminal import WIDTHS, run_on_terminal

INVENTORY = """
defaults:
  python: /usr/bin/python3
  model: /m/target
  draft_model: /m/draft
  nccl_preset: pcie
  gpus: 8
{quiet}
hosts:
  g1: {{default: true}}
  g2: {{}}
"""
ARGS = ("render", "--host", "all", "--steps", "3", "--measure", "--sglang-version", "0.5.16")


def _inventory(tmp_path: Path, quiet: bool) -> Path:
    p = tmp_path / "i.yaml"
    p.write_text(INVENTORY.format(quiet="  notes: {quiet: [nccl_preset, timer_cost]}" if quiet else ""))
    return p


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("on_terminal", [True, False], ids=["pty", "pipe"])
def test_notes_on_the_tools_own_settings_said_once_or_silenced(tmp_path: Path, columns: int,
                                                               on_terminal: bool) -> None:
    code, shown, _ = run_on_terminal(*ARGS, columns=columns, inventory=_inventory(tmp_path, False),
                                     stdout_tty=on_terminal)
    assert code == 0, shown
    flat = shown.replace("\n", "") if on_terminal else shown  # the terminal folds a long line, nothing else
    assert flat.count("plan for g") == 2
    for start in ("note: NCCL_PROTO=LL leaves all-reduce", "note: NCCL_MAX_NCHANNELS is deprecated",
                  "note: measurement on (--measure); its recorded cost"):
        assert flat.count(start) == 1, (start, shown)  # for g1, not again for g2
    assert "note: 3 more, said above for another host" in flat
    if not on_terminal:
        cost = next(ln for ln in shown.splitlines() if "its recorded cost" in ln)
        assert len(cost) < 340 and cost.rstrip().endswith("(docs/measured.md, docs/real-sglang.md)"), cost
    code, shown, _ = run_on_terminal(*ARGS, columns=columns, inventory=_inventory(tmp_path, True),
                                     stdout_tty=on_terminal)
    assert code == 0, shown
    assert "NCCL_PROTO=LL leaves" not in shown and "NCCL_MAX_NCHANNELS is deprecated" not in shown
    assert "recorded cost" not in shown and shown.count("note: measurement on (--measure)") == 1, shown
