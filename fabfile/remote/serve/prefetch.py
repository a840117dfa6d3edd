"""Work a deploy does while its server loads: what the steps after ready need that the new server cannot change.

Waiting for ready is seconds to minutes of idle polling. Meanwhile a thread imports the modules of the steps that
follow (the gates' HTTP client and load generator, the evidence parser: ~50 ms of imports on the simulated host)
and reads the GPU listing and topology that ``verify_env`` reports (two nvidia-smi runs, tens of ms on a real
host). Those facts are hardware: they cannot differ between the start of the wait and its end, and a GPU that
fell off the bus meanwhile takes the server down with it, which the deploy reports anyway. A prefetch that fails
or is late changes nothing: the step then does the work itself, as it would without it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the evidence room is imported on the thread, not before
    from ..evidence.interconnect import GpuFacts


class Prefetch:
    def __init__(self, gpu_facts: bool, wait_s: float = 15.0) -> None:
        self._want_gpu_facts = gpu_facts
        self._wait_s = wait_s
        self._gpu_facts: GpuFacts | None = None
        self._thread = threading.Thread(target=self._run, name="deploy-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            # Imported for the steps after ready (unused here: only warms sys.modules).
            from ..evidence import interconnect, judge  # noqa: F401
            from ..measure import bench  # noqa: F401
            from ..patch import modes  # noqa: F401
            from . import gates  # noqa: F401

            if self._want_gpu_facts:
                self._gpu_facts = interconnect.gpu_facts()
        except Exception:
            self._gpu_facts = None

    def gpu_facts(self) -> GpuFacts | None:
        """The GPU facts read during the wait; None when they were not asked for, failed, or are still not in
        (``wait_s``: nvidia-smi's own bound, a wedged driver is then reported by the step's own query)."""
        self._thread.join(self._wait_s)
        return None if self._thread.is_alive() else self._gpu_facts
