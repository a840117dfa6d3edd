"""Real SGLang 0.5.16 deployed by the tool's own commands on a GPU machine (``local`` connection kind).

Run by bench/real_sglang/run.sh after it installed the carried SGLang into a venv over the image's torch. Every
step is an ``inv`` command of this checkout; each result is printed as it happens and kept in OUT/results.json.

    python bench/real_sglang/real_run.py --phase tp1|tp2|tp8 --python VENV_PYTHON --models DIR --out OUT

tp1: deploy --steps 0 and --steps 3, check-env in the env, plugin, scheduler and engine modes, bench (accept
     length against the prediction of make_models.py), a three-configuration sweep, failure paths (a flag 0.5.16
     rejects, a CUDA OOM start, a port in use), stop (nvidia-smi clean), rollback-patches (byte-exact tree).
tp2: --tp 2 on two GPUs: every patch mode with check-env proving 6 NCCL variables × 2 ranks from NCCL's lines,
     then a launch path that strips the six variables (a python wrapper), bench, stop, rollback.
tp8: the seed's launch shape at --tp 8 (issue 20).
profmoe: the MoE shape (issue 37 point 5): inv profile --trace of the baseline and steps 7 and 3, kernels by class,
     inv explain --from each against the baseline's traced profile (does gemm_growth fire?), accept length checked.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from bench.real_sglang import make_models  # noqa: E402

# Mandatory on this workplace's multi-GPU machines, and kept in the launch env (built with env -i) on purpose.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TUNED = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS")
PORT = 30000
BENCH = ["--client", "builtin", "--input-len", "64", "--output-len", "128", "--num-prompts", "6"]
OUTPUT_LEN = 128
# CUDA graphs off (fast starts). 0.5.16's own flags; --disable-cuda-graph is its deprecated spelling.
NO_GRAPH = os.environ.get("REAL_RUN_NO_GRAPH",
                          "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled").split()

results: list[dict[str, Any]] = []
# The models of this call (--shape, --wrong-every): every prediction of an accept length reads them.
MODEL: dict[str, Any] = {"shape": "tiny", "wrong_every": 0}


def predicted_accept(new_tokens: int, steps: int) -> float:
    hidden = make_models.SHAPES[MODEL["shape"]].hidden
    return make_models.predicted_accept_length(new_tokens, steps, MODEL["wrong_every"], hidden)


def accept_as_predicted(got: float, new_tokens: int, steps: int) -> bool:
    """Always-right draft: every request's accept length is the one figure. Partial draft: a mean over requests
    whose first slots are random lies within the per-request range make_models computes."""
    hidden = make_models.SHAPES[MODEL["shape"]].hidden
    low, high = make_models.accept_length_range(new_tokens, steps, MODEL["wrong_every"], hidden)
    return low - 0.01 <= got <= high + 0.01
OUT = Path(".")
WORK = Path("/tmp/rs/work")


def now() -> str:
    return f"{datetime.datetime.now(datetime.timezone.utc):%H:%M:%S}"


def sh(cmd: list[str] | str, timeout: float = 60) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, shell=isinstance(cmd, str))
    return (r.stdout + r.stderr).strip()


def save() -> None:
    (OUT / "results.json").write_text(json.dumps(results, indent=1, default=str))


def record(check: str, ok: bool | None, detail: Any, **extra: Any) -> None:
    status = "PASS" if ok else ("INFO" if ok is None else "FAIL")
    results.append({"check": check, "result": status, "detail": detail, "at": now(), **extra})
    print(f"[{now()}] {status}: {check}: {detail}", flush=True)
    save()


def inv(*args: str, inventory: Path | None = None, timeout: float = 540,
        local: bool = False) -> tuple[int, Any, str, float]:
    """``inv ARGS --inventory ...``; local: a command on saved documents (``explain --from``), which takes none."""
    argv = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args,
            *([] if local else ["--inventory", str(inventory or WORK / "inventory.yaml")])]
    print(f"\n[{now()}] $ inv {' '.join(args)}", flush=True)
    timeout = min(timeout, max(30.0, time_left() + 20))   # never run past the call's own limit
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "COLUMNS": "160"})
        code, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = 124, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), \
            f"inv did not return within {timeout} s"
    wall = time.monotonic() - t0
    doc: Any = None
    if "--json" in args:
        try:
            doc = json.loads(out)
        except ValueError:
            doc = None
    print(f"  → exit {code} in {wall:.1f} s")
    print(out[-7000:] if doc is None else json.dumps(doc, indent=1, default=str)[-7000:])
    if err.strip():
        print("  stderr: " + err[-3000:])
    return code, doc, err, wall


def write_inventory(path: Path, *, python: str, tp: int, models: Path, extra_args: list[str] | None = None,
                    mem: str = "0.3", env: dict[str, str] | None = None, idle_mib: int = 2048,
                    steps: int = 3, graphs: bool = False) -> Path:
    import yaml

    # graphs: CUDA graphs on, as production runs (needs sgl-deep-gemm in the carried set: the draft-extend capture
    # imports deep_gemm); the batch sizes captured stay small so the capture is quick.
    shape = ["--cuda-graph-max-bs", "4"] if graphs else NO_GRAPH
    args = ["--attention-backend", "triton", "--sampling-backend", "pytorch", *shape, "--skip-tokenizer-init",
            "--mem-fraction-static", mem, *(extra_args or [])]
    inventory = {
        "defaults": {"timeouts": {"ready": 300, "stall": 180, "stop_grace": 15, "gpu_clean": 60}},
        "hosts": {"h200": {
            "connection": "local", "default": True, "python": python, "gpus": tp, "tp": tp,
            "model": str(models / "target"), "draft_model": str(models / "draft"),
            "log_dir": str(WORK / "logs"), "state_dir": str(WORK / "state"), "port": PORT,
            "nccl_preset": "pcie", "gpu_idle_mib": idle_mib,
            "env": {**SAFE_ENV, "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", "/tmp/rs/triton-cache"),
                    **(env or {})},
            "speculative": {"algorithm": "EAGLE3", "steps": steps, "topk": 1},
            "sglang_args": args,
        }},
    }
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def tree_manifest(site: Path) -> dict[str, str]:
    """sha256 of every file under site-packages except bytecode caches (importing SGLang writes those)."""
    out: dict[str, str] = {}
    for p in sorted(site.rglob("*")):
        if "__pycache__" in p.parts or not p.is_file():
            continue
        out[str(p.relative_to(site))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def deploy_ok(doc: Any, code: int) -> bool:
    return code == 0 and bool(doc and doc.get("ok"))


def deploy_detail(doc: Any, err: str, wall: float) -> str:
    if not doc:
        return f"no JSON; {err.strip()[-300:]}"
    if doc.get("ok"):
        t = doc.get("timings") or {}
        return f"ready in {wall:.1f} s (wait_ready {t.get('wait_ready', '?')} s, start {t.get('start', '?')} s)"
    e = doc.get("error") or {}
    return f"{e.get('kind')}: {e.get('message')} | hint: {e.get('hint')}"


def one_host(doc: Any) -> Any:
    """This run's one host's part of a host command's --json ({"ok", "hosts": [...]}, one shape for any number)."""
    return ((doc or {}).get("hosts") or [{}])[0]


