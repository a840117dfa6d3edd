"""`inv diff`: what changed between two deploys of a host, or between a deploy and what `render` would run now.

Compared: the launch argv (flag by flag), the environment (the deploy id aside: it always differs), the SGLang
version, the patch mode, the patched files' checksums and check-env's result. The question it answers is "what
changed since it was fast?".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabfile.commands.result import CommandResult
from fabfile.errors import FlagError
from fabfile.flags import quote
from fabfile.results.documents import DeployView

if TYPE_CHECKING:  # the shapes are annotations only: the protocol's TypedDicts cost ~4 ms of every start
    from fabfile.remote.protocol import DeployRecord

_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]*")
NOW = "now"
PENDING = "(after a deploy)"
SKIP_ENV = {"SPECDEPLOY_DEPLOY_ID"}


def parse_ref(flag: str, value: str) -> tuple[str | None, str]:
    """``ID``, ``HOST:ID``, ``current``, ``previous`` or ``now`` -> (host or None, ref)."""
    host, sep, ref = value.rpartition(":")
    if not sep:
        host, ref = "", value
    if not _ID.fullmatch(ref) or (host and not _ID.fullmatch(host.replace(".", ""))):
        raise FlagError(f"{flag}: {quote(value, as_repr=True)} is not a deploy id (like 20261130T192906-010698), "
                        "HOST:ID, current, previous or now")
    return host or None, ref


def flag_map(argv: list[str]) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / ``--switch`` -> {flag: value or ""}; the program and module as ``argv``.
    A flag the tool writes from a field is keyed by render's spelling: an adopted server's ``--tp 2`` and render's
    ``--tp-size=2`` are one flag with one value (the last, as argparse reads it)."""
    from fabfile.inventory.launch_flags import canonical
    from fabfile.remote.common import split_argv

    flags = split_argv(argv)
    first = next((i for i, f in enumerate(flags) if f.name.startswith("--")), len(flags))
    m: dict[str, str] = {"(program)": " ".join(w for f in flags[:first] for w in f.words)}
    for f in flags[first:]:
        m[canonical(f.name) if f.name else f.words[0]] = f.value or ""
    return m


def view_of_record(rec: DeployRecord) -> DeployView:
    launch = rec.get("launch")
    patch = rec.get("patch")
    files = {f["path"]: f.get("sha256") or "(not recorded)" for f in (patch.get("files") or [] if patch else [])
             if f.get("action") not in ("removed", "restored")}
    verified = rec.get("verify")
    rows = (verified["evaluation"].get("rows") or []) if verified else []
    if rows:
        proven = sum(1 for r in rows if r.get("status") == "proven")
        check = f"{proven}/{len(rows)} proven" + ("" if proven == len(rows) else " (NOT all)")
    else:
        check = "not run"
    return {"label": f"deploy {rec.get('deploy_id')}", "host": None,  # the caller names the host
            "config": rec.get("config_name"), "status": rec.get("status"),
            "argv": list(launch.get("argv") or []) if launch else [],
            "env": dict(launch.get("env") or {}) if launch else {},
            "sglang_version": rec.get("sglang_version"),
            "patch_mode": (patch.get("mode") if patch else None) or rec.get("patch_mode"),
            "patched_files": files, "check_env": check}


def view_of_plan(host: Any, opts: Any, rec: DeployRecord) -> DeployView:
    """What a deploy would run now (render's plan), on the host as ``rec`` found it (its SGLang version, its
    site-packages and state folder), so the patch files are built exactly as a deploy would build them."""
    from fabfile import __version__
    from fabfile.plan.deploy_plan import build
    from fabfile.remote.common import sha256_bytes
    from fabfile.render.patchset import build_patch_request, resolve_mode

    version = rec.get("sglang_version")
    plan = build(host, opts, sglang_version=version)
    mode = resolve_mode(plan.patch_mode, version) if version else plan.patch_mode
    if not plan.nccl_values:
        mode = "env"
    files: dict[str, str] = {}
    kept = rec.get("request")
    old_req = kept.get("patch") if kept else None
    site, state = (old_req.get("site_packages"), old_req.get("state_dir")) if old_req else (None, None)
    if version and site and state and mode != "env":
        values = {**plan.nccl_values, **plan.nccl_logging}  # as deploy.patch_request builds it
        req = build_patch_request(mode, values, plan.force_env, version, state, site, __version__,
                                  python=host.python)
        for content in req["files"].values():
            if isinstance(content, dict):  # whole files (plugin, sitecustomize): their checksum is known now
                for rel, text in content.items():
                    files[f"{site.rstrip('/')}/{rel}"] = sha256_bytes(text.encode("utf-8"))
    return {"label": "render now", "host": host.name, "config": plan.config_name, "status": "-",
            "argv": plan.masked_argv(), "env": plan.masked_env(), "sglang_version": version or "(unknown)",
            "patch_mode": mode, "patched_files": files, "check_env": PENDING,
            # A source patch's result depends on the host's file: only whole files (plugin) are known before.
            "files_partial": True}


