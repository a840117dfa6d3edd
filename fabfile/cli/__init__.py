"""The command line: the task collection (``tasks``), one spec per flag (``flagspec``: help, metavar, reading), flags
to typed options (``options``), the tool's Invoke Program (``program``), the one wrapper that prints a command's
result (``run``), and the installed ``specdeploy`` command (``main``)."""

import sys

# `inv` turns Python's bytecode cache off before it reads tasks.py (Invoke's --write-pyc, off by default, keeps a
# tasks folder free of .pyc files), so this package's modules, imported by tasks.py for every `inv --list`, were
# compiled again on each run. They are a package like any other: Python's own rule (-B, PYTHONDONTWRITEBYTECODE).
sys.dont_write_bytecode = bool(sys.flags.dont_write_bytecode)
