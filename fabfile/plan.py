"""A Plan is everything a deploy will do to one host, as a pure value: the exact launch argv and environment, the
files it ships, the patch it applies and the steps it runs. ``--dry-run`` and ``inv render`` print it and stop."""

from __future__ import annotations

import getpass
import hashlib
import json
import re
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fabfile import __version__
from fabfile.errors import FlagError
from fabfile.inventory import PATCH_MODES, Host, Speculative, check_speculative
from fabfile.remote import patching
from fabfile.render import render_shell

DEPLOY_ID_ENV = "SPECDEPLOY_DEPLOY_ID"
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
_SECRET_NAME = re.compile(r"(?i)(token|secret|passw|api[_-]?key|credential|private)")
_SECRET_FLAGS = {"--api-key", "--admin-api-key", "--hf-token"}

def secret_values(host: Host) -> list[str]:
    """The secret values this host's configuration carries (secret-named env vars, --api-key style flags), so
    anything the host sends back (log lines, excerpts) can be masked before it is shown. SGLang logs its
    server_args, API key included."""
    found = [v for k, v in host.env.items() if _SECRET_NAME.search(k) and v]
    args = list(host.sglang_args)
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag in _SECRET_FLAGS:
            found.append(value if eq else (args[i + 1] if i + 1 < len(args) else ""))
    return sorted({v for v in found if len(v) >= 3}, key=len, reverse=True)


def mask_secrets(text: str, secrets_: list[str]) -> str:
    for value in secrets_:
        text = text.replace(value, "***")
    return text


STEPS = ("connect", "preflight", "lock", "patch", "stop", "gpu_clean", "start", "wait_ready", "verify_env",
         "record")


@dataclass(frozen=True)
class Options:
    """Command-line choices that override the inventory for one run."""

    steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None
    patch_mode: str | None = None
    timeout: float | None = None
    verify: bool = True


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
    steps: tuple[str, ...]
    client: str
    expected: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the tool changed in, or adds to, the inventory's settings, in sentences
    nccl_logging: dict[str, str] = field(default_factory=dict)
    nccl_notes: tuple[str, ...] = ()

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
        return {k: ("***" if _SECRET_NAME.search(k) else v) for k, v in self.env.items()}

    def masked_argv(self) -> list[str]:
        out: list[str] = []
        hide_next = False
        for a in self.argv:
            if hide_next:
                out.append("***")
                hide_next = False
                continue
            flag, eq, _ = a.partition("=")
            if flag in _SECRET_FLAGS:
                if eq:
                    out.append(f"{flag}=***")
                else:
                    out.append(a)
                    hide_next = True
            else:
                out.append(a)
        return out

    def masked_script(self) -> str:
        text = self.script
        for k, v in self.env.items():
            if _SECRET_NAME.search(k) and v:
                text = text.replace(v, "***")
        for i, a in enumerate(self.argv[:-1]):
            if a in _SECRET_FLAGS:
                text = text.replace(self.argv[i + 1], "***")
        return text

    def summary(self) -> dict[str, Any]:
        return {"host": self.host.name, "deploy_id": self.deploy_id, "config": self.config_name,
                "plan_hash": self.plan_hash, "url": self.url, "argv": self.masked_argv(), "env": self.masked_env(),
                "patch_mode": self.patch_mode, "log_path": self.log_path, "script_path": self.script_path,
                "steps": list(self.steps), "notes": list(self.notes), "nccl_expected": dict(self.expected),
                "nccl_notes": list(self.nccl_notes)}


def config_name(spec: Speculative) -> str:
    if spec.steps == 0:
        return "baseline"
    return f"{spec.algorithm.lower()}-s{spec.steps}-k{spec.topk}-d{spec.draft_tokens}"


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
        raise FlagError(f"--draft-tokens is required when --topk is {spec.topk}",
                        "SGLang derives it only for topk 1 (steps + 1)", host=host.name)
    return spec


