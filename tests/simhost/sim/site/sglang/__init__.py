"""SIMULATED SGLang (test equipment for specdeploy): same module layout and names as SGLang, no GPU, no model.

This package is installed into a Python venv on every simulated GPU host by
``tests/simhost/sim/install.py``.  It is not SGLang and serves no model.
"""

from sglang.version import __version__

__all__ = ["__version__"]
