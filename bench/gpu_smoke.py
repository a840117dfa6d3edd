"""Real-GPU smoke check (run on a machine with NVIDIA GPUs, PyTorch and NCCL; no sshd or network needed).

Runs the tool's real code paths against real hardware through the ``local`` connection kind:

1. the GPU-clean gate on the real ``nvidia-smi`` (clean), then with a real CUDA process that holds GPU memory and
   ignores SIGTERM: ``inv stop`` must find it through nvidia-smi, name it, kill it and confirm the GPU clean;
2. ``inv deploy`` of the SGLang simulator whose schedulers do real CUDA work (GPU memory + a real NCCL communicator
   and all-reduce, ``NCCL_DEBUG=INFO``), in every patch mode, each followed by ``inv check-env`` parsing NCCL's own
   output; plus a launch path that strips the environment, where only in-process modes can work and
   ``/proc/PID/environ`` cannot see the values NCCL used;
3. ``inv rollback-patches``.

    bench/gpu_smoke.sh [--tp N]          (wrapper: installs carried wheels, then runs this with the GPU's Python)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORK = Path("/tmp/specdeploy-gpu-smoke")
# Required on this workplace's multi-GPU machines (and harmless elsewhere): never let NCCL use NVLink multicast.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
HOLDER = r"""
import signal, sys, time, torch
signal.signal(signal.SIGTERM, signal.SIG_IGN)
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("holding", flush=True)
while True:
    time.sleep(1)