def inv_one(*args: str, inventory: Path | None = None, timeout: float = 540) -> tuple[int, Any, str, float]:
    """``inv`` of a host command on this run's one host, its document that host's part (None: no JSON came)."""
    code, doc, err, wall = inv(*args, inventory=inventory, timeout=timeout)
    return code, None if doc is None else one_host(doc), err, wall


def checkenv_summary(doc: Any) -> str:
    rows = (doc or {}).get("rows") or []
    by: dict[str, int] = {}
    for r in rows:
        key = f"{r.get('status')}/{r.get('evidence')}"
        by[key] = by.get(key, 0) + 1
    return f"{len(rows)} rows: " + ", ".join(f"{n} {k}" for k, n in sorted(by.items()))


def server_log(name: str) -> Path:
    return WORK / "logs" / f"sglang-{name}.log"


def nccl_lines(name: str, limit: int = 40) -> list[str]:
    p = server_log(name)
    if not p.is_file():
        return []
    lines = [ln for ln in p.read_text(errors="replace").splitlines()
             if "set by environment" in ln or "[specdeploy]" in ln]
    return lines[-limit:]


def gpu_state() -> str:
    return sh(["nvidia-smi", "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader"]) + \
        " | apps: " + (sh(["nvidia-smi", "--query-compute-apps=pid,used_memory,process_name",
                           "--format=csv,noheader"]) or "none")


def sglang_procs() -> str:
    """SGLang processes still running ("none" when there are none). An exited one that its parent has not reaped
    yet (a zombie: state Z, empty cmdline, its comm still ``sglang::...``) holds no memory and runs nothing; it is
    named after a ``|`` with its parent (who must reap it), not counted as running."""
    out, zombies = [], []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            comm = (d / "comm").read_text().strip()
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if "-m sglang." in cmd or cmd.startswith("sglang::") or comm.startswith("sglang::"):
            if fields[0] == "Z":
                zombies.append(f"{d.name} ({comm}, exited, parent {fields[1]} has not reaped it)")
            else:
                out.append(f"{d.name}:{cmd[:80] or comm}")
    return ("; ".join(out) or "none") + (" | zombies: " + "; ".join(zombies) if zombies else "")


# ---------------------------------------------------------------------------------------------------------------
def check_modes(modes: list[str], tp: int, steps: int = 3) -> None:
    for mode in modes:
        code, doc, err, wall = inv_one("deploy", "--steps", str(steps), "--patch-mode", mode, "--json")
        record(f"tp{tp} deploy --steps {steps} --patch-mode {mode}", deploy_ok(doc, code),
               deploy_detail(doc, err, wall), wall_s=round(wall, 1), doc=doc)
        if not deploy_ok(doc, code):
            continue
        code, doc, err, _ = inv("check-env", "--json")
        doc = one_host(doc)
        rows = (doc or {}).get("rows") or []
        proven = [r for r in rows if r.get("status") == "proven"]
        nccl = [r for r in rows if r.get("evidence") == "nccl_log"]
        record(f"tp{tp} check-env after {mode}", code == 0 and len(proven) == len(rows) >= 6 * tp,
               checkenv_summary(doc) + f"; {len(nccl)} proven by NCCL's own lines", rows=rows)
        print("NCCL 'set by environment' lines and patch markers in the server log:")
        print("\n".join(nccl_lines("baseline" if steps == 0 else f"eagle3-s{steps}-k1-d{steps + 1}")))


def bench(label: str, steps: int, extra: list[str] | None = None, timeout: float = 300) -> Any:
    code, doc, err, _wall = inv_one("bench", *BENCH, *(extra or []), "--json", timeout=timeout)
    if not doc or code != 0:
        record(label, False, (doc or {}).get("error") or err[-400:])
        return None
    predicted = predicted_accept(OUTPUT_LEN, steps) if steps else None
    got = doc.get("accept_len")
    ok = True if not steps else (got is not None and accept_as_predicted(got, OUTPUT_LEN, steps))
    record(label, ok, f"output {doc.get('output_tok_s')} tok/s, TPOT {doc.get('tpot_ms')} ms, accept_len {got} "
           f"(source {doc.get('accept_len_source')}; predicted {predicted}), all sources "
           f"{doc.get('accept_len_sources')}, accept_rate {doc.get('accept_rate')}", doc=doc)
    return doc


def failure_paths(python: str, models: Path, tp: int) -> None:
    # 1. a flag SGLang 0.5.16 does not define (0.5.23 does): SGLang's argparse must end the deploy.
    inv_bad = write_inventory(WORK / "inv-badflag.yaml", python=python, tp=tp, models=models,
                              extra_args=["--enable-amd-monokernel"])
    code, doc, err, wall = inv_one("deploy", "--steps", "3", "--json", inventory=inv_bad, timeout=300)
    msg = json.dumps((doc or {}).get("error") or err[-500:])
    record("failure: a flag 0.5.16 rejects (--enable-amd-monokernel)",
           code != 0 and ("unrecognized arguments" in msg or "enable-amd-monokernel" in msg),
           deploy_detail(doc, err, wall) + f" [wall {wall:.1f} s]", doc=doc)
    # 2. a memory fraction the model cannot start with. Tiny shape: 0.999 leaves no slack, a CUDA OOM at start. The
    # 7B shape starts at 0.999 on 0.5.16 (the target's KV pool is resized after the CUDA graphs are captured,
    # kv_pool_runtime.compute_post_capture_kv_resize: 142.8 GB used, ready in 160 s, 2026-12-04), so there the
    # fraction is one below the weights: SGLang's own refusal.
    mem = "0.05" if MODEL["shape"] != "tiny" else "0.999"
    what = "weights above the fraction" if mem == "0.05" else "CUDA OOM start"
    inv_oom = write_inventory(WORK / "inv-oom.yaml", python=python, tp=tp, models=models, mem=mem)
    code, doc, err, wall = inv_one("deploy", "--steps", "3", "--json", inventory=inv_oom, timeout=400)
    msg = json.dumps((doc or {}).get("error") or err[-500:])
    record(f"failure: --mem-fraction-static {mem} ({what})",
           code != 0 and ("memory" in msg.lower()),
           deploy_detail(doc, err, wall) + f" [wall {wall:.1f} s]", doc=doc)
    print("gpu after the memory failure: " + gpu_state())
    # 3. the port held by another process (listening, never answering). Whatever the tool left running goes first.
    inv("stop", "--json", timeout=120)
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", PORT))
    holder.listen(1)
    try:
        code, doc, err, wall = inv_one("deploy", "--steps", "3", "--json", timeout=400)
    finally:
        holder.close()
    msg = json.dumps((doc or {}).get("error") or err[-500:])
    record("failure: port in use", code != 0 and ("in use" in msg.lower() or "98" in msg),
           deploy_detail(doc, err, wall) + f" [wall {wall:.1f} s]", doc=doc)
    print("gpu after the port failure: " + gpu_state() + " | sglang processes: " + sglang_procs())


