"""How readable the library's layout is (issue 14): import cycles, imports against the rooms' order, modules over
400 lines, functions over 60 lines.

    .venv/bin/python -m bench.layout [ROOT]

Counts every ``import`` in ``fabfile/`` (top level and inside functions) with ``ast``; a cycle is a strongly connected
group of modules. Lines are physical lines; a function's length runs from its ``def`` (or first decorator) to its
last line, nested functions included in their parent's count. The rooms' order is docs/ARCHITECTURE.md's: a room
imports only rooms before it in ``ROOMS``, ``present.output`` (which any room may print through) and the agent
(``remote``, which imports nothing of the client).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MODULE_MAX = 400
FUNCTION_MAX = 60
# The client's rooms, lowest first (docs/ARCHITECTURE.md); the top-level modules (errors, flags, cli) are outside
# the order.
ROOMS = ("inventory", "render", "plan", "transport", "results", "present", "commands")
ANYONE_MAY_IMPORT = ("fabfile.errors", "fabfile.flags", "fabfile.present.output", "fabfile.remote")


def _modules(root: Path) -> dict[str, Path]:
    mods = {}
    for p in sorted((root / "fabfile").rglob("*.py")):
        name = ".".join(p.relative_to(root).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for n in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - n.level + 1] + ([n.module] if n.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in n.names]
        elif isinstance(n, ast.Import):
            targets = [a.name for a in n.names]
        found |= {t for t in targets if t in mods and t != name}
    return found


def cycles(root: Path) -> list[list[str]]:
    mods = _modules(root)
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else None


def room_breaks(root: Path) -> list[str]:
    """Imports from a room to a room after it in ``ROOMS`` (``present`` reading a command, say)."""
    mods = _modules(root)
    out = []
    for name, path in mods.items():
        mine = _room(name)
        for target in sorted(_imports(name, path, mods)):
            theirs = _room(target)
            if target.startswith(ANYONE_MAY_IMPORT) or mine is None or theirs is None or theirs == mine:
                continue
            if ROOMS.index(theirs) > ROOMS.index(mine):
                out.append(f"{name} -> {target}")
    return out


def sizes(root: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    big, long = [], []
    for p in sorted((root / "fabfile").rglob("*.py")):
        text = p.read_text()
        rel = str(p.relative_to(root))
        n = len(text.splitlines())
        if n > MODULE_MAX:
            big.append((n, rel))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                length = (node.end_lineno or node.lineno) - start + 1
                if length > FUNCTION_MAX:
                    long.append((length, f"{rel}:{node.lineno} {node.name}"))
    return sorted(big, reverse=True), sorted(long, reverse=True)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    found = cycles(root)
    print("import cycles:", "none" if not found else "; ".join(" <-> ".join(g) for g in found))
    breaks = room_breaks(root)
    print(f"imports against the rooms' order: {len(breaks)}")
    for b in breaks:
        print(f"  {b}")
    big, long = sizes(root)
    print(f"modules over {MODULE_MAX} lines: {len(big)}")
    for n, rel in big:
        print(f"  {n:5d}  {rel}")
    print(f"functions over {FUNCTION_MAX} lines: {len(long)}")
    for n, where in long:
        print(f"  {n:5d}  {where}")


if __name__ == "__main__":
    main()