def _site_relative(files: dict[str, str]) -> dict[str, str]:
    """Paths from `<site-packages>/` on, so a plan's files compare with a record's absolute ones."""
    outp: dict[str, str] = {}
    for path, sha in files.items():
        key = path
        for marker in ("site-packages/", "<site-packages>/"):
            if marker in path:
                key = path.split(marker, 1)[1]
        outp[key] = sha
    return outp


def compare(a: DeployView, b: DeployView) -> list[dict[str, str]]:
    """Rows {what, a, b} for every difference; empty when the two would run the same server."""
    rows: list[dict[str, str]] = []
    for key, va, vb in (("config", a["config"], b["config"]),
                        ("sglang_version", a["sglang_version"], b["sglang_version"]),
                        ("patch_mode", a["patch_mode"], b["patch_mode"]),
                        ("check_env", a["check_env"], b["check_env"])):
        if key == "check_env" and PENDING in (va, vb):
            continue
        if str(va) != str(vb):
            rows.append({"what": key.replace("_", " "), "a": str(va), "b": str(vb)})
    fa, fb = flag_map(a["argv"]), flag_map(b["argv"])
    for flag in [*fa, *(f for f in fb if f not in fa)]:
        if fa.get(flag) != fb.get(flag):
            rows.append({"what": f"argv {flag}", "a": _shown(fa.get(flag)), "b": _shown(fb.get(flag))})
    ea = {k: v for k, v in a["env"].items() if k not in SKIP_ENV}
    eb = {k: v for k, v in b["env"].items() if k not in SKIP_ENV}
    for k in [*ea, *(k for k in eb if k not in ea)]:
        if ea.get(k) != eb.get(k):
            rows.append({"what": f"env {k}", "a": _shown(ea.get(k)), "b": _shown(eb.get(k))})
    pa, pb = _site_relative(a["patched_files"]), _site_relative(b["patched_files"])
    paths = [*pa, *(p for p in pb if p not in pa)]
    if b.get("files_partial"):
        paths = [p for p in paths if p in pb]
    for path in paths:
        if pa.get(path) != pb.get(path) and "(not recorded)" not in (pa.get(path), pb.get(path)):
            rows.append({"what": f"file {path}", "a": _sha(pa.get(path)), "b": _sha(pb.get(path))})
    return rows


def _shown(v: str | None) -> str:
    return "(absent)" if v is None else ("(set)" if v == "" else v)


def _sha(v: str | None) -> str:
    return "(absent)" if v is None else f"sha256 {v[:12]}"


def fetch(inv: Any, host: Any, refs: list[str]) -> dict[str, DeployRecord]:
    """The named records of ``host`` (``current``/``previous`` or ids), from the host's agent."""
    from fabfile.transport.session import HostSession

    ids = [r for r in refs if r not in ("current", "previous", NOW)]
    with HostSession.open(inv, host) as s:
        data = s.records(ids)
    found: dict[str, DeployRecord] = {}
    for r in refs:
        if r == NOW:
            continue
        rec = (data["current"] if r == "current" else data["previous"] if r == "previous"
               else (data.get("loaded") or {}).get(r))
        if not rec:
            what = f"no {r} deploy" if r in ("current", "previous") else f"no record of deploy {r}"
            raise FlagError(f"--old/--new: {host.name} has {what}",
                            "`inv status` shows the current deploy id; ids are kept under STATE/deploys/")
        found[r] = rec
    return found


@dataclass(frozen=True)
class DiffOptions:
    host: str | None = None
    old: str | None = None    # a deploy id, HOST:ID, current or previous
    new: str | None = None    # the same, or now (what render would run now)
    steps: int | None = None  # with --new now: the steps to render


