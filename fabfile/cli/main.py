"""The installed console command: `specdeploy deploy --host gpu1 --steps 3` from any folder.

The same task collection as `inv` in the project folder (tasks.py), run by Invoke's ``Program``, so the flags, help
and exit codes are the same. The inventory is found as for `inv`: --inventory, else $SPECDEPLOY_INVENTORY, else
./inventory.yaml in the current folder. Shell completion: `specdeploy --print-completion-script bash` (or zsh, fish).
"""

from __future__ import annotations

from invoke.program import Program

from fabfile import __version__


def main() -> None:
    from fabfile.cli.tasks import ns  # imports only Invoke and fabfile.flags at the top; each task the rest it needs

    Program(namespace=ns, version=__version__, name="specdeploy", binary="specdeploy",
            binary_names=["specdeploy"]).run()


if __name__ == "__main__":
    main()
