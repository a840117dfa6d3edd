"""Results: what the commands come back with, as plain values, between the agent's answers and what the user sees.

``hosts`` (``HostOutcome``: one host's data or error from the fan-out; ``HostsResult`` and the commands' own
verdicts: ``StopResult``, ``StatusResult``, ``CancelResult``, ``CheckEnvResult``), ``deploys`` (``DeployResult``,
``HostRollout``/``RolloutResult`` for rollouts and clusters, ``RouterResult``) and ``documents`` (results that are
one dict already: ``SweepResult``). ``present`` prints them; each has ``exit_code`` (judged here,
never by what prints it) and ``as_dict``, the ``--json`` document, one shape for one host or many.

May import: ``fabfile.errors``, ``fabfile.inventory``, ``fabfile.plan`` (a deploy's result carries its plan); never
a transport, a command or ``present``.
"""
