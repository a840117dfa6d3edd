"""Benchmark (not a test): what the tool itself costs around a deploy, on the simulated fleet.

Prints, over N deploys to one simulated host (each deploy replaces the previous server):
  * overhead: deploy wall time minus the server's own start→ready time, split into the ready gates' generation on
    the server (the first real request and the accept-length burst beside it) and the tool's own part (target:
    median ≤ 0.5 s)
  * SSH connections and remote commands per deploy (target: one connection)
  * fatal log line → deploy returned (target ≤ 1 s), from a watcher that sees the line land in the log file
  * ready → reported (target ≤ 0.3 s): the simulator logs "fired up" when it turns ready; the client's wait step
    ends when the agent's probe sees it

    .venv/bin/python -m bench.deploy_overhead [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fabfile.commands.deploy import deploy_host
from fabfile.inventory import hosts as inventory
from fabfile.plan.deploy_plan import Options
from fabfile.present.progress import Reporter
from tests.simhost import fleet as simfleet


class TimedReporter(Reporter):
    """Quiet reporter that notes when each step ended (monotonic clock, same process as the log watcher)."""

    def __init__(self, host: str) -> None:
        super().__init__(host, enabled=False)
        self.ended_at: dict[str, float] = {}

    def step_end(self, name: str, ok: bool, elapsed: float | None = None, detail: Any = None,
                 message: str | None = None) -> None:
        self.ended_at[name] = time.monotonic()
        super().step_end(name, ok, elapsed, detail, message)


class LogWatcher(threading.Thread):
    """Polls a log file on the host's real filesystem path and notes when a line containing ``needle`` lands."""

    def __init__(self, path: Path, needle: str) -> None:
        super().__init__(daemon=True)
        self.path, self.needle = path, needle
        self.seen_at: float | None = None
        self.stop_flag = False
        self.start_size = path.stat().st_size if path.exists() else 0

    def run(self) -> None:
        while not self.stop_flag and self.seen_at is None:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.start_size)
                    if self.needle.encode() in f.read():
                        self.seen_at = time.monotonic()
            except OSError:
                pass
            time.sleep(0.002)


def fmt(xs: list[float], unit: str = "s") -> str:
    if not xs:
        return "n/a"
    return f"median {statistics.median(xs):.3f} {unit}  (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--tp", type=int, default=2)
    args = ap.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="specdeploy-bench-"))
    fl = simfleet.up(1, directory, gpus=8, tp=args.tp)
    try:
        host_dir = fl.host("sim1")
        inv = inventory.load(fl.inventory_path)
        h = inv.hosts["sim1"]
        overheads, totals, server_times, conns, cmds, ready_lag = [], [], [], [], [], []
        gate_times: list[float] = []
        per_step: dict[str, list[float]] = {}
        for i in range(args.runs):
            steps = 2 + i % 2
            opts = Options(steps=steps)
            log = host_dir.home / "sglang-logs" / f"sglang-eagle3-s{steps}-k1-d{steps + 1}.log"
            watcher = LogWatcher(log, "The server is fired up and ready to roll!")
            watcher.start()
            rep = TimedReporter("sim1")
            t0 = time.monotonic()
            r = deploy_host(inv, h, opts, rep)
            total = time.monotonic() - t0
            watcher.stop_flag = True
            if not r.ok:
                print(f"deploy {i} failed: {r.error and r.error.describe()}", file=sys.stderr)
                return 1
            server = float(r.record["ready"]["ready_after_s"])
            totals.append(total)
            server_times.append(server)
            gates = float(r.timings.get("first_request", 0.0)) + float(r.timings.get("accept_gate", 0.0))
            gate_times.append(gates)
            overheads.append(total - server - gates)
            for k, v in r.timings.items():
                per_step.setdefault(k, []).append(v)
            conns.append(r.stats["connections"])
            cmds.append(r.stats["commands"])
            if watcher.seen_at is not None and "wait_ready" in rep.ended_at:
                ready_lag.append(rep.ended_at["wait_ready"] - watcher.seen_at)
        # Failure detection: a crash during weight load.
        fail_lat = []
        for _ in range(max(3, args.runs // 3)):
            host_dir.set_sim_config(fail="load_traceback")
            log = host_dir.home / "sglang-logs" / "sglang-eagle3-s3-k1-d4.log"
            watcher = LogWatcher(log, "Traceback (most recent call last)")
            watcher.start()
            r = deploy_host(inv, h, Options(steps=3), TimedReporter("sim1"))
            returned = time.monotonic()
            watcher.stop_flag = True
            assert not r.ok
            if watcher.seen_at is not None:
                fail_lat.append(returned - watcher.seen_at)
        host_dir.set_sim_config(fail=None)

        print(f"simulated host: 1 ({fl.mode} mode), TP {args.tp}, {args.runs} deploys")
        print(f"deploy wall time           {fmt(totals)}")
        print(f"server start→ready         {fmt(server_times)}")
        print(f"ready gates (server time)  {fmt(gate_times)}")
        print(f"tool overhead              {fmt(overheads)}   target ≤ 0.5 s (wall − start→ready − gates)")
        print(f"SSH connections / deploy   {fmt([float(c) for c in conns], '')}   target 1")
        print(f"remote commands / deploy   {fmt([float(c) for c in cmds], '')}")
        print("per step (median s)        " + "  ".join(f"{k} {statistics.median(v):.3f}"
                                                     for k, v in per_step.items()))
        print(f"fatal line → returned      {fmt(fail_lat)}   target ≤ 1 s")
        print(f"ready → reported           {fmt(ready_lag)}   target ≤ 0.3 s")
    finally:
        fl.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
