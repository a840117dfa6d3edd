"""The agent's verbs, one table: name → its request and answer shapes (``protocol``) and the function in its room.

Each row names where its function lives (``"room.module:function"``, relative to this package) and the function is
imported only when its verb is called: every agent call starts a fresh Python, and a status call should not pay for
the deploy machinery (measured: importing everything costs ~50 ms per call). The client imports this table too
(``transport/session.py``: ``HostSession``'s one method per verb sends ``verbs.STOP`` and gets a ``StopAnswer``
back), so the verb's name and its two shapes are written here once, for both sides; ``tests/test_protocol.py``
checks that each function is annotated with its row's shapes and that its real answer has the answer's shape.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

from . import protocol as p

if TYPE_CHECKING:
    from .common import EventSink

Req = TypeVar("Req")
Ans = TypeVar("Ans")


class Verb(Generic[Req, Ans]):
    """One verb of the protocol: its wire name, its shapes, and where the agent's function is."""

    def __init__(self, name: str, request: type[Req], answer: type[Ans], where: str) -> None:
        if name in TABLE:
            raise ValueError(f"verb {name!r} is defined twice")
        self.name, self.request, self.answer, self.where = name, request, answer, where
        TABLE[name] = self

    def function(self) -> Callable[[Req, EventSink], Ans]:
        """The agent's function for this verb, importing only its room."""
        module, _, attr = self.where.partition(":")
        fn: Callable[[Req, EventSink], Ans] = getattr(importlib.import_module(f".{module}", __package__), attr)
        return fn

    def __repr__(self) -> str:
        return f"Verb({self.name!r})"


# Every verb the agent answers, by name: filled by the rows below (a row adds itself).
TABLE: dict[str, Verb[Any, Any]] = {}

FACTS = Verb("facts", p.FactsRequest, p.FactsAnswer, "facts:report")
DEPLOY = Verb("deploy", p.DeployRequest, p.DeployRecord, "serve.deploy:run")
ATTACH = Verb("attach", p.AttachRequest, p.AttachAnswer, "serve.follow:attach")
STOP = Verb("stop", p.StopRequest, p.StopAnswer, "serve.stop:run")
STATUS = Verb("status", p.StateRequest, p.StatusAnswer, "serve.hoststatus:status")
LOGS = Verb("logs", p.LogsRequest, p.LogsAnswer, "serve.follow:logs")
GPUS = Verb("gpus", p.GpusRequest, p.GpusAnswer, "gpus:report")
ADOPT = Verb("adopt", p.AdoptRequest, p.AdoptAnswer, "serve.adoption:adopt")
RECORDS = Verb("records", p.RecordsRequest, p.RecordsAnswer, "serve.records:read")
REDEPLOY = Verb("redeploy", p.RedeployRequest, p.DeployRecord, "serve.deploy:redeploy")
CANCEL = Verb("cancel", p.CancelRequest, p.CancelAnswer, "serve.records:cancel")
ROUTER_START = Verb("router_start", p.RouterStartRequest, p.RouterStartAnswer, "serve.router:start_verb")
ROUTER_STOP = Verb("router_stop", p.RouterStopRequest, p.RouterStopAnswer, "serve.router:stop_verb")
ROUTER_WORKER = Verb("router_worker", p.RouterWorkerRequest, p.RouterWorkerAnswer, "serve.router:worker_verb")
WATCH = Verb("watch", p.StateRequest, p.WatchAnswer, "measure.watch:watch")
BENCH = Verb("bench", p.BenchRequest, p.BenchAnswer, "measure.bench:run")
PROFILE = Verb("profile", p.ProfileRequest, p.ProfileResult, "measure.profile:run")
EVIDENCE = Verb("evidence", p.CheckEnvRequest, p.CheckEnvAnswer, "evidence.judge:check_env")
PATCH_APPLY = Verb("patch_apply", p.PatchApplyRequest, p.PatchApplyAnswer, "patch.apply:apply_verb")
PATCH_ROLLBACK = Verb("patch_rollback", p.PatchRollbackRequest, p.PatchRollbackAnswer,
                      "patch.rollback:rollback_verb")
