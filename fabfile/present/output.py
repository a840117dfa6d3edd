"""What the commands print: summaries for people (rich, stdout) and one JSON document for machines (--json)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console, ConsoleDimensions

from fabfile.errors import SpecDeployError
from fabfile.present.text import pipe_closed, terminal_safe


class _Stdout:
    """``sys.stdout`` as it is at each write (tests swap it), with a closed pipe ending the process quietly."""

    def write(self, text: str) -> int:
        try:
            return sys.stdout.write(text)
        except BrokenPipeError:
            pipe_closed()

    def flush(self) -> None:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            pipe_closed()

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stdout, name)


# A line printed into a pipe or a file is never wrapped: ``inv deploy | grep "ssh -F"`` must get the tunnel line
# whole. Rich would take the width of whichever standard stream is a terminal (stderr's, under a pipe), so a piped
# stdout was hard-wrapped at the operator's 80 columns. Wide enough for any line the tool prints, tables included.
UNWRAPPED_WIDTH = 1 << 16


class UnwrappedWhenPiped(Console):
    """A console that wraps only on a terminal. Into a pipe or a file its width is :data:`UNWRAPPED_WIDTH`, unless
    a width was asked for (``COLUMNS`` in the environment, or set by the caller), which is kept."""

    @property
    def size(self) -> ConsoleDimensions:
        dims = Console.size.fget(self)  # type: ignore[attr-defined]
        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(UNWRAPPED_WIDTH, dims.height)
        return dims  # type: ignore[no-any-return]

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


def console(**options: Any) -> Console:
    """A console of the tool's (stdout's, stderr's, a progress line's): not wrapped into a pipe or a file.

    No emoji codes: the tool writes none, and Rich would turn a ``:name:`` in a host's text (a log line, an error
    from the host, printed as it is) into a picture; leaving it off also spares every run the import of Rich's
    emoji table (~2 ms, on the first line printed)."""
    return UnwrappedWhenPiped(highlight=False, emoji=False, **options)


out = console(file=_Stdout(), soft_wrap=True)
err = console(stderr=True, soft_wrap=True)


def print_json(data: Any) -> None:
    out.file.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    out.file.flush()


def show(result: Any, for_people: Callable[[], object], *, as_json: bool) -> None:
    """The one switch between tables and JSON, the same for every command. With ``--json`` stdout carries exactly one
    JSON document, the result (its ``as_dict()`` when it has one), and nothing else; without, ``for_people`` prints
    the tables and lines. A command's exit code comes from its result, never from this switch."""
    if as_json:
        print_json(result.as_dict() if hasattr(result, "as_dict") else result)
    else:
        for_people()


def print_error(e: SpecDeployError) -> None:
    each = getattr(e, "each", ())
    if each:
        # Every input error of the run, one line each (its hint below it), then how many: all fixed in one go.
        for one in each:
            err.print(f"[red]error:[/red] {one.describe()}", markup=True)
        err.print(f"{len(each)} input errors; nothing was touched on any host", markup=False)
        return
    err.print(f"[red]error:[/red] {e.describe()}", markup=True)
    excerpt = e.details.get("excerpt")
    if excerpt:
        err.print(f"[dim]--- last lines of {e.details.get('log_path', 'the log')} ---[/dim]")
        for line in excerpt[-25:]:
            err.print(f"  {terminal_safe(str(line))}", markup=False)
    stderr = e.details.get("stderr")
    if stderr:
        err.print("[dim]--- host stderr ---[/dim]")
        err.print(terminal_safe(str(stderr)), markup=False)
    torn = e.details.get("torn_down")
    if torn:
        err.print(f"[dim]stopped the failed server's processes: {', '.join(map(str, torn))} (none left running)[/dim]")
