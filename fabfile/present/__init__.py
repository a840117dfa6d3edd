"""Present: what the user sees. Tables for people on stdout, one JSON document with ``--json``, live progress on
stderr.

``output`` (the two consoles, ``print_json``, ``print_error``, ``terminal_safe``: imports only ``fabfile.errors``, so
any room may print through it), ``tables`` (tables that never cut a key value), ``progress`` (step lines and the
spinner), ``checkenv_report``, ``rollout_report`` and ``report`` (a sweep's table, ``report.md`` and plot).

May import value types from the rooms below and ``fabfile.errors``; a command imports this room, never the reverse
(``rollout_report`` still reads the ``DeployResult``/``RolloutResult`` value types defined beside their commands).
"""