def stop_and_rollback(site: Path, before: dict[str, str], tp: int) -> None:
    code, doc, _err, wall = inv("stop", "--json", timeout=120)
    time.sleep(1.0)
    state = gpu_state()
    procs_left = sglang_procs()
    used = [int(x.split(",")[1].strip().split()[0]) for x in
            sh(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]).splitlines()
            if x.strip()]
    record(f"tp{tp} stop: every process gone, GPU memory released", code == 0 and procs_left.startswith("none") and
           "apps: none" in state and max(used[:tp]) < 1024,
           f"stop exit {code} in {wall:.1f} s; nvidia-smi: {state}; sglang processes: {procs_left}", doc=doc)
    code, doc, _err, wall = inv("rollback-patches", "--json", timeout=120)
    doc = one_host(doc)
    after = tree_manifest(site)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    record(f"tp{tp} rollback-patches: installed tree byte-identical", code == 0 and not changed,
           f"exit {code}; {len(before)} files hashed; differing after rollback: {changed[:10] or 'none'}; "
           f"restored: {json.dumps(((doc or {}).get('data') or {}).get('files', []))[:600]}")


DEADLINE = float("inf")


def time_left() -> float:
    return DEADLINE - time.monotonic()


def run_steps(steps: list[tuple[str, float, Any]], reserve: float) -> None:
    """Run each (name, estimated seconds, fn) while it fits before the deadline, keeping ``reserve`` seconds for
    the closing stop + rollback; a step that does not fit is recorded as skipped (a later call runs it)."""
    for name, estimate, fn in steps:
        if time_left() < estimate + reserve:
            record(f"skipped: {name}", None, f"{time_left():.0f} s left, needs ~{estimate:.0f} s + {reserve:.0f} s")
            continue
        try:
            fn()
        except Exception as e:  # a step's own failure must not cost the steps after it
            record(f"{name} raised", False, f"{type(e).__name__}: {e}")


def step_baseline() -> None:
    code, doc, err, wall = inv_one("deploy", "--steps", "0", "--patch-mode", "env", "--json")
    record("tp1 deploy --steps 0 (baseline, env mode)", deploy_ok(doc, code), deploy_detail(doc, err, wall),
           doc=doc)
    if not deploy_ok(doc, code):
        log = server_log("baseline")
        print(log.read_text(errors="replace")[-6000:] if log.is_file() else "no server log")
        return
    code, cdoc, _, _ = inv("check-env", "--json")
    cdoc = one_host(cdoc)
    record("tp1 check-env after env (baseline)", code == 0, checkenv_summary(cdoc), rows=(cdoc or {}).get("rows"))
    BENCHES["baseline"] = bench("tp1 bench baseline", 0)


def step_eagle(tp: int, mode: str = "plugin") -> None:
    code, doc, err, wall = inv_one("deploy", "--steps", "3", "--patch-mode", mode, "--json")
    record(f"tp{tp} deploy --steps 3 (EAGLE-3, {mode} mode)", deploy_ok(doc, code), deploy_detail(doc, err, wall),
           doc=doc)
    if not deploy_ok(doc, code):
        log = server_log("eagle3-s3-k1-d4")
        print(log.read_text(errors="replace")[-6000:] if log.is_file() else "no server log")
        return
    code, cdoc, _, _ = inv("check-env", "--json")
    cdoc = one_host(cdoc)
    rows = (cdoc or {}).get("rows") or []
    record(f"tp{tp} check-env after {mode}", code == 0 and len(rows) >= 6 * tp and
           all(r.get("status") == "proven" for r in rows), checkenv_summary(cdoc), rows=rows)
    print("\n".join(nccl_lines("eagle3-s3-k1-d4")))
    eagle = bench(f"tp{tp} bench EAGLE-3 steps 3", 3)
    base = BENCHES.get("baseline")
    if base and eagle:
        record(f"tp{tp} baseline vs EAGLE-3", None,
               f"{base.get('output_tok_s')} → {eagle.get('output_tok_s')} tok/s")


def step_sweep() -> None:
    t0 = time.monotonic()
    code, doc, _err, _wall = inv("sweep", "--steps", "2,3", *BENCH, "--patch-mode", "plugin", "--json",
                               "--out", str(WORK / "runs"), timeout=max(60, time_left() - 60))
    record("sweep --steps 2,3 (baseline + 2 EAGLE-3 configurations)", code == 0,
           f"{time.monotonic() - t0:.0f} s; predicted accept_len s2 {predicted_accept(128, 2):.3f}"
           f", s3 {predicted_accept(128, 3):.3f}; result: " + json.dumps(doc, default=str)[:2500], doc=doc)


def step_bench_sglang() -> None:
    # SGLang's own bench_serving through the tool (it wants a tokenizer; these models have none).
    _code, sdoc, _err, _wall = inv_one("bench", "--client", "sglang", "--input-len", "64", "--output-len", "128",
                                    "--num-prompts", "4", "--timeout", "60", "--json", timeout=100)
    record("bench --client sglang (SGLang's bench_serving)", None,
           (sdoc or {}).get("error") or {k: (sdoc or {}).get(k) for k in ("output_tok_s", "accept_len",
                                                                              "accept_len_source")})


