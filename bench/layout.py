"""How readable the library's layout is (issues 14, 28): import cycles, imports against the rooms' order, private
names used across modules, functions over 60 lines.

    .venv/bin/python -m bench.layout [ROOT]

Counts every ``import`` in ``fabfile/`` (top level and inside functions) with ``ast``; a cycle is a strongly connected
group of modules. The rooms' order is docs/ARCHITECTURE.md's: a room imports only rooms before it in ``ROOMS``,
``present.output`` (which any room may print through) and the agent (``remote``, which imports nothing of the client:
counted as a break too).

A private name (``_x``, not a dunder) belongs to its module: another module that imports it
(``from m import _x``) or reaches it as an attribute of an imported module (``m._x``) breaks the rule that matters
for changing code safely, since the owner may rename or drop it without looking further. Checked in ``fabfile/``,
``bench/`` and ``tools/``; ``tests/`` are counted on a line of their own and do not fail the check (a test may
pin a helper that no user reaches). Exits 1 when the library breaks a rule (a cycle, an import against the order,
a private name across modules), so ``./dev check`` fails on it; long functions are listed, not enforced.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from pathlib import Path

FUNCTION_MAX = 60
# The client's rooms, lowest first (docs/ARCHITECTURE.md); the top-level modules (errors, flags, cli) are outside
# the order.
ROOMS = ("inventory", "render", "plan", "transport", "results", "present", "commands")
ANYONE_MAY_IMPORT = ("fabfile.errors", "fabfile.flags", "fabfile.present.output", "fabfile.remote")
AGENT = "fabfile.remote"
# Where a private name used across modules fails the check, and where it is only counted.
CHECKED = ("fabfile", "bench", "tools")
COUNTED = ("tests",)


def _modules(root: Path, folders: tuple[str, ...] = ("fabfile",)) -> dict[str, Path]:
    mods = {}
    for folder in folders:
        for p in sorted((root / folder).rglob("*.py")):
            name = ".".join(p.relative_to(root).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = p
    return mods


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A file's tree, parsed once per process (the tests that scan the library share it: tests/support/sources.py).
    Shared: read it, never change it."""
    return ast.parse(path.read_text(), str(path))


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a file in ``ast.walk``'s order, walked once per process: the rules below read the same files
    four times (the import graph for cycles and for the rooms' order, private names, long functions), and parsing
    and walking them each time was most of the check's 3 s."""
    return tuple(ast.walk(parsed(path)))


def _base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` reads from (relative imports resolved against ``name``)."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    parts = package.split(".")
    return ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    for n in nodes(path):
        targets: list[str] = []
        if isinstance(n, ast.ImportFrom):
            base = _base(name, path, n)
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
    """Imports from a room to a room after it in ``ROOMS`` (``present`` reading a command, say), and any import of
    the client by the agent (``fabfile.remote`` ships alone to the host)."""
    mods = _modules(root)
    out = []
    for name, path in mods.items():
        mine = _room(name)
        for target in sorted(_imports(name, path, mods)):
            if name.startswith(AGENT) and not target.startswith(AGENT):
                out.append(f"{name} -> {target}")
                continue
            theirs = _room(target)
            if target.startswith(ANYONE_MAY_IMPORT) or mine is None or theirs is None or theirs == mine:
                continue
            if ROOMS.index(theirs) > ROOMS.index(mine):
                out.append(f"{name} -> {target}")
    return out


def _private(attr: str) -> bool:
    return attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__"))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _private_uses(name: str, path: Path, mods: dict[str, Path], root: Path) -> list[str]:
    """``from m import _x`` and ``m._x`` where ``m`` is another module of the project, as ``file:line text``."""
    rel = path.relative_to(root)
    out: list[str] = []
    bound: dict[str, str] = {}  # a local name → the project module it stands for
    for n in nodes(path):
        if isinstance(n, ast.ImportFrom):
            base = _base(name, path, n)
            for a in n.names:
                full = f"{base}.{a.name}"
                if full in mods:
                    bound[a.asname or a.name] = full
                if (base in mods or full in mods) and base != name and _private(a.name):
                    out.append(f"{rel}:{n.lineno} from {base} import {a.name}")
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name in mods:
                    bound[a.asname or a.name] = a.name
                if a.asname is None:  # ``import a.b.c`` binds ``a``, reached as ``a.b.c``
                    bound.setdefault(a.name.split(".")[0], a.name.split(".")[0])
                parts = a.name.split(".")
                if any(_private(p) for p in parts) and a.name in mods and a.name != name:
                    out.append(f"{rel}:{n.lineno} import {a.name}")
    for n in nodes(path):
        if not isinstance(n, ast.Attribute) or not _private(n.attr):
            continue
        head = _dotted(n.value)
        if head is None:
            continue
        first, _, rest = head.partition(".")
        if first not in bound:
            continue
        module = bound[first] + (f".{rest}" if rest else "")
        if module in mods and module != name:
            out.append(f"{rel}:{n.lineno} {module}.{n.attr}")
    return sorted(set(out), key=lambda s: (s.split(":")[0], int(s.split(":")[1].split()[0])))


def private_uses(root: Path, folders: tuple[str, ...]) -> list[str]:
    """Every private name one module of ``folders`` takes from another module of the project."""
    everything = _modules(root, tuple(f for f in (*CHECKED, *COUNTED) if (root / f).is_dir()))
    out: list[str] = []
    for name, path in everything.items():
        if name.split(".")[0] in folders:
            out += _private_uses(name, path, everything, root)
    return out


def long_functions(root: Path) -> list[tuple[int, str]]:
    long = []
    for p in sorted((root / "fabfile").rglob("*.py")):
        rel = str(p.relative_to(root))
        for node in nodes(p):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                length = (node.end_lineno or node.lineno) - start + 1
                if length > FUNCTION_MAX:
                    long.append((length, f"{rel}:{node.lineno} {node.name}"))
    return sorted(long, reverse=True)


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    found = cycles(root)
    print("import cycles:", "none" if not found else "; ".join(" <-> ".join(g) for g in found))
    breaks = room_breaks(root)
    print(f"imports against the rooms' order: {len(breaks)}")
    for b in breaks:
        print(f"  {b}")
    checked = [f for f in CHECKED if (root / f).is_dir()]
    private = private_uses(root, tuple(checked))
    print(f"private names used across modules ({', '.join(f + '/' for f in checked)}): {len(private)}")
    for p in private:
        print(f"  {p}")
    in_tests = private_uses(root, COUNTED)
    print(f"private names used across modules by tests/ (counted, not enforced): {len(in_tests)}")
    for p in in_tests:
        print(f"  {p}")
    long = long_functions(root)
    print(f"functions over {FUNCTION_MAX} lines (listed, not enforced): {len(long)}")
    for n, where in long:
        print(f"  {n:5d}  {where}")
    return 1 if found or breaks or private else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m bench.layout | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
