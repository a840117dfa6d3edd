"""The inventory's values, as every other room reads them: ``Host`` (one server's fully resolved settings),
``Inventory`` (the hosts, groups, clusters and routers of one file, and how ``--host`` selects among them),
``Speculative``, ``Timeouts``, ``Cluster``, ``Router``; the fixed defaults (patch modes, built-in NCCL presets) and
SGLang's rules for speculative parameters. Frozen, no I/O; ``hosts.load`` builds them from a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fabfile.errors import InventoryError
from fabfile.flags import quote

# The seed host's PCIe tuning (8 GPUs, no NVLink): what the manual hour converged on.
BUILTIN_NCCL_PRESETS: dict[str, dict[str, str]] = {
    "pcie": {
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Ring",
        "NCCL_P2P_LEVEL": "SYS",
        "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216",
        "NCCL_NTHREADS": "512",
    },
    "none": {},
}

DEFAULT_LOG_DIR = "~/.specdeploy/logs"

# The notes an inventory may silence (``notes: {quiet: [...]}``), each the tool's advice on a setting it was asked
# for: the NCCL advice on a value the tool's built-in preset the host names gives unchanged (pcie's NCCL_PROTO=LL and
# NCCL_MAX_NCHANNELS), and the device timer's recorded cost beside "measurement on". A value refused, or one
# that SGLang replaces, is said whatever this says. The schema's ``NotesFields`` lists the same names.
QUIET_NOTES = ("nccl_preset", "timer_cost")

_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MAX_INVENTORY_BYTES = 4 << 20


def check_name(name: str, where: str, what: str) -> None:
    """Names end up in file names on the host and in launch scripts: letters, digits, '.', '_', '-' only, no '..'."""
    if not _HOST_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"{where}: {what} names may use letters, digits, '.', '_' and '-' only "
                         f"(and no '..'), got {name!r}")


@dataclass(frozen=True)
class Speculative:
    algorithm: str
    steps: int          # 0 = baseline, no speculation
    topk: int
    draft_tokens: int | None


# An EAGLE accept length of 1.0 means no draft token is ever accepted; a little above it, speculation still costs
# more than it saves on any configuration we measured (the analysis in `inv analyze`). A deploy at or below fails.
DEFAULT_ACCEPT_GATE = 1.1


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0
    connect_total: float = 60.0
    connect_refused: float = 5.0
    command: float = 120.0
    ready: float = 1800.0
    stall: float = 600.0
    stop_grace: float = 15.0
    gpu_clean: float = 60.0
    lock_wait: float = 0.0  # another deploy holds the host: refuse (a second deploy never replaces the first unasked)
    host: float = 60.0
    silence: float = 30.0
    first_request: float = 60.0


@dataclass(frozen=True)
class NodeRole:
    """This host's place in a multi-node cluster (SGLang's --nnodes/--node-rank/--dist-init-addr)."""

    cluster: str
    rank: int
    nnodes: int
    total_tp: int
    dist_init_addr: str  # host:port


@dataclass(frozen=True)
class Cluster:
    name: str
    hosts: tuple[str, ...]
    tp: int
    dist_init_addr: str  # host:port, as every node reaches rank 0

    @property
    def tp_per_node(self) -> int:
        return self.tp // len(self.hosts)


@dataclass(frozen=True)
class Router:
    name: str
    host: str
    members: tuple[str, ...]
    group: str
    port: int
    listen: str
    policy: str
    python: str
    args: tuple[str, ...]
    drain_s: float = 5.0


@dataclass(frozen=True)
class Host:
    """One fully resolved host: every value final, every remote path absolute (or ``~/`` for state_dir)."""

    name: str
    connection: str
    ssh_host: str
    is_default: bool
    gpus: int
    tp: int
    python: str
    model: str
    draft_model: str | None
    served_model_name: str | None
    log_dir: str
    state_dir: str
    listen: str
    port: int
    nccl_preset: str | None
    nccl_env: dict[str, str]
    env: dict[str, str]
    sglang_args: tuple[str, ...]
    secret_env: tuple[str, ...]
    speculative: Speculative
    patch_mode: str
    force_env: bool
    nccl_debug: bool
    min_free_disk_gb: float
    gpu_idle_mib: int
    timeouts: Timeouts
    source: str = ""
    accept_gate: float = 1.1
    address: str | None = None
    node: NodeRole | None = None
    measure: bool | None = None  # the inventory's `measure` (None: the tool's default, plan/measure.py)
    quiet_notes: tuple[str, ...] = ()  # `notes: {quiet: [...]}`: kinds of QUIET_NOTES not said
    # What carries a read-only command (status, check-env, gpus, logs, watch): "openssh", the `ssh` binary with one
    # connection kept open and reused (transport/openssh.py), or "paramiko", a connection of its own each time, as
    # every deploy and file write has (transport/ssh.py). OpenSSH falls back to Paramiko where it cannot be used.
    ssh_client: str = "openssh"


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: dict[str, Host]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ssh_config: Path | None = None
    known_hosts: Path | None = None
    clusters: dict[str, Cluster] = field(default_factory=dict)
    routers: dict[str, Router] = field(default_factory=dict)
    # every NCCL preset a host or `inv sweep --nccl` may name: the built-in ones with the file's `presets.nccl`
    nccl_presets: dict[str, dict[str, str]] = field(default_factory=lambda: dict(BUILTIN_NCCL_PRESETS))

    def cluster_nodes(self, name: str) -> list[Host]:
        """The cluster's hosts in rank order, each with its per-node TP size and its NodeRole."""
        from dataclasses import replace

        c = self.clusters[name]
        return [replace(self.hosts[h], tp=c.tp_per_node,
                        node=NodeRole(cluster=name, rank=i, nnodes=len(c.hosts), total_tp=c.tp,
                                      dist_init_addr=c.dist_init_addr))
                for i, h in enumerate(c.hosts)]

    def cluster_named(self, spec: str | None) -> Cluster | None:
        """The cluster when ``--host`` names one (and only one); None when it names no cluster."""
        tokens = [t.strip() for t in (spec or "").split(",") if t.strip()]
        named = [t for t in tokens if t in self.clusters]
        if not named:
            return None
        if len(tokens) != 1:
            raise InventoryError(f"--host: cluster {named[0]!r} must be named on its own, not in a list",
                                 "deploy the cluster and the other hosts in separate commands")
        return self.clusters[named[0]]

    def default_host(self) -> Host:
        marked = [h for h in self.hosts.values() if h.is_default]
        if len(marked) == 1:
            return marked[0]
        if len(self.hosts) == 1:
            return next(iter(self.hosts.values()))
        raise InventoryError(
            f"{self.path}: no default host: the inventory has {len(self.hosts)} hosts and none is marked "
            "`default: true`",
            "pass --host NAME or mark one host with `default: true`",
        )

    def select(self, spec: str | None) -> list[Host]:
        """Resolve ``--host`` (names, group names, comma lists, ``all``) into hosts, in order, without duplicates.

        ``all`` is every host of the inventory, in its order (unless the inventory names a host, group or cluster
        ``all``: its own name wins). No ``--host`` is the default host."""
        if spec is None or spec.strip() == "":
            return [self.default_host()]
        out: list[Host] = []
        for token in (t.strip() for t in spec.split(",")):
            if not token:
                continue
            if token == ALL and token not in self.hosts and token not in self.groups and token not in self.clusters:
                out += [h for h in self.hosts.values() if all(o.name != h.name for o in out)]
                continue
            if token in self.clusters:
                for node in self.cluster_nodes(token):
                    if all(o.name != node.name for o in out):
                        out.append(node)
                continue
            if token in self.hosts:
                names: tuple[str, ...] = (token,)
            elif token in self.groups:
                names = self.groups[token]
            else:
                known = ", ".join(sorted([*self.hosts, *self.groups, *self.clusters]))
                raise InventoryError(f"--host: unknown host or group {quote(token, as_repr=True)} in {self.path}",
                                     f"known names: {known}, or all (every host)")
            for n in names:
                h = self.hosts[n]
                if all(o.name != h.name for o in out):
                    out.append(h)
        if not out:
            raise InventoryError("--host: no host named", "pass --host NAME")
        return out


