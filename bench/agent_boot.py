"""What the agent's bootstrap costs per call: checking owners/modes and hashing every agent file before running.

    .venv/bin/python -m bench.agent_boot [--calls 50]

Runs the `records` verb (cheap, no GPUs) through the real command line a deploy uses, on this machine with the
host Python, once through the bootstrap (``python -I -c BOOT run DIR MANIFEST_SHA VERB B64``) and once the way the
agent ran before it (``python -I DIR VERB B64``), and times ``verify_tree`` on its own.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import time

from fabfile.remote.boot import verify_tree
from fabfile.transport.agentclient import AgentClient
from fabfile.transport.base import LocalTransport


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = f"{tmp}/state"
        agent = AgentClient(LocalTransport("local"), args.python, state)
        agent.call("records", {"state_dir": state})  # installs it
        payload = base64.b64encode(json.dumps({"state_dir": state}).encode()).decode()
        boot = ["/bin/sh", "-c", agent._command("records", {"state_dir": state})]
        direct = [args.python, "-I", agent.dir, "records", payload]
        out = {}
        for name, argv in (("bootstrap", boot), ("direct", direct)):
            times = []
            for _ in range(args.calls):
                t0 = time.perf_counter()
                subprocess.run(argv, capture_output=True, check=True)
                times.append(time.perf_counter() - t0)
            out[name] = statistics.median(times) * 1000
        t0 = time.perf_counter()
        for _ in range(args.calls):
            verify_tree(agent.dir, agent.bundle.manifest_sha256)
        verify_ms = (time.perf_counter() - t0) / args.calls * 1000
    print(f"per call, median of {args.calls}: through the bootstrap {out['bootstrap']:.1f} ms, direct "
          f"{out['direct']:.1f} ms (+{out['bootstrap'] - out['direct']:.1f} ms); verify_tree alone {verify_ms:.2f} ms")


if __name__ == "__main__":
    main()
