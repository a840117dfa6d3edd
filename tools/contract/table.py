"""The contract: for one SGLang version, each fact as SGLang's wheel has it, as the simulator shows it, and
whether they match. ``rows()`` is what the test asserts and what docs/sglang-contract.md shows."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.contract import envfacts, real, specfacts
from tools.contract.sim import ENV_SCENARIOS, decode_template

ROOT = Path(__file__).resolve().parents[2]

# load_plugins() call sites SGLang has outside what `python -m sglang.launch_server` runs, or in processes the
# simulator does not have. They are shown in the table, not compared.
NOT_ON_LAUNCH_PATH = {
    "sglang.cli.serve:serve": "the `sglang serve` CLI (the tool launches `python -m sglang.launch_server`)",
    "sglang.srt.entrypoints.engine:Engine.__init__": "the offline Engine API",
    "sglang.srt.managers.data_parallel_controller:run_data_parallel_controller_process":
        "the DP controller (data parallelism is not simulated)",
    "sglang.multimodal_gen.runtime.managers.worker_bootstrap:bootstrap_http_server_process":
        "the diffusion (multimodal_gen) server",
    "sglang.multimodal_gen.runtime.managers.worker_bootstrap:bootstrap_scheduler_process":
        "the diffusion (multimodal_gen) server",
}


@dataclass
class Row:
    fact: str
    sglang: str
    sim: str
    match: bool


def tool_flags() -> list[str]:
    """Every ``--flag`` the tool puts on SGLang's command line (``fabfile/plan/deploy_plan.py::launch_argv``)."""
    tree = ast.parse((ROOT / "fabfile" / "plan" / "deploy_plan.py").read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "launch_argv")
    # The agent writes each value in its flag's word (`--host=...`, fabfile/plan/argv.py): the name is before `=`.
    return sorted({n.value.split("=", 1)[0] for n in ast.walk(fn)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("--")})


def tool_bench_flags() -> list[str]:
    """Every ``--flag`` the agent passes to ``python -m sglang.bench_serving`` (``remote/measure/bench.py``)."""
    tree = ast.parse((ROOT / "fabfile" / "remote" / "measure" / "bench.py").read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_run_bench_serving")
    # The agent writes each value in its flag's word (`--host=...`, fabfile/plan/argv.py): the name is before `=`.
    return sorted({n.value.split("=", 1)[0] for n in ast.walk(fn)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("--")})


def tool_algorithms() -> list[str]:
    """The ``speculative.algorithm`` values the inventory accepts (and the tool renders)."""
    import typing

    from fabfile.inventory.schema import SpeculativeFields

    ann = SpeculativeFields.model_fields["algorithm"].annotation
    out: list[str] = []
    for arg in typing.get_args(ann):
        out += [str(a) for a in typing.get_args(arg)]
    return sorted(out)


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items()) or "(nothing)"
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v) or "(none)"
    return str(v)


def _rate_meaning(line: str, draft_tokens: int) -> str | None:
    m = re.search(r"accept len: ([\d.]+), accept rate: ([\d.]+)", line)
    if not m:
        return None
    al, rate = float(m.group(1)), float(m.group(2))
    if abs(rate - (al - 1) / (draft_tokens - 1)) < 0.006:
        return "(accept_len - 1) / (draft_tokens - 1)"
    if abs(rate - al / draft_tokens) < 0.006:
        # with 3 steps, topk 1, 4 draft tokens, steps + 1 == draft tokens: both readings give this number
        return "accept_len / draft_tokens"
    return f"other ({al} → {rate})"


