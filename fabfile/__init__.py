"""specdeploy: the library behind the command line (``fabfile/cli``, which ``tasks.py`` exposes to `inv`);
``docs/ARCHITECTURE.md`` draws the data flow and says what each room may import.

One sub-package per step of the data flow, read in this order:
inventory → plan → render → transport → agent → results → what the user sees.

``inventory`` (the YAML file, validated: ``Host`` values), ``plan`` (what a deploy will do, a pure value),
``render`` (the launch script and patch files, from ``templates/``), ``transport`` (SSH or local, the session and
the agent client), ``remote`` (the host-side agent, stdlib-only, shipped to the host), ``commands`` (each command:
``dispatch`` → ``cluster`` → ``rollout`` → ``deploy``, the ``fanout`` engine, and the rest, returning results),
``results`` (what the commands return), ``present`` (tables or JSON through one switch, progress). At the top:
``errors`` (the one exception tree, imported by every room), ``flags`` (the one parser of command-line flag values)
and ``cli`` (the installed ``specdeploy`` command).
"""

__version__ = "0.1.0"
