"""The tool's profiles directory on the host (``STATE/profiles``): where SGLang's profiler writes the traces the
``profile`` verb asks for, created 0700 by the deploying user, never ``/tmp``, never a symlink, and bounded (the oldest
profiles go first); and which rank files in a profile's directory SGLang has finished writing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time

from ..common import AgentError, ensure_private_dir

PROFILES = "profiles"


def profiles_dir(state_dir: str) -> str:
    """``STATE/profiles``, made private (see ``ensure_dir``)."""
    return ensure_dir(os.path.join(state_dir, PROFILES), state_dir)


def ensure_dir(path: str, state_dir: str | None = None) -> str:
    """The profiles directory SGLang's profiler writes into (SGLANG_TORCH_PROFILER_DIR), made before the server
    starts: a private directory of the deploying user, not ``/tmp`` (SGLang's default, every account's), never
    through a symlink, even one of our own (a trace written through a planted link lands where the link points)."""
    state_dir = state_dir if state_dir is not None else os.path.dirname(path.rstrip("/"))
    if os.path.islink(path):
        raise AgentError("unsafe_path", f"{path} is a symlink: the tool writes traces only into its own directory",
                         "remove the link; the tool creates the directory itself")
    real = os.path.realpath(state_dir)
    if real in ("/tmp", "/var/tmp", "/dev/shm"):
        raise AgentError("unsafe_path", f"the state dir {state_dir} is a shared temporary directory: traces "
                         "would be readable and replaceable by every user of the host",
                         "set state_dir to a directory of the deploying user")
    ensure_private_dir(path, "profiles directory")
    return path


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def prune(base: str, keep_bytes: int) -> list[str]:
    """Remove the oldest profiles until the rest weigh at most ``keep_bytes``; the names removed. A profile is a
    directory of this verb's, or a loose trace file (a ``/start_profile`` without ``output_dir`` writes into
    SGLANG_TORCH_PROFILER_DIR, which a measuring deploy points here). Links are never followed nor removed."""
    entries = []
    for name in os.listdir(base):
        p = os.path.join(base, name)
        st = os.lstat(p)
        if stat.S_ISDIR(st.st_mode):
            entries.append((st.st_mtime, name, _dir_bytes(p), True))
        elif stat.S_ISREG(st.st_mode) and name.endswith(".trace.json.gz"):
            entries.append((st.st_mtime, name, st.st_size, False))
    entries.sort()
    total = sum(e[2] for e in entries)
    removed = []
    for _mtime, name, size, is_dir in entries:
        if total <= keep_bytes:
            break
        if is_dir:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(base, name))
        total -= size
        removed.append(name)
    return removed


def _rank_of(name: str) -> int | None:
    part = name.split("-TP-", 1)
    if len(part) != 2:
        return None
    digits = ""
    for ch in part[1]:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else None


def ready_traces(out_dir: str, cap: int) -> dict[int, str]:
    """The rank files SGLang finished writing (a size that held still), refusing one over the bound."""
    found: dict[int, str] = {}
    for name in sorted(os.listdir(out_dir)):
        if not name.endswith(".trace.json.gz") or name.startswith("merged-"):
            continue
        rank = _rank_of(name)
        if rank is None:
            continue
        path = os.path.join(out_dir, name)
        size = os.path.getsize(path)
        if size > cap:
            raise AgentError("trace_too_big", f"the trace of rank {rank} ({name}) weighs {size} bytes, over the "
                             f"bound of {cap} bytes: it was not read (it is left in {out_dir})",
                             "profile fewer steps (--trace-steps) or a smaller load")
        time.sleep(0.2)
        if os.path.getsize(path) == size and size > 0:
            found[rank] = path
    return found
