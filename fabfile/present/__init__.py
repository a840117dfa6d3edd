"""Present: what the user sees. Tables for people on stdout, one JSON document with ``--json``, live progress on
stderr.

``output`` (the two consoles, ``show`` — the one switch between tables and JSON that every command uses —,
``print_error``, ``terminal_safe``: imports only ``fabfile.errors``, so any room may print through it), ``tables``
(tables that never cut a key value), ``progress`` (step lines and the spinner), and one ``*_report`` per command:
``hosts_report`` (stop, status, logs, check-env, rollback-patches, gpus, cancel), ``deploy_report``,
``rollout_report`` (rollouts and clusters), ``checkenv_report``, ``router_report``, ``bench_report``, ``report``
(a sweep's table, ``report.md`` and plot; ``inv analyze``), ``diff_report``, ``plan_report``, ``watch_report``.

May import ``fabfile.results`` and the value types of the rooms below, and ``fabfile.errors``; a command imports
this room, never the reverse.
"""
