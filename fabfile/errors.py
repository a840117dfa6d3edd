"""The tool's single exception tree. Every failure a user can meet is one of these, carrying a sentence that says
what happened and a hint that says what to do; ``fabfile/cli/run.py`` maps them to exit codes and never shows a
traceback.

    SpecDeployError                      (exit 1 unless noted)
    ├── UsageError                       (exit 2: nothing was touched on any host)
    │   ├── InventoryError               a bad inventory file or field
    │   ├── FlagError                    a bad command-line flag or combination
    │   │   └── PatchModeError           a patch mode or patch values refused before anything is sent
    │   └── UnsafePathError              a host directory others could write (code or secrets would leak)
    ├── ConnectError                     could not get a working SSH session
    │   ├── HostKeyError                 unknown or changed host key (never retried)
    │   ├── AuthError                    authentication refused (never retried)
    │   └── ConnectionLost               the session dropped while a command ran (its outcome is unknown)
    ├── RemoteError                      a host-side step failed (the agent said why)
    │   ├── PreflightError               python, SGLang, paths, GPUs or disk not as required (exit 2: refused
    │   │                                before anything was touched, like bad input)
    │   ├── LockHeldError                another deploy holds this host
    │   ├── PatchError                   anchor missing/ambiguous, unsupported mode, file changed
    │   ├── GpuBusyError                 a GPU still held after stopping everything
    │   ├── LaunchError                  the server died, logged a fatal line, stalled, timed out, or was
    │   │                                ready but failed or hung on a real request
    │   ├── AcceptGateError              ready and answering, but its EAGLE accept length is at/below accept_gate
    │   ├── BenchError                   a benchmark could not run, or every request failed
    │   └── AgentCrashError              the agent itself failed (a bug: stderr is attached)
    ├── EnvNotProvenError                check-env could not prove the expected values in every rank
    ├── SweepError                       no configuration of a sweep could be deployed and measured
    └── HostTimeoutError                 a host gave no answer within its wall-clock bound (its session was closed)

    Interrupted (a KeyboardInterrupt, so no handler of the tree catches it): Ctrl-C during a deploy, with what the
    user needs then (the host, its step, whether the old server is stopped, `inv cancel`); exit 130.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a deploy: what the terminal's user needs to know then (the host, the step it was at, whether
    the old server was already stopped). Still a KeyboardInterrupt, so nothing that lets Ctrl-C through catches it
    by mistake; ``fabfile.cli.run.cli`` turns it into its sentence and exit 130."""

    def __init__(self, host: str, step: str | None, old_stopped: bool, started: bool) -> None:
        super().__init__(host)
        self.host, self.step, self.old_stopped, self.started = host, step, old_stopped, started

    def sentence(self) -> str:
        if not self.started:
            return (f"interrupted before {self.host} was changed (at step {self.step or 'connect'}): nothing runs "
                    "there that did not before")
        where = f"at step {self.step}" if self.step else "on the host"
        old = ("the server that ran before is already stopped" if self.old_stopped else
               "the server that ran before may already be stopped")
        return (f"interrupted: the deploy goes on on {self.host} without this terminal ({where}; {old}): it finishes "
                f"there, or tears its new server down if it fails. `inv status --host {self.host}` follows it; "
                f"`inv cancel --host {self.host}` stops it, then `inv deploy --previous --host {self.host}` starts "
                "the deploy before it again")


class SpecDeployError(Exception):
    exit_code = 1

    def __init__(self, message: str, hint: str = "", *, host: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.host = host
        self.details = details

    def describe(self) -> str:
        prefix = f"{self.host}: " if self.host else ""
        text = prefix + self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": type(self).__name__,
            "message": self.message,
            "hint": self.hint,
            "host": self.host,
            "details": self.details,
        }


class UsageError(SpecDeployError):
    exit_code = 2
    each: tuple[UsageError, ...] = ()  # the errors it stands for when it says several at once (:func:`several`)

    def as_dict(self) -> dict[str, object]:
        return {**super().as_dict(), **({"errors": [e.as_dict() for e in self.each]} if self.each else {})}


class InventoryError(UsageError):
    pass


