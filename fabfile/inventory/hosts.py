"""Inventory: the YAML file that names hosts and how to run SGLang on them, validated before any connection.

Layering, lowest first: built-in NCCL presets < ``presets.nccl`` < ``defaults`` < ``groups.<g>.defaults`` < host.
``nccl_env`` is laid over the named ``nccl_preset``. Every error names the file and the field, in one line, and
nothing is touched on any host (exit 2).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabfile.errors import InventoryError

if TYPE_CHECKING:  # pydantic and PyYAML are imported only to validate a file the cache has not seen
    from fabfile.inventory.schema import InventoryFields

PATCH_MODES = ("auto", "env", "engine", "scheduler", "plugin", "sitecustomize")

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

_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MAX_INVENTORY_BYTES = 4 << 20


def _check_name(name: str, where: str, what: str) -> None:
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
    lock_wait: float = 600.0  # another deploy holds the host: wait for it (bounded, with a progress line)
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


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: dict[str, Host]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ssh_config: Path | None = None
    known_hosts: Path | None = None
    clusters: dict[str, Cluster] = field(default_factory=dict)
    routers: dict[str, Router] = field(default_factory=dict)

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
        """Resolve ``--host`` (names, group names, comma lists) into hosts, in order, without duplicates."""
        if spec is None or spec.strip() == "":
            return [self.default_host()]
        out: list[Host] = []
        for token in (t.strip() for t in spec.split(",")):
            if not token:
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
                raise InventoryError(f"--host: unknown host or group {token!r} in {self.path}",
                                     f"known names: {known}")
            for n in names:
                h = self.hosts[n]
                if all(o.name != h.name for o in out):
                    out.append(h)
        if not out:
            raise InventoryError("--host: no host named", "pass --host NAME")
        return out


def _merge(*layers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        for k, v in layer.items():
            if isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = {**out[k], **v}
            else:
                out[k] = v
    return out


def _remote_path(value: str | None, where: str, *, allow_home: bool = False) -> None:
    if value is None:
        return
    if "\n" in value or "\0" in value:
        raise ValueError(f"{where}: must not contain a newline or NUL byte")
    if value.startswith("/") or (allow_home and value.startswith("~/")):
        return
    extra = " or start with ~/" if allow_home else ""
    raise ValueError(f"{where}: remote paths must be absolute{extra}, got {value!r}")


def load(path: str | Path, *, cache: bool = False) -> Inventory:
    """Read and validate an inventory file; raise :class:`InventoryError` naming the file and the field.

    ``cache`` (the CLI): reuse the result of an earlier validation of exactly these bytes (see :func:`_cache_key`),
    which spares each command the ~80 ms of importing PyYAML and pydantic and building the schema. A file is
    validated in full whenever its bytes, its path, this code or those libraries changed; errors are never cached,
    and the files the inventory names are checked for existence on every load, as without the cache.
    """
    try:
        return _load(path, cache)
    except InventoryError as e:
        # One line, always: a key or value with a newline or control character in it is shown escaped.
        e.message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in e.message)
        e.args = (e.message,)
        raise


def _load(path: str | Path, cache: bool) -> Inventory:
    p = Path(path).expanduser()
    if not p.is_file():
        what = "is not a regular file" if p.exists() else "does not exist"
        raise InventoryError(f"inventory file {p} {what}", "pass --inventory PATH or create inventory.yaml")
    try:
        if p.stat().st_size > MAX_INVENTORY_BYTES:
            raise InventoryError(f"{p}: larger than {MAX_INVENTORY_BYTES >> 20} MiB; an inventory is a short file")
        data = p.read_bytes()
    except OSError as e:
        raise InventoryError(f"{p}: cannot read: {e.strerror}") from None
    key = _cache_key(p, data) if cache else None
    if key is not None:
        from fabfile.inventory import cache as store

        found = _from_doc(store.lookup("inventory", key))
        if found is not None:
            try:
                _check_files(found.ssh_config, found.known_hosts)
            except ValueError as e:
                raise InventoryError(f"{p}: {e}") from None
            return found
    from fabfile.inventory import schema

    raw = schema.read(p, data)
    if not isinstance(raw, dict):
        raise InventoryError(f"{p}: the top level must be a mapping with a `hosts:` key")
    try:
        inv = _build(p, raw)
    except schema.InvalidField as e:
        raise InventoryError(f"{p}: {schema.pydantic_message(e, '')}") from None
    except ValueError as e:
        raise InventoryError(f"{p}: {e}") from None
    if key is not None:
        doc = _to_doc(inv)
        if _from_doc(json.loads(json.dumps(doc))) == inv:  # only what comes back identical is worth keeping
            store.store("inventory", key, doc)
    return inv


# -- the cache of validated inventories (the CLI's fast path) -----------------------------------------------------
CACHE_FORMAT = "1"


def _cache_key(p: Path, data: bytes) -> str | None:
    """What a validated inventory depends on: the file's bytes, its path as given (relative paths in it resolve
    against its folder, and the working directory), HOME (``~`` in ssh_config/known_hosts), the code that validates
    it, and the PyYAML and pydantic installed (their files' size and time). None: no key, no cache."""
    import hashlib
    import importlib.util

    h = hashlib.sha256()
    try:
        parts = [CACHE_FORMAT, str(p), os.getcwd(), os.path.expanduser("~")]
        here = Path(__file__).resolve().parent
        for name in ("hosts.py", "schema.py"):
            h.update(hashlib.sha256((here / name).read_bytes()).digest())
        for lib in ("yaml", "pydantic"):
            spec = importlib.util.find_spec(lib)
            if spec is None or spec.origin is None:
                return None
            st = os.stat(spec.origin)
            parts.append(f"{spec.origin}:{st.st_size}:{st.st_mtime_ns}")
    except (OSError, ValueError, ImportError):
        return None
    for part in parts:
        h.update(part.encode("utf-8", "surrogateescape") + b"\0")
    h.update(data)
    return h.hexdigest()


def _to_doc(inv: Inventory) -> dict[str, Any]:
    return {"path": str(inv.path), "hosts": {n: asdict(h) for n, h in inv.hosts.items()},
            "groups": {g: list(m) for g, m in inv.groups.items()},
            "ssh_config": None if inv.ssh_config is None else str(inv.ssh_config),
            "known_hosts": None if inv.known_hosts is None else str(inv.known_hosts),
            "clusters": {n: asdict(c) for n, c in inv.clusters.items()},
            "routers": {n: asdict(r) for n, r in inv.routers.items()}}


def _from_doc(d: Any) -> Inventory | None:
    """The inventory a document of :func:`_to_doc` holds; None for anything else (an older format, say)."""
    if not isinstance(d, dict):
        return None
    try:
        hosts = {n: Host(**{**h, "speculative": Speculative(**h["speculative"]), "timeouts": Timeouts(**h["timeouts"]),
                            "sglang_args": tuple(h["sglang_args"]), "secret_env": tuple(h["secret_env"]),
                            "node": None}) for n, h in d["hosts"].items()}
        return Inventory(
            path=Path(d["path"]), hosts=hosts, groups={g: tuple(m) for g, m in d["groups"].items()},
            ssh_config=None if d["ssh_config"] is None else Path(d["ssh_config"]),
            known_hosts=None if d["known_hosts"] is None else Path(d["known_hosts"]),
            clusters={n: Cluster(**{**c, "hosts": tuple(c["hosts"])}) for n, c in d["clusters"].items()},
            routers={n: Router(**{**r, "members": tuple(r["members"]), "args": tuple(r["args"])})
                     for n, r in d["routers"].items()})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _check_files(ssh_config: Path | None, known_hosts: Path | None) -> None:
    for key, value in (("ssh_config", ssh_config), ("known_hosts", known_hosts)):
        if value is not None and not value.is_file():
            raise ValueError(f"{key}: file {value} does not exist")


def _build(p: Path, raw: dict[str, Any]) -> Inventory:
    from fabfile.inventory.schema import GroupFields, validate

    inv = validate(raw)
    if not inv.hosts:
        raise ValueError("hosts: at least one host is required")
    presets = dict(BUILTIN_NCCL_PRESETS)
    if inv.presets is not None:
        presets.update(inv.presets.nccl)

    groups: dict[str, tuple[str, ...]] = {}
    group_defaults: dict[str, dict[str, Any]] = {}
    for gname, g in (inv.groups or {}).items():
        _check_name(gname, f"groups.{gname}", "group")
        members = g if isinstance(g, list) else g.hosts
        for m in members:
            if m not in inv.hosts:
                raise ValueError(f"groups.{gname}: unknown host {m!r}")
        if gname in inv.hosts:
            raise ValueError(f"groups.{gname}: a group may not share its name with a host")
        groups[gname] = tuple(members)
        if isinstance(g, GroupFields) and g.defaults is not None:
            group_defaults[gname] = g.defaults.model_dump(exclude_unset=True)

    base = inv.defaults.model_dump(exclude_unset=True) if inv.defaults else {}
    hosts: dict[str, Host] = {}
    for name, hf in inv.hosts.items():
        _check_name(name, f"hosts.{name}", "host")
        layers = [base] + [group_defaults[g] for g, members in groups.items() if name in members and g in
                           group_defaults]
        own = hf.model_dump(exclude_unset=True) if hf else {}
        merged = _merge(*layers, own)
        hosts[name] = _resolve(name, merged, presets, str(p))

    defaults = [h.name for h in hosts.values() if h.is_default]
    if len(defaults) > 1:
        raise ValueError(f"hosts: only one host may be `default: true`, found {', '.join(defaults)}")
    base_dir = p.parent
    ssh_config = (base_dir / Path(inv.ssh_config).expanduser()) if inv.ssh_config else None
    known_hosts = (base_dir / Path(inv.known_hosts).expanduser()) if inv.known_hosts else None
    _check_files(ssh_config, known_hosts)
    clusters = _clusters(inv, hosts, groups)
    routers = _routers(inv, hosts, groups, clusters)
    return Inventory(path=p, hosts=hosts, groups=groups, ssh_config=ssh_config, known_hosts=known_hosts,
                     clusters=clusters, routers=routers)


def _clusters(inv: InventoryFields, hosts: dict[str, Host], groups: dict[str, tuple[str, ...]]) -> dict[str, Cluster]:
    out: dict[str, Cluster] = {}
    for name, c in (inv.clusters or {}).items():
        _check_name(name, f"clusters.{name}", "cluster")
        where = f"clusters.{name}"
        if name in hosts or name in groups:
            raise ValueError(f"{where}: a cluster may not share its name with a host or group")
        if len(c.hosts) < 2:
            raise ValueError(f"{where}.hosts: a multi-node cluster needs at least 2 hosts, got {len(c.hosts)}")
        for h in c.hosts:
            if h not in hosts:
                raise ValueError(f"{where}.hosts: unknown host {h!r}")
        if len(set(c.hosts)) != len(c.hosts):
            raise ValueError(f"{where}.hosts: a host is listed twice")
        n = len(c.hosts)
        if c.tp % n:
            raise ValueError(f"{where}.tp: total TP size {c.tp} does not divide over {n} nodes")
        per = c.tp // n
        for h in c.hosts:
            if hosts[h].gpus < per:
                raise ValueError(f"{where}.tp: {c.tp} over {n} nodes needs {per} GPUs per node but {h} has "
                                 f"gpus: {hosts[h].gpus}")
        addr = c.dist_init_addr or hosts[c.hosts[0]].address
        if not addr:
            raise ValueError(f"{where}.dist_init_addr: required (or set hosts.{c.hosts[0]}.address: rank 0's "
                             "address as the other nodes reach it)")
        out[name] = Cluster(name=name, hosts=tuple(c.hosts), tp=c.tp, dist_init_addr=f"{addr}:{c.dist_init_port}")
    return out


def _routers(inv: InventoryFields, hosts: dict[str, Host], groups: dict[str, tuple[str, ...]],
             clusters: dict[str, Cluster]) -> dict[str, Router]:
    out: dict[str, Router] = {}
    for name, r in (inv.routers or {}).items():
        _check_name(name, f"routers.{name}", "router")
        where = f"routers.{name}"
        if r.host not in hosts:
            raise ValueError(f"{where}.host: unknown host {r.host!r}")
        if not 0 <= r.drain_s <= 3600:
            raise ValueError(f"{where}.drain_s: seconds from 0 to 3600, got {r.drain_s:g}")
        members: list[str] = []
        for token in (t.strip() for t in r.group.split(",") if t.strip()):
            if token in groups:
                members += groups[token]
            elif token in clusters:
                members.append(clusters[token].hosts[0])  # a cluster serves through its rank 0
            elif token in hosts:
                members.append(token)
            else:
                raise ValueError(f"{where}.group: unknown group or host {token!r}")
        for m in members:
            if not hosts[m].address:
                raise ValueError(f"{where}.group: host {m} has no `address` (the router reaches replicas by it)")
        python = r.python or hosts[r.host].python
        _remote_path(python, f"{where}.python")
        out[name] = Router(name=name, host=r.host, members=tuple(dict.fromkeys(members)), group=r.group,
                           port=r.port, listen=r.listen, policy=r.policy, python=python, args=tuple(r.args),
                           drain_s=float(r.drain_s))
    return out


def _resolve(name: str, m: dict[str, Any], presets: dict[str, dict[str, str]], source: str) -> Host:
    where = f"hosts.{name}"
    m = {k: v for k, v in m.items() if v is not None}  # an explicit `field: null` means the built-in default
    for req in ("python", "model"):
        if not m.get(req):
            raise ValueError(f"{where}.{req}: required (set it on the host or under defaults)")
    for key in ("python", "model", "draft_model"):
        _remote_path(m.get(key), f"{where}.{key}")
    for key in ("log_dir", "state_dir"):
        _remote_path(m.get(key), f"{where}.{key}", allow_home=True)

    gpus = int(m["gpus"]) if m.get("gpus") is not None else 1  # `gpus: null` (explicit) means the default too
    tp = int(m["tp"]) if m.get("tp") is not None else gpus
    if tp > gpus:
        raise ValueError(f"{where}.tp: tensor parallel size {tp} needs {tp} GPUs but the host has gpus: {gpus}")

    preset_name = m.get("nccl_preset")
    if preset_name is not None and preset_name not in presets:
        raise ValueError(f"{where}.nccl_preset: unknown preset {preset_name!r} (known: {', '.join(sorted(presets))})")
    nccl_env = {**(presets.get(preset_name, {}) if preset_name else {}), **(m.get("nccl_env") or {})}
    bad = [k for k in nccl_env if not k.startswith("NCCL_")]
    if bad:
        raise ValueError(f"{where}.nccl_env: {bad[0]} is not an NCCL_ variable; put it under env")

    spec_raw = m.get("speculative") or {}
    spec = Speculative(
        algorithm=spec_raw.get("algorithm") or "EAGLE3",
        steps=int(spec_raw["steps"]) if spec_raw.get("steps") is not None else (3 if m.get("draft_model") else 0),
        topk=int(spec_raw.get("topk") or 1),
        draft_tokens=spec_raw.get("draft_tokens"),
    )
    check_speculative(spec, has_draft=bool(m.get("draft_model")), where=f"{where}.speculative")

    accept_gate = float(m["accept_gate"]) if m.get("accept_gate") is not None else DEFAULT_ACCEPT_GATE
    if not 0 <= accept_gate < 64:
        raise ValueError(f"{where}.accept_gate: an accept length from 0 (no gate) to below 64, got {accept_gate:g}")
    t = Timeouts(**{k: float(v) for k, v in (m.get("timeouts") or {}).items() if v is not None})
    for key, value in asdict(t).items():
        if not math.isfinite(value) or value < 0 or (value == 0 and key != "lock_wait"):
            raise ValueError(f"{where}.timeouts.{key}: must be a positive number of seconds, got {value:g}")
    if t.silence < 2:
        raise ValueError(f"{where}.timeouts.silence: at least 2 s (the host sends a heartbeat every "
                         f"silence/4 s, at least every 0.5 s), got {t.silence:g}")
    if m.get("gpu_idle_mib", 0) < 0:
        raise ValueError(f"{where}.gpu_idle_mib: must be 0 or more MiB, got {m['gpu_idle_mib']}")
    free = float(m.get("min_free_disk_gb", 1.0))
    if not math.isfinite(free) or free < 0:
        raise ValueError(f"{where}.min_free_disk_gb: must be 0 or more GB, got {m['min_free_disk_gb']}")
    return Host(
        name=name,
        connection=m.get("connection") or "ssh",
        ssh_host=m.get("ssh_host") or name,
        is_default=bool(m.get("default", False)),
        gpus=gpus,
        tp=tp,
        python=m["python"],
        model=m["model"],
        draft_model=m.get("draft_model"),
        served_model_name=m.get("served_model_name"),
        # Under the deploying user's HOME (created 0700): a shared /tmp directory let other accounts plant code
        # that Python imported from the working directory, and links the log was appended through.
        log_dir=m.get("log_dir") or DEFAULT_LOG_DIR,
        state_dir=m.get("state_dir") or "~/.specdeploy",
        listen=m.get("listen") or "127.0.0.1",
        port=int(m.get("port", 30000)),
        nccl_preset=preset_name,
        nccl_env=nccl_env,
        env=dict(m.get("env") or {}),
        sglang_args=tuple(m.get("sglang_args") or ()),
        secret_env=tuple(m.get("secret_env") or ()),
        speculative=spec,
        patch_mode=m.get("patch_mode") or "auto",
        force_env=bool(m.get("force_env", False)),
        nccl_debug=bool(m.get("nccl_debug", True)),
        min_free_disk_gb=free,
        gpu_idle_mib=int(m.get("gpu_idle_mib", 512)),
        timeouts=t,
        source=source,
        address=m.get("address"),
        accept_gate=accept_gate,
    )


def check_speculative(spec: Speculative, *, has_draft: bool, where: str) -> None:
    """SGLang's rules for EAGLE parameters (the same in every release from 0.4.5 to ``versions.NEWEST_SUPPORTED``),
    checked up front.

    - topk 1: SGLang replaces any other draft-token count with steps + 1 (a warning, server_args / speculative_hook);
      refused here so the plan, its config name and the server agree.
    - topk > 1: the draft tree picks ``draft_tokens - 1`` tokens with ``torch.topk`` from the ``topk + (steps - 1) *
      topk**2`` candidates the steps produce (``organize_draft_results``); more than that fails at the first draft.
      SGLang sets no other limit (its own EAGLE tests run steps 5, topk 8, draft tokens 64).
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
