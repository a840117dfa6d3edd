"""specdeploy: the library behind ``tasks.py`` (the CLI), one concept per module; ``docs/ARCHITECTURE.md`` draws the
data flow and says what each part may import.

inventory → plan → render → transport → agent → results → what the user sees: ``inventory`` (validated hosts),
``plan`` (what a deploy will do, a pure value), ``patchset``/``render``/``render_plan`` (what gets written),
``transport``/``ssh``/``session`` (how commands reach a host), ``agentclient`` (ships and calls the host-side agent,
``fabfile.remote``, stdlib-only), ``deploy`` (one host), ``rollout``/``cluster`` (several hosts, below
``dispatch``), ``fanout`` (the one multi-host engine), ``operations``/``router``/``bench``/``sweep``/``adopt``/
``trust`` (the other commands), ``output``/``progress``/``checkenv_report``/``report`` (what is printed), ``errors``
(the one exception tree).
"""

__version__ = "0.1.0"
