"""specdeploy: the library behind ``tasks.py``.

One concept per module: ``inventory`` (validated hosts), ``plan`` (what a deploy will do), ``render`` (Jinja),
``transport``/``ssh`` (how commands reach a host), ``agentclient`` (the shipped host-side agent), ``deploy``,
``checkenv``, ``patchset``, ``errors``. The host-side agent lives in ``fabfile.remote`` and is stdlib-only.
"""

__version__ = "0.1.0"