"""

results: list[tuple[str, str, str]] = []


def sh(cmd: list[str], **kw: Any) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, **kw).stdout.strip()


def inv(*args: str, timeout: float = 300) -> tuple[int, Any, str]:
    env = {**os.environ, "COLUMNS": "160"}
    argv = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args, "--inventory",
            str(WORK / "inventory.yaml")]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    doc: Any = None
    if "--json" in args:
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            doc = None
    if isinstance(doc, dict) and isinstance(doc.get("hosts"), list) and len(doc["hosts"]) == 1:
        doc = doc["hosts"][0]  # a host command's {"ok", "hosts": [...]}: this smoke's one host's part
    print(f"\n$ inv {' '.join(args)}   → exit {r.returncode}")
    print(r.stdout if doc is None else json.dumps(_short(doc), indent=1)[:6000])
    if r.stderr.strip():
        print(r.stderr[-4000:])
    return r.returncode, doc, r.stderr


def _short(doc: Any) -> Any:
    if isinstance(doc, dict) and "rows" in doc:
        return {**doc, "rows": [{k: r.get(k) for k in ("label", "pid", "var", "expected", "observed", "evidence",
                                                         "status", "environ_status")} for r in doc["rows"]]}
    return doc


def record(check: str, ok: bool, detail: str) -> None:
    results.append((check, "PASS" if ok else "FAIL", " ".join(str(detail).split()).replace("|", "/")))


def setup(tp: int, version: str) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.simhost.sim.install import install_simulator

    shutil.rmtree(WORK, ignore_errors=True)
    for d in ("models/kimi-k2.5-int4", "eagle3/output_100k_sglang/4", "logs", "unused-bin"):
        (WORK / d).mkdir(parents=True, exist_ok=True)
    for d in ("models/kimi-k2.5-int4", "eagle3/output_100k_sglang/4"):
        (WORK / d / "config.json").write_text('{"architectures": ["DeepseekV3ForCausalLM"]}')
    install_simulator(Path(sys.prefix), WORK / "unused-bin", version, sys.executable,
                      {"real_cuda": True, "gpus": tp, "per_gpu_memory_mib": 2048, "load_seconds": 0.5})
    inventory = {
        "defaults": {"timeouts": {"ready": 240, "stall": 120, "stop_grace": 5, "gpu_clean": 30}},
        "hosts": {"h200": {
            "connection": "local", "default": True, "python": sys.executable, "gpus": tp, "tp": tp,
            "model": str(WORK / "models/kimi-k2.5-int4"), "draft_model": str(WORK / "eagle3/output_100k_sglang/4"),
            "log_dir": str(WORK / "logs"), "state_dir": str(WORK / "state"), "port": 30111,
            "nccl_preset": "pcie", "env": SAFE_ENV, "gpu_idle_mib": 1024,
        }},
    }
    import yaml

    (WORK / "inventory.yaml").write_text(yaml.safe_dump(inventory, sort_keys=False))


def sim_config(**values: Any) -> None:
    path = Path(sys.prefix) / "sim-state" / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(values)
    path.write_text(json.dumps(cfg))


def gate_checks(tp: int) -> None:
    from fabfile.remote import gpus

    t0 = time.monotonic()
    try:
        r = gpus.wait_clean(list(range(tp)), 1024, 20)
        record("GPU-clean gate, idle GPU", True, f"clean after {time.monotonic() - t0:.2f}s ({r['samples']} samples)")
    except Exception as e:
        record("GPU-clean gate, idle GPU", False, str(e))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert holder.stdout is not None
    holder.stdout.readline()
    time.sleep(1.0)
    apps = sh(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory,process_name",
               "--format=csv,noheader,nounits"])
    print(f"\nnvidia-smi compute apps with the holder running:\n{apps}")
    try:
        gpus.wait_clean(list(range(tp)), 1024, 2)
        record("gate refuses a held GPU", False, "gate passed although a process holds GPU 0")
    except Exception as e:
        named = str(holder.pid) in str(e)
        record("gate refuses a held GPU", named, str(e)[:110])
    t0 = time.monotonic()
    code, doc, _ = inv("stop", "--json")
    reported = time.monotonic()
    killed = [p for p in (doc or {}).get("data", {}).get("killed", []) if p["pid"] == holder.pid]
    # The tool must not report the holder gone before its last thread is: check that it is reapable at once.
    try:
        holder.wait(timeout=0.5)
        gone = True
    except subprocess.TimeoutExpired:
        gone = False
        holder.wait(timeout=10)
    record("stop kills a SIGTERM-ignoring CUDA holder", code == 0 and bool(killed) and gone,
           f"pid {holder.pid} needed SIGKILL; stop returned after {reported - t0:.2f}s, process truly gone "
           f"{'by then' if gone else 'only later'}" if killed else f"{doc}")
    try:
        r = gpus.wait_clean(list(range(tp)), 1024, 20)
        record("gate clean again after stop", True, f"{r['waited_s']}s")
    except Exception as e:
        record("gate clean again after stop", False, str(e))


def evidence_summary(doc: dict[str, Any]) -> str:
    rows = doc.get("rows") or []
    by: dict[str, int] = {}
    for r in rows:
        key = f"{r['status']}/{r.get('evidence')}"
        by[key] = by.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(by.items()))


def deploy_checks(tp: int) -> None:
    for mode in ("env", "engine", "scheduler", "plugin", "sitecustomize"):
        code, doc, err = inv("deploy", "--steps", "3", "--patch-mode", mode, "--json")
        ok = code == 0 and bool(doc and doc.get("ok"))
        record(f"deploy --patch-mode {mode}", ok, f"ready in {sum((doc or {}).get('timings', {}).values()):.1f}s"
               if ok else (doc or {}).get("error", {}).get("message", err[-200:]) if doc else err[-200:])
        code, doc, _ = inv("check-env", "--json")
        nccl_rows = [r for r in (doc or {}).get("rows", []) if r.get("evidence") == "nccl_log"]
        # At TP 1 SGLang (and the simulator, since real 0.5.16 showed it) builds no NCCL communicator: no NCCL lines.
        record(f"check-env after {mode}", code == 0 and (bool(nccl_rows) or tp == 1), evidence_summary(doc or {}))
    # A launch path that strips NCCL_* before the workers start: env mode must fail, scheduler mode must pass,
    # and the values NCCL used must be invisible in /proc/PID/environ.
    sim_config(strip_env_prefixes=["NCCL_"])
    code, doc, _ = inv("deploy", "--steps", "3", "--patch-mode", "env", "--json")
    record("stripped env: deploy --patch-mode env fails check", code == 1 and (doc or {}).get("error", {}).get(
        "kind") == "EnvNotProvenError", f"exit {code}")
    code, doc, _ = inv("deploy", "--steps", "3", "--patch-mode", "scheduler", "--json")
    record("stripped env: deploy --patch-mode scheduler", code == 0, f"exit {code}")
    code, doc, _ = inv("check-env", "--json")
    log = WORK / "logs" / "sglang-eagle3-s3-k1-d4.log"
    nccl = [ln for ln in log.read_text(errors="replace").splitlines() if "NCCL INFO" in ln or "[specdeploy]" in ln]
    print("\nreal NCCL lines and patch markers from the server log (last deploy):")
    print("\n".join(nccl[-30:]))
    rows = (doc or {}).get("rows", [])
    blind = [r for r in rows if r.get("status") == "proven" and (r.get("sources") or {}).get("environ") is None]
    in_nccl_not_environ = [r for r in blind if r.get("evidence") == "nccl_log"]
    if tp == 1:
        record("in-process values: proven with /proc/PID/environ blind (TP 1: no NCCL communicator)",
               code == 0 and len(blind) == len(rows) > 0, f"{len(blind)}/{len(rows)} rows proven, environ blind")
    else:
        record("in-process values: seen by NCCL, not by /proc/PID/environ", code == 0 and bool(in_nccl_not_environ),
               f"{len(in_nccl_not_environ)}/{len(rows)} rows proven by NCCL's log with environ blind")
    sim_config(strip_env_prefixes=[])
    code, _, _ = inv("stop")
    code, doc, _ = inv("rollback-patches", "--json")
    record("rollback-patches", code == 0, json.dumps((doc or {}).get("data", {}).get("files", []))[:100])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--version", default="0.5.23")
    args = ap.parse_args()
    import torch

    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC")
    print(f"gpu: {sh(['nvidia-smi', '--query-gpu=index,name,driver_version,memory.total', '--format=csv,noheader'])}")
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
          f", python {sys.version.split()[0]}, tp {args.tp}")
    print(sh(["nvidia-smi", "topo", "-m"]))
    setup(args.tp, args.version)
    gate_checks(args.tp)
    deploy_checks(args.tp)
    print("\n| check | result | detail |\n|---|---|---|")
    for check, res, detail in results:
        print(f"| {check} | {res} | {detail} |")
    failed = [r for r in results if r[1] != "PASS"]
    print(f"\n{len(results) - len(failed)}/{len(results)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
