"""From a validated file to ``Host`` values: the layering (built-in NCCL presets < ``presets.nccl`` < ``defaults`` <
``groups.<g>.defaults`` < host, ``nccl_env`` over the named ``nccl_preset``), every field's own rule, and the
clusters and routers checked against the hosts. Each error is a ``ValueError`` naming the field; ``hosts.load``
words it as an ``InventoryError`` naming the file.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabfile.inventory.values import (
    BUILTIN_NCCL_PRESETS,
    DEFAULT_ACCEPT_GATE,
    DEFAULT_LOG_DIR,
    Cluster,
    Host,
    Inventory,
    Router,
    Speculative,
    Timeouts,
    check_name,
    check_speculative,
)

if TYPE_CHECKING:  # pydantic and PyYAML are imported only to validate a file the cache has not seen
    from fabfile.inventory.schema import ClusterFields, GroupFields, InventoryFields, RouterFields


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


def check_files(ssh_config: Path | None, known_hosts: Path | None) -> None:
    for key, value in (("ssh_config", ssh_config), ("known_hosts", known_hosts)):
        if value is not None and not value.is_file():
            raise ValueError(f"{key}: file {value} does not exist")


class Problems(ValueError):
    """Several fields refused at once, one line each (``lines``): a file is fixed in one go, not one run a field."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


class Found:
    """Independent checks run one after another, every refusal kept: ``check(fn, ...)`` is ``fn``'s value, or None
    when it refused; :meth:`done` raises them all (:class:`Problems`)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def check(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Problems as e:
            self.lines += e.lines
        except ValueError as e:
            self.lines.append(str(e))
        return None

    def done(self) -> None:
        if self.lines:
            raise Problems(self.lines)


def build(p: Path, raw: dict[str, Any]) -> Inventory:
    from fabfile.inventory.schema import validate

    inv = validate(raw)
    if not inv.hosts:
        raise ValueError("hosts: at least one host is required")
    presets = dict(BUILTIN_NCCL_PRESETS)
    if inv.presets is not None:
        presets.update(inv.presets.nccl)
    found = Found()
    groups: dict[str, tuple[str, ...]] = {}
    group_defaults: dict[str, dict[str, Any]] = {}
    for gname, g in (inv.groups or {}).items():
        checked = found.check(_group, gname, g, inv)
        if checked is not None:
            groups[gname] = checked[0]
            if checked[1] is not None:
                group_defaults[gname] = checked[1]

    base = inv.defaults.model_dump(exclude_unset=True) if inv.defaults else {}
    hosts: dict[str, Host] = {}
    for name, hf in inv.hosts.items():
        layers = [base] + [group_defaults[g] for g, members in groups.items() if name in members and g in
                           group_defaults]
        own = hf.model_dump(exclude_unset=True) if hf else {}
        host = found.check(_host, name, _merge(*layers, own), presets, str(p))
        if host is not None:
            hosts[name] = host

    defaults = [h.name for h in hosts.values() if h.is_default]
    if len(defaults) > 1:
        found.lines.append(f"hosts: only one host may be `default: true`, found {', '.join(defaults)}")
    base_dir = p.parent
    ssh_config = (base_dir / Path(inv.ssh_config).expanduser()) if inv.ssh_config else None
    known_hosts = (base_dir / Path(inv.known_hosts).expanduser()) if inv.known_hosts else None
    found.check(check_files, ssh_config, known_hosts)
    # Clusters and routers are checked against the hosts and groups: with one of those refused, what they would say
    # of it follows from that refusal, so they wait for the next run.
    if found.lines:
        found.done()
    clusters = _clusters(inv, hosts, groups)
    routers = _routers(inv, hosts, groups, clusters)
    return Inventory(path=p, hosts=hosts, groups=groups, ssh_config=ssh_config, known_hosts=known_hosts,
                     clusters=clusters, routers=routers, nccl_presets=presets)


def _group(gname: str, g: GroupFields | list[str],
           inv: InventoryFields) -> tuple[tuple[str, ...], dict[str, Any] | None]:
    """A group's members (every one a host) and its defaults."""
    from fabfile.inventory.schema import GroupFields

    check_name(gname, f"groups.{gname}", "group")
    members = g if isinstance(g, list) else g.hosts
    for m in members:
        if m not in inv.hosts:
            raise ValueError(f"groups.{gname}: unknown host {m!r}")
    if gname in inv.hosts:
        raise ValueError(f"groups.{gname}: a group may not share its name with a host")
    defaults = g.defaults.model_dump(exclude_unset=True) if isinstance(g, GroupFields) and g.defaults is not None \
        else None
    return tuple(members), defaults


def _host(name: str, merged: dict[str, Any], presets: dict[str, dict[str, str]], source: str) -> Host:
    check_name(name, f"hosts.{name}", "host")
    return _resolve(name, merged, presets, source)


def _clusters(inv: InventoryFields, hosts: dict[str, Host], groups: dict[str, tuple[str, ...]]) -> dict[str, Cluster]:
    found = Found()
    out: dict[str, Cluster] = {}
    for name, c in (inv.clusters or {}).items():
        one = found.check(_cluster, name, c, hosts, groups)
        if one is not None:
            out[name] = one
    found.done()
    return out


def _cluster(name: str, c: ClusterFields, hosts: dict[str, Host], groups: dict[str, tuple[str, ...]]) -> Cluster:
    check_name(name, f"clusters.{name}", "cluster")
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
    return Cluster(name=name, hosts=tuple(c.hosts), tp=c.tp, dist_init_addr=f"{addr}:{c.dist_init_port}")


