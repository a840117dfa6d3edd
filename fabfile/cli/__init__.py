"""The command line: the task collection (``tasks``), and the installed ``specdeploy`` command (``main``)."""