def launch_argv(host: Host, spec: Speculative) -> list[str]:
    tp = host.node.total_tp if host.node is not None else host.tp
    argv = [host.python, "-m", "sglang.launch_server", "--model-path", host.model, "--tp-size", str(tp),
            "--host", host.listen, "--port", str(host.port)]
    if host.node is not None:
        argv += ["--nnodes", str(host.node.nnodes), "--node-rank", str(host.node.rank),
                 "--dist-init-addr", host.node.dist_init_addr]
    if host.served_model_name:
        argv += ["--served-model-name", host.served_model_name]
    if spec.steps > 0:
        argv += ["--speculative-algorithm", spec.algorithm]
        if host.draft_model:
            argv += ["--speculative-draft-model-path", host.draft_model]
        argv += ["--speculative-num-steps", str(spec.steps), "--speculative-eagle-topk", str(spec.topk),
                 "--speculative-num-draft-tokens", str(spec.draft_tokens)]
    return argv + list(host.sglang_args)


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
    from fabfile.remote import ncclenv

    tuning: dict[str, str] = {}
    logging: dict[str, str] = dict(NCCL_DEBUG_ENV) if host.nccl_debug else {}
    notes: list[str] = []
    preset = f"nccl_preset {host.nccl_preset}" if host.nccl_preset else "nccl_env"
    for where, values in (("nccl_env", host.nccl_env), ("env", host.env)):
        for k, v in values.items():
            if not k.startswith("NCCL_") or ncclenv.kind(k) == "not_param":
                continue
            if ncclenv.kind(k) == "logging":
                if host.nccl_debug and k in NCCL_DEBUG_ENV and v != NCCL_DEBUG_ENV[k]:
                    notes.append(f"{where}.{k}={v} replaces nccl_debug's {NCCL_DEBUG_ENV[k]}")
                logging[k] = v
                continue
            if where == "env" and k in tuning and tuning[k] != v:
                notes.append(f"env.{k}={v} replaces {preset}'s {tuning[k]} (env wins; check-env expects {v})")
            tuning[k] = v
    return NcclSettings(tuning=tuning, logging=logging, notes=tuple(notes))


def build(host: Host, opts: Options, deploy_id: str | None = None) -> Plan:
    if opts.patch_mode is not None and opts.patch_mode not in PATCH_MODES:
        raise FlagError(f"--patch-mode: unknown mode {opts.patch_mode!r}", f"choose one of {', '.join(PATCH_MODES)}")
    if opts.timeout is not None and opts.timeout <= 0:
        raise FlagError("--timeout: must be a positive number of seconds")
    spec = _speculative(host, opts)
    name = config_name(spec)
    deploy_id = deploy_id or new_deploy_id()
    # PYTHONSAFEPATH (3.11+; older Pythons ignore it, and the working directory is checked to be private): keeps
    # the working directory off the import path of the launcher and of every scheduler it spawns.
    nccl = nccl_settings(host)
    env: dict[str, str] = {"SPT_NOENV": "1", "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1"}
    env.update(nccl.tuning)
    env.update(nccl.logging)
    env.update({k: v for k, v in host.env.items() if k not in env or not k.startswith("NCCL_")})
    env[DEPLOY_ID_ENV] = deploy_id
    patch_mode = opts.patch_mode or host.patch_mode
    notes = _plugin_allowlist(env, host, patch_mode)
    argv = launch_argv(host, spec)
    log_path = f"{host.log_dir.rstrip('/')}/sglang-{name}.log"
    script_path = f"{host.state_dir.rstrip('/')}/launch-{name}.sh"
    client = f"{getpass.getuser()}@{socket.gethostname()}"
    plan = Plan(host=host, deploy_id=deploy_id, config_name=name, argv=tuple(argv), env=env, patch_mode=patch_mode,
                nccl_values=dict(nccl.tuning), force_env=host.force_env, log_path=log_path,
                script_path=script_path, script="", ready_timeout=opts.timeout or host.timeouts.ready,
                steps=STEPS if opts.verify else tuple(s for s in STEPS if s != "verify_env"), client=client,
                expected=dict(nccl.tuning), notes=tuple(notes), nccl_logging=dict(nccl.logging),
                nccl_notes=nccl.notes)
    return replace(plan, script=render_launch_script(plan))


def _plugin_allowlist(env: dict[str, str], host: Host, patch_mode: str) -> list[str]:
    """A user's SGLANG_PLUGINS would keep SGLang 0.5.11+ from loading specdeploy's plugin (only the named plugins
    load), so the plugin mode would silently do nothing: the plugin is added to the list, and the plan says so.
    (``auto`` may pick the plugin mode; on versions or modes without the plugin the extra name is inert.)"""
    value = env.get("SGLANG_PLUGINS")
    if value is None or patch_mode not in ("auto", "plugin") or not host.nccl_env or \
            not patching.plugin_excluded_by(value):
        return []
    env["SGLANG_PLUGINS"] = patching.with_plugin_allowed(value)
    return [f"SGLANG_PLUGINS from the inventory env ({value!r}) lets SGLang load only the plugins it names; "
            f"specdeploy's plugin {patching.PLUGIN_NAME} is added to it, so the launch has "
            f"SGLANG_PLUGINS={env['SGLANG_PLUGINS']!r}"]


def render_launch_script(plan: Plan) -> str:
    return render_shell("launch.sh.j2", plan=plan, host=plan.host, env=plan.env, argv=plan.argv,
                        tool_version=__version__, plan_hash=plan.plan_hash,
                        rendered_at=time.strftime("%Y-%m-%d %H:%M:%S %Z"))


def as_dict(plan: Plan) -> dict[str, Any]:
    d = plan.summary()
    d["host_config"] = asdict(plan.host)
    return d
