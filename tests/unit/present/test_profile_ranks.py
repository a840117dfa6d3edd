"""Issue 40, point 4: `inv profile` prints one table where the ranks agree ("ranks 0–7 agree within N %"), a table
of its own for a rank that differs, and every rank with --verbose; at 80 and 200 columns."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from fabfile.present.profile_report import print_profile, rank_span
from tests.support.terminal import WIDTHS


def _rank(n: int, verify_ms: float = 20.2) -> dict[str, Any]:
    timer = {key: {"ms": ms, "source": "SGLang device timer", "count": 830}
             for key, ms in (("draft_step", 1.5), ("draft", 3.0), ("verify", verify_ms), ("draft_extend", 1.5),
                             ("cycle", 24.7), ("accept_length", 2.47))}
    return {"rank": n, "timer": {**timer, "steps": 3}}


def _profile(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"host": "sim1", "config_name": "eagle3-s3-k1-d4", "deploy_id": "20261202T201047-b4d779",
            "speculative": {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "draft_tokens": 4}, "timer": True,
            "ranks": ranks}


def _text(doc: dict[str, Any], width: int, verbose: bool = False) -> str:
    buf = io.StringIO()
    print_profile(doc, Console(file=buf, width=width, color_system=None), verbose=verbose)
    return buf.getvalue()


@pytest.mark.parametrize("width", WIDTHS)
def test_ranks_that_agree_print_as_one_table_and_a_rank_apart_gets_its_own(width: int) -> None:
    same = _text(_profile([_rank(n) for n in range(8)]), width)
    assert same.count("verify ") == 1 and "ranks 0–7 agree within 0.0 %" in same, same
    assert "rank 3" not in same and "--verbose" in same
    apart = _text(_profile([*(_rank(n) for n in range(5)), _rank(5, verify_ms=26.0), _rank(6), _rank(7)]), width)
    assert apart.count("verify ") == 2 and "ranks 0, 1, 2, 3, 4, 6, 7 agree" in apart and "rank 5\n" in apart, apart
    every = _text(_profile([_rank(n) for n in range(8)]), width, verbose=True)
    assert every.count("verify ") == 8 and "agree" not in every, every


def test_rank_span_says_a_run_as_a_range() -> None:
    assert rank_span([0, 1, 2, 3]) == "0–3" and rank_span([0, 2, 5]) == "0, 2, 5" and rank_span([0, 1]) == "0, 1"
