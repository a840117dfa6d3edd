"""A Plan is everything a deploy will do to one host, as a pure value: the exact launch argv and environment, the
files it ships, the patch it applies and the steps it runs. ``--dry-run`` and ``inv render`` print it and stop."""

from __future__ import annotations

import getpass
import hashlib
import json
import re
import secrets
import shlex
import socket
import time
from dataclasses import dataclass, field, replace
from typing import Any

from fabfile import __version__
from fabfile.errors import FlagError, InventoryError
from fabfile.inventory.hosts import MAX_DRAFT_TOKENS, Host, Speculative, check_speculative
from fabfile.inventory.launch_flags import FLAG_OF, LAUNCH_FLAGS
from fabfile.plan.argv import opt
from fabfile.plan.ncclsettings import nccl_settings
from fabfile.remote import versions
from fabfile.remote.common import split_argv
from fabfile.remote.procs import SECRET_FLAGS, redact_argv
from fabfile.remote.protocol import DEPLOY_STEPS, StepName

DEPLOY_ID_ENV = "SPECDEPLOY_DEPLOY_ID"
# What every launch gets from the tool (not the inventory): setproctitle keeps the workers' environ readable, output
# unbuffered, and (3.11+; the working directory is checked to be private anyway) the working directory off the import
# path of the launcher and of every scheduler it spawns.
TOOL_ENV = {"SPT_NOENV": "1", "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1"}
_SECRET_NAME = re.compile(r"(?i)(token|secret|passw|api[_-]?key|credential|private)")
# SGLang reads `--config FILE` (YAML; each key a flag name) since `versions.CONFIG_FILE` (0.5.3): the one way to give
# it the API key without putting the key in its command line, which every account on the host can read (ps,
# /proc/PID/cmdline).


def client_name() -> str:
    """``user@machine`` of this client: recorded with each deploy, and who holds a host's lock or cancelled its
    deploy, as `inv status` and a waiting deploy say."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def secret_name(name: str) -> bool:
    """Whether an environment variable's name says its value is secret (TOKEN, PASSWORD, API_KEY, ...)."""
    return _SECRET_NAME.search(name) is not None


def secret_names(host: Host) -> set[str]:
    """Environment variables whose values are secret: by name (TOKEN, PASSWORD, API_KEY, ...) or marked in the
    inventory with ``secret_env`` (a DATABASE_URL carries a password under an innocent name)."""
    return {k for k in host.env if _SECRET_NAME.search(k)} | set(host.secret_env)


