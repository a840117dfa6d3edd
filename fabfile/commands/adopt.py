"""`inv adopt`: turn a hand-started SGLang server into an inventory entry.

Two sources, one result. A launch line pasted by the user (``NCCL_PROTO=LL ... nohup python3 -m
sglang.launch_server ... > log 2>&1 &``, even the whole ``ssh host '...'`` line it was typed as), or the running
server itself, read from ``/proc`` on the host by the agent (argv, start-time environment, the file its stdout goes
to). Either way the entry is built so that ``inv render`` of it runs the same command: the flags the tool derives
from inventory fields (model, TP, listen address, port, the speculative ones) go to those fields, every other flag
stays verbatim in ``sglang_args``, and every variable of the line goes to ``env`` (the NCCL tuning ones to a preset
when they are exactly one, else to ``nccl_env``). The tool's own additions (its NCCL debug variables, its deploy
id) come on top, as for any deploy.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabfile.commands.result import CommandResult
from fabfile.errors import FlagError
from fabfile.inventory.launch_flags import BY_SPELLING, LAUNCH_FLAGS, row_of
from fabfile.remote import versions

if TYPE_CHECKING:
    from fabfile.remote.protocol import AdoptAnswer, JSONObject, JSONValue

# Words that only change how the command runs, not what runs; the server is the same without them.
_WRAPPERS = {"nohup", "setsid", "exec", "command", "builtin", "time"}
_SEPARATORS = {"&&", "||", ";", "|", "&", "|&", ";;", "(", ")"}
_REDIRECTS = {">", ">>", ">&", "&>", "&>>", "<", ">|", "<>", "<<", "<<<", "<&"}
# ssh options that take a value (OpenSSH's getopt string): their value is not the destination.
_SSH_VALUE_OPTS = set("BbcDEeFIiJLlmOoPpQRSWw")
_ENV_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)



@dataclass
class Launch:
    """A parsed launch: what ran, with which environment, writing where."""

    python: str
    args: list[str]                              # everything after ``-m sglang.launch_server``
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    cwd: str | None = None


def _words(text: str) -> list[str]:
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        return list(lex)
    except ValueError as e:
        # shlex says "No closing quotation" / "No escaped character"
        raise FlagError(f"--command: cannot parse the command line ({e}); paste it exactly as the shell ran "
                        "it") from None


def _segments(words: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for w in words:
        if w in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(w)
    return [s for s in out if s]


def _ssh_remote(seg: list[str]) -> str | None:
    """``ssh [opts] dest remote words...`` -> the remote command as the remote shell gets it (words joined)."""
    i = 1
    while i < len(seg) and seg[i].startswith("-") and seg[i] != "--":
        opt = seg[i]
        if len(opt) == 2 and opt[1] in _SSH_VALUE_OPTS:
            i += 1
        i += 1
    if i < len(seg) and seg[i] == "--":
        i += 1
    rest = seg[i + 1:]
    return " ".join(rest) if rest else None


def parse_command(text: str, depth: int = 0) -> Launch:
    """Parse a pasted launch line. Raises FlagError (exit 2) with one sentence when it is not one."""
    if not text.strip():
        raise FlagError("--command: empty; paste the line that started the server")
    words = _words(text)
    cwd = None
    for seg in _segments_with_redirects(words):
        plain = [w for w in seg if w not in _REDIRECTS]
        if plain and os.path.basename(plain[0]) == "ssh" and depth == 0:
            remote = _ssh_remote(plain)
            if remote and "sglang" in remote:
                return parse_command(remote, depth + 1)
        if plain[:1] == ["cd"] and len(plain) > 1:
            cwd = plain[1]
        if any("sglang.launch_server" in w for w in plain):
            launch = _parse_segment(seg, text)
            launch.cwd = cwd
            return launch
    if any(w in ("sglang", "serve") for w in words):
        raise FlagError("--command: `sglang serve` lines are not understood; use the `python -m "
                        "sglang.launch_server ...` form of the same command")
    raise FlagError("--command: no `python -m sglang.launch_server` in it; paste the line that started the server")


def _segments_with_redirects(words: list[str]) -> list[list[str]]:
    # `2>&1` arrives as "2", ">&", "1"; `>` targets stay in the segment and are taken apart in _parse_segment.
    return _segments(words)


def _fd_prefix(digit: str, op: str, text: str) -> bool:
    """Whether ``digit`` before ``op`` was written against it (``2>&1``: a file descriptor) rather than apart
    (``--speculative-num-steps 3 > log``: an argument); the lexer loses that, the text keeps it."""
    glued = re.search(rf"(?<!\S){digit}{re.escape(op)}", text) is not None
    apart = re.search(rf"(?<!\S){digit}\s+{re.escape(op)}", text) is not None
    return glued and not apart


def _parse_segment(seg: list[str], text: str) -> Launch:
    env: dict[str, str] = {}
    log_path: str | None = None
    words: list[str] = []
    i = 0
    while i < len(seg):
        w = seg[i]
        if w in _REDIRECTS:
            target = seg[i + 1] if i + 1 < len(seg) else None
            if target is None:
                raise FlagError(f"--command: the redirection {w!r} has no target")
            fd = None
            if words and words[-1].isdigit() and w not in ("&>", "&>>") and _fd_prefix(words[-1], w, text):
                fd = words.pop()
            if w in (">", ">>", "&>", "&>>", ">|") and fd in (None, "1") and target != "/dev/null":
                log_path = target
            i += 2
            continue
        words.append(w)
        i += 1
    # Leading assignments, `env [-i] [-u NAME] NAME=value ...`, `nohup`, `setsid`, `nice -n N`.
    j = 0
    while j < len(words):
        w = words[j]
        m = _ENV_ASSIGN.fullmatch(w)
        if m:
            env[m.group(1)] = m.group(2)
        elif w in _WRAPPERS or os.path.basename(w) in ("env", "nohup", "setsid"):
            pass
        elif os.path.basename(w) == "nice":
            if j + 1 < len(words) and words[j + 1] == "-n":
                j += 1
            if j + 1 < len(words) and words[j + 1].lstrip("-+").isdigit():
                j += 1
        elif w == "-i" or w == "--ignore-environment":
            pass
        elif w in ("-u", "--unset") and j + 1 < len(words):
            j += 1
        else:
            break
        j += 1
    rest = words[j:]
    if not rest:
        raise FlagError("--command: no program after the variables; paste the whole launch line")
    python = rest[0]
    k = 1
    while k < len(rest) and rest[k] != "-m" and rest[k].startswith("-") and not rest[k].startswith("--"):
        k += 1
    if k + 1 >= len(rest) or rest[k] != "-m" or rest[k + 1] != "sglang.launch_server":
        raise FlagError(f"--command: expected `{python} -m sglang.launch_server ...`, got "
                        f"{shlex.join(rest[:3])!r}; adopt understands the `python -m` form")
    return Launch(python=python, args=rest[k + 2:], env=env, log_path=log_path)


def split_flags(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """The flags the tool renders from fields (flag -> value) and the rest, verbatim and in order."""
    from fabfile.remote.common import split_argv

    managed: dict[str, str] = {}
    rest: list[str] = []
    for item in split_argv(args):
        flag = item.name
        row = row_of(flag)
        if row is None:
            rest.extend(item.words)
            continue
        if item.value is None:
            raise FlagError(f"--command: {flag} has no value")
        if flag in managed or any(row_of(f) == row for f in managed):
            raise FlagError(f"--command: {flag} is given twice; SGLang would take the last, keep one")
        managed[flag] = item.value
    return managed, rest


def host_entry(launch: Launch, *, ssh_host: str | None = None, gpus: int | None = None,
               extra: JSONObject | None = None) -> JSONObject:
    """The inventory entry (a plain mapping, YAML-ready) that renders ``launch``."""
    from fabfile.inventory.hosts import BUILTIN_NCCL_PRESETS
    from fabfile.remote.evidence import ncclenv

    managed, rest = split_flags(launch.args)
    fields: dict[str, str | int] = {}
    for flag, value in managed.items():
        row = BY_SPELLING[flag]  # split_flags keeps only the table's flags
        name = row.field
        if row.whole:
            try:
                fields[name] = int(value)
            except ValueError:
                raise FlagError(f"--command: {flag} expects a whole number, got {value!r}") from None
        else:
            fields[name] = value
    if "model" not in fields:
        raise FlagError("--command: the line has no --model-path; it is not a server launch")
    entry: JSONObject = {}
    if ssh_host:
        entry["ssh_host"] = ssh_host
    tp = int(fields.get("tp", 1))
    entry.update({"python": launch.python, "model": fields["model"], "tp": tp, "gpus": max(gpus or 0, tp)})
    if "draft_model" in fields:
        entry["draft_model"] = fields["draft_model"]
    entry.update({row.field: fields[row.field] for row in LAUNCH_FLAGS if row.when_set and row.field in fields})
    # SGLang's own defaults (server_args.py: host 127.0.0.1, port 30000), written out so the entry does not depend
    # on the tool's defaults.
    entry["listen"] = fields.get("listen", "127.0.0.1")
    entry["port"] = int(fields.get("port", 30000))
    if launch.log_path:
        entry["log_dir"] = os.path.dirname(launch.log_path) or "."
    tuning = {k: v for k, v in launch.env.items() if k.startswith("NCCL_") and ncclenv.kind(k) != "logging"
              and ncclenv.kind(k) != "not_param"}
    other = {k: v for k, v in launch.env.items() if k not in tuning}
    preset = next((name for name, values in BUILTIN_NCCL_PRESETS.items() if values and values == tuning), None)
    entry["nccl_preset"] = preset or "none"
    if tuning and preset is None:
        entry["nccl_env"] = tuning
    if other:
        entry["env"] = other
    given = "speculative.algorithm" in fields or "speculative.steps" in fields
    steps = int(fields.get("speculative.steps", 0)) if given else 0
    spec: JSONObject = {"algorithm": fields.get("speculative.algorithm", "EAGLE3"), "steps": steps}
    if steps:
        spec["topk"] = int(fields.get("speculative.topk", 1))
        if "speculative.draft_tokens" in fields:
            spec["draft_tokens"] = int(fields["speculative.draft_tokens"])
    entry["speculative"] = spec
    if rest:
        entry["sglang_args"] = rest
    entry.update(extra or {})
    return entry


def validate_entry(name: str, entry: JSONObject) -> Any:
    """Resolve the entry exactly as `inv` would (an inventory of this one host); FlagError when it would refuse."""
    from pathlib import Path

    from fabfile.inventory import resolve
    from fabfile.inventory import schema as inventory_schema

    try:
        return resolve.build(Path("<adopted>"), {"hosts": {name: entry}}).hosts[name]
    except inventory_schema.InvalidField as e:
        raise FlagError(f"--command: the adopted entry is not valid: {inventory_schema.pydantic_message(e, '')}") \
            from None
    except ValueError as e:
        raise FlagError(f"--command: the adopted entry is not valid: {e}") from None


def connection_settings(inv: Any) -> dict[str, str]:
    """The inventory's own ``ssh_config`` and ``known_hosts`` (absolute paths), so a file written by
    ``inv adopt --write`` reaches the host the way the adopting inventory did (it wrote only ``hosts:``, and its
    deploy could not connect unless the alias was also in ~/.ssh/config)."""
    out: dict[str, str] = {}
    for key in ("ssh_config", "known_hosts"):
        path = getattr(inv, key, None)
        if path is not None:
            out[key] = str(Path(path).expanduser().resolve())
    return out


def _strings(value: JSONValue | None) -> dict[str, str]:
    """An entry's mapping of names to values (``env``, ``nccl_env``), as the entry built it."""
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _word_list(value: JSONValue | None) -> list[str]:
    """An entry's list of words (``sglang_args``)."""
    return [str(w) for w in value] if isinstance(value, list) else []


