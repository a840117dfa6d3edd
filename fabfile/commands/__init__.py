"""Commands: one user command (or deploy strategy) per module, each turning selected hosts into a result.

``dispatch`` picks how ``inv deploy`` runs: one host (``deploy``), several (``rollout``: parallel or rolling) or a
multi-node ``cluster``; ``fanout`` is the one multi-host engine (a session per host, a cap, a per-host timeout);
the other commands are ``operations`` (stop, status, logs, check-env, rollback-patches, gpus, cancel), ``router``,
``bench``, ``sweep``, ``analyze``, ``watch``, ``adopt``, ``diff`` and ``render_plan`` (``inv render`` / ``--dry-run``).

Each returns a result (``fabfile.results``) and prints it through ``fabfile.present.output.show``, the one switch
between tables and JSON. May import every room below it (inventory, plan, render, transport, results, present).
A strategy never imports its caller: ``dispatch`` → ``cluster`` → ``rollout`` → ``deploy``.
"""
