"""Benchmark (not a test): wall time of a parallel deploy to 1, 4, 8 and 16 simulated hosts, and the ratio to one.

Every host is a real sshd in its own namespaces with the SGLang simulator (load time fixed at --load-seconds); the
deploy is the real one (`inv deploy --strategy parallel`: one thread and one SSH session per host). Each size is
deployed --runs times (each deploy replaces the previous server); the median is reported. Target on a 2-core
machine: 16 hosts within 1.5x the single-host time.

    .venv/bin/python -m bench.fleet_deploy [--sizes 1,4,8,16] [--runs 3] [--tp 2] [--load-seconds 0.3] [--profile]

--profile also prints where the client's time goes (per-step medians across hosts, and the machine's CPU use).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fabfile.commands.rollout import BatchSize, run_rollout
from fabfile.inventory import hosts as inventory
from fabfile.plan.deploy_plan import Options
from fabfile.transport.agentclient import AgentClient
from fabfile.transport.session import HostSession, connector, open_transport
from tests.simhost import fleet as simfleet


def _cpu_s() -> float:
    """CPU seconds used by the whole machine so far (user + system, all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / ticks


def is_server(cmdline: bytes) -> bool:
    """A process of a simulated SGLang server (launcher, schedulers, detokenizer)."""
    return cmdline.startswith(b"sglang::") or b"sglang.launch_server" in cmdline or b"multiprocessing" in cmdline


def host_processes(fl: simfleet.Fleet, names: list[str]) -> Iterator[tuple[bytes, float, float]]:
    """(command line, own CPU s, CPU s of the children it reaped) of every live process inside the hosts (their PID
    namespaces): sshd's reaped sessions and their agents land in its reaped part. Other tenants are not counted."""
    ticks = os.sysconf("SC_CLK_TCK")
    for name in names:
        for pid in fl.host(name).pids():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            yield cmd, (int(st[11]) + int(st[12])) / ticks, (int(st[13]) + int(st[14])) / ticks


def _server_cpu_s(fl: simfleet.Fleet, names: list[str]) -> float:
    """CPU seconds used so far by the SGLang simulator processes of hosts."""
    return sum(own for cmd, own, _ in host_processes(fl, names) if is_server(cmd))


def _hosts_cpu_s(fl: simfleet.Fleet, names: list[str]) -> float:
    """CPU seconds of everything inside the hosts: live processes plus the reaped ones (cutime/cstime of the parents
    that waited for them: init, sshd, the agents)."""
    return sum(own + reaped for _, own, reaped in host_processes(fl, names))


def _client_cpu_s() -> tuple[float, float]:
    """(this process: the tool, its threads; its reaped children: the ProxyCommands that carry each SSH session)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


class AgentCPU:
    """Every session a deploy opens, through the sessions' one seam (``session.connector``): the real transport and
    agent, so the agents' CPU on the hosts (each result reports its own) can be added up after the deploy."""

    def __init__(self) -> None:
        self.sessions: list[HostSession] = []

    def open(self, inv: inventory.Inventory, host: inventory.Host, on_open: Any) -> HostSession:
        transport = open_transport(inv, host, on_open)
        s = HostSession(host=host, transport=transport, agent=AgentClient(transport, host.python, host.state_dir))
        self.sessions.append(s)
        return s

    def take(self) -> float:
        total = sum(s.agent.cpu_s for s in self.sessions)
        self.sessions.clear()
        return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,4,8,16")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--load-seconds", type=float, default=0.3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    directory = Path(tempfile.mkdtemp(prefix="specdeploy-fleetbench-"))
    t_up = time.monotonic()
    fl = simfleet.up(max(sizes), directory, gpus=8, tp=args.tp)
    print(f"{max(sizes)} simulated hosts up in {time.monotonic() - t_up:.1f} s ({fl.mode} mode), "
          f"{os.cpu_count()} CPU core(s), load_seconds {args.load_seconds}", file=sys.stderr)
    try:
        for h in fl.hosts.values():
            h.set_sim_config(load_seconds=args.load_seconds)
        inv = inventory.load(fl.inventory_path)
        hosts = list(inv.hosts.values())
        # One warm-up deploy everywhere: ships the agent and installs the patch once, as on a fleet in use.
        run_rollout(inv, hosts, Options(steps=2), strategy="parallel", batch=BatchSize(percent=100), canary=False,
                    rollback_on_failure=False, quiet=True)
        rows = []
        base = None
        agents = AgentCPU()
        splits: dict[int, list[tuple[float, ...]]] = {}
        for n in sizes:
            walls, cpus, servers, server_cpu, client_cpu, host_cpu = [], [], [], [], [], []
            steps: dict[str, list[float]] = {}
            for i in range(args.runs):
                names = [h.name for h in hosts[:n]]
                # The hosts' CPU first: that walk of the machine's /proc (every pid's namespace, 8 hosts × every
                # tenant's processes) is this benchmark's work, not the tool's, so it stays out of the tool's window.
                h0 = _hosts_cpu_s(fl, names)
                c0, (k0, p0), t0 = _cpu_s(), _client_cpu_s(), time.monotonic()
                with connector(agents.open):
                    res = run_rollout(inv, hosts[:n], Options(steps=2 + i % 2), strategy="parallel",
                                      batch=BatchSize(percent=100), canary=False, rollback_on_failure=False,
                                      quiet=True)
                wall = time.monotonic() - t0
                cpus.append(_cpu_s() - c0)
                k1, p1 = _client_cpu_s()
                client_cpu.append(k1 - k0 + p1 - p0)
                host_cpu.append(_hosts_cpu_s(fl, names) - h0)
                server_cpu.append(_server_cpu_s(fl, names))
                agent_cpu = agents.take()
                splits.setdefault(n, []).append((k1 - k0, p1 - p0, agent_cpu, server_cpu[-1],
                                                 host_cpu[-1] - agent_cpu - server_cpu[-1], cpus[-1]))
                if not res.ok:
                    bad = [h for h in res.hosts if not h.ok]
                    err = bad[0].deploy.error if bad[0].deploy else None
                    print(f"deploy to {n} hosts failed on {bad[0].host.name}: {err and err.describe()}",
                          file=sys.stderr)
                    return 1
                walls.append(wall)
                for h in res.hosts:
                    assert h.deploy is not None
                    servers.append(float(h.deploy.record["ready"]["ready_after_s"]))
                    for k, v in h.deploy.timings.items():
                        steps.setdefault(k, []).append(v)
            med = statistics.median(walls)
            base = base or med
            rows.append((n, med, min(walls), max(walls), med / base, statistics.median(cpus),
                         statistics.median(servers), steps, statistics.median(client_cpu),
                         statistics.median(server_cpu), statistics.median(host_cpu)))
        print(f"\n{'hosts':>5}  {'wall median':>11}  {'min':>6}  {'max':>6}  {'x 1 host':>8}  {'CPU s':>6}  "
              f"{'server start->ready':>19}")
        for n, med, lo, hi, ratio, cpu, server, *_ in rows:
            print(f"{n:>5}  {med:>10.3f}s  {lo:>6.3f}  {hi:>6.3f}  {ratio:>7.2f}x  {cpu:>6.2f}  {server:>18.3f}s")
        print(f"\nCPU seconds per deploy by process kind (median of {args.runs}; {os.cpu_count()} core(s)):")
        kinds = ("the tool", "its ProxyCommands", "its agents", "new servers", "sshd and the rest", "machine")
        print(f"{'hosts':>5}  " + "  ".join(f"{k:>17}" for k in kinds))
        for n, got in splits.items():
            print(f"{n:>5}  " + "  ".join(f"{statistics.median(col):>17.2f}" for col in zip(*got, strict=True)))
        print("the tool: this process (getrusage); its ProxyCommands: its reaped children (ip netns exec, socat); "
              "its agents: what each agent's result reports (os.times, its children included); new servers: the "
              "simulated servers' own; sshd and the rest: the hosts' PID namespaces' processes, reaped ones "
              "included (a replaced server counts only what it used while this deploy ran), less the agents and the "
              "new servers; machine: "
              "/proc/stat, every tenant")
        if args.profile:
            print("\nper-step median (s) across hosts and runs:")
            names = list(rows[0][7])
            print(f"{'hosts':>5}  " + "  ".join(f"{k[:10]:>10}" for k in names))
            for n, *_, steps, _c, _s, _h in rows:
                print(f"{n:>5}  " + "  ".join(f"{statistics.median(steps.get(k, [0])):>10.3f}" for k in names))
            print("\nwhere the CPU goes (median CPU seconds per deploy; the machine has "
                  f"{os.cpu_count()} core(s)):")
            print(f"{'hosts':>5}  {'client':>7}  {'inside the hosts':>16}  {'of which new servers':>20}  "
                  f"{'agents, nvidia-smi, sshd, old servers':>38}  {'machine, all tenants':>20}")
            for n, _m, _lo, _hi, _r, cpu, _sv, _st, ccpu, scpu, hcpu in rows:
                print(f"{n:>5}  {ccpu:>7.2f}  {hcpu:>16.2f}  {scpu:>20.2f}  {hcpu - scpu:>38.2f}  {cpu:>20.2f}")
        return 0
    finally:
        fl.down()


if __name__ == "__main__":
    sys.exit(main())