def entry_yaml(name: str, entry: JSONObject, source: str, settings: dict[str, str] | None = None,
               knob_notes: list[str] | None = None) -> str:
    import yaml

    head = f"# adopted by `inv adopt` from {source}\n"
    for note in knob_notes or []:
        head += f"# knob: {note}\n"
    hidden = [k for k, v in _strings(entry.get("env")).items() if v == SECRET_PLACEHOLDER]
    if hidden:
        head += (f"# {', '.join(hidden)}: secret (listed in secret_env); the running server's value is not shown: "
                 f"replace {SECRET_PLACEHOLDER} with it before deploying.\n")
    args = _word_list(entry.get("sglang_args"))
    if any(w == SECRET_PLACEHOLDER or w.endswith("=" + SECRET_PLACEHOLDER) for w in args):
        head += f"# sglang_args: a secret flag's value is not shown: replace {SECRET_PLACEHOLDER} with it.\n"
    if entry.get("listen") not in ("127.0.0.1", "localhost", "::1"):
        head += (f"# listen {entry.get('listen')}: kept as the server ran. The tool advises 127.0.0.1 (reach it "
                 "through an SSH tunnel or the router) unless other machines must call it; deploy warns.\n")
    body = yaml.safe_dump({**(settings or {}), "hosts": {name: entry}}, sort_keys=False, default_flow_style=False,
                          width=100)
    return head + body