def split_secret_flags(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """``args`` without the secret flags (``--api-key V`` / ``--api-key=V``), and those as a config mapping."""
    rest: list[str] = []
    found: dict[str, str] = {}
    for f in split_argv(args, values=SECRET_FLAGS):
        if f.name not in SECRET_FLAGS:
            rest.extend(f.words)
        elif f.value is not None:  # a secret flag without a value (the last word) is dropped
            found[f.name[2:]] = f.value
    return rest, found


def secret_values(host: Host) -> list[str]:
    """The secret values this host's configuration carries (secret env vars, --api-key style flags), so anything
    the host sends back (log lines, excerpts, command lines) can be masked before it is shown. SGLang logs its
    server_args, API key included."""
    names = secret_names(host)
    found = [v for k, v in host.env.items() if k in names and v]
    found += list(split_secret_flags(list(host.sglang_args))[1].values())
    return sorted({v for v in found if len(v) >= 3}, key=len, reverse=True)


def mask_secrets(text: str, secrets_: list[str]) -> str:
    """``text`` with every secret replaced by ``***``, also as shell quoting, JSON or repr would have spelt it."""
    for value in secrets_:
        spellings = {value, shlex.quote(value), json.dumps(value)[1:-1], repr(value)[1:-1],
                     json.dumps(value, ensure_ascii=False)[1:-1]}
        for spelt in sorted(spellings, key=len, reverse=True):
            if len(spelt) >= 3:
                text = text.replace(spelt, "***")
    return text


def env_file_text(env: dict[str, str]) -> str:
    """The private environment file the launch script sources (``set -a``): values never enter a command line."""
    head = "# specdeploy: environment for the server, read by its launch script (mode 0600)\n"
    return head + "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items())


def config_file_text(values: dict[str, str]) -> str:
    """SGLang's ``--config`` file (YAML; JSON is YAML) holding the secret flags."""
    return json.dumps(values, indent=2, sort_keys=True) + "\n"




@dataclass(frozen=True)
class Options:
    """Command-line choices that override the inventory for one run."""

    steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None
    patch_mode: str | None = None
    timeout: float | None = None
    verify: bool = True
    accept_gate: float | None = None  # --accept-gate: overrides the inventory's (0 turns the gate off)
    measure: bool | None = None  # --measure / --no-measure: overrides the inventory's `measure`
    measuring: bool = False  # the deploy is measured (a sweep's): the device timer is on unless turned off
    strict_knobs: bool = False  # --strict: a knob without effect on the host's release is refused (exit 2)
    tune_id: str = ""  # a deploy of `inv tune`'s: admitted while that tune holds the host (remote/serve/tunelease)


@dataclass(frozen=True)
class Plan:
    host: Host
    deploy_id: str
    config_name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    patch_mode: str            # as requested; "auto" is resolved against the host's SGLang version at preflight
    nccl_values: dict[str, str]
    force_env: bool
    log_path: str
    script_path: str
    script: str
    ready_timeout: float
    steps: tuple[StepName, ...]
    client: str
    expected: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the tool changed in, or adds to, the inventory's settings, in sentences
    accept_gate: float | None = None  # the accept length a speculative deploy must exceed (None: no gate)
    tune_id: str = ""  # Options.tune_id
    nccl_logging: dict[str, str] = field(default_factory=dict)
    nccl_notes: tuple[str, ...] = ()
    # NCCL settings that will hurt, for the SGLang version the plan was last decided for (ncclnotes; in notes too)
    nccl_advice: tuple[str, ...] = ()
    # What the script really runs: argv with the secret flags moved into ``config_file`` (when SGLang has
    # --config), and the inventory's ``env`` read from ``env_file`` (0600) instead of the command line.
    launch_argv: tuple[str, ...] = ()
    file_env: dict[str, str] = field(default_factory=dict)
    env_file: str = ""
    config_file: str = ""
    secret_config: dict[str, str] = field(default_factory=dict)
    # Measurement (plan/measure.py): whether the device timer is on for the version, which of the launch's flags
    # and notes that decision added (for_version decides again once the version is known), the profiler's directory.
    measure: bool = False
    measure_wanted: bool | None = None
    measure_wanted_by: str = ""
    measuring: bool = False
    measure_added: tuple[str, ...] = ()
    measure_notes: tuple[str, ...] = ()
    profile_dir: str = ""
    # Knobs of the launch that do nothing on the release the plan was decided for, or have a new name there
    # (plan/knob_effects, read from the wheels), in sentences; with ``strict_knobs`` the deploy refuses them.
    knob_notes: tuple[str, ...] = ()
    strict_knobs: bool = False

    @property
    def plan_hash(self) -> str:
        """Identity of the configuration (not of this run): same inventory + flags → same hash."""
        env = {k: v for k, v in self.env.items() if k != DEPLOY_ID_ENV}
        blob = json.dumps({"argv": self.argv, "env": env, "patch_mode": self.patch_mode,
                           "nccl": self.nccl_values, "force": self.force_env}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def url(self) -> str:
        return f"http://{self.host.listen}:{self.host.port}"

    def masked_env(self) -> dict[str, str]:
        names = secret_names(self.host)
        return {k: ("***" if k in names or _SECRET_NAME.search(k) else v) for k, v in self.env.items()}

    def masked_argv(self) -> list[str]:
        return redact_argv(list(self.argv))

    def masked_script(self) -> str:
        return mask_secrets(self.script, secret_values(self.host))

    def masked_files(self) -> dict[str, str]:
        """The private files a deploy writes next to the script, as ``render`` may show them."""
        out: dict[str, str] = {}
        if self.env_file:
            names = secret_names(self.host)
            out[self.env_file] = env_file_text({k: ("***" if k in names else v) for k, v in self.file_env.items()})
        if self.config_file:
            out[self.config_file] = config_file_text({k: "***" for k in self.secret_config})
        return out

    def summary(self) -> dict[str, Any]:
        return {"host": self.host.name, "deploy_id": self.deploy_id, "config": self.config_name,
                "plan_hash": self.plan_hash, "url": self.url, "argv": self.masked_argv(), "env": self.masked_env(),
                "patch_mode": self.patch_mode, "log_path": self.log_path, "script_path": self.script_path,
                "steps": list(self.steps), "notes": list(self.notes), "nccl_expected": dict(self.expected),
                "nccl_notes": list(self.nccl_notes), "accept_gate": self.accept_gate, "measure": self.measure,
                "profile_dir": self.profile_dir, "knob_notes": list(self.knob_notes),
                "notes_quiet": list(self.host.quiet_notes)}


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def config_name(spec: Speculative) -> str:
    if spec.steps == 0:
        return "baseline"
    return f"{spec.algorithm.lower()}-s{spec.steps}-k{spec.topk}-d{spec.draft_tokens}"


def steps_of(name: str) -> int | None:
    """The steps a :func:`config_name` names (``eagle3-s2-k1-d3`` → 2, ``baseline`` → 0; None for another name)."""
    if name == "baseline":
        return 0
    head, sep, rest = name.partition("-s")
    step = rest.split("-", 1)[0]
    return int(step) if sep and head and step.isdigit() else None


def new_deploy_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)


def _speculative(host: Host, opts: Options) -> Speculative:
    steps = host.speculative.steps if opts.steps is None else opts.steps
    topk = host.speculative.topk if opts.topk is None else opts.topk
    draft = opts.draft_tokens
    if draft is None:
        # An inventory draft_tokens only holds for the steps it was written for.
        draft = host.speculative.draft_tokens if opts.steps is None and opts.topk is None else None
    if draft is None and steps > 0 and topk == 1:
        draft = steps + 1
    spec = Speculative(algorithm=host.speculative.algorithm, steps=steps, topk=topk, draft_tokens=draft)
    try:
        check_speculative(spec, has_draft=host.draft_model is not None, where="flags")
    except ValueError as e:
        msg = str(e).replace("flags.draft_tokens", "--draft-tokens").replace("flags.steps", "--steps") \
            .replace("flags.topk", "--topk").replace("flags:", "--steps:")
        raise FlagError(msg, "see `inv --help deploy`", host=host.name) from None
    if spec.steps > 0 and spec.topk > 1 and spec.draft_tokens is None:
        top = min(spec.topk + (spec.steps - 1) * spec.topk ** 2 + 1, MAX_DRAFT_TOKENS)
        raise FlagError(f"--draft-tokens is required when --topk is {spec.topk} (SGLang derives it only for topk 1: "
                        f"steps + 1); with --steps {spec.steps} it can be 1 to {top}",
                        f"e.g. --draft-tokens {min(2 * spec.topk, top)} (SGLang's own choice for topk 4 is 8 draft "
                        "tokens at 5 steps; its EAGLE tests run topk 8 with 64); `inv sweep --topk "
                        f"{spec.topk} --draft-tokens {min(2 * spec.topk, top)},{min(4 * spec.topk, top)}` measures "
                        "them", host=host.name)
    return spec


def launch_argv(host: Host, spec: Speculative) -> list[str]:
    """The launch command. Every value follows its flag in the same word (``--model-path=/m``; ``plan.argv`` says
    why): a served name ``--warmups`` or a model path ``-m`` is then that flag's value, not another flag."""
    tp = host.node.total_tp if host.node is not None else host.tp
    f = FLAG_OF  # the spelling of each field's flag: inventory/launch_flags, which adopt and the checks read too
    argv = [host.python, "-m", "sglang.launch_server", opt(f["model"], host.model), opt(f["tp"], tp),
            opt(f["listen"], host.listen), opt(f["port"], host.port)]
    if host.node is not None:
        argv += [opt("--nnodes", host.node.nnodes), opt("--node-rank", host.node.rank),
                 opt("--dist-init-addr", host.node.dist_init_addr)]
    for row in LAUNCH_FLAGS:
        value = getattr(host, row.field) if row.when_set else None
        if value:
            argv.append(opt(row.flag, value))
    if spec.steps > 0:
        argv.append(opt(f["speculative.algorithm"], spec.algorithm))
        if host.draft_model:
            argv.append(opt(f["draft_model"], host.draft_model))
        argv += [opt(f["speculative.steps"], spec.steps), opt(f["speculative.topk"], spec.topk),
                 opt(f["speculative.draft_tokens"], spec.draft_tokens)]
    return argv + list(host.sglang_args)


def build(host: Host, opts: Options, deploy_id: str | None = None, sglang_version: str | None = None) -> Plan:
    """The plan for ``host``; ``sglang_version`` (known after preflight) decides how secret flags reach SGLang."""
    if opts.timeout is not None and opts.timeout <= 0:
        raise FlagError("--timeout: must be a positive number of seconds")
    spec = _speculative(host, opts)
    name = config_name(spec)
    deploy_id = deploy_id or new_deploy_id()
    # PYTHONSAFEPATH (3.11+; older Pythons ignore it, and the working directory is checked to be private): keeps
    # the working directory off the import path of the launcher and of every scheduler it spawns.
    nccl = nccl_settings(host)
    env: dict[str, str] = dict(TOOL_ENV)
    env.update(nccl.tuning)
    env.update(nccl.logging)
    env.update({k: v for k, v in host.env.items() if k not in env or not k.startswith("NCCL_")})
    env[DEPLOY_ID_ENV] = deploy_id
    from fabfile.plan import measure

    profiles = measure.profile_dir(host.state_dir)
    env.setdefault(measure.PROFILER_DIR_ENV, profiles)  # SGLang's default is /tmp, every account's
    patch_mode = opts.patch_mode or host.patch_mode
    notes = _plugin_allowlist(env, host, patch_mode)
    if host.listen not in LOOPBACK:
        # Kept as the operator wrote it (the seed host served on 0.0.0.0); the tool only says what it would advise.
        notes.append(f"listen {host.listen}: SGLang serves every network this host is on, without authentication; "
                     "127.0.0.1 (reached through an SSH tunnel or the router) is advised unless other machines "
                     "must call it")
    argv = launch_argv(host, spec)
    log_path = f"{host.log_dir.rstrip('/')}/sglang-{name}.log"
    script_path = f"{host.state_dir.rstrip('/')}/launch-{name}.sh"
    client = client_name()
    gate = host.accept_gate if opts.accept_gate is None else opts.accept_gate
    # Only node rank 0 of a cluster serves the API (the others answer SGLang's stub health server): it is the one
    # that takes the real request. The accept gate is for speculative configurations with a gate above 0.
    answers = host.node is None or host.node.rank == 0
    accept_gate = gate if answers and spec.steps > 0 and gate > 0 else None
    skip: set[StepName] = set() if opts.verify else {"verify_env"}
    if not answers:
        skip.add("first_request")
    if accept_gate is None:
        skip.add("accept_gate")
    plan = Plan(host=host, deploy_id=deploy_id, config_name=name, argv=tuple(argv), env=env, patch_mode=patch_mode,
                nccl_values=dict(nccl.tuning), force_env=host.force_env, log_path=log_path,
                script_path=script_path, script="", ready_timeout=opts.timeout or host.timeouts.ready,
                steps=tuple(s for s in DEPLOY_STEPS if s not in skip), accept_gate=accept_gate, client=client,
                tune_id=opts.tune_id,
                expected=dict(nccl.tuning), notes=tuple(notes), nccl_logging=dict(nccl.logging),
                nccl_notes=nccl.notes, profile_dir=profiles, measuring=opts.measuring, strict_knobs=opts.strict_knobs,
                measure_wanted=opts.measure if opts.measure is not None else host.measure,
                measure_wanted_by=(("--measure" if opts.measure else "--no-measure") if opts.measure is not None
                                   else f"measure: {str(host.measure).lower()} in the inventory"))
    return for_version(plan, sglang_version)


def for_version(plan: Plan, sglang_version: str | None, nccl_version: str | None = None) -> Plan:
    """Decide how secrets reach the server and render the script: the inventory's ``env`` from a 0600 file the
    script sources; secret flags in SGLang's ``--config`` file where the version has it (None: assume it has),
    else on the command line, with a note saying so; the device timer on or off for the version (``_measured``)."""
    plan = _measured(plan, sglang_version)
    deploys = f"{plan.host.state_dir.rstrip('/')}/deploys"
    rest, secret_cfg = split_secret_flags(list(plan.argv))
    launch = list(plan.argv)
    from fabfile.plan.ncclnotes import nccl_notes

    advice = tuple(nccl_notes({**plan.expected, **plan.nccl_logging}, plan.argv, sglang_version, nccl_version,
                              quiet=preset_values_quiet(plan.host, plan.expected)))
    notes = [n for n in plan.notes if n not in plan.nccl_advice] + list(advice)
    config_file = f"{deploys}/{plan.deploy_id}.yaml" if secret_cfg else ""
    if secret_cfg:
        flags = ", ".join(f"--{k}" for k in sorted(secret_cfg))
        if versions.has_config_file(sglang_version):
            _check_config_values(plan.host, secret_cfg)
            # Two words: SGLang looks for the word --config itself (plan/argv.py).
            launch = [*rest, "--config", config_file]
        else:
            notes.append(f"SGLang {sglang_version} takes {flags} only on its command line (--config FILE came in "
                         f"{versions.CONFIG_FILE}): other accounts on the host can read it with ps while the server "
                         "runs; upgrade SGLang to keep it private")
    file_env = {k: v for k, v in plan.env.items() if k in plan.host.env}
    from fabfile.plan import knob_effects

    # Judged on the host's release once it is known (render judges on a named or the newest release itself).
    knobs = tuple(knob_effects.notes(sglang_version, launch, plan.env)) if sglang_version else ()
    out = replace(plan, launch_argv=tuple(launch), file_env=file_env, knob_notes=knobs,
                  env_file=f"{deploys}/{plan.deploy_id}.env" if file_env else "", config_file=config_file,
                  secret_config=secret_cfg, notes=tuple(dict.fromkeys(notes)), nccl_advice=advice)
    return replace(out, script=render_launch_script(out))


def preset_values_quiet(host: Host, expected: dict[str, str]) -> frozenset[str]:
    """The variables whose NCCL advice the inventory silenced (``notes: {quiet: [nccl_preset]}``): those the host's
    ``nccl_preset`` gives and nothing laid over it changed. A value written in ``nccl_env`` or ``env`` is the
    operator's own and keeps its advice."""
    if "nccl_preset" not in host.quiet_notes or not host.nccl_preset:
        return frozenset()
    from fabfile.inventory.values import BUILTIN_NCCL_PRESETS

    preset = BUILTIN_NCCL_PRESETS.get(host.nccl_preset, {})
    return frozenset(k for k, v in preset.items() if expected.get(k) == v and host.nccl_env.get(k, v) == v
                     and host.env.get(k, v) == v)


def _check_config_values(host: Host, values: dict[str, str]) -> None:
    """SGLang turns its ``--config`` file back into ``--key value`` words (``ConfigArgumentMerger``, read from the
    wheels) before its argparse reads them, so a value there that starts with ``-`` is read as a flag and the server
    exits at once. The tool writes the secret flags into that file and cannot write them otherwise without showing
    them to every account on the host: such a value is refused before anything on the host is changed."""
    for key, value in values.items():
        if value.startswith("-"):
            raise InventoryError(f"sglang_args: the value of --{key} starts with '-'; SGLang passes "
                                 "its --config file's values to its argparse as words, which reads such a value as "
                                 "a flag and exits", f"choose a --{key} value that does not start with '-'",
                                 host=host.name)


def _plugin_allowlist(env: dict[str, str], host: Host, patch_mode: str) -> list[str]:
    """A user's SGLANG_PLUGINS would keep SGLang 0.5.11+ from loading specdeploy's plugin (only the named plugins
    load), so the plugin mode would silently do nothing: the plugin is added to the list, and the plan says so.
    (``auto`` may pick the plugin mode; on versions or modes without the plugin the extra name is inert.)"""
    # Imported here: status and friends use plan's helpers, not the patch engine.
    from fabfile.remote.patch import modes as patch_modes

    value = env.get("SGLANG_PLUGINS")
    if value is None or patch_mode not in ("auto", "plugin") or not host.nccl_env or \
            not patch_modes.plugin_excluded_by(value):
        return []
    env["SGLANG_PLUGINS"] = patch_modes.with_plugin_allowed(value)
    return [f"SGLANG_PLUGINS from the inventory env ({value!r}) lets SGLang load only the plugins it names; "
            f"specdeploy's plugin {patch_modes.PLUGIN_NAME} is added to it, so the launch has "
            f"SGLANG_PLUGINS={env['SGLANG_PLUGINS']!r}"]


def _measured(plan: Plan, sglang_version: str | None) -> Plan:
    """The launch with the device timer on or off for this version (``measure.launch``: decided again once
    preflight knows the version), and the plan's notes about measurement in place of the earlier ones."""
    from fabfile.plan import measure

    m = measure.launch(list(plan.argv), dict(plan.env), plan.measure_added, plan.measure_wanted,
                       plan.measure_wanted_by, plan.measuring, sglang_version,
                       quiet_cost="timer_cost" in plan.host.quiet_notes)
    host = plan.host
    notes = m.notes + measure.profiler_notes(host.listen in LOOPBACK, host.listen, host.port, host.sglang_args,
                                             plan.profile_dir)
    kept = [n for n in plan.notes if n not in plan.measure_notes]
    return replace(plan, argv=tuple(m.argv), env=m.env, measure=m.on, measure_added=m.added,
                   measure_notes=tuple(notes), notes=tuple(kept + notes))


def render_launch_script(plan: Plan) -> str:
    from fabfile.plan.measure import PROFILER_DIR_ENV
    from fabfile.render.jinja import render_shell, shell_path  # Jinja2 only when a script is rendered

    inline: dict[str, str] = {k: v for k, v in plan.env.items() if k not in plan.file_env}
    if inline.get(PROFILER_DIR_ENV, "").startswith("~/"):
        # the tool's own path under the host's HOME: expanded by the shell, as the log directory is
        inline[PROFILER_DIR_ENV] = shell_path(inline[PROFILER_DIR_ENV])
    return render_shell("launch.sh.j2", plan=plan, host=plan.host, env=inline, argv=plan.launch_argv or plan.argv,
                        env_file=plan.env_file,
                        tool_version=__version__, plan_hash=plan.plan_hash,
                        rendered_at=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
