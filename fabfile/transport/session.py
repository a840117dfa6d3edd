"""A session with one host: its transport (SSH or local) and the agent on it, opened once and reused for a run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from fabfile.inventory.hosts import Host, Inventory
from fabfile.remote import verbs
from fabfile.remote.verbs import Verb
from fabfile.transport.agentclient import AgentClient
from fabfile.transport.base import LocalTransport, Transport

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.remote import protocol as p


def open_transport(inv: Inventory, host: Host, on_open: Callable[[Transport], None] | None = None, *,
                   read_only: bool = False) -> Transport:
    """The host's transport. ``read_only`` (status, check-env, gpus, logs, watch): the OpenSSH client through a
    reused connection (``openssh``) unless the host's ``ssh_client`` is paramiko or that carrier cannot be used
    here; everything else, and every deploy, Paramiko (``ssh``)."""
    if host.connection == "local":
        local = LocalTransport(host.name)
        if on_open is not None:
            on_open(local)
        return local
    if read_only and host.ssh_client == "openssh":
        from fabfile.transport.openssh import open_openssh

        carrier = open_openssh(host.name, host.ssh_host, ssh_config=inv.ssh_config, known_hosts=inv.known_hosts,
                               timeouts=host.timeouts, on_open=on_open)
        if carrier is not None:
            return carrier
    from fabfile.transport.ssh import SSHTransport  # paramiko is slow to import; `inv --list` should not pay for it

    return SSHTransport(host.name, host.ssh_host, ssh_config=inv.ssh_config, known_hosts=inv.known_hosts,
                        timeouts=host.timeouts, on_open=on_open)


# How a session is opened. None: a real transport (``open_transport``). Tests swap in an in-process fake for a
# block (``connector``), the way httpx takes a mock transport: every command opens sessions through
# ``HostSession.open``, so rollout, cluster and the multi-host commands run unchanged against scripted hosts.
# A module global, not a context variable: the fan-out runs each host in its own thread.
Connector = Callable[["Inventory", Host, "Callable[[Transport], None] | None"], "HostSession"]
_connector: Connector | None = None


@contextmanager
def connector(fn: Connector) -> Iterator[None]:
    """Open every ``HostSession`` through ``fn`` inside the block (test equipment: ``tests/support/fakehost.py``)."""
    global _connector
    before, _connector = _connector, fn
    try:
        yield
    finally:
        _connector = before


Req = TypeVar("Req", bound=Mapping[str, Any])
Ans = TypeVar("Ans")
OnEvent = Callable[["p.AgentEvent"], None]


@dataclass
class HostSession:
    """One host's transport and agent, with one method per verb the client sends: the one place its request is
    built (typed with its shape from ``remote/protocol.py``), returning the verb's typed answer."""

    host: Host
    transport: Transport
    agent: AgentClient
    facts: p.FactsAnswer | None = None  # the preflight's answer (``host_facts``), once asked

    @classmethod
    def open(cls, inv: Inventory, host: Host, on_open: Callable[[Transport], None] | None = None, *,
             read_only: bool = False) -> HostSession:
        """Connect; ``on_open`` gets the transport before the handshake, so another thread can abort it;
        ``read_only``: the session only reads the host (``open_transport`` says what carries it then)."""
        if _connector is not None:
            return _connector(inv, host, on_open)
        transport = open_transport(inv, host, on_open, read_only=read_only)
        return cls(host=host, transport=transport, agent=AgentClient(transport, host.python, host.state_dir))

    def resolve(self, path: str) -> str:
        """A remote path with ``~/`` replaced by the host's HOME (known after the first agent call)."""
        home = self.facts["home"] if self.facts else None
        if path.startswith("~/") and home:
            return f"{home.rstrip('/')}/{path[2:]}"
        return path

    def _call(self, verb: Verb[Req, Ans], request: Req, timeout: float | None = None, **kw: Any) -> Ans:
        """Send ``verb``; ``state_dir`` is the host's unless the request names one (a deploy's is resolved)."""
        req = {"state_dir": self.host.state_dir, **request}
        # The agent's answer is the JSON its verb function returned, typed with the same shape (verbs.TABLE).
        return cast(Ans, self.agent.call(verb.name, req, timeout or self.host.timeouts.command, **kw))

    # -- deploy and its steps ------------------------------------------------------------------------------------
    def host_facts(self, *, paths: dict[str, str | None], need_gpus: int, min_free_disk_gb: float, log_dir: str,
                   log_path: str) -> p.FactsAnswer:
        """The preflight: what the host has (SGLang, GPUs, disk, the paths named) and what a deploy cannot live
        with (``problems``, ``unsafe``); kept on the session (``facts``: its HOME resolves ``~/``)."""
        req: p.FactsRequest = {"paths": paths, "need_gpus": need_gpus, "min_free_disk_gb": min_free_disk_gb,
                               "log_dir": log_dir, "log_path": log_path}
        self.facts = facts = self._call(verbs.FACTS, req)
        return facts

    def deploy(self, req: p.DeployRequest, timeout: float, on_event: OnEvent | None = None,
               idle_timeout: float | None = None) -> p.DeployRecord:
        """Run a whole deploy on the host (``commands.deploy.deploy_request`` builds its request from the plan)."""
        return self._call(verbs.DEPLOY, req, timeout, on_event=on_event, idle_timeout=idle_timeout)

    def attach(self, deploy_id: str, *, skip: int, timeout: float, on_event: OnEvent | None = None,
               idle_timeout: float | None = None) -> p.AttachAnswer:
        """Follow a deploy's journal on the host from event ``skip`` until its result (after a lost link)."""
        req: p.AttachRequest = {"deploy_id": deploy_id, "skip": skip}
        return self._call(verbs.ATTACH, req, timeout, on_event=on_event, idle_timeout=idle_timeout)

    def redeploy(self, from_deploy_id: str, deploy_id: str, *, timeout: float,
                 on_event: OnEvent | None = None) -> p.DeployRecord:
        """Start a recorded deploy again from its saved script (a rollback, `--previous`, `--id`), waiting for
        another deploy's lock as this run says (the host's ``lock_wait``, ``--lock-wait``)."""
        req: p.RedeployRequest = {"from_deploy_id": from_deploy_id, "deploy_id": deploy_id, "client": _client(),
                                  "lock_wait": self.host.timeouts.lock_wait}
        return self._call(verbs.REDEPLOY, req, timeout, on_event=on_event)

    def cancel(self, *, reason: str, deploy_id: str | None = None, wait_s: float | None = None,
               timeout: float = 30) -> p.CancelAnswer:
        """Ask the deploy ``deploy_id`` (None: the one holding the host) to give up; ``wait_s``: wait until it has
        let go of the host."""
        req: p.CancelRequest = {"reason": reason}
        if deploy_id is not None:
            req["deploy_id"] = deploy_id
        if wait_s is not None:
            req["wait_s"] = wait_s
        return self._call(verbs.CANCEL, req, timeout)

    def stop(self, *, dry_run: bool = False, lock_wait: float | None = None, slack: float = 30) -> p.StopAnswer:
        """Stop the SGLang server(s) on this host's GPUs.

        ``lock_wait``: how long the agent waits for another run's lock (default: the host's ``lock_wait``);
        ``slack``: seconds the client waits beyond the agent's own worst case (a TERM grace, then a KILL grace).
        """
        t = self.host.timeouts
        wait = t.lock_wait if lock_wait is None else lock_wait
        req: p.StopRequest = {"target_gpus": list(range(self.host.tp)), "grace": t.stop_grace, "dry_run": dry_run,
                              "lock_wait": wait, "client": _client()}
        # The agent's bound includes its wait for a deploy in progress (it waits for the lock by default).
        return self._call(verbs.STOP, req, timeout=wait + 3 * t.stop_grace + slack)

    # -- reading the host ----------------------------------------------------------------------------------------
    def status(self, timeout: float | None = None) -> p.StatusAnswer:
        req: p.StateRequest = {}
        return self._call(verbs.STATUS, req, timeout)

    def watch(self) -> p.WatchAnswer:
        req: p.StateRequest = {}
        return self._call(verbs.WATCH, req)

    def gpus(self) -> p.GpusAnswer:
        req: p.GpusRequest = {}
        return self._call(verbs.GPUS, req)

    def records(self, ids: list[str] | None = None, *, history: bool = False) -> p.RecordsAnswer:
        """The current deploy record and the one before it; with ``ids``, those records too (`inv diff`); with
        ``history``, a summary of every recorded deploy (`inv deploys`, `--previous`, `--id`)."""
        req: p.RecordsRequest = {} if ids is None else {"ids": ids}
        if history:
            req["history"] = True
        return self._call(verbs.RECORDS, req)

    def logs(self, *, lines: int, follow: bool, follow_s: float, timeout: float,
             on_event: OnEvent | None = None) -> p.LogsAnswer:
        """The server log's last ``lines`` (as ``log`` events), then with ``follow`` new lines up to ``follow_s``."""
        req: p.LogsRequest = {"lines": lines, "follow": follow, "follow_s": follow_s}
        return self._call(verbs.LOGS, req, timeout, on_event=on_event)

    def check_env(self, expected: dict[str, str]) -> p.CheckEnvAnswer:
        """check-env: ``expected`` are the inventory's values; the host judges a running deploy by its record."""
        req: p.CheckEnvRequest = {"expected": expected}
        return self._call(verbs.CHECK_ENV, req)

    def adopt(self, port: int | None) -> p.AdoptAnswer:
        """Read the hand-started server (on ``port`` when several run) and record it as adopted on the host."""
        req: p.AdoptRequest = {"port": port}
        return self._call(verbs.ADOPT, req)

    # -- measuring -----------------------------------------------------------------------------------------------
    def bench(self, req: p.BenchRequest, timeout: float, on_event: OnEvent | None = None) -> p.BenchAnswer:
        """One benchmark run (``commands.bench.bench_request`` builds the request from the flags)."""
        return self._call(verbs.BENCH, req, timeout, on_event=on_event)

    def profile(self, req: p.ProfileRequest, timeout: float, on_event: OnEvent | None = None) -> p.ProfileResult:
        """One profile run (``commands.profile.profile_request`` builds the request from the flags)."""
        return self._call(verbs.PROFILE, req, timeout, on_event=on_event)

    # -- patches -------------------------------------------------------------------------------------------------
    def patch_apply(self, req: p.PatchApplyRequest) -> p.PatchApplyAnswer:
        """Put a patch state on the host (a recorded deploy's ``patch`` request, built by ``render.patchset``)."""
        return self._call(verbs.PATCH_APPLY, req)

    def patch_rollback(self, *, dry_run: bool) -> p.PatchRollbackAnswer:
        """Put SGLang's files back as they were before any patch; waits for a deploy in progress (the lock)."""
        t = self.host.timeouts
        req: p.PatchRollbackRequest = {"dry_run": dry_run, "lock_wait": t.lock_wait, "client": _client()}
        return self._call(verbs.PATCH_ROLLBACK, req, timeout=t.lock_wait + t.command)

    # -- routers -------------------------------------------------------------------------------------------------
    def router_start(self, *, name: str, script: str, log_path: str, listen: str, port: int, workers: list[str],
                     policy: str | None, argv: list[str], ready_s: float) -> p.RouterStartAnswer:
        """(Re)start router ``name`` from its script (already uploaded), in the host's log directory."""
        req: p.RouterStartRequest = {"name": name, "script": script, "cwd": self.host.log_dir, "log_path": log_path,
                                     "listen": listen, "port": port, "workers": workers, "policy": policy,
                                     "argv": argv, "ready_s": ready_s, "grace": self.host.timeouts.stop_grace}
        return self._call(verbs.ROUTER_START, req, timeout=ready_s + 60)

    def router_stop(self, name: str) -> p.RouterStopAnswer:
        grace = self.host.timeouts.stop_grace
        req: p.RouterStopRequest = {"name": name, "grace": grace}
        return self._call(verbs.ROUTER_STOP, req, timeout=3 * grace + 30)

    def router_worker(self, name: str, url: str, *, back: bool, drain_s: float) -> p.RouterWorkerAnswer:
        """Take replica ``url`` out of router ``name`` (draining it ``drain_s``), or with ``back`` put it back."""
        req: p.RouterWorkerRequest = {"name": name, "url": url, "action": "add" if back else "remove",
                                      "drain_s": drain_s, "wait_s": 30.0}
        return self._call(verbs.ROUTER_WORKER, req, timeout=drain_s + 60.0)

    def tune_lease(self, tune_id: str, *, release: bool = False, timeout: float = 30.0,
                   on_event: OnEvent | None = None) -> p.TuneLeaseAnswer:
        """Hold the host for a whole tune (``release`` False: the call lasts until its channel closes, its ``held``
        event says when the lease is taken), or end this tune's hold (``release``)."""
        req: p.TuneLeaseRequest = {"tune_id": tune_id, "action": "release" if release else "hold",
                                   "client": _client()}
        # The holder beats every second (serve/tunelease.HOLD_BEAT_S): silence means its link is gone.
        return self._call(verbs.TUNE_LEASE, req, timeout, on_event=on_event,
                          idle_timeout=None if release else max(30.0, self.host.timeouts.silence))

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> HostSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _client() -> str:
    from fabfile.plan.deploy_plan import client_name  # only when a request names its client

    return client_name()
