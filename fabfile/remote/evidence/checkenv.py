"""The ``check_env`` verb's door: the GPU query starts first, then the judge's modules load while it runs.

One ``nvidia-smi nvlink -s`` is the longest part of a check-env call on the host (tens of milliseconds on a real
host). Started from :func:`judge.check_env`, it waited for the judge, the gatherer and their tables to be imported
(~7 ms of every call); started here, that import runs beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..common import EventSink  # loaded by the agent's entry already; named here for the verb table's check

if TYPE_CHECKING:
    from ..protocol import CheckEnvAnswer, CheckEnvRequest


def check_env(req: CheckEnvRequest, sink: EventSink) -> CheckEnvAnswer:
    """``inv check-env`` on this host (:func:`judge.check_env`), its GPU query already running."""
    from .interconnect import start_gpu_facts

    queries = start_gpu_facts()
    try:
        from .judge import check_env as judge

        return judge(req, sink, gpu_queries=queries)
    finally:
        queries.stop()  # read by then; a judge that gave up early (a refused request, the deadline) ends it here
