"""SGLang's command line (and its router's) as words: how the tool writes a flag's value, and how it reads one back.

argparse reads a word that starts with ``-`` as a flag, wherever it stands: ``--served-model-name --warmups`` is two
flags to it, and SGLang exits "argument --served-model-name: expected one argument". So every value the tool places
after a flag is written in one word, ``--flag=value``, which argparse reads as that flag's value whatever the value's
first character. Which flags allow it, read from the wheels (``server_args.py``'s ``add_argument`` calls up to 0.5.19,
the ``arg_groups/fields`` dataclasses from 0.5.20; the router's ``launch_router``):

- every flag the tool writes from the inventory (``--model-path``, ``--tp-size``, ``--host``, ``--port``,
  ``--nnodes``, ``--node-rank``, ``--dist-init-addr``, ``--served-model-name``, ``--speculative-*``; the router's
  ``--host``, ``--port``, ``--policy``) takes exactly one value (``type=str``/``int``): ``=`` works;
- ``--config FILE`` stays two words: SGLang looks for the word itself (``"--config" in argv``,
  ``prepare_server_args``) and takes the next word as the file, so ``--config=FILE`` would be parsed and never read;
- the router's ``--worker-urls URL ...`` is ``nargs='+'``: ``=`` carries one URL only, so the URLs (which the tool
  builds as ``http://...``) follow as words;
- store_true flags take no value, and a list flag (``nargs='+'``/``'*'``) can take a value that starts with ``-``
  only alone, through ``=``.

Readers of a command line (adopt, diff, sweep, the version check, check-env, the secret masking, on both sides) take
both forms, as SGLang does (a server started by hand may use either), through one splitter: the agent's
``remote.common.split_argv``, which the client imports (the agent cannot import ``plan``).
"""

from __future__ import annotations

from collections.abc import Sequence

from fabfile.remote.common import flag_value


def opt(flag: str, value: object) -> str:
    """``--flag=value``: one word, read by argparse as the flag's value whatever the value starts with."""
    return f"{flag}={value}"


def value_of(argv: Sequence[str], flag: str) -> str | None:
    """The value ``argv`` gives ``flag`` (``--flag=value`` or ``--flag value``; the last one wins, as in argparse);
    None when it does not give the flag a value."""
    return flag_value(argv, flag)
