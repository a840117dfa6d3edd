"""The agent's verbs, one table: name → its request and answer shapes (``protocol``) and the function in its room.

Each row names where its function lives (``"room.module:function"``, relative to this package) and the function is
imported only when its verb is called: every agent call starts a fresh Python, and a status call should not pay for
the deploy machinery (measured: importing everything costs ~50 ms per call). The client imports this table too
(``transport/session.py``: ``HostSession``'s one method per verb sends ``verbs.STOP`` and gets a ``StopAnswer``
back), so the verb's name and its two shapes are written here once, for both sides;
``tests/unit/remote/test_protocol.py`` checks that each function is annotated with its row's shapes and that its real
answer has the answer's shape.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar, get_args, get_type_hints

if TYPE_CHECKING:
    from . import protocol as p
    from .common import EventSink

Req = TypeVar("Req")
Ans = TypeVar("Ans")


class Verb(Generic[Req, Ans]):
    """One verb of the protocol: its wire name, its shapes, and where the agent's function is."""

    def __init__(self, name: str, where: str) -> None:
        if name in TABLE:
            raise ValueError(f"verb {name!r} is defined twice")
        self.name, self.where = name, where
        TABLE[name] = self

    # The shapes are read from the row's annotation (``STOP: Verb[p.StopRequest, p.StopAnswer]``), the one place they
    # are written: mypy checks both ends with it, and at run time the agent never builds the protocol's TypedDicts
    # (~10 ms of every call on the host, for shapes only the client's checks and the tests look at).
    @property
    def request(self) -> type[Req]:
        return self._shapes()[0]  # type: ignore[no-any-return]

    @property
    def answer(self) -> type[Ans]:
        return self._shapes()[1]  # type: ignore[no-any-return]

    def _shapes(self) -> tuple[Any, ...]:
        from . import protocol

        module = sys.modules[__name__]
        hints = get_type_hints(module, localns={"p": protocol})
        const = next(k for k, v in vars(module).items() if v is self)
        return get_args(hints[const])

    def function(self) -> Callable[[Req, EventSink], Ans]:
        """The agent's function for this verb, importing only its room."""
        module, _, attr = self.where.partition(":")
        fn: Callable[[Req, EventSink], Ans] = getattr(importlib.import_module(f".{module}", __package__), attr)
        return fn

    def __repr__(self) -> str:
        return f"Verb({self.name!r})"


# Every verb the agent answers, by name: filled by the rows below (a row adds itself).
TABLE: dict[str, Verb[Any, Any]] = {}

FACTS: Verb[p.FactsRequest, p.FactsAnswer] = Verb("facts", "facts:report")
DEPLOY: Verb[p.DeployRequest, p.DeployRecord] = Verb("deploy", "serve.deploy:run")
ATTACH: Verb[p.AttachRequest, p.AttachAnswer] = Verb("attach", "serve.follow:attach")
STOP: Verb[p.StopRequest, p.StopAnswer] = Verb("stop", "serve.stop:run")
STATUS: Verb[p.StateRequest, p.StatusAnswer] = Verb("status", "serve.hoststatus:status")
LOGS: Verb[p.LogsRequest, p.LogsAnswer] = Verb("logs", "serve.follow:logs")
GPUS: Verb[p.GpusRequest, p.GpusAnswer] = Verb("gpus", "gpus:report")
ADOPT: Verb[p.AdoptRequest, p.AdoptAnswer] = Verb("adopt", "serve.adoption:adopt")
RECORDS: Verb[p.RecordsRequest, p.RecordsAnswer] = Verb("records", "serve.records:read")
REDEPLOY: Verb[p.RedeployRequest, p.DeployRecord] = Verb("redeploy", "serve.deploy:redeploy")
CANCEL: Verb[p.CancelRequest, p.CancelAnswer] = Verb("cancel", "serve.records:cancel")
ROUTER_START: Verb[p.RouterStartRequest, p.RouterStartAnswer] = Verb("router_start", "serve.router:start_verb")
ROUTER_STOP: Verb[p.RouterStopRequest, p.RouterStopAnswer] = Verb("router_stop", "serve.router:stop_verb")
ROUTER_WORKER: Verb[p.RouterWorkerRequest, p.RouterWorkerAnswer] = Verb("router_worker", "serve.router:worker_verb")
WATCH: Verb[p.StateRequest, p.WatchAnswer] = Verb("watch", "measure.watch:watch")
BENCH: Verb[p.BenchRequest, p.BenchAnswer] = Verb("bench", "measure.bench:run")
PROFILE: Verb[p.ProfileRequest, p.ProfileResult] = Verb("profile", "measure.profile:run")
CHECK_ENV: Verb[p.CheckEnvRequest, p.CheckEnvAnswer] = Verb("check_env", "evidence.checkenv:check_env")
PATCH_APPLY: Verb[p.PatchApplyRequest, p.PatchApplyAnswer] = Verb("patch_apply", "patch.apply:apply_verb")
PATCH_ROLLBACK: Verb[p.PatchRollbackRequest, p.PatchRollbackAnswer] = Verb("patch_rollback",
                                                                          "patch.rollback:rollback_verb")
TUNE_LEASE: Verb[p.TuneLeaseRequest, p.TuneLeaseAnswer] = Verb("tune_lease", "serve.tunelease:run")