def _routers(inv: InventoryFields, hosts: dict[str, Host], groups: dict[str, tuple[str, ...]],
             clusters: dict[str, Cluster]) -> dict[str, Router]:
    found = Found()
    out: dict[str, Router] = {}
    for name, r in (inv.routers or {}).items():
        one = found.check(_router, name, r, hosts, groups, clusters)
        if one is not None:
            out[name] = one
    found.done()
    return out


def _router(name: str, r: RouterFields, hosts: dict[str, Host], groups: dict[str, tuple[str, ...]],
            clusters: dict[str, Cluster]) -> Router:
    check_name(name, f"routers.{name}", "router")
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
    return Router(name=name, host=r.host, members=tuple(dict.fromkeys(members)), group=r.group,
                  port=r.port, listen=r.listen, policy=r.policy, python=python, args=tuple(r.args),
                  drain_s=float(r.drain_s))


def _resolve(name: str, m: dict[str, Any], presets: dict[str, dict[str, str]], source: str) -> Host:
    where = f"hosts.{name}"
    m = {k: v for k, v in m.items() if v is not None}  # an explicit `field: null` means the built-in default
    found = Found()  # every field's own rule, each refusal kept: one line each
    found.check(_check_paths, m, where)
    gpus = int(m["gpus"]) if m.get("gpus") is not None else 1  # `gpus: null` (explicit) means the default too
    tp = int(m["tp"]) if m.get("tp") is not None else gpus
    if tp > gpus:
        found.lines.append(f"{where}.tp: tensor parallel size {tp} needs {tp} GPUs but the host has gpus: {gpus}")
    preset_name = m.get("nccl_preset")
    nccl_env = found.check(_nccl_env, m, presets, where)
    spec = found.check(_speculative, m, where)
    accept_gate = float(m["accept_gate"]) if m.get("accept_gate") is not None else DEFAULT_ACCEPT_GATE
    if not 0 <= accept_gate < 64:
        found.lines.append(f"{where}.accept_gate: an accept length from 0 (no gate) to below 64, got "
                           f"{accept_gate:g}")
    t = found.check(_timeouts, m, where)
    if m.get("gpu_idle_mib", 0) < 0:
        found.lines.append(f"{where}.gpu_idle_mib: must be 0 or more MiB, got {m['gpu_idle_mib']}")
    free = float(m.get("min_free_disk_gb", 1.0))
    if not math.isfinite(free) or free < 0:
        found.lines.append(f"{where}.min_free_disk_gb: must be 0 or more GB, got {m['min_free_disk_gb']}")
    found.done()
    return Host(
        name=name,
        connection=m.get("connection") or "ssh",
        ssh_host=m.get("ssh_host") or name,
        ssh_client=m.get("ssh_client") or "openssh",
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
        measure=bool(m["measure"]) if m.get("measure") is not None else None,
        quiet_notes=tuple(dict.fromkeys((m.get("notes") or {}).get("quiet") or ())),
    )


def _check_paths(m: dict[str, Any], where: str) -> None:
    found = Found()
    for req in ("python", "model"):
        if not m.get(req):
            found.lines.append(f"{where}.{req}: required (set it on the host or under defaults)")
    for key in ("python", "model", "draft_model"):
        if m.get(key):
            found.check(_remote_path, m.get(key), f"{where}.{key}")
    for key in ("log_dir", "state_dir"):
        found.check(lambda v, w: _remote_path(v, w, allow_home=True), m.get(key), f"{where}.{key}")
    found.done()


def _nccl_env(m: dict[str, Any], presets: dict[str, dict[str, str]], where: str) -> dict[str, str]:
    """The named preset with the host's ``nccl_env`` laid over it; NCCL_ variables only."""
    preset_name = m.get("nccl_preset")
    if preset_name is not None and preset_name not in presets:
        raise ValueError(f"{where}.nccl_preset: unknown preset {preset_name!r} (known: {', '.join(sorted(presets))})")
    nccl_env = {**(presets.get(preset_name, {}) if preset_name else {}), **(m.get("nccl_env") or {})}
    bad = [k for k in nccl_env if not k.startswith("NCCL_")]
    if bad:
        raise ValueError(f"{where}.nccl_env: {bad[0]} is not an NCCL_ variable; put it under env")
    return nccl_env


def _speculative(m: dict[str, Any], where: str) -> Speculative:
    spec_raw = m.get("speculative") or {}
    spec = Speculative(
        algorithm=spec_raw.get("algorithm") or "EAGLE3",
        steps=int(spec_raw["steps"]) if spec_raw.get("steps") is not None else (3 if m.get("draft_model") else 0),
        topk=int(spec_raw.get("topk") or 1),
        draft_tokens=spec_raw.get("draft_tokens"),
    )
    check_speculative(spec, has_draft=bool(m.get("draft_model")), where=f"{where}.speculative")
    return spec


def _timeouts(m: dict[str, Any], where: str) -> Timeouts:
    t = Timeouts(**{k: float(v) for k, v in (m.get("timeouts") or {}).items() if v is not None})
    for key, value in asdict(t).items():
        if not math.isfinite(value) or value < 0 or (value == 0 and key != "lock_wait"):
            raise ValueError(f"{where}.timeouts.{key}: must be a positive number of seconds, got {value:g}")
    if t.silence < 2:
        raise ValueError(f"{where}.timeouts.silence: at least 2 s (the host sends a heartbeat every "
                         f"silence/4 s, at least every 0.5 s), got {t.silence:g}")
    return t
