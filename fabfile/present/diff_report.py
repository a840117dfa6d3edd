"""What ``inv diff`` prints for a person: each difference with its old and new value, whole."""

from __future__ import annotations

from fabfile.results.documents import DeployView


def print_diff(a: DeployView, b: DeployView, rows: list[dict[str, str]],
               sides: tuple[str, str] = ("old", "new")) -> None:
    """``sides``: what each value is labelled (two hosts' names when the diff is across hosts)."""
    # A list, not a table: values (paths, checksums, argv values) print whole at any terminal width.
    say = print
    if sides == ("old", "new"):
        say(f"{a['host']}: old = {a['label']} ({a['config']}), new = {b['label']} ({b['config']})")
    else:
        say(f"{a['label']} ({a['config']}) against {b['label']} ({b['config']})")
    if not rows:
        say("  no difference in argv, environment, SGLang version, patch mode, patched files or check-env")
        return
    width = max(len(r["what"]) for r in rows)
    for r in rows:
        say(f"  {r['what']:<{width}}  {sides[0]}: {r['a']}")
        say(f"  {'':<{width}}  {sides[1]}: {r['b']}")
    say(f"{len(rows)} difference(s)")
