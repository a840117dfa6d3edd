"""What a command hands back to the command line: its JSON form, how people see it, its exit code.

The command line prints it through the one output switch (``present.output.show``) and exits with its code
(fabfile/cli/run.py); no task prints a result itself. Every task returns one: a command that prints as it goes
(``inv logs``, ``inv watch``: a stream) returns :meth:`CommandResult.printed`, its exit code and nothing left to
show."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fabfile.errors import SpecDeployError


@dataclass(frozen=True)
class CommandResult:
    document: Any                          # the --json document (its as_dict() when it has one)
    for_people: Callable[[], object]       # prints the tables and lines instead
    exit_code: int = 0
    error: SpecDeployError | None = None   # raised after the document is shown: its sentence and exit code follow
    shown: bool = False                    # printed already, as it came (a stream): the switch prints nothing more

    @classmethod
    def printed(cls, exit_code: int) -> CommandResult:
        """A stream's result: its lines (or JSON lines) are on the terminal already; only the exit code is left."""
        return cls(None, lambda: None, exit_code, shown=True)
