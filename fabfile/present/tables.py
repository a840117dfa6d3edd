"""The one table builder of every report: tables that never cut a key value, at any terminal width and piped to a
file, and the one way a missing value is printed (:func:`cell`: ``-``).

Rich squeezes a table that is wider than the terminal by cutting cells to ``eagle…``. Here the key columns (host,
config, deploy id, verdict, numbers) keep their full width and only the free-text columns wrap; when even the key
columns do not fit side by side, the rows print as a list instead (``head: value`` pairs, wrapped between pairs),
so every value is still printed whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

DASH = "-"  # a value that is not there (None, an empty string), in a table cell or a line


def cell(value: Any, fmt: str = "{}") -> str:
    """``value`` as printed: through ``fmt`` (``"{:.1f}"``), or :data:`DASH` when there is none."""
    return DASH if value is None or value == "" else fmt.format(value)


@dataclass(frozen=True)
class Col:
    head: str
    key: bool = True            # never cut or wrapped
    justify: str = "left"
    style: str = ""             # the column's style (a source column printed dim)
    always: bool = False        # the narrow layout shows it even without a value (a monitor keeps its shape)


def _plain(cell: Any) -> str:
    # Markup read as the consoles print it: no emoji codes (``output.console``), so a width is the printed one.
    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(str(cell), emoji=False).plain


def print_table(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[Any]], title: str | None = None,
                min_free: int = 8, *, boxed: bool = True, title_style: str | None = None) -> None:
    """Print ``rows`` (cells: markup strings or Text) under ``cols`` within ``console.width``."""
    console.print(fit_table(console.width, cols, rows, title, min_free, boxed=boxed, title_style=title_style),
                  soft_wrap=False)


def _widths(cols: Sequence[Col], rows: Sequence[Sequence[Any]]) -> list[int]:
    return [max([len(c.head), *(len(_plain(r[i])) for r in rows)]) for i, c in enumerate(cols)]


def fits(width: int, cols: Sequence[Col], rows: Sequence[Sequence[Any]], min_free: int = 8, *,
         boxed: bool = True) -> bool:
    """Whether the table's key columns fit side by side within ``width`` (else :func:`fit_table` lists the rows)."""
    gaps = 3 * len(cols) + 1 if boxed else 2 * (len(cols) - 1)  # borders and padding, or two spaces between
    return sum(w if c.key else min(w, min_free) for c, w in zip(cols, _widths(cols, rows), strict=True)) + gaps <= width


def fit_table(width: int, cols: Sequence[Col], rows: Sequence[Sequence[Any]], title: str | None = None,
              min_free: int = 8, *, boxed: bool = True, title_style: str | None = None) -> RenderableType:
    """The renderable :func:`print_table` prints (``inv watch`` redraws it in place): a table within ``width``, or
    the list layout when its key columns do not fit side by side. ``boxed=False``: no lines around or between the
    cells (a figures block under a heading line); ``title_style``: a dim title on the left, as a caption."""
    widths = _widths(cols, rows)
    if not fits(width, cols, rows, min_free, boxed=boxed):
        return Group(*list_lines(width, cols, rows, title))
    t = Table(header_style="bold", title=title) if boxed else Table(header_style="bold", title=title, box=None,
                                                                      pad_edge=False)
    if title_style is not None:
        t.title_style, t.title_justify = title_style, "left"
    for c, w in zip(cols, widths, strict=True):
        if c.key:
            t.add_column(c.head, no_wrap=True, min_width=w, justify=c.justify,  # type: ignore[arg-type]
                         style=c.style)
        else:
            # A free column wraps, but never below the width the fit was reckoned with (a head cut to `eviden`).
            t.add_column(c.head, overflow="fold", justify=c.justify, style=c.style,  # type: ignore[arg-type]
                         min_width=min(w, min_free))
    for r in rows:
        t.add_row(*r)
    return t


def list_lines(width: int, cols: Sequence[Col], rows: Sequence[Sequence[Any]], title: str | None = None) -> list[Text]:
    """The narrow layout: per row, the first cell, then ``head: value`` pairs wrapped between pairs."""
    lines: list[Text] = [Text.from_markup(f"[bold]{title}[/bold]", emoji=False)] if title else []
    width = max(width, 40)
    for r in rows:
        first = Text.from_markup(r[0], emoji=False) if isinstance(r[0], str) else r[0]
        line = Text()
        line.append_text(first)
        length = len(line.plain)
        for c, cell in zip(cols[1:], r[1:], strict=True):
            value = Text.from_markup(cell, emoji=False) if isinstance(cell, str) else cell
            if not value.plain or (value.plain == DASH and not c.always):
                continue
            pair = Text(f"{c.head}: ", style="dim")
            pair.append_text(value)
            if length + 2 + len(pair.plain) > width and length > 4:
                lines.append(line)
                line, length = Text("    "), 4
            else:
                line.append("  ")
                length += 2
            line.append_text(pair)
            length += len(pair.plain)
        lines.append(line)
    return lines