# What a secret's value becomes in the adopted entry: the running server's value is never printed or written; the
# operator fills it in (the entry lists the name under ``secret_env`` and its file says so).
SECRET_PLACEHOLDER = "***"


def without_tool_variables(env: dict[str, str]) -> dict[str, str]:
    """``env`` without what the tool itself adds to every launch (its deploy id, SPT_NOENV, PYTHONSAFEPATH, ...;
    on a server it deployed, also its NCCL debug variables and profiler directory): a deploy of the entry adds them
    again, so copying them would only pin this deploy's values."""
    from fabfile.plan import measure
    from fabfile.plan.deploy_plan import DEPLOY_ID_ENV, TOOL_ENV
    from fabfile.plan.ncclsettings import NCCL_DEBUG_ENV

    ours = {k: v for k, v in env.items() if k.startswith("SPECDEPLOY_") or TOOL_ENV.get(k) == v}
    if DEPLOY_ID_ENV in env:
        ours.update({k: v for k, v in env.items() if NCCL_DEBUG_ENV.get(k) == v
                     or k in (measure.PROFILER_DIR_ENV, measure.TIMER_ENV)})
    return {k: v for k, v in env.items() if k not in ours}


def hide_secrets(launch: Launch, names: set[str]) -> list[str]:
    """Replace, in ``launch``, the values of the secret variables ``names`` and of the secret flags (``--api-key``)
    by the placeholder; the names hidden, for the entry's ``secret_env``."""
    from fabfile.remote.procs import redact_argv

    launch.env = {k: (SECRET_PLACEHOLDER if k in names else v) for k, v in launch.env.items()}
    launch.args = redact_argv(launch.args)
    return sorted(k for k in names if k in launch.env)