def rows(w: real.Wheel, rf: dict[str, Any], sf: dict[str, Any]) -> list[Row]:
    """Compare the facts of one wheel (``rf``, from real.facts) with the simulator's (``sf``, sim.facts)."""
    out: list[Row] = []

    def add(fact: str, sg: Any, sm: Any, match: bool | None = None) -> None:
        out.append(Row(fact, _fmt(sg), _fmt(sm), (sg == sm) if match is None else match))

    rflags, sflags = rf["flags"], sf["flags"]
    extra = sorted(set(sflags) - set(rflags))
    add("flags: the simulator accepts only flags SGLang defines", f"{len(rflags)} flags",
        f"{len(sflags)} flags" + (f"; not in SGLang: {', '.join(extra)}" if extra else ""), not extra)
    tf = tool_flags()
    lack_sg, lack_sm = [f for f in tf if f not in rflags], [f for f in tf if f not in sflags]
    add("flags the tool renders (plan.launch_argv) exist", lack_sg or f"all {len(tf)}", lack_sm or f"all {len(tf)}",
        not lack_sg and not lack_sm)
    for flag in sorted(set(sflags) & set(rflags)):
        if flag.startswith("--speculative") or sflags[flag] != "any":
            add(f"choices of {flag}", rflags[flag], sflags[flag])
    algos = tool_algorithms()
    ch = rflags.get("--speculative-algorithm")
    # The inventory allows these on every version; SGLang's argparse refuses the others at launch with its own
    # message (the deploy ends with it), so the contract is that the simulator refuses exactly the same ones.
    add("speculative algorithms the tool may render that this version refuses",
        [a for a in algos if isinstance(ch, list) and a not in ch] or "none",
        [a for a in algos if isinstance(sflags.get("--speculative-algorithm"), list)
         and a not in sflags["--speculative-algorithm"]] or "none")

    bf, tbf = real.bench_serving_flags(w), tool_bench_flags()
    lack_sg, lack_sm = [f for f in tbf if f not in bf], [f for f in tbf if f not in sf["bench_flags"]]
    add("bench_serving flags the agent passes exist", lack_sg or f"all {len(tbf)}", lack_sm or f"all {len(tbf)}",
        not lack_sg and not lack_sm)
    ds = bf.get("--dataset-name")
    sds = sf["bench_datasets"]
    add("bench_serving --dataset-name random-ids (the agent's) is a valid choice",
        "yes" if isinstance(ds, list) and "random-ids" in ds else ds,
        "yes" if isinstance(sds, list) and "random-ids" in sds else sds)
    extra_ds = [d for d in sds if isinstance(ds, list) and d not in ds] if isinstance(sds, list) else sds
    add("bench_serving --dataset-name: the simulator offers only SGLang's choices", ds,
        (sds if not extra_ds else f"{_fmt(sds)}; not in SGLang: {_fmt(extra_ds)}"), not extra_ds)

    for r in real.ROUTES:
        sg = rf["routes"][r]
        add(f"route {r}", "GET" if sg == "mount" else sg, sf["routes"][r])

    add("GET /health runs a one-token generate (same handler as /health_generate)", rf["health_runs_generate"],
        sf["health_runs_generate"])
    add("readiness log line", rf["ready_line"], sf["ready_line"])

    db = rf["decode_batch"]
    line = sf["decode_lines"][0] if sf["decode_lines"] else ""
    tmpl = decode_template(line) if line else None
    head = re.match(r"Decode batch(?: \[\{\}\])?[.,]", tmpl or "")
    add("Decode batch: head", db.get("head"), head.group(0) if head else None)
    spec = re.search(r"accept len: \{\}, (?:accept rate: \{\}, )?", tmpl or "")
    add("Decode batch: speculative fields", db.get("spec"), spec.group(0) if spec else None)
    tail = re.search(r"(?:cuda graph: |gen throughput).*$", tmpl or "")  # no cuda graph field up to 0.4.6.post3
    add("Decode batch: tail (cuda graph, gen throughput, #queue-req)", db.get("tail"),
        tail.group(0) if tail else None)
    seen = _rate_meaning(line, 4) if line else None
    # The probe runs 3 steps, topk 1, 4 draft tokens: steps + 1 == draft tokens, so the logged number cannot tell
    # these two apart; either matches (the simulator's source divides as the release does).
    same = {"accept_len / draft_tokens", "accept_len / (steps + 1)"}
    add("Decode batch: accept rate means", db.get("accept_rate"),
        "accept_len / draft_tokens = accept_len / (steps + 1) here" if seen in same else seen,
        db.get("accept_rate") == seen or (seen in same and db.get("accept_rate") in same))

    sal = sf["server_args_line"] or ""
    shape = "server_args=ServerArgs(" if sal.startswith("server_args=ServerArgs(") else (
        "server_args={" if sal.startswith("server_args={") else sal[:24])
    add("server_args= log line", rf["server_args_line"].get("shape"), [shape])

    parts = rf["titles"]["scheduler_parts"]
    ep = 2 if sf.get("ep") else 1
    want = sorted(real.render_scheduler_title(parts, {"tp_size": 2, "ep_size": ep, "tp_rank": i, "ep_rank": i})
                  for i in range(2))
    got = sorted(t for t in sf["titles"] if t.startswith("sglang::scheduler"))
    sf = {**sf, "titles": [t for t in sf["titles"] if t.startswith("sglang::")]}
    add(f"scheduler titles, TP 2{' EP 2' if ep > 1 else ''}", want, got)
    # PP 2: the simulator starts only the pipeline stage 0 ranks (PP is not simulated); their titles must be
    # among SGLang's four.
    ctxs = [{"tp_size": 2, "ep_size": ep, "pp_size": 2, "tp_rank": i, "ep_rank": i, "pp_rank": pp}
            for pp in range(2) for i in range(2)]
    fact = f"scheduler titles, TP 2{' EP 2' if ep > 1 else ''} PP 2 (simulator: stage 0 only)"
    if "--pp-size" not in rflags or sf["pp_titles"] is None:
        add(fact, "no --pp-size" if "--pp-size" not in rflags else "has --pp-size",
            "no --pp-size" if sf["pp_titles"] is None else "has --pp-size")
    else:
        want_pp = sorted(real.render_scheduler_title(parts, c) for c in ctxs)
        got_pp = sorted(t for t in sf["pp_titles"] if t.startswith("sglang::scheduler"))
        add(fact, want_pp, got_pp, bool(got_pp) and set(got_pp) <= set(want_pp))
    add("scheduler title parts, in order (SGLang's source)", parts, "—", True)
    add("detokenizer title", "sglang::detokenizer" if "sglang::detokenizer" in rf["titles"]["other"] else None,
        "sglang::detokenizer" if "sglang::detokenizer" in sf["titles"] else None)

    sites = rf["load_plugins"]
    launch = [s for s in sites if s not in NOT_ON_LAUNCH_PATH]
    add("load_plugins() call sites on the launch path", launch, sf["load_plugins"])

    for sc, renv, senv in zip(ENV_SCENARIOS, rf["env_runs"], sf["env"], strict=True):
        add(f"_set_envs_and_config writes ({sc['name']})", renv, senv)
    add("--enable-deterministic-inference --tp-size 2 writes", rf["deterministic"], sf["deterministic"])
    for key, got in sf["spec_defaults"].items():
        arch, algo = key.split(" ")
        want = real.spec_defaults(w, arch, algo)
        add(f"default steps/topk/draft tokens: {algo} on {arch}", list(want) if want else None, got)
    return out


