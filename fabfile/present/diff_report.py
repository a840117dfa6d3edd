"""What ``inv diff`` prints for a person: each difference with its old and new value, whole."""

from __future__ import annotations

from typing import Any


def print_diff(a: dict[str, Any], b: dict[str, Any], rows: list[dict[str, str]]) -> None:
    # A list, not a table: values (paths, checksums, argv values) print whole at any terminal width.
    say = print
    say(f"{a['host']}: old = {a['label']} ({a['config']}), new = {b['label']} ({b['config']})")
    if not rows:
        say("  no difference in argv, environment, SGLang version, patch mode, patched files or check-env")
        return
    width = max(len(r["what"]) for r in rows)
    for r in rows:
        say(f"  {r['what']:<{width}}  old: {r['a']}")
        say(f"  {'':<{width}}  new: {r['b']}")
    say(f"{len(rows)} difference(s)")
