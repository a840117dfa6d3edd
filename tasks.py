"""The porch: `inv` in the project folder reads this file, and the task collection lives in the package
(fabfile/cli/tasks.py), the same one the installed `specdeploy` command runs."""

from fabfile.cli.tasks import ns

__all__ = ["ns"]