@dataclass
class Checked:
    """One release of an ``--all`` run: its contract rows and the generated-table lookups that were wrong."""

    version: str
    wheel: str
    rows: list[Row]
    lookups: list[str]

    @property
    def ok(self) -> bool:
        return all(r.match for r in self.rows) and not self.lookups


EVERY_BEGIN = "<!-- every release: generated by python -m tools.contract --all --write -->"
EVERY_END = "<!-- every release: end -->"


def render_every(every: list[Checked], date: str) -> str:
    """The every-release table of docs/sglang-contract.md, dated (kept as it is by a plain ``--write``)."""
    held = sum(c.ok for c in every)
    lines = [
        EVERY_BEGIN,
        f"## Every release from {every[0].version} to {every[-1].version} (checked {date})",
        "",
        f"{held} of {len(every)} releases hold the contract. Each is every final and post release on the index "
        "(pre-releases left out), its wheel read and the simulator set to it as above; the tables column says whether "
        "`fabfile/remote/evidence/sglang_env_facts.py` and `fabfile/plan/sglang_spec_facts.py`, looked up as the tool "
        "looks them up (the nearest release read that is not newer), give the release its own wheel's facts. CI checks "
        "only the matrix below; re-run this table with `SPECDEPLOY_WHEEL_CACHE=/work/wheelcache python -m "
        "tools.contract --all --write` (a few minutes; downloads the wheels not yet cached).",
        "",
        "| release | wheel | facts match | tables | differences |",
        "|---|---|---|---|---|",
    ]
    for c in every:
        diff = [r.fact for r in c.rows if not r.match] + c.lookups
        cells = [c.version, c.wheel, f"{sum(r.match for r in c.rows)}/{len(c.rows)}",
                 "yes" if not c.lookups else "**NO**", "; ".join(diff).replace("|", "\\|") or "none"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", EVERY_END, ""])


def every_section(doc: str) -> str:
    """The every-release table of a committed doc (empty when it has none)."""
    a, b = doc.find(EVERY_BEGIN), doc.find(EVERY_END)
    return doc[a : b + len(EVERY_END)] + "\n" if a >= 0 and b > a else ""


SECTION = re.compile(r"^## SGLang (\S+) \((\S+)\)\n\n(\d+/\d+) facts match\.", re.M)
EVERY_ROW = re.compile(r"^\| (\S+) \| (\S+) \| (\d+/\d+) \| ", re.M)


def stale_rows(doc: str) -> list[str]:
    """Where the doc's every-release table disagrees with its own per-version sections (the same release, another
    wheel or facts count; a section's release missing from the table): each a sentence, empty when they agree. A
    plain ``--write`` keeps the every-release table as the last ``--all`` left it, so the contract can grow facts
    (66 to 68) under a table that still says the old count."""
    every = {m[1]: (m[2], m[3]) for m in EVERY_ROW.finditer(every_section(doc))}
    out = []
    for version, wheel, count in SECTION.findall(doc):
        row = every.get(version)
        if row is None:
            out.append(f"{version}: a section ({count}) but no row in the every-release table")
        elif row != (wheel, count):
            said = (f"{row[1]} of {row[0]}", f"{count} of {wheel}") if row[0] != wheel else (row[1], count)
            out.append(f"{version}: the every-release table says {said[0]} facts match, its section {said[1]}")
    return out


def lookups(w: real.Wheel) -> list[str]:
    """Where the committed tables, looked up for this release as the tool does, differ from its own wheel."""
    from fabfile.plan import versioncheck
    from fabfile.remote.evidence.sglangnccl import sglang_env_facts_for

    bad = []
    env_from, env = sglang_env_facts_for(w.version)
    if env != envfacts.version_facts(w):
        bad.append(f"fabfile/remote/evidence/sglang_env_facts.py gives {w.version} the NCCL writes of {env_from}")
    found = versioncheck.facts_for(w.version)
    want = specfacts.version_facts(w)
    if found is None:
        bad.append(f"fabfile/plan/sglang_spec_facts.py has nothing for {w.version}")
    else:
        release, facts, flags = found
        got = {k: v for k, v in facts.items() if not k.startswith("flags")}
        if sorted(flags) != want["flags"] or got != {k: v for k, v in want.items() if k != "flags"}:
            bad.append(f"fabfile/plan/sglang_spec_facts.py gives {w.version} the launch facts of {release}")
    return bad


def real_facts(w: real.Wheel) -> dict[str, Any]:
    f = real.facts(w)
    f["env_runs"] = [real.run_env_function(w, sc["env"], sc["args"]) for sc in ENV_SCENARIOS]
    f["deterministic"] = real.deterministic_writes(w)
    return f


def render(results: dict[str, list[Row]], meta: dict[str, str], every: str = "") -> str:
    """docs/sglang-contract.md: the matrix in full, and ``every`` (the every-release table) before it."""
    lines = [
        "# The simulator's contract with SGLang",
        "",
        "Generated by `python -m tools.contract --write` from the real SGLang release wheels (read as zip files, "
        "parsed with `ast`, never installed or imported) and from the simulator (`tests/simhost/sim`) installed "
        "and run at each version. Do not edit by hand. `tests/wheels/test_contract.py` (marker `wheels`) asserts that "
        "every row matches.",
        "",
        "How each side is read:",
        "",
        "- **flags**: SGLang: every `add_argument(\"--x\")` in `server_args.py`/`arg_groups/` and, from 0.5.20, every "
        "annotated `A[T, \"help\" | Arg(...)]` field; simulator: its argparse parser. The simulator may accept "
        "fewer flags than SGLang, never one SGLang lacks.",
        "- **routes**: SGLang: the `@app.get/post/api_route` decorators of `http_server.py` (`/metrics` is the "
        "Prometheus app mounted with `--enable-metrics`); simulator: GET/POST/PUT on the running server "
        "(anything but 404/405/501 counts as served).",
        "- **/health**: SGLang: whether one handler carries both `/health` and `/health_generate` (the one-token "
        "generate check); simulator: whether a `GET /health` on the ready server left a `Prefill batch` line in its "
        "log.",
        "- **log lines**: SGLang: the literals and f-strings that build the line; simulator: the line it logged "
        "(values replaced by `{}`); the accept-rate meaning from the logged numbers (draft tokens 4).",
        "- **titles**: SGLang: the `prefix += \" XX{rank}\"` parts before `setproctitle(\"sglang::scheduler...\")`, "
        "rendered for the simulator's run; simulator: `/proc/PID/cmdline` of its children.",
        "- **load_plugins**: SGLang: every call site (module:qualname); simulator: a plugin entry point that "
        "reports its caller in each process. Sites off the `launch_server` path are shown, not compared: "
        + "; ".join(f"`{k}` ({v})" for k, v in NOT_ON_LAUNCH_PATH.items()) + ".",
        "- **environment**: SGLang: the wheel's own `_set_envs_and_config` compiled alone, `os.environ` a dict, "
        "every other name a stub (main thread, no MNNVL fabric, KV-shard gather off); simulator: its function "
        "run in its venv. `SGLANG_RUN_ID` shows as `<set>`. Deterministic inference: SGLang's writes in its "
        "argument post-processing vs the simulator's `ServerArgs` with those flags.",
        "",
    ]
    if every:
        lines += [every]
    for version, rws in results.items():
        ok = sum(r.match for r in rws)
        lines += [f"## SGLang {version} ({meta.get(version, '')})", "",
                  f"{ok}/{len(rws)} facts match.", "",
                  "| fact | SGLang | simulator | match |", "|---|---|---|---|"]
        for r in rws:
            cells = [c.replace("|", "\\|").replace("\n", " ") for c in (r.fact, r.sglang, r.sim)]
            lines.append(f"| {cells[0]} | {cells[1]} | {cells[2]} | {'yes' if r.match else '**NO**'} |")
        lines.append("")
    return "\n".join(lines)
