"""The inventory file's shape: reading its YAML and checking every field (pydantic models), on the slow path only.

Importing PyYAML and pydantic and building these models costs ~80 ms, more than a read-only command's own work on
a host. ``hosts.load`` imports this module only when a file is not in the CLI's cache of validated inventories
(``cache``): a file is checked here the first time the CLI meets its bytes, and after every edit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from fabfile.errors import InventoryError
from fabfile.flags import quote
from fabfile.inventory.launch_flags import LAUNCH_FLAGS, row_of
from fabfile.remote.common import is_flag_word
from fabfile.remote.procs import SECRET_FLAGS

InvalidField = ValidationError  # what validate() raises (a ValueError): pydantic_message() words it


# Always used with fullmatch: `$` would also accept a trailing newline.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What OpenSSH (9.6+, CVE-2023-51385) refuses in a host or user name given on its command line: such a name can
# reach a shell through a ProxyCommand's %h. ssh_host is that name here.
_SSH_FORBIDDEN = set("'`\"$\\;&<>|(){}")


def valid_ssh_host(value: str) -> bool:
    return bool(value) and not value.startswith("-") and not any(
        c in _SSH_FORBIDDEN or c.isspace() or not c.isprintable() for c in value)


# Flags of sglang_args the tool itself reads a value from (the secret flags it moves into --config) or renders
# from a field: each takes exactly one value in every release (``type=str``, read from the wheels).
ONE_VALUE_FLAGS = (*SECRET_FLAGS, *(row.flag for row in LAUNCH_FLAGS if row.in_args_too))


def check_flag_words(items: list[str]) -> None:
    """Refuse a word argparse would read as a flag that no SGLang (or router) flag is: one that starts with a single
    ``-`` and is no negative number, meant as the value of the flag before it. argparse then says "expected one
    argument" and the server exits after the old one was stopped; in one word, ``--flag=-value``, it is the
    value (fabfile/plan/argv.py)."""
    for i, item in enumerate(items):
        following = items[i + 1] if i + 1 < len(items) else None
        if item in ONE_VALUE_FLAGS and (following is None or following.startswith("--")):
            raise ValueError(f"{item} takes a value, and " +
                             (f"{quote(following)} is the next flag" if following else "none follows") +
                             f"; write the two as one word, {item}=VALUE")
        if is_flag_word(item) and not item.startswith("--") and " " not in item:
            before = items[i - 1].split("=", 1)[0] if i and items[i - 1].startswith("--") else "--flag"
            raise ValueError(f"{quote(item)} starts with '-', so SGLang's argparse reads it as a flag, not as the "
                             f"value of {before}; write the two as one word, {before}=VALUE")


def _env_value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        raise ValueError("must be a string or number (quote true/false/null to pass them literally)")
    if isinstance(v, (int, float, str)):
        s = str(v)
        if "\0" in s:
            raise ValueError("must not contain a NUL byte")
        return s
    raise ValueError(f"must be a string or number, got {type(v).__name__}")


def _env_map(v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise ValueError("must be a mapping of VARIABLE: value")
    out: dict[str, str] = {}
    for k, val in v.items():
        if not isinstance(k, str) or not _ENV_NAME.fullmatch(k):
            raise ValueError(f"{k!r} is not a valid environment variable name")
        try:
            out[k] = _env_value(val)
        except ValueError as e:
            raise ValueError(f"{k}: {e}") from None
    return out


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class SpeculativeFields(_Strict):
    algorithm: Literal["EAGLE3", "EAGLE", "NEXTN", "STANDALONE"] | None = None
    steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None


class TimeoutFields(_Strict):
    connect: float | None = None      # TCP + banner + auth, per attempt
    connect_total: float | None = None  # all connection attempts together
    connect_refused: float | None = None  # retries after a refusal (a dead ProxyCommand, a closed port)
    command: float | None = None      # default bound for one remote command (remote side too)
    ready: float | None = None        # hard bound on waiting for readiness
    stall: float | None = None        # no new log bytes for this long = failure
    stop_grace: float | None = None   # SIGTERM → SIGKILL
    gpu_clean: float | None = None    # bounded wait for the GPU-clean gate
    lock_wait: float | None = None    # wait for another deploy's lock (0 = fail at once)
    host: float | None = None         # wall-clock bound on one host's part of a read-only command (status, ...)
    silence: float | None = None      # a deploy's link is dead after this long without a byte (heartbeats: 5 s)
    first_request: float | None = None  # bound on the first real request after ready, and on the accept burst


class NotesFields(_Strict):
    # Notes the tool raises about its own settings, silenced by kind (values.QUIET_NOTES says what each is).
    quiet: list[Literal["nccl_preset", "timer_cost"]] = []


class HostFields(_Strict):
    """Every field a host, a group's defaults or the global defaults may set. All optional here."""

    connection: Literal["ssh", "local"] | None = None
    ssh_host: str | None = None
    ssh_client: Literal["openssh", "paramiko"] | None = None  # what carries a read-only command (values.Host)
    default: bool | None = None
    gpus: int | None = None
    tp: int | None = None
    python: str | None = None
    model: str | None = None
    draft_model: str | None = None
    served_model_name: str | None = None
    log_dir: str | None = None
    state_dir: str | None = None
    listen: str | None = None
    port: int | None = None
    nccl_preset: str | None = None
    nccl_env: dict[str, str] | None = None
    env: dict[str, str] | None = None
    secret_env: list[str] | None = None  # env names whose values are secret (besides *TOKEN*, *PASSWORD*, ...)
    sglang_args: list[str] | None = None
    speculative: SpeculativeFields | None = None
    patch_mode: str | None = None  # one of remote.patch.modes.PATCH_MODES (``_patch_mode``)
    force_env: bool | None = None
    nccl_debug: bool | None = None
    # SGLang's per-phase GPU timer (--enable-metrics + SGLANG_ENABLE_METRICS_DEVICE_TIMER=1); unset: on only for the
    # deploys of commands that measure (sweep), see fabfile/plan/measure.py
    measure: bool | None = None
    min_free_disk_gb: float | None = None
    gpu_idle_mib: int | None = None
    # EAGLE accept length at or below which a deploy fails (measured after ready); 0 turns the gate off
    accept_gate: float | None = None
    timeouts: TimeoutFields | None = None
    notes: NotesFields | None = None  # `notes: {quiet: [nccl_preset, timer_cost]}`
    address: str | None = None        # how the other hosts reach this one (cluster rendezvous, router workers)

    @field_validator("ssh_host")
    @classmethod
    def _ssh_host(cls, v: str | None) -> str | None:
        if v is not None and not valid_ssh_host(v):
            raise ValueError("not a valid SSH host name: no spaces, control characters, leading '-' or any of "
                             "' ` \" $ \\ ; & < > | ( ) { } (OpenSSH refuses them too)")
        return v

    @field_validator("patch_mode", mode="before")
    @classmethod
    def _patch_mode(cls, v: Any) -> Any:
        from fabfile.remote.patch.modes import PATCH_MODES

        if v is not None and v not in PATCH_MODES:
            raise ValueError("Input should be " + ", ".join(repr(m) for m in PATCH_MODES[:-1])
                             + f" or {PATCH_MODES[-1]!r}")  # as pydantic words a Literal
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None and (not v or any(c.isspace() for c in v) or "/" in v):
            raise ValueError("must be a bare IP address or DNS name, no spaces or scheme")
        return v

    @field_validator("nccl_env", "env", mode="before")
    @classmethod
    def _check_env(cls, v: Any) -> Any:
        return None if v is None else _env_map(v)

    @field_validator("secret_env", mode="before")
    @classmethod
    def _check_secret_env(cls, v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(k, str) and _ENV_NAME.fullmatch(k) for k in v):
            raise ValueError("must be a list of environment variable names")
        return v

    @field_validator("sglang_args", mode="before")
    @classmethod
    def _check_args(cls, v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, list):
            raise ValueError("must be a list of strings, one argument per item")
        out = []
        for item in v:
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                raise ValueError(f"{item!r} is not a string")
            flag = str(item).split("=", 1)[0]
            row = row_of(flag)
            # A flag the tool writes from a field, here too, would be a second source of truth.
            if row is not None and not row.in_args_too:
                raise ValueError(f"{flag} is set by the tool from `{row.source}`; remove it here")
            out.append(str(item))
        check_flag_words(out)
        return out

    @field_validator("gpus", "tp")
    @classmethod
    def _positive(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError("must be at least 1")
        return v

    @field_validator("port")
    @classmethod
    def _port(cls, v: int | None) -> int | None:
        if v is not None and not 1 <= v <= 65535:
            raise ValueError("must be a TCP port between 1 and 65535")
        return v


class GroupFields(_Strict):
    hosts: list[str]
    defaults: HostFields | None = None


class PresetsFields(_Strict):
    nccl: dict[str, dict[str, str]] = {}

    @field_validator("nccl", mode="before")
    @classmethod
    def _check(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            raise ValueError("must map preset names to {VARIABLE: value}")
        return {str(k): _env_map(val or {}) for k, val in v.items()}


class ClusterFields(_Strict):
    hosts: list[str]                  # ordered: the first is node rank 0
    tp: int                           # total tensor parallel size over all nodes
    dist_init_port: int = 29500
    dist_init_addr: str | None = None  # rank 0's address as the other nodes reach it (default: its `address`)

    @field_validator("tp")
    @classmethod
    def _tp(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v

    @field_validator("dist_init_port")
    @classmethod
    def _port(cls, v: int) -> int:
        if not 1 <= v <= 65535:
            raise ValueError("must be a TCP port between 1 and 65535")
        return v


class RouterFields(_Strict):
    host: str                         # where the router runs (a host of this inventory)
    group: str                        # whose healthy replicas it fronts (a group or a comma list of hosts)
    port: int = 30000
    listen: str = "0.0.0.0"
    policy: Literal["round_robin", "random", "cache_aware", "power_of_two"] = "round_robin"
    python: str | None = None         # default: the router host's `python`
    args: list[str] = []
    # a rolling deploy takes a replica out of this router first; requests already sent there get this long to finish
    drain_s: float = 5.0

    @field_validator("args")
    @classmethod
    def _check_args(cls, v: list[str]) -> list[str]:
        check_flag_words(v)
        return v

    @field_validator("port")
    @classmethod
    def _port(cls, v: int) -> int:
        if not 1 <= v <= 65535:
            raise ValueError("must be a TCP port between 1 and 65535")
        return v


class InventoryFields(_Strict):
    ssh_config: str | None = None
    known_hosts: str | None = None
    presets: PresetsFields | None = None
    defaults: HostFields | None = None
    groups: dict[str, GroupFields | list[str]] | None = None
    clusters: dict[str, ClusterFields] | None = None
    routers: dict[str, RouterFields] | None = None
    hosts: dict[str, HostFields | None]


def _loc(err: Any, prefix: str) -> str:
    parts = [prefix] if prefix else []
    # A key with a control character (a newline, say) is shown quoted: the message stays one readable line.
    parts += [str(p) if str(p).isprintable() else repr(p) for p in err.get("loc", ())
              if not (isinstance(p, str) and p.startswith("function-"))]
    return ".".join(p for p in parts if p)


def pydantic_message(e: ValidationError, prefix: str) -> str:
    """The first bad field, in one line: ``where: what``."""
    return pydantic_messages(e, prefix)[0]


def pydantic_messages(e: ValidationError, prefix: str) -> list[str]:
    """Every bad field, one line each (``where: what``), so a file is fixed in one go. A value that fits no branch
    of a union (a group: a list of hosts, or a mapping) is said for the first branch only: the others' complaints
    about the same value are noise."""
    out: list[str] = []
    branch: dict[tuple[Any, ...], Any] = {}
    for err in e.errors():
        loc = tuple(err.get("loc", ()))
        tag = next((i for i, part in enumerate(loc) if isinstance(part, str) and _is_branch(part)), None)
        if tag is not None and branch.setdefault(loc[:tag], loc[tag]) != loc[tag]:
            continue
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (a typo?)"
        line = f"{_loc(err, prefix)}: {msg.removeprefix('Value error, ')}"
        if line not in out:
            out.append(line)
    return out or ["invalid"]


def _is_branch(part: str) -> bool:
    """A union branch's name in an error's location (``GroupFields``, ``list[str]``): fields are lower case, and a
    key named after one of these classes would only hide a duplicate complaint."""
    return "[" in part or part in {c.__name__ for c in _Strict.__subclasses__()}


# Deeper than any inventory needs (a host's `env: {...}` inside `hosts: {...}` is three). PyYAML's scanner keeps one
# entry per open `[`/`{` and walks them all at each token, so a deeply nested flow took it ~1.2 s to reach Python's
# recursion limit (about 490 levels) before the load was refused; refused at this depth it takes milliseconds.
FLOW_DEPTH_MAX = 64


class _TooDeep(Exception):
    pass


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error, not a silent overwrite (a host
    defined twice, a field set twice: the first one would be dropped without a word). Keys merged in with ``<<``
    may still be overridden, as YAML intends. Flow collections nest at most ``FLOW_DEPTH_MAX`` deep."""

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # PyYAML names its argument so
        if self.flow_level >= FLOW_DEPTH_MAX:
            raise _TooDeep
        super().fetch_flow_collection_start(TokenClass)


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key; the constructor below says so
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first given on line {first + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def read(p: Path, data: bytes) -> Any:
    """The file's YAML (``data``, its bytes), or :class:`InventoryError` naming the file and the line."""
    try:
        # Line ends as a text-mode read gives them (universal newlines), so a value means what it did with one.
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        return yaml.load(text, Loader=_StrictLoader)
    except UnicodeDecodeError as e:
        raise InventoryError(f"{p}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except (RecursionError, _TooDeep):
        raise InventoryError(f"{p}: nested too deeply to be an inventory") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InventoryError(f"{p}:{line} not valid YAML: {problem}") from None
    except (ValueError, TypeError, IndexError, OverflowError) as e:
        # PyYAML's constructors raise these for a tagged scalar they cannot build (`!!float ";"`, `!!int ""`).
        raise InventoryError(f"{p}: not valid YAML: a tagged value cannot be read ({type(e).__name__}: "
                             f"{str(e)[:100]!r})") from None


def validate(raw: Any) -> InventoryFields:
    """The file's fields checked (pydantic); ``ValidationError`` names every bad one (:func:`pydantic_messages`)."""
    return InventoryFields.model_validate(raw)
