"""Benchmark (not a test): how long the agent's readiness probe takes to get its answer, per SGLang version.

On the simulator, which answers the health endpoints with SGLang's own timing (read from the wheels'
``http_server.py``): ``/ready`` (0.5.20+) at once; ``/health`` (0.5.1 ... 0.5.19) and ``/health_generate`` (0.4.x)
after the handler's ``await asyncio.sleep(1)``, so a little over one second; ``/health`` with
``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0`` (0.5.6+) at once. Prints min / median / max of N probes through
``fabfile.remote.serve.health.timed_probe`` with the timeout the agent uses (``probe_timeout_s``).

    .venv/bin/python -m bench.probe_latency [--probes 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from fabfile.remote import versions
from fabfile.remote.serve import health
from tests.support.sim import Sim

CASES = [
    ("0.4.9", None, {}),
    ("0.5.16", None, {}),
    ("0.5.16", None, {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0"}),
    ("0.5.20", None, {}),
    ("0.5.20", "/health", {}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probes", type=int, default=5)
    args = ap.parse_args()
    print(f"{'version':<8} {'endpoint':<17} {'env':<45} {'timeout':>7} {'min':>6} {'median':>7} {'max':>6}  codes")
    for version, path, env in CASES:
        with tempfile.TemporaryDirectory(prefix="probe-latency-") as d:
            sim = Sim(Path(d))
            try:
                sim.install(version)
                launcher = sim.launch(tp=1, extra_env=env)
                sim.wait_log("fired up", timeout=60, proc=launcher)
                ep = path or versions.readiness_path(version)
                timeout = health.probe_timeout_s(ep, env)
                got = [health.timed_probe("127.0.0.1", sim.port, ep, timeout) for _ in range(args.probes)]
            finally:
                sim.kill_all()
        took = [t for _, t in got]
        codes = sorted({c for c, _ in got}, key=str)
        shown = ",".join(f"{k}={v}" for k, v in env.items()) or "-"
        print(f"{version:<8} {ep:<17} {shown:<45} {timeout:>6.0f}s {min(took):>5.3f}s {statistics.median(took):>6.3f}s "
              f"{max(took):>5.3f}s  {codes}")


if __name__ == "__main__":
    main()
