"""The host-side agent: stdlib-only code shipped to the GPU host once and run by the host's own Python.

Everything here must import and run with nothing but the standard library (Python 3.9+), because the only
interpreter guaranteed on a GPU host is the one that runs SGLang. The client never parses shell output: each verb
answers with JSON lines (see ``common.emit``).

One style across the package, so a reader meets one dialect: every module opens with a docstring saying why it
exists and ``from __future__ import annotations``, imports its siblings relatively (``from . import procs``; the
package is unpacked under a content-addressed name on the host), and annotates with builtin generics and
``X | None``. Those are only strings under the future import, so Python 3.9 never evaluates them; anything 3.9
does evaluate (a type alias, a TypedDict body, a ``cast`` argument) keeps ``typing.Optional``. Ruff enforces the
split: it checks this folder as Python 3.9 code (``per-file-target-version`` in pyproject.toml).
"""

from __future__ import annotations
