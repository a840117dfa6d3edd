"""CLI: ``python -m tests.simhost up --hosts N --dir DIR`` / ``python -m tests.simhost down --dir DIR``.

``up`` returns once the fleet is ready; the hosts keep running under a small detached keeper process
(their parent, so that they are reaped when ``down`` stops them) until ``down``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from tests.simhost.fleet import FleetError, down, up

_OK = "\0ok"


def _up_detached(a: argparse.Namespace) -> int:
    """Fork a keeper that brings the fleet up, relays its lines to us, then stays as the hosts' parent."""
    versions = [v.strip() for v in a.versions.split(",") if v.strip()] if a.versions else None
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # keeper
        os.close(r)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        out = os.fdopen(w, "w", buffering=1)
        code = 0
        try:
            try:
                import setproctitle  # type: ignore[import-not-found]

                setproctitle.setproctitle(f"simhost-keeper {a.dir.resolve()}")
            except ImportError:
                pass
            up(
                a.hosts,
                a.dir,
                versions,
                a.gpus,
                a.tp,
                a.mode,
                echo=lambda m: out.write(m + "\n"),
                keeper=True,
            )
            out.write(_OK + "\n")
        except BaseException as e:  # report anything to the waiting CLI
            out.write(f"error: {e}\n")
            code = 1
        out.close()
        if code == 0:
            while True:  # reap the host launchers until down() has stopped them all
                try:
                    os.wait()
                except ChildProcessError:
                    break
                except InterruptedError:
                    continue
        os._exit(code)
    os.close(w)
    ok = False
    with os.fdopen(r) as lines:
        for line in lines:
            if line.rstrip("\n") == _OK:
                ok = True
                continue
            print(
                line.rstrip("\n"),
                file=sys.stdout if not line.startswith("error:") else sys.stderr,
                flush=True,
            )
    if not ok:
        os.waitpid(pid, 0)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.simhost", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    pu = sub.add_parser("up", help="bring up a simulated fleet (a live one in DIR is brought down first)")
    pu.add_argument("--hosts", type=int, required=True)
    pu.add_argument("--dir", type=Path, required=True)
    pu.add_argument("--versions", default=None, help="comma-separated sglang versions, one per host")
    pu.add_argument("--gpus", type=int, default=8)
    pu.add_argument("--tp", type=int, default=8)
    pu.add_argument("--mode", choices=["auto", "netns", "loopback"], default="auto")
    pd = sub.add_parser("down", help="stop the fleet in DIR (safe to repeat)")
    pd.add_argument("--dir", type=Path, required=True)
    a = p.parse_args(argv)
    if a.cmd == "up":
        return _up_detached(a)
    started = time.monotonic()
    try:
        down(a.dir)
    except FleetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"fleet in {a.dir.resolve()} is down ({time.monotonic() - started:.2f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
