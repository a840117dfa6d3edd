"""Results: what the commands come back with, as plain values, between the agent's answers and what the user sees.

``hosts`` (``HostOutcome``: one host's data or error from the fan-out) and ``deploys`` (``DeployResult``,
``HostRollout``/``RolloutResult`` for rollouts and clusters, ``RouterResult``). ``present`` prints them; their
``as_dict`` is the ``--json`` document.

May import: ``fabfile.errors``, ``fabfile.inventory``, ``fabfile.plan`` (a deploy's result carries its plan); never
a transport, a command or ``present``.
"""
