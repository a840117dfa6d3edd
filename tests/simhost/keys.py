"""SSH key and client-file helpers for the simulated fleet (explicit paths only; ~/.ssh is never used)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def keygen(path: Path, comment: str) -> str:
    """Write a new ed25519 key pair at ``path`` / ``path.pub`` (replacing any) and return the public line."""
    for p in (path, path.with_name(path.name + ".pub")):
        p.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )
    return path.with_name(path.name + ".pub").read_text().strip()


def key_type_and_blob(pub_line: str) -> str:
    """``ssh-ed25519 AAAA...`` from a public key line (drops the comment)."""
    kind, blob = pub_line.split()[:2]
    return f"{kind} {blob}"
