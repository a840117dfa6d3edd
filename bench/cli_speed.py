"""Benchmark (not a test): each read-only command as a ratio to ``ssh host true`` on the same host (issue 42).

One simulated seed host (a real sshd in its namespaces, 8 GPUs, TP 8) with a server deployed on it. Each command
runs as a whole process (``inv CMD --inventory FLEET``), paired with ``ssh -F FLEET/ssh_config sim1 true``: the two
alternate in one loop (A B, then B A, ...) so the pair sees the same load, and the ratio is taken pair by pair; the
median of those ratios is the figure to quote (absolute times do not carry between machines, ratios do). Every
process's CPU (user + system, its reaped children included) comes from ``wait4``, and the host's CPU outside the
server (sshd, the shell, the agent) from ``/proc`` of its PID namespace: figures that the machine's load moves less
than wall time. The tool's modules are byte-compiled first, as ``pip install`` does: with PYTHONDONTWRITEBYTECODE
set every start compiles them again (``--no-bytecode`` times that).

Then where the tool's time goes, for ``inv status`` (medians of --runs, each named by how it was measured):
interpreter start (``python -c pass``), imports (``python -X importtime``: the sum of the top-level imports, the
top ten, each the least of the runs), connection set-up (Paramiko's handshake in this process against OpenSSH's
``ssh true``, a ``ssh true`` through an already-open ControlMaster connection, and the carrier the read-only commands
use, ``transport/openssh.py``: its set-up and one ``true`` through it), the agent's start on the host (the host's
``python -I -c pass``; the status and check-env verbs' whole calls and the agent's own imports for each, under
``-X importtime``), the round trips (counted per command in this process through the real session) and the
printing; and one ``inv status`` process's order: when its host command went, when the printing's imports (run
while the host answers) were done, when the answer came and the table was printed.

    .venv/bin/python -m bench.cli_speed [--runs 10] [--commands status,check-env] [--baseline DIR] [--no-bytecode]

``--baseline DIR`` runs an older checkout's ``inv`` in the same loop (A, A(baseline), B): a before/after under the
same load, against the same ``ssh true``. Invoke puts the tasks folder first on sys.path, so ``inv`` run in DIR
imports DIR's tasks.py and fabfile/.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
INV = str(ROOT / ".venv" / "bin" / "inv")
COMMANDS = {"status": ["status"], "check-env": ["check-env"], "gpus": ["gpus"], "logs": ["logs", "--lines", "20"],
            "render": ["render"]}
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_once(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(wall s, CPU s of the process and the children it reaped, exit code) of one whole process, output dropped."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=None if env is None else {**os.environ, **env})
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_utime + ru.ru_stime, proc.returncode


Variant = tuple[str, list[str], Path, "dict[str, str] | None"]  # label, argv, working directory, extra environment


def paired(variants: list[Variant], runs: int,
           host_cpu: Callable[[], float]) -> dict[str, list[tuple[float, float, float]]]:
    """Each variant once per round, the order reversed every other round; one warm-up round first. Each run's
    (wall, the process's CPU, the host's CPU outside the server: sshd, the shell, the agent)."""
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _, _, _ in variants}
    for i in range(runs + 1):
        order = variants if i % 2 else list(reversed(variants))
        for name, argv, cwd, env in order:
            before = host_cpu()
            wall, cpu, code = run_once(argv, cwd, env)
            time.sleep(0.05)  # sshd reaps the session (and with it the agent's CPU) a moment after the client ends
            on_host = host_cpu() - before
            if code != 0:
                raise SystemExit(f"{name}: `{shlex.join(argv)}` exited {code}")
            if i:
                got[name].append((wall, cpu, on_host))
    return got


def med(xs: list[float]) -> float:
    return statistics.median(xs)


Row = tuple[str, float, float, float, float, float, float, str]


def ratio_rows(commands: list[str], trees: list[tuple[str, Path]], inventory: str, ssh_true: list[str],
               runs: int, uncompiled: Path | None, host_cpu: Callable[[], float]) -> list[Row]:
    rows = []
    for name in commands:
        variants: list[Variant] = [(f"inv {name}{tag}", [INV, *COMMANDS[name], "--inventory", inventory], tree, None)
                                   for tag, tree in trees]
        if uncompiled is not None and name == "status":
            # A checkout without bytecode and PYTHONDONTWRITEBYTECODE set: every start compiles the tool again
            # (the installed libraries keep theirs, compiled by pip).
            variants.append(("inv status (no bytecode)", [INV, "status", "--inventory", inventory], uncompiled,
                             {"PYTHONDONTWRITEBYTECODE": "1"}))
        variants.append(("ssh true", ssh_true, ROOT, None))
        got = paired(variants, runs, host_cpu)
        base = got["ssh true"]
        for label, *_ in [*variants[:-1], variants[-1]]:
            xs = got[label]
            ratios = [a[0] / b[0] for a, b in zip(xs, base, strict=True)]
            shown = label if label != "ssh true" else f"  (ssh true, beside {name})"
            rows.append((shown, med(ratios), min(ratios), med([x[0] for x in xs]), med([b[0] for b in base]),
                         med([x[1] for x in xs]), statistics.mean([x[2] for x in xs]), load()))
    return rows


# -- where the time goes ----------------------------------------------------------------------------------------
def import_times(stderr_texts: list[str]) -> tuple[float, list[tuple[str, float]]]:
    """(the sum of the top-level imports, the ten heaviest top-level imports), each module's least over the runs."""
    best: dict[str, int] = {}
    for text in stderr_texts:
        for line in text.splitlines():
            m = IMPORT_LINE.match(line)
            if m and len(m[3]) == 1:  # one space: imported by the program itself, not by another module
                best[m[4]] = min(best.get(m[4], 1 << 62), int(m[2]))
    top = sorted(best.items(), key=lambda kv: -kv[1])[:10]
    return sum(best.values()) / 1e6, [(n, us / 1e6) for n, us in top]


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    walls, last = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        last = fn()
        walls.append(time.perf_counter() - t0)
    return med(walls), last


