"""Benchmark (not a test): how quick the CLI is, whole-process, on one simulated host (issue 17, point 5).

Measured with public tools, as a user would time it: ``hyperfine`` (``apt-get install hyperfine``) for the
read-only commands, ``/usr/bin/time`` around each deploy. Targets:
  * read-only commands (status, check-env, gpus, render): mean wall ≤ 0.35 s
  * deploy overhead: whole-process wall minus the server's own start→ready (the deploy's start + wait_ready steps,
    from its --json timings) ≤ 0.6 s
  * ``inv --help deploy``: ≤ 0.2 s
Wall time on a shared machine depends on its load, so the load average is printed next to every figure, and the
CPU time (user + system) with it: the part the tool itself decides. The deploy overhead is split in two rows: the
time the server spends answering the deploy's own ready gates (generation on the server, like start→ready: the
first real request and, beside it, the accept-length burst of 4 requests of 32 tokens; on the seed machine's
simulated costs ~0.4 s, the burst's 8 verify passes at batch 4-5), and the rest, what the tool itself costs.
The tool's modules are byte-compiled first, as ``pip install`` does (``compileall``): a run with
PYTHONDONTWRITEBYTECODE set would otherwise compile them again on every start.

    .venv/bin/python -m bench.cli_speed [--runs 10] [--deploys 5] [--baseline DIR]

``--baseline DIR`` times an older checkout beside this one (same venv, same simulated host, each command right
before this tree's run of it): a before/after under the same load. Invoke puts the tasks folder first on sys.path,
so ``inv`` run in DIR imports DIR's tasks.py and fabfile/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INV = str(ROOT / ".venv" / "bin" / "inv")
TARGETS = {"help": 0.2, "read": 0.35, "deploy_overhead": 0.6}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def hyperfine(name: str, cmd: str, runs: int, out_dir: Path, cwd: Path = ROOT) -> dict[str, float]:
    out = out_dir / f"{name}.json"
    subprocess.run(["hyperfine", "--runs", str(runs), "--warmup", "1", "--style", "none", "-N" if " " not in cmd
                    else "--shell=sh", "--export-json", str(out), cmd], check=True, capture_output=True, cwd=cwd)
    r = json.loads(out.read_text())["results"][0]
    return {"wall": r["mean"], "median": r["median"], "min": r["min"], "cpu": r["user"] + r["system"]}


def timed(cmd: list[str], out_dir: Path, cwd: Path = ROOT) -> tuple[float, float, str]:
    """(/usr/bin/time's wall, its user+sys, stdout) of one whole process."""
    tf = out_dir / "time.txt"
    r = subprocess.run(["/usr/bin/time", "-o", str(tf), "-f", "%e %U %S", *cmd], capture_output=True, text=True,
                       cwd=cwd)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    e, u, s = (float(x) for x in tf.read_text().split()[-3:])
    return e, u + s, r.stdout


Row = tuple[str, float, float, float, float, str, "float | None"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--deploys", type=int, default=5)
    ap.add_argument("--baseline", type=Path, help="a checkout of an older commit (`git worktree add DIR COMMIT`): "
                    "timed with this venv on the same host, each command right before this tree's, so both see "
                    "the same load")
    args = ap.parse_args()
    if shutil.which("hyperfine") is None:
        print("hyperfine is not installed: apt-get install -y hyperfine", file=sys.stderr)
        return 2
    from tests.simhost import fleet as simfleet

    trees = [("", ROOT)] if args.baseline is None else [(" (baseline)", args.baseline.resolve()), ("", ROOT)]
    for _, tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", "fabfile", "tasks.py"], check=True, cwd=tree)
    work = Path(tempfile.mkdtemp(prefix="specdeploy-cli-speed-"))
    fleet = simfleet.up(1, work / "fleet", gpus=8, tp=8)
    inv = str(fleet.inventory_path)
    rows: list[Row] = []
    try:
        for h in fleet.hosts.values():
            h.set_sim_config(**simfleet.SEED_MACHINE)
        for _, tree in trees:  # a server to look at; the agent of each tree installed
            timed([INV, "deploy", "--steps", "3", "--json", "--inventory", inv], work, tree)
        for tag, tree in trees:
            rows.append((f"inv --help deploy{tag}", *_hf("help", f"{INV} --help deploy", args.runs, work, tree),
                         TARGETS["help"]))
        for name in ("status", "check-env", "gpus", "render"):
            for tag, tree in trees:
                cmd = f"{INV} {name} --inventory {inv}"
                rows.append((f"inv {name}{tag}", *_hf(name, cmd, args.runs, work, tree), TARGETS["read"]))
        per_tree: dict[str, tuple[list[float], list[float], list[float], list[float], list[str]]] = {
            tag: ([], [], [], [], []) for tag, _ in trees}
        for _ in range(args.deploys):
            for tag, tree in trees:
                overheads, gates, tool, cpus, loads = per_tree[tag]
                wall, cpu, stdout = timed([INV, "deploy", "--steps", "3", "--json", "--inventory", inv], work, tree)
                doc = json.loads(stdout)
                # {"ok", "hosts": [...]}; a baseline tree from before that shape printed one host's document bare
                t = (doc["hosts"][0] if "hosts" in doc else doc)["timings"]
                overheads.append(wall - t.get("start", 0.0) - t["wait_ready"])
                gates.append(t.get("first_request", 0.0) + t.get("accept_gate", 0.0))
                tool.append(overheads[-1] - gates[-1])
                cpus.append(cpu)
                loads.append(load())
        for tag, _ in trees:
            overheads, gates, tool, cpus, loads = per_tree[tag]
            for name, xs, target in ((f"deploy overhead (wall - start→ready){tag}", overheads,
                                      TARGETS["deploy_overhead"]),
                                     (f"  of it, the ready gates' generation on the server{tag}", gates, None),
                                     (f"  of it, the tool's own{tag}", tool, TARGETS["deploy_overhead"])):
                rows.append((name, statistics.mean(xs), statistics.median(cpus), statistics.median(xs), min(xs),
                             loads[-1], target))
        timed([INV, "stop", "--inventory", inv], work)
    finally:
        fleet.down()
        shutil.rmtree(work, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"{'command':<{width}} {'wall s':>7} {'median':>7} {'min':>7} {'cpu s':>6} {'target':>7}  "
          "load average (1/5/15 min)")
    for name, wall, cpu, median, least, ld, target in rows:
        mark = "" if target is None else "ok" if wall <= target else "OVER"
        goal = "" if target is None else f"{target:.2f}"
        print(f"{name:<{width}} {wall:>7.3f} {median:>7.3f} {least:>7.3f} {cpu:>6.3f} {goal:>7}  {ld}  {mark}")
    print(f"cores: {os.cpu_count()}; wall = hyperfine mean ({args.runs} runs) or the mean of {args.deploys} deploys "
          "timed by /usr/bin/time (median, min beside it); cpu = user + system of the whole process (median for "
          "deploys); the mark compares the mean with the target")
    return 0


def _hf(name: str, cmd: str, runs: int, work: Path, cwd: Path) -> tuple[float, float, float, float, str]:
    r = hyperfine(name, cmd, runs, work, cwd)
    return r["wall"], r["cpu"], r["median"], r["min"], load()


if __name__ == "__main__":
    sys.exit(main())
