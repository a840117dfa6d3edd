"""The one wrapper around every task: it prints a command's result through the output switch, exits with the
result's code, and maps the tool's errors to sentences and exit codes (0 ok, 1 failed, 2 bad input with nothing
touched, 130 Ctrl-C); never a traceback for a failure the tool understands."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from invoke.exceptions import Exit

if TYPE_CHECKING:  # annotations only: `inv --list` imports no command
    from fabfile.commands.result import CommandResult

F = TypeVar("F", bound=Callable[..., Any])

# What Ctrl-C leaves behind, for the commands that change hosts (a deploy says it itself: fabfile.errors.Interrupted),
# by task function.
_ON_HOSTS = ("interrupted: what was started on the host goes on there without this terminal (or tears itself down); "
             "`inv status` shows what runs, `inv cancel` stops a deploy in progress")
INTERRUPTED = {"deploy": _ON_HOSTS, "sweep": _ON_HOSTS + "; the sweep's finished rows are in its --out folder",
               "deploy_router": _ON_HOSTS, "stop": "interrupted: `inv status` shows what still runs",
               "rollback_patches": "interrupted: `inv rollback-patches --dry-run` shows what is left to restore",
               "cancel": "interrupted: `inv status` shows whether the deploy let go of the host"}


def finish(result: CommandResult, as_json: bool) -> None:
    """A task's return, shown through the one switch unless it was printed as it came (a stream), then its error
    raised or its code exited with."""
    if not result.shown:
        from fabfile.present.output import show

        show(result.document, result.for_people, as_json=as_json)
    if result.error is not None:
        raise result.error
    if result.exit_code:
        raise Exit(code=result.exit_code)


def cli(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        from fabfile.errors import SpecDeployError
        from fabfile.present.text import begin_command  # Rich's consoles wait for something to print

        begin_command()
        try:
            finish(fn(*args, **kwargs), bool(kwargs.get("json")))
        except SpecDeployError as e:
            from fabfile.present.output import print_error

            print_error(e)
            raise Exit(code=e.exit_code) from None
        except BrokenPipeError:
            from fabfile.present.text import pipe_closed

            pipe_closed()
        except KeyboardInterrupt as e:
            from fabfile.errors import Interrupted

            if isinstance(e, Interrupted):
                raise Exit(e.sentence(), code=130) from None
            # Read-only commands (logs --follow, watch, status...) just stop: no word about deploys.
            raise Exit(INTERRUPTED.get(fn.__name__, ""), code=130) from None

    return wrapper  # type: ignore[return-value]