def secret_names_of(env: dict[str, str], host: Any) -> set[str]:
    """The variables of ``env`` whose values are secret, by the rule ``inv render`` masks by (the name, or the
    inventory's ``secret_env`` for this host), and any holding a secret value the inventory knows."""
    from fabfile.plan.deploy_plan import secret_name, secret_names, secret_values

    known = secret_names(host)
    values = set(secret_values(host))
    return {k for k, v in env.items() if k in known or secret_name(k) or v in values}


def from_host(inv: Any, host: Any) -> tuple[JSONObject, str, AdoptAnswer]:
    """Read the server running on ``host`` (agent verb ``adopt``, which also records it as adopted there)."""
    from fabfile.transport.session import HostSession

    with HostSession.open(inv, host) as s:
        data = s.adopt(host.port)
    argv = list(data.get("argv") or [])
    launch = _parse_segment(argv, shlex.join(argv)) if argv else None
    if launch is None:
        raise FlagError(f"--host: {host.name}: the server's command line could not be read")
    # The variables came from /proc, not from a line: whatever the login shell did not set was the operator's.
    launch.env = without_tool_variables({**dict(data.get("env") or {}), **launch.env})
    launch.log_path = data.get("log_path")
    secret = hide_secrets(launch, secret_names_of(launch.env, host))
    entry = host_entry(launch, ssh_host=host.ssh_host if host.connection == "ssh" else None, gpus=host.gpus,
                       extra={"connection": "local"} if host.connection == "local" else None)
    if secret:
        entry["secret_env"] = secret
    entry.setdefault("state_dir", host.state_dir)
    return entry, f"pid {data.get('pid')} on {host.name} (SGLang {data.get('sglang') or 'unknown'})", data


