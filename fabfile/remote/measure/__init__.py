"""Measuring a running server on the host: ``bench`` (with the stdlib load generator ``loadgen``), the metric
parsers (``metrics``), one ``watch`` sample, and ``profile`` with SGLang's device timer (``devicetimer``), its
profiler traces (``trace``) and the bounded profiles directory (``profilestore``). Imports nothing.
"""

from __future__ import annotations