def stripped(python: str, models: Path, tp: int, modes: list[str], **inv_kw: Any) -> None:
    """A launch path that strips the six tuned variables before Python starts (the multicast-off ones stay)."""
    wrapper = WORK / "python-stripped"
    wrapper.write_text("#!/bin/sh\n# a launch path that drops the tuned NCCL variables before SGLang starts\n"
                       f"exec env {' '.join('-u ' + v for v in TUNED)} {python} \"$@\"\n")
    wrapper.chmod(0o755)
    write_inventory(WORK / "inventory.yaml", python=str(wrapper), tp=tp, models=models, **inv_kw)
    try:
        for mode in modes:
            if time_left() < 120:
                record(f"skipped: tp{tp} stripped env {mode}", None, f"{time_left():.0f} s left")
                continue
            code, doc, err, wall = inv_one("deploy", "--steps", "3", "--patch-mode", mode, "--json")
            if mode == "env":
                record(f"tp{tp} stripped env: deploy --patch-mode env is refused by the check",
                       code == 1 and ((doc or {}).get("error") or {}).get("kind") == "EnvNotProvenError",
                       deploy_detail(doc, err, wall), doc=doc)
                continue
            record(f"tp{tp} stripped env: deploy --patch-mode {mode}", deploy_ok(doc, code),
                   deploy_detail(doc, err, wall), doc=doc)
            if not deploy_ok(doc, code):
                continue
            code, cdoc, _, _ = inv("check-env", "--json")
            cdoc = one_host(cdoc)
            rows = (cdoc or {}).get("rows") or []
            blind = [r for r in rows if r.get("evidence") == "nccl_log" and
                     (r.get("sources") or {}).get("environ") is None]
            record(f"tp{tp} stripped env: check-env after {mode}", code == 0 and len(rows) >= 6 * tp and
                   all(r.get("status") == "proven" for r in rows),
                   checkenv_summary(cdoc) + f"; {len(blind)}/{len(rows)} proven by NCCL's lines with "
                   "/proc/PID/environ blind", rows=rows)
            print("\n".join(nccl_lines("eagle3-s3-k1-d4")))
    finally:
        write_inventory(WORK / "inventory.yaml", python=python, tp=tp, models=models, **inv_kw)


BENCHES: dict[str, Any] = {}
RESERVE = 75.0   # the closing stop + rollback


def phase_tp1a(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models)
    inv("render", "--steps", "3", "--json")
    run_steps([("baseline", 150, step_baseline), ("eagle plugin", 120, lambda: step_eagle(1, "plugin")),
               ("check-env scheduler", 60, lambda: check_modes(["scheduler"], 1)),
               ("check-env engine", 60, lambda: check_modes(["engine"], 1))], RESERVE)
    stop_and_rollback(site, before, 1)


def phase_tp1b(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models)
    run_steps([("sweep", 200, step_sweep), ("bench client sglang", 60, step_bench_sglang),
               ("failure paths", 150, lambda: failure_paths(python, models, 1))], RESERVE)
    stop_and_rollback(site, before, 1)


def phase_tp1(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models)
    inv("render", "--steps", "3", "--json")
    run_steps([("baseline", 150, step_baseline), ("eagle plugin", 100, lambda: step_eagle(1, "plugin")),
               ("failure paths", 120, lambda: failure_paths(python, models, 1)),
               ("check-env scheduler", 50, lambda: check_modes(["scheduler"], 1)),
               ("check-env engine", 50, lambda: check_modes(["engine"], 1)),
               ("sweep", 150, step_sweep), ("bench client sglang", 45, step_bench_sglang)], RESERVE)
    stop_and_rollback(site, before, 1)


