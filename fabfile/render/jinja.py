"""Jinja rendering for everything the tool writes onto a host.

Two environments, because quoting rules differ:

* ``shell``: every ``{{ value }}`` is shell-quoted by ``finalize`` unless marked :class:`Raw`; used for launch
  scripts. Autoescape is off on purpose: it is HTML-only and would corrupt ``&&`` (pallets/jinja#1890).
* ``text``: no quoting; for Python source blocks and metadata files, where templates use the ``pyrepr`` filter.

Both use ``StrictUndefined``: a missing variable is an error, never an empty string in a command line.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

# An installed package carries them as fabfile/templates (pyproject's package-dir); a checkout or an editable install
# reads the project's own templates/ folder beside fabfile/.
_HERE = Path(__file__).resolve()
TEMPLATES = next((d for d in (_HERE.parents[1] / "templates", _HERE.parents[2] / "templates") if d.is_dir()),
                 _HERE.parents[2] / "templates")


class Raw(str):
    """Text that is already shell-safe (built with shlex) and must not be quoted again."""


def _shell_finalize(value: Any) -> str:
    if isinstance(value, Raw):
        return value
    return shlex.quote(str(value))


def _shjoin(items: Iterable[Any]) -> Raw:
    return Raw(shlex.join(str(x) for x in items))


def shell_path(path: str) -> Raw:
    """A remote path for ``sh``: quoted, with a leading ``~/`` kept expandable as ``"$HOME"/``."""
    if path.startswith("~/"):
        return Raw('"$HOME"/' + shlex.quote(path[2:]))
    return Raw(shlex.quote(path))


def shell_argv(items: Iterable[Any]) -> Raw:
    """Shell words for a command line; a word starting with ``~/`` (a path under the host's HOME) expands."""
    return Raw(" ".join(shell_path(str(x)) for x in items))


def env_word(name: str, value: Any) -> Raw:
    """``NAME=value`` as one shell word; a value already made shell-safe (:class:`Raw`, e.g. a ``~/`` path from
    :func:`shell_path`) is kept as it is, so the shell expands it."""
    if isinstance(value, Raw):
        return Raw(shlex.quote(f"{name}=") + value)
    return Raw(shlex.quote(f"{name}={value}"))


def comment(value: Any) -> Raw:
    """Text for a ``#`` comment line: control characters escaped, so a newline in a name cannot start a command."""
    return Raw(str(value).encode("unicode_escape").decode("ascii"))


def _make(finalize: Any | None) -> Environment:
    kwargs: dict[str, Any] = {}
    if finalize is not None:
        kwargs["finalize"] = finalize
    env = Environment(  # nosec B701: shell and Python sources, never HTML
        loader=FileSystemLoader(str(TEMPLATES)),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        **kwargs,
    )
    env.filters["shjoin"] = _shjoin
    env.filters["raw"] = Raw
    env.filters["shpath"] = shell_path
    env.filters["shargv"] = shell_argv
    env.filters["comment"] = comment
    env.filters["envword"] = env_word
    env.filters["pyrepr"] = repr
    env.filters["tojson_sorted"] = lambda v: json.dumps(v, sort_keys=True)
    return env


_SHELL = _make(_shell_finalize)
_TEXT = _make(None)


def render_shell(template: str, **context: Any) -> str:
    """Render a shell template: values are quoted unless wrapped in :class:`Raw` or passed through ``shjoin``."""
    return _SHELL.get_template(template).render(**context)


def render_text(template: str, **context: Any) -> str:
    """Render a non-shell template (Python source, metadata); quote with ``pyrepr``/``tojson_sorted`` yourself."""
    return _TEXT.get_template(template).render(**context)
