"""Benchmark (not a test): what `inv profile` costs beside the bench's own time, on the simulated fleet.

Prints, on one simulated host (TP 2, EAGLE-3 steps 3, the device timer on):
  * timer path: `inv profile LOAD` wall time minus `inv bench --client builtin LOAD` wall time, pair by pair
    (target: median ≤ +1 s)
  * trace path: (`inv profile --trace --trace-steps S2` − `--trace-steps S1`) / (S2 − S1): wall seconds per profiled
    step, and the traces' bytes per step (all ranks), from the answers' own sizes

    .venv/bin/python -m bench.profile_cost [--pairs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from tests.simhost import fleet as simfleet
from tests.support.invoke_cli import INV, ROOT

LOAD = ["--num-prompts", "8", "--output-len", "64", "--input-len", "64"]


def _inv(*args: str, inventory: Path) -> tuple[float, dict[str, Any]]:
    t0 = time.monotonic()
    r = subprocess.run([*INV, *args, "--json", "--inventory", str(inventory)], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"inv {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}")
    return wall, json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", default="8,40", help="two --trace-steps values")
    args = ap.parse_args()
    s1, s2 = (int(x) for x in args.steps.split(","))
    with tempfile.TemporaryDirectory(prefix="profile-cost-") as d:
        directory = Path(d)
        fl = simfleet.up(1, directory, gpus=8, tp=2)
        try:
            data = yaml.safe_load(fl.inventory_path.read_text())
            data["defaults"]["sglang_args"] = ["--enable-metrics"]
            data["defaults"]["env"] = {"SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}
            inventory = directory / "inventory.yaml"
            inventory.write_text(yaml.safe_dump(data, sort_keys=False))
            _inv("deploy", "--steps", "3", inventory=inventory)
            diffs, bench_walls, prof_walls = [], [], []
            for _ in range(args.pairs):
                wb, _b = _inv("bench", "--client", "builtin", *LOAD, "--out", str(directory / "runs"),
                              inventory=inventory)
                wp, _p = _inv("profile", *LOAD, inventory=inventory)
                bench_walls.append(wb)
                prof_walls.append(wp)
                diffs.append(wp - wb)
            print(f"timer path: inv profile {statistics.median(prof_walls):.2f} s, inv bench "
                  f"{statistics.median(bench_walls):.2f} s; profile − bench per pair: median "
                  f"{statistics.median(diffs):+.2f} s (min {min(diffs):+.2f}, max {max(diffs):+.2f}; target ≤ +1 s)")
            per_step, per_step_bytes, fixed = [], [], []
            for _ in range(max(1, args.pairs // 2)):
                w0, _p0 = _inv("profile", *LOAD, inventory=inventory)
                w1, p1 = _inv("profile", *LOAD, "--trace", "--trace-steps", str(s1), inventory=inventory)
                fixed.append(w1 - w0)
                w2, p2 = _inv("profile", *LOAD, "--trace", "--trace-steps", str(s2), inventory=inventory)
                per_step.append((w2 - w1) / (s2 - s1))
                b1 = sum(r.get("trace_bytes") or 0 for r in p1["hosts"][0]["data"]["ranks"])
                b2 = sum(r.get("trace_bytes") or 0 for r in p2["hosts"][0]["data"]["ranks"])
                per_step_bytes.append((b2 - b1) / (s2 - s1))
            print(f"trace path: {statistics.median(per_step) * 1000:.1f} ms per profiled step (wall, "
                  f"--trace-steps {s1} vs {s2}), {statistics.median(per_step_bytes) / 1024:.1f} KiB of trace per step "
                  f"(2 ranks, gzip'd); --trace --trace-steps {s1} − timer path: median "
                  f"{statistics.median(fixed):+.2f} s")
        finally:
            fl.down()


if __name__ == "__main__":
    main()
