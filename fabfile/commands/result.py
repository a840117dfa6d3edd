"""What a command hands back to the command line: its JSON form, how people see it, its exit code.

The command line prints it through the one output switch (``present.output.show``) and exits with its code
(fabfile/cli/run.py); no task prints a result itself."""

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
