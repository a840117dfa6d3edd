"""The NCCL-env patch engine, host side: edit SGLang sources, or install a tiny plugin / sitecustomize.

Stdlib only, Python 3.9+. The client renders every piece of code (``fabfile.render.patchset``) and sends it in
the request; the engine only finds anchors (``anchors``), applies (``apply.apply``), records (``store``) and undoes
(``rollback.rollback``); its modes and fixed facts live in ``modes``, and the marker line each
patched process prints in ``markers`` (check-env reads it too). Callers import the module that holds what they
use; this package imports nothing.

Guarantees:

* all-or-nothing: every new content is computed before the first write; a failed write restores what was
  already written;
* every source file's original bytes are kept content-addressed under ``STATE/patches/backups/`` and recorded
  in ``STATE/patches/manifest.json`` (hash before/after), so rollback is byte-exact and refuses to touch
  a file that changed behind our back;
* Python bytecode caches of every written/restored module are deleted so no stale ``.pyc`` is ever served.
"""

from __future__ import annotations
