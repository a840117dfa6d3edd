"""specdeploy's commands for `inv` in the project folder: this file only exposes the package's collection
(fabfile/cli/tasks.py), the same one the installed `specdeploy` command runs."""

import sys

from fabfile.cli.program import take_over
from fabfile.cli.tasks import ns

if "invoke.main" in sys.modules:  # run by `inv`: its Program becomes the tool's own (fabfile/cli/program.py)
    take_over(sys.modules["invoke.main"].program)

__all__ = ["ns"]
