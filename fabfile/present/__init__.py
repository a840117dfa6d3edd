"""Present: what the user sees. Tables for people on stdout, one JSON document with ``--json``, live progress on
stderr.

``output`` (the two consoles, ``show`` — the one switch between tables and JSON that every command uses —,
``print_error``: imports only ``fabfile.errors``, so any room may print through it), ``text`` (what needs no Rich:
``terminal_safe``, the notes said once per command, a closed pipe's quiet end; so a command's start and its work
import no Rich, and the printing's imports can wait for the hosts' answers), ``tables``
(the one table builder: tables that never cut a key value, and the one dash for a missing value), ``progress``
(step lines and the spinner), and one ``*_report`` per command: ``hosts_report`` (stop, status, logs, check-env,
rollback-patches, gpus, cancel), ``deploy_report``, ``rollout_report`` (rollouts and clusters), ``checkenv_report``,
``router_report``, ``bench_report``, ``profile_report``, ``explain_report``, ``sweep_report`` (a sweep's table and
the text of its ``report.md``), ``plot`` (the sweep's optional ``sweep.png`` figure), ``analyze_report``,
``diff_report``, ``plan_report``, ``watch_report``. Nothing here writes a file: the command that writes files does.

May import ``fabfile.results`` and the value types of the rooms below, and ``fabfile.errors``; a command imports
this room, never the reverse.
"""
