"""NCCL candidates for ``inv sweep --nccl pcie,none,host --nccl-env 'NCCL_PROTO=LL|Simple|-'``: each one a set of
NCCL tuning values a configuration is deployed with (NCCL reads its environment once per process, so every
candidate is its own server start). Pure; bad input is a FlagError (exit 2) before anything starts.

A preset candidate replaces the host's NCCL tuning values (its preset, ``nccl_env`` and the ``NCCL_*`` tuning
variables of ``env``) with the preset's; ``none`` with nothing (NCCL's own defaults); ``host`` keeps the host's.
``--nccl-env`` values are laid over each of them (``-``: the variable unset). Values are checked with NCCL's own
parsing rules (``remote/ncclenv``): an integer NCCL cannot parse, a level name it does not know, a protocol or
algorithm list it refuses, a variable it does not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from fabfile.errors import FlagError
from fabfile.flags import quote
from fabfile.inventory.hosts import BUILTIN_NCCL_PRESETS, Host
from fabfile.remote.evidence import ncclenv

HOST = "host"


@dataclass(frozen=True)
class NcclCandidate:
    name: str
    base: str  # a preset name, "none" or "host"
    values: dict[str, str | None] = field(default_factory=dict)  # laid over the base; None: unset
    preset: dict[str, str] = field(default_factory=dict)  # the preset's values (built in or the inventory's)


def _check_value(var: str, value: str) -> None:
    kind = ncclenv.kind(var)
    if kind in ("unknown", "not_param"):
        raise FlagError(f"--nccl-env: {quote(var)} is not a variable NCCL reads",
                        "check the spelling (NCCL_PROTO, ...)")
    if kind == "logging":
        raise FlagError(f"--nccl-env: {quote(var)} is a logging setting, not a tuning value to compare")
    if var in ncclenv.SELECTION_VARS:
        try:
            ncclenv.selection(var, value)
        except ncclenv.SelectionError as e:
            raise FlagError(f"--nccl-env: {e}", "NCCL would refuse it and the server would not start") from None
    elif ncclenv.reading(var, value)["value"] is None:
        raise FlagError(f"--nccl-env: {quote(var)}={quote(value, as_repr=True)}: {ncclenv.reading(var, value)['why']}")


def _env_axes(spec: str) -> list[tuple[str, list[str | None]]]:
    """``'NCCL_PROTO=LL|Simple|- NCCL_ALGO=Ring|Tree'`` → [(var, [values])], in order."""
    axes: list[tuple[str, list[str | None]]] = []
    for item in spec.split():
        var, sep, values = item.partition("=")
        if not sep or not var or not values:
            raise FlagError("--nccl-env: expected VAR=V1|V2|- (space between variables), got "
                            f"{quote(item, as_repr=True)}")
        if any(v == var for v, _ in axes):
            raise FlagError(f"--nccl-env: {quote(var)} is given twice")
        vals: list[str | None] = []
        for v in values.split("|"):
            if v == "":
                raise FlagError(f"--nccl-env: {quote(var)} has an empty value in {quote(values, as_repr=True)} "
                                "(write - for unset)")
            if v != "-":
                _check_value(var, v)
            vals.append(None if v == "-" else v)
        if len(set(vals)) != len(vals):
            raise FlagError(f"--nccl-env: {quote(var)} lists a value twice")
        axes.append((var, vals))
    return axes


def candidates(nccl: str | None, nccl_env: str | None,
               presets: Mapping[str, Mapping[str, str]] | None = None) -> list[NcclCandidate]:
    """The candidates the two flags give (empty: neither was given, the sweep runs the host's settings).
    ``presets``: the inventory's (``Inventory.nccl_presets``: the built-in ones and its ``presets.nccl``)."""
    if nccl is None and nccl_env is None:
        return []
    bases = [b.strip() for b in (nccl or HOST).split(",") if b.strip()]
    if not bases:
        raise FlagError("--nccl: give presets to try, e.g. --nccl pcie,none")
    table = dict(BUILTIN_NCCL_PRESETS if presets is None else presets)
    known = [*sorted(table), HOST]
    for b in bases:
        if b not in known:
            raise FlagError(f"--nccl: unknown preset {quote(b, as_repr=True)}", f"choose from {', '.join(known)}")
    if len(set(bases)) != len(bases):
        raise FlagError("--nccl: a preset is listed twice")
    combos: list[dict[str, str | None]] = [{}]
    for var, vals in _env_axes(nccl_env or ""):
        combos = [{**c, var: v} for c in combos for v in vals]
    out = []
    for b in bases:
        for c in combos:
            over = "+".join(f"{k.removeprefix('NCCL_')}={'-' if v is None else v}" for k, v in c.items())
            name = over if b == HOST and over else (f"{b}+{over}" if over else b)
            out.append(NcclCandidate(name=name, base=b, values=c, preset=dict(table.get(b, {}))))
    return out


def apply(host: Host, cand: NcclCandidate) -> Host:
    """``host`` with the candidate's NCCL tuning values (the logging ones, NCCL_DEBUG*, are kept)."""
    env = dict(host.env)
    nccl_env = dict(host.nccl_env)
    preset = host.nccl_preset
    if cand.base != HOST:
        env = {k: v for k, v in env.items() if not k.startswith("NCCL_") or ncclenv.kind(k) in ("logging", "not_param")}
        nccl_env = dict(cand.preset)
        preset = cand.base
    for var, value in cand.values.items():
        env.pop(var, None)
        if value is None:
            nccl_env.pop(var, None)
        else:
            nccl_env[var] = value
    return replace(host, env=env, nccl_env=nccl_env, nccl_preset=preset)


def nccl_tuning(host: Host) -> set[str]:
    """The NCCL tuning variables ``host`` launches with (``nccl_env`` and the tuning ``NCCL_*`` of ``env``; the
    logging ones are not a change to the all-reduce)."""
    return set(host.nccl_env) | {k for k in host.env if k.startswith("NCCL_") and ncclenv.kind(k) not in
                                 ("logging", "not_param")}
