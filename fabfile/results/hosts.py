"""What a command run on several hosts comes back with: each host's outcome (its data or its error), the exit
code they earn and the ``--json`` document, one shape for one host or many. Built by ``fabfile.commands``
(``fanout`` runs the hosts); printed by ``fabfile.present``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypedDict, TypeVar

from fabfile.errors import SpecDeployError
from fabfile.inventory.hosts import Host

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.remote import protocol as p

# One host's part of a ``--json`` document: ``host``, ``ok``, and its answer (``data``) or ``error``, or the keys a
# command writes in their place (check-env's evaluation); read back only by the one who wrote it.
HostDocument = dict[str, object]

# What one host's work answered: a verb's answer shape (``remote/protocol.py``), or what a command made of it.
T = TypeVar("T")
U = TypeVar("U")


@dataclass
class HostOutcome(Generic[T]):
    """One host's part of a command: what it answered (``data``, typed with the verb's answer) or its error."""

    host: Host
    data: T | None = None
    error: SpecDeployError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def answer(self) -> T:
        """What the host answered, for an outcome that is ``ok`` (a failed host has none: ask ``ok`` first)."""
        if self.data is None:
            raise LookupError(f"{self.host.name} answered nothing: {self.error.message if self.error else '?'}")
        return self.data

    def then(self, fn: Callable[[T], U]) -> HostOutcome[U]:
        """The outcome with ``fn`` applied to its answer (a failed host stays failed): what a command makes of a
        verb's answer, typed as the command's."""
        if self.data is None:
            return HostOutcome(self.host, error=self.error)
        return HostOutcome(self.host, fn(self.data), self.error)


@dataclass
class HostsResult(Generic[T]):
    """One command's outcomes on the selected hosts. ``exit_code``: 0 when every host succeeded, else the worst
    host's code, or the command's own judgement of what the hosts answered (:meth:`verdict`) when it is worse."""
    outcomes: list[HostOutcome[T]]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    def verdict(self) -> int:
        """The command's own judgement of the answers that came back (a server that does not serve, a process that
        survived a stop): 0 here, where an answer is a success."""
        return 0

    @property
    def exit_code(self) -> int:
        return exit_code(self.outcomes, self.verdict())

    def host_document(self, o: HostOutcome[T]) -> HostDocument:
        return {"host": o.host.name, "ok": o.ok, "data": o.data, "error": o.error.as_dict() if o.error else None}

    def as_dict(self) -> dict[str, object]:
        return hosts_document([self.host_document(o) for o in self.outcomes])


class StopResult(HostsResult["p.StopAnswer"]):
    """``inv stop``: a process that survived the stop is a failure (exit 1)."""

    def verdict(self) -> int:
        return 1 if any(o.ok and o.answer.get("survivors") for o in self.outcomes) else 0


class ServerView(TypedDict):
    """What a ``status`` answer says runs on a host (``commands.operations.server_view``)."""

    state: str
    config: str | None
    pid: int | None
    deploy_id: str | None
    health: int | None
    health_path: str | None
    problem: str | None
    serving: bool
    idle: str | None


if TYPE_CHECKING:
    class DeployHistory(TypedDict):
        """``inv deploys``: a host's recorded deploys, newest first, and which one is current."""

        current: str | None
        deploys: list[p.DeploySummary]

    class _Viewed(TypedDict):
        state: ServerView
        sglang_warnings: list[str]  # SGLang's own warnings about the recorded launch

    class HostStatus(p.StatusAnswer, _Viewed):
        """A host's ``status`` answer with what ``inv status`` makes of it."""


class StatusResult(HostsResult["HostStatus"]):
    """``inv status``: exit 0 only when every host serves (``data["state"]["serving"]``: our server alive, its
    readiness endpoint 200 just now). A server that runs but does not serve, a record the host disagrees with
    (``problem``), and a host where nothing serves (``idle``: stopped, none, a deploy under way with no server up)
    are exit 1, and that host's ``ok`` is false in ``--json``."""

    def verdict(self) -> int:
        return 1 if any(o.ok and not serves(o) for o in self.outcomes) else 0

    def host_document(self, o: HostOutcome[HostStatus]) -> HostDocument:
        return {**super().host_document(o), "ok": o.ok and serves(o)}


def serves(o: HostOutcome[HostStatus]) -> bool:
    """A host that answered ``status`` and serves: our server alive and ready, nothing the record disagrees with."""
    state = o.answer["state"]
    return state["serving"] and not state["problem"]


class CancelResult(HostsResult["p.CancelAnswer"]):
    """``inv cancel``: a cancelled deploy that has not let go of its host in time is exit 1."""

    def verdict(self) -> int:
        return 1 if any(o.ok and o.answer.get("cancelled") is not None and not o.answer.get("ended")
                        for o in self.outcomes) else 0


class CheckEnvResult(HostsResult["p.CheckEnvAnswer"]):
    """``inv check-env``: each host's evidence and its evaluation (``data["evaluation"]``, ``data["evidence"]``);
    a value not proven on some host is exit 1. A host's document is its evaluation and facts
    (:func:`evaluation_document`), its ``ok`` whether every value was proven."""

    def verdict(self) -> int:
        return max([evaluation_code(o.answer["evaluation"]) for o in self.outcomes if o.ok], default=0)

    def host_document(self, o: HostOutcome[p.CheckEnvAnswer]) -> HostDocument:
        if o.error is not None:
            return {"host": o.host.name, "ok": False, "error": o.error.as_dict()}
        return {"host": o.host.name, **evaluation_document(o.answer["evaluation"],
                                                           o.answer["evidence"].get("facts") or {})}


def evaluation_document(evaluation: p.Evaluation, facts: Mapping[str, object]) -> HostDocument:
    """A check-env evaluation (:func:`fabfile.remote.evidence.judge.evaluate`) plus the host's facts, as plain JSON
    types: a host's part of ``check-env --json``."""
    return {
        "ok": bool(evaluation.get("ok")),
        "summary": dict(evaluation.get("summary") or {}),
        "nranks": evaluation.get("nranks"),
        "nranks_source": evaluation.get("nranks_source"),
        "single_rank": evaluation.get("single_rank"),
        "ranks": dict(evaluation.get("ranks") or {}),
        "rows": [dict(r) for r in evaluation.get("rows") or []],
        "hints": [dict(h) for h in evaluation.get("hints") or []],
        "used": dict(evaluation.get("used") or {}),
        "sglang_overwrites": [dict(o) for o in evaluation.get("sglang_overwrites") or []],
        "facts": dict(facts),
    }


def evaluation_code(evaluation: p.Evaluation) -> int:
    """0 when every expected variable is proven in every rank, 1 otherwise."""
    return 0 if evaluation.get("ok") is True else 1


def hosts_document(docs: list[HostDocument], **run: object) -> dict[str, object]:
    """The ``--json`` document of every host command, one shape for one host or many (a script reads
    ``doc["hosts"]`` either way): ``{"ok": every host ok, "hosts": [{"host", "ok", ...}, ...]}``, with ``run``'s keys
    (what describes the whole run, such as a rollout's strategy) beside them."""
    return {"ok": all(d["ok"] for d in docs), **run, "hosts": docs}


def exit_code(outcomes: list[HostOutcome[T]], extra: int = 0) -> int:
    """The worst host's exit code, or ``extra`` (the command's own verdict) when it is worse; 0 when all is well."""
    codes = [o.error.exit_code for o in outcomes if o.error is not None]
    return max([*codes, extra]) if (codes or extra) else 0
