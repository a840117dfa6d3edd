"""Issue 40, point 8: sweep.png's right-hand panel label ran past the figure's top (and bottom), and the shortest
accept length's marker sat on the baseline's line, as if the baseline had an accept length (it has none). The
figures are those of a real `inv sweep --steps 0,1,3` on a simulated 8-GPU host, where both happened."""

from __future__ import annotations

from typing import Any

import pytest

matplotlib = pytest.importorskip("matplotlib")  # the optional `plot` extra; the dev venv has it


def _phases(config: str, steps: int, verify: float, draft: float, extend: float, cycle: float) -> dict[str, Any]:
    def timer(ms: float) -> dict[str, Any]:
        return {"ms": ms, "count": 80, "source": "SGLang device timer"}

    rank = {"config": config, "steps": steps, "rank": 0, "verify": timer(verify), "draft": timer(draft),
            "draft_extend": timer(extend),
            "cycle": {"ms": cycle, "count": 4, "source": "derived: TPOT × accept length"}}
    return {"ranks": [rank], "cuda_graph": True, "missing": None}


def sweep_doc(phases: bool = True) -> dict[str, Any]:
    rows = [
        {"config": "baseline", "steps": 0, "topk": 1, "draft_tokens": None, "ok": True, "tok_s": 82.9,
         "accept_len": None, "decode_ms_per_token": 12.21, "requests": 4, "measured": True},
        {"config": "eagle3-s1-k1-d2", "steps": 1, "topk": 1, "draft_tokens": 2, "ok": True, "tok_s": 94.05,
         "accept_len": 1.745, "requests": 4, "measured": True},
        {"config": "eagle3-s3-k1-d4", "steps": 3, "topk": 1, "draft_tokens": 4, "ok": True, "tok_s": 87.49,
         "accept_len": 2.29, "requests": 4, "measured": True},
    ]
    if phases:
        rows[1]["phases"] = _phases("eagle3-s1-k1-d2", 1, 17.2, 0.0, 1.5, 18.7)
        rows[2]["phases"] = _phases("eagle3-s3-k1-d4", 3, 20.2, 3.0, 1.5, 26.5)
    return {"sweep_id": "20261204T183537-869a", "host": "sim2", "rows": rows, "winner": "eagle3-s1-k1-d2",
            "winners": {"1": "eagle3-s1-k1-d2"}, "concurrency_levels": [1], "params": {"concurrency": 1}}


@pytest.mark.parametrize("phases", [True, False], ids=["with-phase-bars", "without"])
def test_every_axis_label_is_inside_the_figure(phases: bool) -> None:
    from fabfile.present.plot import sweep_figure

    fig = sweep_figure(sweep_doc(phases))
    assert fig is not None
    fig.canvas.draw()  # the layout is what savefig writes
    page = fig.bbox
    labels = [a.yaxis.label for a in fig.axes if a.yaxis.label.get_text()]
    assert len(labels) == 2 + phases  # tok/s, accept length (and ms per cycle)
    for label in labels:
        box = label.get_window_extent()
        assert page.y0 <= box.y0 and box.y1 <= page.y1 and page.x0 <= box.x0 and box.x1 <= page.x1, \
            (label.get_text(), box, page)


def test_no_accept_length_marker_sits_on_the_baseline_line() -> None:
    from fabfile.present.plot import sweep_figure

    fig = sweep_figure(sweep_doc(phases=False))
    assert fig is not None
    fig.canvas.draw()
    tok_axis, accept_axis = fig.axes[0], fig.axes[1]
    baseline = [ln for ln in tok_axis.get_lines() if str(ln.get_label()).startswith("baseline")]
    assert len(baseline) == 1
    base_y = tok_axis.transData.transform((0, baseline[0].get_ydata()[0]))[1]
    markers = [ln for ln in accept_axis.get_lines() if str(ln.get_label()).startswith("accept len")]
    points = [accept_axis.transData.transform(xy)[1] for ln in markers for xy in ln.get_xydata()]
    assert len(points) == 2
    # A marker is ~6 px tall at this size: it sat 0 px from the line; now the nearest is far clear of it.
    assert min(abs(y - base_y) for y in points) > 40, (points, base_y)
    assert accept_axis.get_ylim()[0] == 0  # from 0: the shortest (1.745) reads as what it is