def diff_command(inv: Any, opts: DiffOptions) -> CommandResult:
    """``inv diff``: the two sides fetched from the host's records (or rendered now) and compared."""
    from fabfile.plan.deploy_plan import Options, steps_of
    from fabfile.present.diff_report import print_diff

    hb, rb = parse_ref("--new", opts.new if opts.new is not None else "current")
    listed = [x.strip() for x in (opts.host or "").split(",") if x.strip()]
    if len(listed) > 2 or len(set(listed)) < len(listed):
        raise FlagError(f"--host: {quote(opts.host or '', as_repr=True)}: a diff compares one host's deploys or two "
                        "hosts' running configurations", "name one host, or two: --host sim1,sim2")
    old_host = parse_ref("--old", opts.old)[0] if opts.old else None
    if len(listed) == 2 or len({x for x in (old_host, hb, *listed) if x}) == 2:
        return _two_hosts(inv, opts, listed, old_host, hb, rb)
    # Against what render would run now, the side to compare is what runs now (it compared the previous deploy and
    # said "no difference" while the running configuration differed).
    ha, ra = parse_ref("--old", opts.old if opts.old is not None else "current" if rb == NOW else "previous")
    named = {x for x in (ha, hb, *listed) if x}
    if len(named) > 1:
        raise FlagError(f"--old/--new: records from {len(named)} hosts ({', '.join(sorted(named))}); a diff compares "
                        "one host's deploys or two hosts' running configurations", "name two: --host A,B")
    if ra == NOW:
        raise FlagError("--old: `now` goes on the new side (--new now); the old side is a recorded deploy")
    if rb != NOW and opts.steps is not None:
        raise FlagError("--steps: only with --new now (a recorded deploy has its own steps)")
    from fabfile.inventory.hosts import one_host

    h = one_host(inv, next(iter(named), None), "diff")
    recs = fetch(inv, h, [ra, rb])
    va = view_of_record(recs[ra])
    if rb == NOW:
        name = str(recs[ra].get("config_name") or "")
        vb = view_of_plan(h, Options(steps=opts.steps if opts.steps is not None else steps_of(name)), recs[ra])
    else:
        vb = view_of_record(recs[rb])
    va["host"] = vb["host"] = h.name
    rows = compare(va, vb)
    return CommandResult({"host": h.name, "a": va, "b": vb, "differences": rows}, lambda: print_diff(va, vb, rows))


def _two_hosts(inv: Any, opts: DiffOptions, listed: list[str], ha: str | None, hb: str | None,
               rb: str) -> CommandResult:
    """Two hosts' configurations side by side (default: what each runs now, its current deploy): the drift
    between hosts that should run the same server. Each side is fetched from its own host."""
    from fabfile.inventory.hosts import one_host
    from fabfile.present.diff_report import print_diff

    if rb == NOW or (opts.old and parse_ref("--old", opts.old)[1] == NOW):
        raise FlagError("--new now: render compares with one host's deploy, not across two hosts",
                        "drop --new now, or name one host")
    if opts.steps is not None:
        raise FlagError("--steps: only with --new now (a recorded deploy has its own steps)")
    rest = [x for x in listed if x not in (ha, hb)]
    a_host = ha or (rest.pop(0) if rest else None)
    b_host = hb or (rest.pop(0) if rest else None)
    if not a_host or not b_host or a_host == b_host:
        raise FlagError("--host: name the two hosts to compare (--host A,B)")
    ra = parse_ref("--old", opts.old)[1] if opts.old else "current"
    hosts = [one_host(inv, a_host, "diff"), one_host(inv, b_host, "diff")]
    va, vb = (view_of_record(fetch(inv, h, [r])[r]) for h, r in zip(hosts, (ra, rb), strict=True))
    va["host"], vb["host"] = hosts[0].name, hosts[1].name
    va["label"], vb["label"] = f"{hosts[0].name} {va['label']}", f"{hosts[1].name} {vb['label']}"
    rows = compare(va, vb)
    doc = {"hosts": [hosts[0].name, hosts[1].name], "a": va, "b": vb, "differences": rows}
    return CommandResult(doc, lambda: print_diff(va, vb, rows, sides=(hosts[0].name, hosts[1].name)))