def phase_tp2(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    write_inventory(WORK / "inventory.yaml", python=python, tp=2, models=models)
    run_steps([("eagle env", 240, lambda: step_eagle(2, "env")),
               ("stripped env+scheduler", 150, lambda: stripped(python, models, 2, ["env", "scheduler"])),
               ("check-env plugin", 70, lambda: check_modes(["plugin"], 2)),
               ("check-env engine", 70, lambda: check_modes(["engine"], 2)),
               ("check-env scheduler", 70, lambda: check_modes(["scheduler"], 2)),
               ("sweep (if call 1 had no time for it)", 150, step_sweep),
               ("stripped plugin+engine", 150, lambda: stripped(python, models, 2, ["plugin", "engine"]))],
              RESERVE)
    stop_and_rollback(site, before, 2)


def step_bench_auto(tp: int) -> None:
    # The default client on a real install: 0.5.16's bench_serving cannot import `datasets`, so auto must fall back
    # to the builtin load generator and still read the accept length from SGLang's meta_info.
    code, doc, err, _wall = inv_one("bench", "--input-len", "64", "--output-len", "128", "--num-prompts", "6", "--json",
                                    timeout=240)
    predicted = predicted_accept(OUTPUT_LEN, 3)
    got = (doc or {}).get("accept_len")
    record(f"tp{tp} bench (default client auto)", code == 0 and got is not None and
           accept_as_predicted(got, OUTPUT_LEN, 3),
           f"client {(doc or {}).get('client')}, accept_len {got} (source {(doc or {}).get('accept_len_source')}, "
           f"predicted {predicted}), output {(doc or {}).get('output_tok_s')} tok/s" if doc and code == 0
           else (doc or {}).get("error") or err[-400:], doc=doc)


def phase_tp2b(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    """What the TP 2 call had no time for: the stripped launch path in plugin and engine mode; the default bench."""
    write_inventory(WORK / "inventory.yaml", python=python, tp=2, models=models)
    run_steps([("stripped plugin+engine", 200, lambda: stripped(python, models, 2, ["plugin", "engine"])),
               ("bench auto", 60, lambda: step_bench_auto(2))], RESERVE)
    stop_and_rollback(site, before, 2)


# -- issue 26: where the cycle's time goes, measured by SGLang itself (CUDA graphs on) ----------------------------
PROFILE_LOAD = ["--input-len", "64", "--output-len", "256", "--num-prompts", "16", "--concurrency", "1"]


def _phases(doc: Any) -> str:
    """The anatomy lines of a profile/bench document, compact (the whole document is in results.json)."""
    text = json.dumps(doc, default=str)
    return text[:1800]


def step_profile(steps: int, *, load: list[str] | None = None, trace: bool = True, bench_explain: bool = True,
                 tag: str = "") -> dict[str, Any]:
    """Deploy, bench, profile (timer), profile --trace, explain. Returns the bench document and the path the traced
    profile's document was saved to (``inv explain --from`` reads it), where they came."""
    load = load or PROFILE_LOAD
    got: dict[str, Any] = {}
    label = ("baseline" if steps == 0 else f"EAGLE-3 steps {steps}") + tag
    code, doc, err, wall = inv_one("deploy", "--steps", str(steps), "--measure", "--json", timeout=400)
    record(f"profile: deploy --steps {steps} --measure (CUDA graphs on)", deploy_ok(doc, code),
           deploy_detail(doc, err, wall), doc=doc)
    if not deploy_ok(doc, code):
        log = server_log("baseline" if steps == 0 else f"eagle3-s{steps}-k1-d{steps + 1}")
        print(log.read_text(errors="replace")[-6000:] if log.is_file() else "no server log")
        return got
    code, bdoc, err, bwall = inv_one("bench", "--client", "builtin", *load, "--out", str(WORK / "runs"),
                                     "--json", timeout=240)
    got["bench"] = bdoc
    record(f"profile: bench {label} (timer on)", code == 0, f"{bwall:.1f} s; " + _phases(bdoc), doc=bdoc,
           wall_s=round(bwall, 2))
    code, pdoc, err, pwall = inv("profile", *load, "--json", timeout=240)
    record(f"profile: inv profile {label} (device timer)", code == 0, f"{pwall:.1f} s; " + _phases(pdoc), doc=pdoc,
           wall_s=round(pwall, 2))
    # under the work tree (server-logs.tar.gz): several traced configurations stay within the 8 files that come back
    traces = WORK / "runs" / f"traces-s{steps}{'-eager' if tag else ''}"
    if not trace:
        _explain(steps, label, load, bench_explain)
        return got
    code, tdoc, err, twall = inv("profile", *load, "--trace", "--trace-steps", "12", "--out", str(traces),
                                 "--json", timeout=300)
    sizes = {p.name: p.stat().st_size for p in traces.glob("*.trace.json.gz")} if traces.is_dir() else {}
    record(f"profile: inv profile --trace {label} (timer + profiler trace, 12 steps)", code == 0,
           f"{twall:.1f} s; trace files {sizes}; " + _phases(tdoc), doc=tdoc, wall_s=round(twall, 2),
           trace_bytes=sizes)
    if code == 0 and tdoc:
        traces.mkdir(parents=True, exist_ok=True)
        got["trace_doc"] = traces / "profile.json"
        got["trace_doc"].write_text(json.dumps(tdoc, default=str))
    _explain(steps, label, load, bench_explain)
    return got


def _explain(steps: int, label: str, load: list[str], bench_explain: bool) -> None:
    if steps and bench_explain:
        code, edoc, _err, _ = inv_one("bench", "--client", "builtin", *load, "--out", str(WORK / "runs"),
                                      "--explain", "--json", timeout=240)
        record(f"profile: bench --explain {label}", code == 0, _phases((edoc or {}).get("explain") or edoc),
               doc=edoc)
    if steps:
        inv("explain", "--rules", timeout=60)
        code, xdoc, _err, _ = inv("explain", "--json", timeout=240)
        record(f"profile: inv explain {label}", code in (0, 1), _phases(xdoc), doc=xdoc)


def step_timer_cost(pairs: int) -> None:
    """The device timer's cost on served tok/s: the same server shape with and without it, alternated."""
    figures: list[dict[str, Any]] = []
    for i in range(pairs):
        for flag in ("--no-measure", "--measure"):
            if time_left() < 120:
                break
            code, doc, err, wall = inv_one("deploy", "--steps", "3", flag, "--json", timeout=300)
            if not deploy_ok(doc, code):
                record(f"timer cost: deploy {flag} (pair {i + 1})", False, deploy_detail(doc, err, wall), doc=doc)
                continue
            code, bdoc, err, _ = inv_one("bench", "--client", "builtin", *PROFILE_LOAD, "--json", timeout=200)
            figures.append({"pair": i + 1, "timer": flag == "--measure",
                            "output_tok_s": (bdoc or {}).get("output_tok_s"), "tpot_ms": (bdoc or {}).get("tpot_ms")})
            print(f"timer cost pair {i + 1} {flag}: {figures[-1]}")
    on = [f["output_tok_s"] for f in figures if f["timer"] and f["output_tok_s"]]
    off = [f["output_tok_s"] for f in figures if not f["timer"] and f["output_tok_s"]]
    cost = None
    if on and off:
        cost = round(100.0 * (1 - (sum(on) / len(on)) / (sum(off) / len(off))), 1)
    record("timer cost on served tok/s (EAGLE-3 steps 3, CUDA graphs on)", None,
           f"{len(on)} on / {len(off)} off; mean on {on and round(sum(on) / len(on), 1)}, off "
           f"{off and round(sum(off) / len(off), 1)} tok/s; cost {cost} % (measured by the tool's bench)",
           figures=figures, cost_percent=cost)


def step_sweep_explain() -> None:
    code, doc, _err, wall = inv("sweep", "--steps", "2,3", "--client", "builtin", *PROFILE_LOAD, "--explain",
                                "--json", "--out", str(WORK / "runs-sweep"), timeout=max(60, time_left() - 60))
    record("sweep --steps 2,3 --explain (measured phases, CUDA graphs on)", code in (0, 1),
           f"{wall:.0f} s; " + json.dumps(doc, default=str)[:2500], doc=doc)


def phase_profile(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True)
    inv("render", "--steps", "3", "--measure", "--json")
    run_steps([("profile baseline", 150, lambda: step_profile(0)),
               ("profile EAGLE-3 s3", 200, lambda: step_profile(3))], RESERVE)
    stop_and_rollback(site, before, 1)


def phase_profileb(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True)
    run_steps([("timer cost pairs", 300, lambda: step_timer_cost(3)),
               ("sweep --explain", 150, step_sweep_explain)], RESERVE)
    stop_and_rollback(site, before, 1)


def step_sweep_grid(predict: bool) -> None:
    """Steps 0..7 on one GPU: with --predict (two loads to predict, one to confirm) or the whole grid, each bench
    at the same fixed load, so the two runs' per-configuration figures can be set side by side."""
    label = "--predict" if predict else "full grid"
    code, doc, _err, wall = inv("sweep", "--steps", "0,1,2,3,4,5,6,7", "--client", "builtin", *PROFILE_LOAD,
                                *(["--predict"] if predict else []), "--explain", "--json",
                                "--out", str(WORK / ("runs-predict" if predict else "runs-grid")),
                                timeout=max(60, time_left() - 60))
    record(f"sweep --steps 0..7 {label} (measured phases, CUDA graphs on)", code in (0, 1),
           f"{wall:.0f} s; " + json.dumps(doc, default=str)[:3000], doc=doc, wall_s=round(wall, 1))


def phase_three(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True)
    run_steps([("sweep --predict", 240, lambda: step_sweep_grid(True))], RESERVE)
    stop_and_rollback(site, before, 1)


def phase_threeb(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True)
    run_steps([("sweep full grid", 420, lambda: step_sweep_grid(False))], RESERVE)
    stop_and_rollback(site, before, 1)


# -- issue 37: the 7B shape (GPU-bound cycle) with the partial draft, CUDA graphs on ---------------------------
LOAD_7B = ["--input-len", "64", "--output-len", "256", "--num-prompts", "8", "--concurrency", "1"]


def phase_prof7b(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    """inv profile for the baseline and steps 3, 7, 1 (traces for decode and verify), inv explain with the measured
    baseline; then verify eager (CUDA graphs off) for the verify_eager rule."""
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True)
    run_steps([("profile baseline (trace)", 200, lambda: step_profile(0, load=LOAD_7B)),
               ("profile s3 (trace, explain)", 120, lambda: step_profile(3, load=LOAD_7B, bench_explain=False)),
               ("profile s7 (trace, explain)", 120, lambda: step_profile(7, load=LOAD_7B, bench_explain=False)),
               ("profile s1 (explain)", 90, lambda: step_profile(1, load=LOAD_7B, trace=False,
                                                                 bench_explain=False))], RESERVE)
    stop_and_rollback(site, before, 1)


def phase_eager7b(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    """Verify's graph off (CUDA graphs off: verify runs eager) for verify_eager, with its trace; then tp1a's checks on
    the 7B shape with graphs on (the plugin patch mode, check-env proven per rank, accept length as predicted, the
    scheduler patch mode). The eager baseline was measured on 2026-12-03 (15.9 ms [timer])."""
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=False)
    run_steps([("profile s3 eager (trace, explain)", 200,
                lambda: step_profile(3, load=LOAD_7B, bench_explain=False, tag=" (CUDA graphs off)"))], RESERVE)
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True)
    run_steps([("eagle plugin (7B, graphs on)", 130, lambda: step_eagle(1, "plugin")),
               ("check-env scheduler (7B)", 80, lambda: check_modes(["scheduler"], 1))], RESERVE)
    stop_and_rollback(site, before, 1)


def phase_fail7b(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    """tp1b's failure paths on the 7B shape (a flag 0.5.16 rejects, a CUDA out-of-memory start, the port held),
    then the stop and the byte-exact rollback."""
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True)
    run_steps([("failure paths (7B)", 100, lambda: failure_paths(python, models, 1))], 30.0)
    stop_and_rollback(site, before, 1)


def step_sweep_7b(steps: str, predict: bool) -> None:
    label = f"--steps {steps}" + (" --predict" if predict else "")
    code, doc, _err, wall = inv("sweep", "--steps", steps, "--client", "builtin", *LOAD_7B,
                                *(["--predict"] if predict else []), "--explain", "--json",
                                "--out", str(WORK / ("runs-predict" if predict else "runs-grid")),
                                timeout=max(60, time_left() - RESERVE))
    preds = {s: round(predicted_accept(256, s), 3) for s in range(1, 8)}
    record(f"sweep {label} (7B, partial draft, CUDA graphs on)", code in (0, 1),
           f"{wall:.0f} s; accept len predicted by make_models {preds}; " + json.dumps(doc, default=str)[:3000],
           doc=doc, wall_s=round(wall, 1), predicted_accept=preds)


def step_spread(repeats: int, steps: int = 3) -> None:
    """Deploy-to-deploy spread: the same configuration deployed afresh ``repeats`` times, one bench + profile each."""
    rows: list[dict[str, Any]] = []
    for i in range(repeats):
        if time_left() < 100 + RESERVE:
            record(f"skipped: spread deploy {i + 1}", None, f"{time_left():.0f} s left")
            break
        inv("stop", "--json", timeout=120)      # a fresh server each time, not a no-op redeploy
        code, doc, err, wall = inv_one("deploy", "--steps", str(steps), "--measure", "--json", timeout=300)
        if not deploy_ok(doc, code):
            record(f"spread: deploy {i + 1}", False, deploy_detail(doc, err, wall), doc=doc)
            continue
        _c, bdoc, _e, _w = inv_one("bench", "--client", "builtin", *LOAD_7B, "--json", timeout=200)
        _c, pdoc, _e, _w = inv("profile", *LOAD_7B, "--json", timeout=200)
        rows.append({"deploy": i + 1, "deploy_s": round(wall, 1), "output_tok_s": (bdoc or {}).get("output_tok_s"),
                     "tpot_ms": (bdoc or {}).get("tpot_ms"), "accept_len": (bdoc or {}).get("accept_len"),
                     "profile": pdoc})
        print(f"spread deploy {i + 1}: {json.dumps(rows[-1], default=str)[:1500]}")
    tok = [r["output_tok_s"] for r in rows if r["output_tok_s"]]
    record(f"deploy-to-deploy spread, steps {steps}, shape {MODEL['shape']} (tok/s from the tool's bench)", None,
           f"{len(rows)} deploys; tok/s {tok}; spread {round(max(tok) - min(tok), 1) if tok else None}",
           spread=rows)


def phase_sweep7b(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True)
    run_steps([("sweep 0..7 --predict", 260, lambda: step_sweep_7b("0,1,2,3,4,5,6,7", True)),
               ("spread x3", 200, lambda: step_spread(3))], RESERVE)
    stop_and_rollback(site, before, 1)


def phase_grid7b(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    """The grid the --predict run is checked against, at the same load. Eight 7B deploys do not fit one call: the
    grid is reduced to 0, 1, 2, 3, 5, 7 (the steps in between are where P = 3 already holds: accept len ~3)."""
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True)
    run_steps([("sweep grid 0,1,2,3,5,7", 420, lambda: step_sweep_7b("0,1,2,3,5,7", False))], RESERVE)
    stop_and_rollback(site, before, 1)


SEED = {"extra_args": ["--disable-custom-all-reduce", "--num-continuous-decode-steps", "4"],
        "env": {"EAGLE3_PROFILE": "1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}}


def step_sweep_tp8() -> None:
    code, doc, _err, _wall = inv("sweep", "--steps", "1,3", *BENCH, "--json", "--out", str(WORK / "runs"),
                                 timeout=max(60, time_left() - 60))
    record("tp8 sweep --steps 1,3 (baseline, s1, s3)", code == 0, json.dumps(doc, default=str)[:2500], doc=doc)


def phase_tp8(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    """Issue 20: the seed's launch shape at TP 8 (mem fraction given explicitly, PCIe NCCL preset)."""
    write_inventory(WORK / "inventory.yaml", python=python, tp=8, models=models, mem="0.3", **SEED)
    run_steps([("eagle env", 300, lambda: step_eagle(8, "env")),
               ("stripped env+scheduler", 200,
                lambda: stripped(python, models, 8, ["env", "scheduler"], mem="0.3", **SEED)),
               ("check-env plugin", 90, lambda: check_modes(["plugin"], 8)),
               ("check-env engine", 90, lambda: check_modes(["engine"], 8)),
               ("sweep 0,1,3", 240, step_sweep_tp8),
               ("check-env scheduler", 90, lambda: check_modes(["scheduler"], 8))], RESERVE)
    stop_and_rollback(site, before, 8)


# The grid7b phase's load, so that tune's answer is checked against that grid's (steps 2 best, 7 loads for
# 0, 1, 2, 3, 5, 7; 9 for the whole 0..7 grid): the same server, shape and draft.
TUNE_LOAD = LOAD_7B


def step_tune(start: str) -> None:
    """Issue 38: `inv tune` from a deliberately poor start: its path table (the text output) and its JSON document
    with every measurement."""
    minutes = max(1.0, (time_left() - RESERVE - 20) / 60)
    code, doc, err, wall = inv("tune", *TUNE_LOAD, "--max-loads", "8", "--max-minutes", f"{minutes:.1f}",
                               "--json", timeout=max(60, time_left() - 30))
    record(f"tune from {start}", code == 0,
           f"{wall:.0f} s; " + json.dumps(doc, default=str)[:3000], doc=doc, wall_s=round(wall, 1))
    state = Path("runs") / "tune-h200.json"
    if state.is_file():
        from fabfile.present.tune_report import render

        table = render(json.loads(state.read_text()))
        (OUT / "tune-path.txt").write_text(table + "\n")
        print(table)
        for extra in (state, state.with_suffix(".png")):
            if extra.is_file():
                (OUT / extra.name).write_bytes(extra.read_bytes())
    elif err:
        print(err[-2000:])


def phase_tune7b(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    """From steps 7, where the grid measured 438 tok/s against steps 2's 499 (draft forwards past what acceptance
    reaches): draft_surplus should fire and its remedy reach steps 2 in one trial (7 loads)."""
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True, steps=7)
    run_steps([("tune", 430, lambda: step_tune("steps 7 (grid: 438 tok/s; steps 2 best, 499)"))], RESERVE)
    stop_and_rollback(site, before, 1)


# -- issue 37 point 5: an MoE target (Qwen3-MoE, each slot routed to its own experts), partial draft ------------
# The Triton fused-MoE runner: what "auto" resolves to for a bf16 Qwen3-MoE at TP 1 on Hopper (flashinfer_trtllm only
# on sm100), said explicitly so a later SGLang's default cannot move the run onto a backend the kit does not carry.
MOE_ARGS = ["--moe-runner-backend", "triton"]
MOE_RESERVE = 45.0   # the closing stop + rollback took 9 s in each 7B call; 45 leaves room for a slow stop
MOE_TRACED: dict[int, Path] = {}   # steps → the saved `inv profile --trace --json` document of that configuration
MOE_LOG = re.compile(r"MoE|moe_runner|fused_moe|[Ee]xpert|Qwen3Moe|ModuleNotFoundError|ImportError|No module")


def moe_facts() -> str:
    shape = make_models.SHAPES[MODEL["shape"]]
    t = make_models.moe_traffic(shape)
    return (f"Qwen3MoeForCausalLM hidden {shape.hidden}, {shape.layers} layers, {shape.heads} query / {shape.kv} KV "
            f"heads of {shape.hd}, {shape.experts} experts of width {shape.intermediate}, top-{shape.top_k}; "
            f"weights {t['total_gb']:.1f} GB (experts {t['experts_gb']:.1f} GB) [make_models]; weights read per "
            f"forward [derived]: decode {t['read_gb'][1]:.2f} GB ({shape.top_k} experts/layer), verify of 4 "
            f"tokens {t['read_gb'][4]:.2f} GB ({make_models.verify_experts(3, shape)}), of 8 {t['read_gb'][8]:.2f} GB "
            f"({make_models.verify_experts(7, shape)}); MoE runner flags {MOE_ARGS}")


def _decode_kernels(path: Path) -> dict[str, Any]:
    """The baseline's decode kernels by class from its saved traced profile (``inv profile --json``'s document)."""
    doc = json.loads(path.read_text())
    rank = ((one_host(doc).get("data") or {}).get("ranks") or [{}])[0]
    return dict((((rank.get("trace") or {}).get("kernels") or {}).get("decode")) or {})


def _by_class(decode: dict[str, Any], verify: dict[str, Any]) -> str:
    d, v = decode.get("classes_ms") or {}, verify.get("classes_ms") or {}
    parts = []
    for cls in sorted(set(d) | set(v), key=lambda c: -float(v.get(c) or 0)):
        a, b = float(d.get(cls) or 0), float(v.get(cls) or 0)
        parts.append(f"{cls} {a:.3f} → {b:.3f} ms" + (f" ({b / a:.2f}×)" if a > 0 else ""))
    return (f"span {decode.get('span_ms')} → {verify.get('span_ms')} ms per pass, launch {decode.get('launch')} / "
            f"{verify.get('launch')}; " + ", ".join(parts))


def step_moe_explain(steps: int) -> None:
    """`inv explain --from` the configuration's traced profile `--baseline` the baseline's: gemm_growth reads the
    verify GEMM time of one against the decode GEMM time of the other. Records the kernels by class and whether
    the rule fired, where this construction predicts it should (the pass reaches D × the experts of decode)."""
    shape = make_models.SHAPES[MODEL["shape"]]
    base, spec = MOE_TRACED.get(0), MOE_TRACED.get(steps)
    reach = f"{steps + 1} tokens reach {make_models.verify_experts(steps, shape)} of {shape.experts} experts " \
            f"per layer, a decode token {shape.top_k}"
    if base is None or spec is None:
        record(f"moe: gemm_growth at steps {steps} ({reach})", False,
               f"no traced profile of the {'baseline' if base is None else f'steps {steps} server'} to read")
        return
    code, xdoc, err, _ = inv("explain", "--from", str(spec), "--baseline", str(base), "--json", local=True,
                             timeout=120)
    subject = ((xdoc or {}).get("subjects") or [{}])[0]
    found = {f.get("rule"): f for f in subject.get("findings") or []}
    verify = dict((((subject.get("anatomy") or {}).get("kernels") or {}).get("verify")) or {})
    decode = _decode_kernels(base)
    read = make_models.moe_traffic(shape)["read_gb"]
    expect = f"; weights read per pass [derived]: {read[1]:.2f} GB decode, {read[steps + 1]:.2f} GB verify " \
             f"({read[steps + 1] / read[1]:.2f}×)" if steps + 1 in read else ""
    record(f"moe: kernels by class [trace], baseline decode → verify at steps {steps}", None
           if code == 0 else False, (_by_class(decode, verify) + expect) if code == 0 else err[-400:],
           decode=decode, verify=verify)
    g = found.get("gemm_growth")
    gv = float((verify.get("classes_ms") or {}).get("gemm") or 0)
    gd = float((decode.get("classes_ms") or {}).get("gemm") or 0)
    record(f"moe: gemm_growth at steps {steps} ({reach})", g is not None,
           g.get("sentence") if g else f"silent: verify GEMM {gv:.3f} ms against decode {gd:.3f} ms per pass "
           "[trace] (the rule fires at 1.5×)", growth=round(gv / gd, 3) if gd else None)
    record(f"moe: inv explain --from steps {steps} --baseline the baseline (traces of both)", code == 0,
           f"rules fired: {sorted(found) or 'none'}; " + str(subject.get("verdict")),
           findings=[found[r] for r in sorted(found)], doc=xdoc)


def step_moe_profile(steps: int) -> None:
    if steps and 0 not in MOE_TRACED:
        record(f"skipped: moe steps {steps}", None, "the baseline was not profiled with a trace (see above)")
        return
    got = step_profile(steps, load=LOAD_7B, bench_explain=False)
    log = server_log("baseline" if steps == 0 else f"eagle3-s{steps}-k1-d{steps + 1}")
    lines = [ln.strip()[:300] for ln in log.read_text(errors="replace").splitlines() if MOE_LOG.search(ln)] \
        if log.is_file() else []
    record(f"moe: SGLang's MoE path at steps {steps} (server log lines naming it)", None, lines[-10:] or "none")
    if got.get("trace_doc"):
        MOE_TRACED[steps] = got["trace_doc"]
    if not steps:
        return
    acc = (got.get("bench") or {}).get("accept_len")
    low, high = make_models.accept_length_range(256, steps, MODEL["wrong_every"],
                                                make_models.SHAPES[MODEL["shape"]].hidden)
    record(f"moe: accept length at steps {steps} as make_models predicts (MoE layers in the residual path)",
           acc is not None and accept_as_predicted(acc, 256, steps),
           f"{acc} [meta_info], predicted {predicted_accept(256, steps):.3f} (per request {low:.3f}–{high:.3f})")
    step_moe_explain(steps)


def phase_profmoe(python: str, models: Path, site: Path, before: dict[str, str]) -> None:
    """The MoE shape with the partial draft: baseline, then 8 draft tokens (steps 7) before 4 (steps 3), so the
    pass that reaches every expert is measured first; each `inv profile --trace`, kernels by class, explained."""
    write_inventory(WORK / "inventory.yaml", python=python, tp=1, models=models, graphs=True, extra_args=MOE_ARGS)
    record("moe: the shape", None, moe_facts())
    run_steps([("moe profile baseline (trace)", 230, lambda: step_moe_profile(0)),
               ("moe profile s7 (trace, explain)", 85, lambda: step_moe_profile(7)),
               ("moe profile s3 (trace, explain)", 85, lambda: step_moe_profile(3))], MOE_RESERVE)
    stop_and_rollback(site, before, 1)


def main() -> int:
    global OUT, DEADLINE
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=("tp1", "tp1a", "tp1b", "tp2", "tp2b", "tp8", "profile", "profileb",
                                       "three", "threeb", "prof7b", "eager7b", "sweep7b", "grid7b", "tune7b",
                                       "profmoe", "fail7b"),
                    required=True)
    ap.add_argument("--budget-s", type=float, default=560.0, help="seconds this run may take in all")
    ap.add_argument("--python", required=True, help="the venv python that has the real SGLang")
    ap.add_argument("--models", default="/tmp/rs/models")
    ap.add_argument("--shape", choices=sorted(make_models.SHAPES), default=None,
                    help="model shape (default: 7b for the *7b phases, moe for profmoe, tiny otherwise)")
    ap.add_argument("--wrong-every", type=int, default=None,
                    help="the draft is wrong where the slot is 0 mod P (default: 3 for the *7b phases and "
                         "profmoe, else 0)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    DEADLINE = time.monotonic() + a.budget_s
    OUT = Path(a.out)
    OUT.mkdir(parents=True, exist_ok=True)
    (WORK / "logs").mkdir(parents=True, exist_ok=True)
    big = a.phase.endswith("7b") or a.phase == "profmoe"
    MODEL["shape"] = a.shape or ("moe" if a.phase == "profmoe" else "7b" if big else "tiny")
    MODEL["wrong_every"] = a.wrong_every if a.wrong_every is not None else (3 if big else 0)
    models = Path(a.models) / f"{MODEL['shape']}-p{MODEL['wrong_every']}"
    made = models / "made.json"
    if not made.is_file():
        t0 = time.monotonic()
        make_models.write(models, MODEL["shape"], MODEL["wrong_every"])
        print(f"models {MODEL} written in {time.monotonic() - t0:.1f} s under {models}")
    site = Path(sh([a.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]))
    print(f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC; phase {a.phase}")
    print(sh(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,memory.used",
              "--format=csv,noheader"]))
    print(sh(["nvidia-smi", "topo", "-m"]))
    # check-env reads the GPUs and their link from this one query (remote/evidence/interconnect): its real output,
    # on every call, is what tests/sim/test_gpu_facts.py's stand-in is checked against.
    print("$ nvidia-smi nvlink -s\n" + sh(["nvidia-smi", "nvlink", "-s"]))
    print(sh([a.python, "-c", "import torch, sglang, transformers, sgl_kernel, triton; "
              "print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), "
              "'sglang', sglang.__version__, 'transformers', transformers.__version__, 'sgl_kernel', "
              "sgl_kernel.__version__ if hasattr(sgl_kernel, '__version__') else '?', 'triton', triton.__version__)"],
             timeout=180))
    before = tree_manifest(site)
    print(f"hashed {len(before)} files under {site}")
    phases = {"tp1": phase_tp1, "tp1a": phase_tp1a, "tp1b": phase_tp1b, "tp2": phase_tp2, "tp2b": phase_tp2b,
              "tp8": phase_tp8, "profile": phase_profile, "profileb": phase_profileb,
              "three": phase_three, "threeb": phase_threeb, "prof7b": phase_prof7b, "eager7b": phase_eager7b,
              "sweep7b": phase_sweep7b, "grid7b": phase_grid7b, "tune7b": phase_tune7b, "fail7b": phase_fail7b,
              "profmoe": phase_profmoe}
    phases[a.phase](a.python, models, site, before)
    print("\n| check | result | detail |\n|---|---|---|")
    for r in results:
        print(f"| {r['check']} | {r['result']} | {' '.join(str(r['detail']).split()).replace('|', '/')[:400]} |")
    failed = [r for r in results if r["result"] == "FAIL"]
    print(f"\n{len(results) - len(failed) - sum(r['result'] == 'INFO' for r in results)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
