"""`./dev demo`: the main job end to end. Deploys EAGLE-3 with the PCIe NCCL preset, proves the settings reached
every scheduler (check-env), shows status, benchmarks it, stops it and rolls the patches back, exactly as a user
types the commands.

Without a configured GPU host (no --inventory and no $SPECDEPLOY_INVENTORY) it runs against one simulated GPU host
(tests/simhost: a real sshd in its own namespaces with the SGLang-shaped simulator), brought up and torn down here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def inv(*args: str, inventory: Path) -> int:
    cmd = [str(ROOT / ".venv" / "bin" / "inv"), *args, "--inventory", str(inventory)]
    print(f"\n$ inv {' '.join(args)}", flush=True)
    return subprocess.call(cmd, cwd=ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--inventory", default=os.environ.get("SPECDEPLOY_INVENTORY"),
                    help="a real inventory; default: one simulated GPU host")
    ap.add_argument("--steps", default="3")
    ap.add_argument("--keep", action="store_true", help="leave the simulated fleet up (tear down with "
                    "`python -m tests.simhost down --dir DIR`)")
    args = ap.parse_args()
    fleet = None
    if args.inventory:
        inventory = Path(args.inventory)
    else:
        from tests.simhost import fleet as simfleet

        directory = Path(tempfile.mkdtemp(prefix="specdeploy-demo-"))
        t0 = time.monotonic()
        fleet = simfleet.up(1, directory, gpus=8, tp=8)
        for h in fleet.hosts.values():
            # The seed's machine: 8 RTX PRO 6000 Blackwell on PCIe in an LXC container (nvidia-smi lists no
            # processes there), so what the demo prints matches the machine the seeds ran on.
            h.set_sim_config(**simfleet.SEED_MACHINE)
        inventory = fleet.inventory_path
        print(f"simulated GPU host up in {time.monotonic() - t0:.2f} s ({fleet.mode} mode): {inventory}")
    try:
        codes = [
            inv("gpus", inventory=inventory),
            inv("deploy", "--steps", args.steps, inventory=inventory),
            inv("check-env", inventory=inventory),
            inv("status", inventory=inventory),
            inv("bench", "--num-prompts", "4", "--output-len", "64", "--input-len", "128", inventory=inventory),
            inv("stop", inventory=inventory),
            inv("rollback-patches", inventory=inventory),
        ]
    finally:
        if fleet is not None and not args.keep:
            fleet.down()
            print("simulated fleet down: nothing left behind")
    ok = all(c == 0 for c in codes)
    print("\ndemo " + ("passed" if ok else f"FAILED (exit codes {codes})"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
