"""Issue 40, point 4: `inv explain` on 8 ranks that measured the same says it once ("ranks 0–7"), not eight identical
lines each followed by the same finding; a rank that differs keeps its own line. At 80 and 200 columns."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from fabfile.plan.explain import Subject
from fabfile.present.explain_report import print_explained
from tests.support.terminal import WIDTHS


def _subject(rank: int, verify_ms: float = 20.2) -> Subject:
    anatomy = {"verify": {"ms": verify_ms, "source": "timer"}, "cycle": {"ms": 24.7, "source": "tool"},
               "accept_length": {"ms": 2.5, "source": "meta"}}
    return Subject(config="eagle3-s3-k1-d4", anatomy=anatomy, rank=rank)


@pytest.mark.parametrize("width", WIDTHS)
def test_ranks_with_the_same_figures_and_findings_print_once(width: int) -> None:
    buf = io.StringIO()
    pairs = [(_subject(r, verify_ms=26.0 if r == 5 else 20.2), []) for r in range(8)]
    print_explained(pairs, Console(file=buf, width=width, color_system=None))  # type: ignore[arg-type]
    text = buf.getvalue()
    heads = [ln for ln in text.splitlines() if ln.startswith("eagle3-s3-k1-d4")]
    assert len(heads) == 3, text  # ranks 0–4, rank 5 apart, ranks 6, 7
    assert heads[0].startswith("eagle3-s3-k1-d4 ranks 0–4 ") and " rank 5:" in heads[1], text
    assert heads[2].startswith("eagle3-s3-k1-d4 ranks 6, 7 ") and text.count("no rule fired") == 3, text