# One `inv status` in a fresh process, as `inv` runs it, with the moments that order its work marked: the host's
# command sent (the transports' one counter), the printing's imports done (``operations.printing_modules``, the
# fan-out's ``meanwhile``), the answer in, the table printed.
_TIMELINE = """
import json, sys, time
t0 = time.perf_counter()
from invoke.main import program
from fabfile.commands import operations
from fabfile.transport import base, session
marks = {}
def mark(k):
    marks.setdefault(k, time.perf_counter() - t0)
count, imports, status = base.Transport.count_command, operations.printing_modules, session.HostSession.status
base.Transport.count_command = lambda self, c: (mark("sent"), count(self, c))[1]
operations.printing_modules = lambda: (imports(), mark("printing_imported"))[0]
session.HostSession.status = lambda self, *a, **k: (status(self, *a, **k), mark("answered"))[0]
sys.argv = ["inv", "status", "--inventory", sys.argv[1]]
try:
    program.run()
except SystemExit:
    pass
mark("printed")
print(json.dumps(marks), file=sys.__stdout__)
"""


def anatomy(inventory_path: Path, ssh_config: Path, work: Path, runs: int) -> list[tuple[str, str, str]]:
    """Rows (what, figure, how it was measured) for ``inv status``, with the host's part of ``inv check-env``."""
    from fabfile.commands import operations
    from fabfile.commands.render_plan import render_hosts
    from fabfile.inventory import hosts as inventory
    from fabfile.plan.deploy_plan import Options
    from fabfile.present.output import show
    from fabfile.remote import verbs
    from fabfile.transport import session
    from fabfile.transport.agentclient import BOOT_SOURCE, AgentClient
    from fabfile.transport.base import Transport

    inv = inventory.load(inventory_path)
    host = next(iter(inv.hosts.values()))
    rows: list[tuple[str, str, str]] = []

    start, _ = timed(lambda: run_once([PYTHON, "-c", "pass"], ROOT), runs)
    rows.append(("interpreter start", f"{start * 1e3:.0f} ms", "`.venv/bin/python -c pass`, whole process"))
    texts = []
    for _ in range(runs):
        r = subprocess.run([PYTHON, "-X", "importtime", INV, "status", "--inventory", str(inventory_path)],
                           capture_output=True, text=True, cwd=ROOT)
        texts.append(r.stderr)
    total, top = import_times(texts)
    rows.append(("imports, all", f"{total * 1e3:.0f} ms", "`python -X importtime inv status`: sum of the top-level "
                 "imports, each module's least over the runs"))
    for name, s in top:
        rows.append((f"  {name}", f"{s * 1e3:.1f} ms", "its cumulative import time (least over the runs)"))

    timeline = [json.loads(subprocess.run([PYTHON, "-c", _TIMELINE, str(inventory_path)], capture_output=True,
                                          text=True, cwd=ROOT, check=True).stdout.splitlines()[-1])
                for _ in range(runs)]
    at = {k: med([t[k] for t in timeline]) for k in timeline[0]}
    rows.append(("inv status, one process's order", f"{at['sent'] * 1e3:.0f} ms",
                 f"the host's command sent, after Invoke, the tool's modules and the session's set-up; the printing's "
                 f"imports then ran beside it, done at {at['printing_imported'] * 1e3:.0f} ms, the answer at "
                 f"{at['answered'] * 1e3:.0f} ms, printed at {at['printed'] * 1e3:.0f} ms (from this process's "
                 "first line of Python, medians)"))

    def handshake() -> None:
        session.open_transport(inv, host).close()

    hs, _ = timed(handshake, runs)
    rows.append(("connection: Paramiko handshake", f"{hs * 1e3:.0f} ms", "open + close of the tool's SSH transport "
                 "in this process (ProxyCommand, key exchange, host key checked, public-key auth)"))
    ssh = ["ssh", "-F", str(ssh_config)]
    ossh, _ = timed(lambda: run_once([*ssh, "sim1", "true"], ROOT), runs)
    rows.append(("connection: OpenSSH `ssh true`", f"{ossh * 1e3:.0f} ms", "whole process: process start, the "
                 "same handshake, one channel running `true`"))
    mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={work}/cm-%C", "-o", "ControlPersist=60"]
    run_once([*ssh, *mux, "sim1", "true"], ROOT)  # opens the master
    reused, _ = timed(lambda: run_once([*ssh, *mux, "sim1", "true"], ROOT), runs)
    subprocess.run([*ssh, *mux, "-O", "exit", "sim1"], capture_output=True)
    rows.append(("connection: OpenSSH reused", f"{reused * 1e3:.0f} ms", "`ssh true` through an open ControlMaster "
                 "(ControlPersist): no handshake"))

    resolving, carried = timed(lambda: session.open_transport(inv, host, read_only=True), runs)
    rows.append(("connection: the read-only carrier's set-up", f"{resolving * 1e3:.0f} ms", f"opening "
                 f"{type(carried).__name__} in this process (for OpenSSH: `ssh -G` resolving the alias, the "
                 "private socket directory checked)"))
    carried.run("true", 30)  # the master, if none is open yet
    through, _ = timed(lambda: carried.run("true", 30), runs)
    rows.append(("connection: the read-only carrier's `true`", f"{through * 1e3:.0f} ms", "one `true` through it "
                 "(for OpenSSH: one `ssh` process through the open master)"))
    t: Transport = session.open_transport(inv, host)
    try:
        rt, _ = timed(lambda: t.run("true", 30), runs)
        rows.append(("one round trip", f"{rt * 1e3:.0f} ms", "`true` on the open session (one channel)"))
        py, _ = timed(lambda: t.run(f"{shlex.quote(host.python)} -I -c pass", 30), runs)
        rows.append(("host: Python start", f"{(py - rt) * 1e3:.0f} ms", "`python -I -c pass` on the host, less the "
                     "round trip"))
        agent = AgentClient(t, host.python, host.state_dir)
        s = session.HostSession(host=host, transport=t, agent=agent)
        expected = operations.expected_env(host)
        # The verbs by the function they run (their wire names are the protocol's, not this benchmark's).
        for what, where, call_it, extra in (
                ("status", "serve.hoststatus:status", s.status, {}),
                ("check-env", "evidence.checkenv:check_env", lambda: s.check_env(expected), {"expected": expected})):
            call, _ = timed(call_it, runs)
            rows.append((f"host: the {what} verb, whole call", f"{(call - rt) * 1e3:.0f} ms", "on the open session, "
                         "less the round trip: Python, bootstrap checks, agent imports, the verb's work"))
            verb = next(v.name for v in verbs.TABLE.values() if v.where == where)
            payload = base64.b64encode(json.dumps({"deadline_s": 30, "state_dir": host.state_dir, **extra})
                                       .encode()).decode()
            cmd = (f"{shlex.quote(host.python)} -I -X importtime -c {shlex.quote(BOOT_SOURCE)} run "
                   f"{t.shell_path(agent.dir)} {agent.bundle.manifest_sha256} {verb} {payload}")
            total, top = import_times([t.run(cmd, 30).stderr for _ in range(runs)])
            rows.append((f"host: the {what} verb's imports", f"{total * 1e3:.0f} ms", "`-X importtime` of the call on "
                         "the host: the top-level imports, each module's least over the runs"))
            for name, sec in top[:5]:
                rows.append((f"  {name}", f"{sec * 1e3:.1f} ms", "on the host, cumulative"))
    finally:
        t.close()

    opened: list[session.HostSession] = []

    def counting(inv: inventory.Inventory, h: inventory.Host, on_open: Any) -> session.HostSession:
        tr = session.open_transport(inv, h, on_open, read_only=True)  # every command below only reads
        hs_ = session.HostSession(host=h, transport=tr, agent=AgentClient(tr, h.python, h.state_dir))
        opened.append(hs_)
        return hs_

    commands: dict[str, Callable[[], Any]] = {
        "status": lambda: operations.status_hosts(inv, [host]),
        "check-env": lambda: operations.check_env_hosts(inv, [host]),
        "gpus": lambda: operations.gpus_hosts(inv, [host]),
        "logs --lines 20": lambda: operations.show_logs(inv, [host], lines=20, follow=False, follow_s=3600.0),
        "render": lambda: render_hosts([host], Options()),
    }
    for name, fn in commands.items():
        opened.clear()
        with session.connector(counting), contextlib.redirect_stdout(io.StringIO()):
            t0 = time.perf_counter()
            result = fn()
            took = time.perf_counter() - t0
            t1 = time.perf_counter()
            if not isinstance(result, int):
                show(result.document, result.for_people, as_json=False)
            printing = time.perf_counter() - t1
        trips = sum(o.transport.stats.commands for o in opened)
        carriers = ", ".join(sorted({type(o.transport).__name__ for o in opened})) or "none"
        rows.append((f"inv {name}: round trips", str(trips), f"SSH commands run over {carriers} ({len(opened)} "
                     "session(s)); the "
                     f"command's work {took * 1e3:.0f} ms, printing {printing * 1e3:.0f} ms (one run, in this "
                     "process)"))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--commands", default=",".join(COMMANDS), help=f"a comma list of {', '.join(COMMANDS)}")
    ap.add_argument("--baseline", type=Path, help="a checkout of an older commit (`git worktree add DIR COMMIT`): "
                    "its inv runs in the same loop, against the same ssh true")
    ap.add_argument("--no-anatomy", action="store_true", help="only the ratios")
    ap.add_argument("--no-bytecode", action="store_true", help="also time `inv status` from a copy of the tree "
                    "without bytecode, PYTHONDONTWRITEBYTECODE set (what the README says it costs)")
    args = ap.parse_args()
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    if unknown := [c for c in commands if c not in COMMANDS]:
        print(f"--commands: unknown {', '.join(unknown)}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    from tests.simhost import fleet as simfleet

    trees = [("", ROOT)] if args.baseline is None else [("", ROOT), (" (baseline)", args.baseline.resolve())]
    for _, tree in trees:
        subprocess.run([PYTHON, "-m", "compileall", "-q", "fabfile", "tasks.py"], check=True, cwd=tree)
    work = Path(tempfile.mkdtemp(prefix="specdeploy-cli-speed-"))
    uncompiled = None
    if args.no_bytecode:
        uncompiled = work / "uncompiled"
        for part in ("fabfile", "templates"):
            shutil.copytree(ROOT / part, uncompiled / part, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(ROOT / "tasks.py", uncompiled / "tasks.py")
    fleet = simfleet.up(1, work / "fleet", gpus=8, tp=8)
    inventory = str(fleet.inventory_path)
    ssh_true = ["ssh", "-F", str(fleet.ssh_config_path), "sim1", "true"]
    try:
        for h in fleet.hosts.values():
            h.set_sim_config(**simfleet.SEED_MACHINE)
        for _, tree in trees:  # a server to look at; each tree's agent installed on the host
            r = subprocess.run([INV, "deploy", "--steps", "3", "--inventory", inventory], capture_output=True,
                               text=True, cwd=tree)
            if r.returncode != 0:
                raise SystemExit(f"the deploy failed ({r.returncode}):\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
        loads = [load()]
        from bench.fleet_deploy import host_processes, is_server

        def host_cpu() -> float:
            return sum(own + reaped for cmd, own, reaped in host_processes(fleet, ["sim1"]) if not is_server(cmd))

        rows = ratio_rows(commands, trees, inventory, ssh_true, args.runs, uncompiled, host_cpu)
        loads.append(load())
        parts = [] if args.no_anatomy else anatomy(fleet.inventory_path, fleet.ssh_config_path, work, args.runs)
        loads.append(load())
    finally:
        fleet.down()
        shutil.rmtree(work, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"{'command':<{width}}  {'x ssh true':>10}  {'min x':>6}  {'wall s':>7}  {'ssh s':>6}  {'cpu s':>6}  "
          f"{'host cpu s':>10}  load average (1/5/15 min)")
    for label, ratio, least, wall, ssh_wall, cpu, on_host, ld in rows:
        print(f"{label:<{width}}  {ratio:>9.2f}x  {least:>5.2f}x  {wall:>7.3f}  {ssh_wall:>6.3f}  {cpu:>6.3f}  "
              f"{on_host:>10.3f}  {ld}")
    print(f"x ssh true: the median (and least) of the pair-by-pair ratios of {args.runs} alternated runs (one "
          "warm-up round first); wall s, ssh s: the medians of each; cpu s: user + system of the whole process and "
          "its children (wait4), median; host cpu s: the host's CPU outside the server (sshd, the shell, the agent: "
          "/proc of its PID namespace, reaped children included, 10 ms ticks), mean; "
          f"{os.cpu_count()} core(s); load average before, after the ratios, after "
          f"the anatomy: {' | '.join(loads)}")
    if parts:
        print("\nwhere the time of `inv status` (and the host's part of `inv check-env`) goes (medians of "
              f"{args.runs} runs unless said; one simulated host):")
        w = max(len(p[0]) for p in parts)
        for what, figure, how in parts:
            print(f"{what:<{w}}  {figure:>9}  {how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
