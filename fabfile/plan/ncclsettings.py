"""Which value of each NCCL variable a host's deploy asks for (``nccl_settings``): the one rule behind the launch
environment, the in-process patch and check-env's expectations.

Its own module, apart from ``deploy_plan``: ``inv check-env`` needs only this rule to say what it expects, and
building the plan's module (its dataclasses, the launch flags' table) was ~6 ms of every check-env's start.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabfile.errors import InventoryError, UsageError, several
from fabfile.inventory.hosts import Host

NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}


@dataclass(frozen=True)
class NcclSettings:
    """Which value of each NCCL_* variable a deploy asks for: one rule, used for the launch environment, the
    in-process patch and check-env's expectations alike.

    Lowest first: the preset, ``nccl_env``, then ``env`` (the most specific: what the process is started with).
    NCCL's logging variables (``NCCL_DEBUG*``) are never values to prove: ``nccl_debug`` supplies them and a
    value for them under ``env`` or ``nccl_env`` wins over it.
    """

    tuning: dict[str, str]
    logging: dict[str, str]
    notes: tuple[str, ...]


def nccl_settings(host: Host) -> NcclSettings:
    from fabfile.plan.ncclrefusals import refusal, unknown_names
    from fabfile.remote.evidence import ncclenv

    tuning: dict[str, str] = {}
    logging: dict[str, str] = dict(NCCL_DEBUG_ENV) if host.nccl_debug else {}
    notes: list[str] = []
    preset = f"nccl_preset {host.nccl_preset}" if host.nccl_preset else "nccl_env"
    refusals: list[UsageError] = []
    for where, values in (("nccl_env", host.nccl_env), ("env", host.env)):
        for k, v in values.items():
            # Any case: a lower-case nccl_* name is refused (NCCL reads names case-sensitively), not passed on.
            if not k.upper().startswith("NCCL_") or ncclenv.kind(k) == "not_param":
                continue
            refused = refusal(k, v)
            if refused is not None:
                # Before anything is stopped: otherwise the deploy loaded the model and check-env found it. Every
                # value refused is said, one line each, so the inventory is fixed in one go.
                refusals.append(InventoryError(f"{where}.{refused}", f"fix {where}.{k} in the inventory (or the "
                                               "preset it comes from), then render again; nothing was touched",
                                               host=host.name))
                continue
            if ncclenv.kind(k) == "unknown" and k in unknown_names({k: v}):
                notes.append(f"{where}.{k} is not a variable NCCL {ncclenv.NCCL_KNOWN_SERIES} reads (kept as "
                             "written: a newer NCCL or PyTorch may read it); check-env cannot prove it")
            if ncclenv.kind(k) == "logging":
                if host.nccl_debug and k in NCCL_DEBUG_ENV and v != NCCL_DEBUG_ENV[k]:
                    notes.append(f"{where}.{k}={v} replaces nccl_debug's {NCCL_DEBUG_ENV[k]}")
                logging[k] = v
                continue
            if where == "env" and k in tuning and tuning[k] != v:
                notes.append(f"env.{k}={v} replaces {preset}'s {tuning[k]} (env wins; check-env expects {v})")
            tuning[k] = v
    if refusals:
        raise several(refusals)
    return NcclSettings(tuning=tuning, logging=logging, notes=tuple(notes))