# ``--host all``: every host of the inventory.
ALL = "all"

# SGLang's build_tree kernel: ``CHECK_HOST(draft_token_num > 0 && draft_token_num <= 1024)`` (check_speculative).
MAX_DRAFT_TOKENS = 1024


def check_speculative(spec: Speculative, *, has_draft: bool, where: str) -> None:
    """SGLang's rules for EAGLE parameters (the same in every release from 0.4.5 to ``versions.NEWEST_SUPPORTED``),
    checked up front.

    - topk 1: SGLang replaces any other draft-token count with steps + 1 (a warning, server_args / speculative_hook);
      refused here so the plan, its config name and the server agree.
    - topk > 1: the draft tree picks ``draft_tokens - 1`` tokens with ``torch.topk`` from the ``topk + (steps - 1) *
      topk**2`` candidates the steps produce (``organize_draft_results``); more than that fails at the first draft.
      SGLang's own EAGLE tests run steps 5, topk 8, draft tokens 64.
    - any topk: the verify tree holds at most :data:`MAX_DRAFT_TOKENS` draft tokens. SGLang's build_tree kernel
      checks ``draft_token_num <= 1024`` before it runs (``sglang/kernels/jit/csrc/speculative/tree.cuh``, in the
      wheels from 0.5.21; earlier releases call the same kernel from sgl-kernel), so at topk 1, where draft tokens
      are steps + 1, steps stop at 1023: more failed at the first draft, after the model had loaded.
    """
    if spec.steps < 0:
        raise ValueError(f"{where}.steps: must be 0 (baseline) or more, got {spec.steps}")
    if spec.topk < 1:
        raise ValueError(f"{where}.topk: must be at least 1, got {spec.topk}")
    if spec.steps == 0:
        return
    if not has_draft and spec.algorithm in ("EAGLE3", "EAGLE"):
        raise ValueError(f"{where}: {spec.algorithm} with {spec.steps} steps needs a draft_model")
    dt = spec.draft_tokens
    tokens = spec.steps + 1 if spec.topk == 1 else dt
    if tokens is not None and tokens > MAX_DRAFT_TOKENS:
        field = "steps" if spec.topk == 1 else "draft_tokens"
        raise ValueError(
            f"{where}.{field}: SGLang's verify tree takes at most {MAX_DRAFT_TOKENS} draft tokens (its build_tree "
            f"kernel refuses more at the first draft, after the model loaded), so "
            + (f"steps at topk 1 (draft tokens = steps + 1) go up to {MAX_DRAFT_TOKENS - 1}, got {spec.steps}"
               if spec.topk == 1 else f"draft tokens go up to {MAX_DRAFT_TOKENS}, got {dt}"))
    if spec.topk == 1 and dt is not None and dt != spec.steps + 1:
        raise ValueError(
            f"{where}.draft_tokens: with topk 1 SGLang requires draft tokens = steps + 1 = {spec.steps + 1}, "
            f"got {dt} (SGLang would silently change it)")
    if spec.topk > 1 and dt is not None:
        candidates = spec.topk + (spec.steps - 1) * spec.topk ** 2
        if not 1 <= dt <= candidates + 1:
            raise ValueError(
                f"{where}.draft_tokens: SGLang picks draft tokens - 1 of the {candidates} candidates that "
                f"{spec.steps} steps of topk {spec.topk} produce, so draft tokens must be between 1 and "
                f"{candidates + 1}, got {dt}")
