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


@pytest.mark.parametrize("width", WIDTHS)
def test_explain_always_ends_with_a_verdict_naming_the_dominant_phase(width: int) -> None:
    """Issue 40, point 5: with measured phases and a baseline it printed the figures and "no rule fired"."""
    anatomy = {"draft": {"ms": 3.0, "source": "SGLang device timer"},
               "verify": {"ms": 20.2, "source": "SGLang device timer"},
               "draft_extend": {"ms": 1.5, "source": "SGLang device timer"},
               "cycle": {"ms": 24.7, "source": "the tool"}, "accept_length": {"ms": 2.5, "source": "meta_info"}}
    with_base = Subject(config="eagle3-s3-k1-d4", anatomy=anatomy,
                        baseline={"decode": {"ms": 12.2, "source": "SGLang device timer"}})
    for subject, ratio, nxt in ((with_base, "1.66× a decode step", "inv profile --trace"),
                                (Subject(config="eagle3-s3-k1-d4", anatomy=anatomy), None, "bench a baseline")):
        buf = io.StringIO()
        print_explained([(subject, [])], Console(file=buf, width=width, color_system=None))
        last = " ".join(buf.getvalue().split("\n  verdict: ")[-1].split())
        assert buf.getvalue().count("verdict: ") == 1 and last.startswith("verify dominates, 82 % of the cycle"), last
        assert (ratio is None or ratio in last) and nxt in last, last


@pytest.mark.parametrize("width", WIDTHS)
def test_two_hosts_that_measured_the_same_are_two_entries_each_named(width: int) -> None:
    """`explain --host sim1,sim2` on two identical simulated hosts: same figures, same findings — still two hosts,
    each named, each with its verdict (merged, one host's verdict went missing and the hosts were not named)."""
    from dataclasses import replace

    buf = io.StringIO()
    pairs = [(replace(_subject(r), host=h), []) for h in ("sim1", "sim2") for r in range(8)]
    print_explained(pairs, Console(file=buf, width=width, color_system=None))  # type: ignore[arg-type]
    text = buf.getvalue()
    heads = [ln for ln in text.splitlines() if ln.startswith("sim")]
    assert [h.split()[0] for h in heads] == ["sim1", "sim2"], text
    assert all(" ranks 0–7 " in h for h in heads) and text.count("verdict: ") == 2, text
