"""The installed console command: `specdeploy deploy --host gpu1 --steps 3` from any folder.

The same task collection as `inv` in the project folder (tasks.py), run by the tool's own Invoke ``Program``
(fabfile/cli/program.py), so the flags, help and exit codes are the same. The inventory is found as for `inv`:
--inventory, else $SPECDEPLOY_INVENTORY, else ./inventory.yaml in the current folder. Shell completion:
`specdeploy --print-completion-script bash` (or zsh, fish); `--host` values complete from the inventory.
"""

from __future__ import annotations

from fabfile import __version__
from fabfile.cli.program import SpecProgram


def program(binary: str = "specdeploy") -> SpecProgram:
    from fabfile.cli.tasks import ns  # imports only Invoke and fabfile.flags at the top; each task the rest it needs

    return SpecProgram(namespace=ns, version=__version__, name="specdeploy", binary=binary, binary_names=[binary])


def main() -> None:
    program().run()


if __name__ == "__main__":
    main()
