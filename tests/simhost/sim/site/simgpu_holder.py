"""A foreign GPU holder for the SGLang simulator (TEST EQUIPMENT).

``python -m simgpu_holder --gpu 0 --mib 2000 [--ignore-term | --no-ignore-term]`` registers itself in
``<venv>/sim-state/gpu-procs/<pid>.json`` so the simulated ``nvidia-smi`` lists it, ignores SIGTERM by
default (a stubborn process the deploy tool must escalate to SIGKILL), and sleeps forever.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from sglang._sim import runtime


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="simgpu_holder")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--mib", type=int, default=2000)
    parser.add_argument("--name", default=None, help="process_name to record (default: sys.executable)")
    parser.add_argument("--ignore-term", dest="ignore_term", action="store_true", default=True)
    parser.add_argument("--no-ignore-term", dest="ignore_term", action="store_false")
    parser.add_argument("--leader-exits", action="store_true",
                        help="the main thread exits while another thread keeps the GPU: the pid shows 'Z' but the "
                        "process lives, as a real CUDA process does while its context is torn down")
    args = parser.parse_args(argv)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:

        def on_term(signum: int, frame: object) -> None:
            runtime.unregister_gpu()
            os._exit(0)

        signal.signal(signal.SIGTERM, on_term)
    runtime.register_gpu(args.gpu, args.mib, args.name)
    sys.stdout.write(f"simgpu_holder pid={os.getpid()} gpu={args.gpu} mib={args.mib}\n")
    sys.stdout.flush()
    if args.leader_exits:
        import ctypes
        import threading

        threading.Thread(target=runtime.sleep_forever).start()
        ctypes.CDLL(None).pthread_exit(None)
    runtime.sleep_forever()


if __name__ == "__main__":
    main()
