"""What a reader sees at a given terminal width, and a command whose output pipe is closed before it writes."""

from __future__ import annotations

from pathlib import Path

# The narrowest terminal the tool supports and a wide one.
WIDTHS = (80, 200)


def whole(text: str, values: list[str]) -> None:
    assert "…" not in text, text
    for v in values:
        assert v in text, (v, text)


def closed_pipe_run(*args: str, inventory: Path | None = None) -> tuple[int, str]:
    """`inv ARGS | head -0`: stdout is a pipe whose reader is already gone, so the very first write fails."""
    import os
    import subprocess

    from tests.support.invoke_cli import INV, ROOT

    read, write = os.pipe()
    os.close(read)
    argv = [*INV, *args, *(["--inventory", str(inventory)] if inventory else [])]
    try:
        p = subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT,
                           stdin=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    finally:
        os.close(write)
    return p.returncode, p.stderr
