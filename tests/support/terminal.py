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


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", text).replace("\r\n", "\n").replace("\r", "\n")


def run_on_terminal(*args: str, columns: int, inventory: Path | None = None, stdout_tty: bool = True,
                    timeout: float = 120, program: list[str] | None = None) -> tuple[int, str, str]:
    """``inv ARGS`` as typed at a terminal of ``columns`` columns (a real pty, its window size set, no COLUMNS in
    the environment): with ``stdout_tty`` stdout is the terminal; without, stdout is a pipe and stderr the terminal
    (``inv deploy | grep ...``: the width rich would read from stderr); ``program`` runs instead of ``inv``.
    Returns the exit code, stdout and what the terminal showed on stderr (escape sequences removed)."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios
    import threading

    from tests.support.invoke_cli import INV, ROOT

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update({"NO_COLOR": "1", "TERM": "xterm"})
    argv = [*(program or INV), *args, *(["--inventory", str(inventory)] if inventory else [])]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower if stdout_tty else subprocess.PIPE,
                         stderr=follower, cwd=ROOT, env=env)
    os.close(follower)
    shown = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the follower side closed: the process ended
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    piped = p.stdout.read().decode() if p.stdout is not None else ""
    code = p.wait(timeout=timeout)
    reader.join(timeout=10)
    os.close(leader)
    terminal = _strip_ansi(shown.decode(errors="replace"))
    return code, terminal if stdout_tty else piped, "" if stdout_tty else terminal