@dataclass(frozen=True)
class AdoptOptions:
    host: str | None = None      # a running server on this inventory host
    command: str | None = None   # or a pasted launch line
    name: str | None = None      # the entry's name (default: host, else gpu1)
    write: str | None = None     # a new inventory file to write the entry to
    sglang_version: str | None = None  # a pasted line: the release its knobs are judged on (default the newest)


def adopt_command(opts: AdoptOptions, inventory: Any) -> CommandResult:
    """``inv adopt``: the inventory entry of a hand-started server, printed or written to a new file (never over an
    existing one). ``inventory`` loads the inventory, only when a host is read."""

    if opts.command is None and opts.host is None:
        raise FlagError("--host or --command: say which server to adopt (a running one, or its launch line)")
    write = opts.write
    if write is not None and Path(write).exists():
        raise FlagError(f"--write: {write} already exists; adopt writes a new file (print the entry without "
                        "--write and paste it into your inventory)")
    entry_name = opts.name or opts.host or "gpu1"
    settings: dict[str, str] = {}
    if opts.command is not None:
        from fabfile.plan.deploy_plan import secret_name

        launch = parse_command(opts.command)
        secret = hide_secrets(launch, {k for k in launch.env if secret_name(k)})
        entry = host_entry(launch)
        if secret:
            entry["secret_env"] = secret
        source = "a pasted launch line"
        judged_on = opts.sglang_version or versions.NEWEST_SUPPORTED
    else:
        inv = inventory()
        from fabfile.inventory.hosts import one_host

        entry, source, data = from_host(inv, one_host(inv, opts.host, "adopt"))
        settings = connection_settings(inv)
        judged_on = str(data.get("sglang") or opts.sglang_version or versions.NEWEST_SUPPORTED)
    validate_entry(entry_name, entry)
    # What the line's flags and variables do on that release (plan/knob_effects, read from the wheels), said where
    # the entry is read: in its file's head and in the JSON.
    knobs = knob_notes(judged_on, entry)
    text = entry_yaml(entry_name, entry, source, settings, knobs)
    if write is not None:
        # O_EXCL: a file that appeared since the check above is not overwritten either.
        fd = os.open(write, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def for_people() -> None:
        if write is not None:
            print(f"wrote {write}: `inv render --inventory {write} --host {entry_name}` shows the command")
        else:
            print(text, end="")

    return CommandResult({"host": entry_name, "entry": entry, "source": source, "knob_notes": knobs,
                          "knob_notes_version": judged_on}, for_people)


def knob_notes(version: str, entry: JSONObject) -> list[str]:
    """The knob lines of an adopted entry on ``version``: its verbatim flags and its variables (the flags the tool
    renders from fields are its own choice)."""
    from fabfile.plan import knob_effects

    env = {**_strings(entry.get("nccl_env")), **_strings(entry.get("env"))}
    return knob_effects.notes(version, _word_list(entry.get("sglang_args")), env)
