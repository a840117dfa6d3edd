"""The server's life on the host: ``deploy`` (lock, patch, stop stale, start, gates, verify, record), starting
and following SGLang (``server``), the readiness ``gates``, ``stop``, the deploy ``lock``, ``records``,
``follow`` (logs, attach), ``hoststatus`` (the ``status`` verb), ``adoption``, ``prefetch`` and the ``router``.
Imports nothing.
"""

from __future__ import annotations