def several(found: list[UsageError]) -> UsageError:
    """Every input error of a run as one error (exit 2): each one's sentence on its own line (``each``, which
    ``present.output.print_error`` prints one line each and ``--json`` lists under ``errors``), their hints once
    each. One error stays itself."""
    flat = [x for e in found for x in (e.each or [e])]
    if len(flat) == 1:
        return flat[0]
    kinds = {type(e) for e in flat}
    cls: type[UsageError] = kinds.pop() if len(kinds) == 1 else UsageError
    hints = "; ".join(dict.fromkeys(e.hint for e in flat if e.hint))
    hosts = {e.host for e in flat}
    lines = [(f"{e.host}: " if e.host and len(hosts) > 1 else "") + e.message for e in flat]
    combined = cls("\n".join(lines), hints, host=hosts.pop() if len(hosts) == 1 else None)
    combined.each = tuple(flat)
    return combined


class Collector:
    """Independent input checks run one after another, every refusal kept: ``check(fn, ...)`` returns ``fn``'s value,
    or None when it refused (a :class:`UsageError`), and :meth:`done` raises them all at once (:func:`several`).
    Call ``done`` before any value is used or any host touched: a refused value is None only until then."""

    def __init__(self) -> None:
        self.found: list[UsageError] = []

    def check(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UsageError as e:
            self.found.append(e)
            return None

    def done(self) -> None:
        if self.found:
            raise several(self.found)


class FlagError(UsageError):
    pass


class PatchModeError(FlagError):
    """A patch mode or patch values the client refuses before anything is sent to a host."""


class UnsafePathError(UsageError):
    pass


class ConnectError(SpecDeployError):
    pass


class HostKeyError(ConnectError):
    pass


class AuthError(ConnectError):
    pass


class ConnectionLost(ConnectError):
    """The session dropped while a command ran; the command's outcome on the host is unknown."""


class RemoteError(SpecDeployError):
    pass


class PreflightError(RemoteError):
    # The host does not meet the inventory (a path, its GPUs, its SGLang): refused before anything was touched, so
    # exit 2 as the README's table says of bad input; one host or a fleet refused at its preflight alike.
    exit_code = 2


class LockHeldError(RemoteError):
    pass


class PatchError(RemoteError):
    pass


class GpuBusyError(RemoteError):
    pass


class LaunchError(RemoteError):
    pass


class AgentCrashError(RemoteError):
    pass


class BenchError(RemoteError):
    pass


class EnvNotProvenError(SpecDeployError):
    pass


class AcceptGateError(RemoteError):
    """A speculative server whose measured accept length is at or below the accept gate."""


class SweepError(SpecDeployError):
    pass


class HostTimeoutError(SpecDeployError):
    pass


# Agent error kinds come from the table both sides import (fabfile/remote/protocol.py); its categories map onto
# the tree above.
_CATEGORIES: dict[str, type[SpecDeployError]] = {
    "preflight": PreflightError,
    "lock_held": LockHeldError,
    "patch": PatchError,
    "gpu_busy": GpuBusyError,
    "launch": LaunchError,
    "bench": BenchError,
    "agent_crash": AgentCrashError,
    "env_not_proven": EnvNotProvenError,
    "remote": RemoteError,
    "unsafe_path": UnsafePathError,
    "usage": UsageError,
    "accept_gate": AcceptGateError,
}


def class_of_kind(kind: str) -> type[SpecDeployError]:
    from fabfile.remote.protocol import category_of

    return _CATEGORIES[category_of(kind)]


def from_agent(error: Mapping[str, object] | None, host: str) -> SpecDeployError:
    """Turn an agent error result into the matching exception, keeping the agent's sentence and hint (the shared
    table's hint when the agent gave none)."""
    from fabfile.remote.protocol import hint_of

    error = error or {}
    kind = str(error.get("kind", ""))
    given = error.get("details")
    details = dict(given) if isinstance(given, Mapping) else {}
    details["agent_kind"] = kind
    return class_of_kind(kind)(str(error.get("message", "the host-side step failed")),
                               str(error.get("hint") or hint_of(kind)), host=host, **details)
