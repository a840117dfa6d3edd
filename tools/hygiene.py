"""Two rules ``./dev check`` holds that neither ruff nor mypy knows (issue 41):

1. **No test that cannot fail.** A test function (``test_*`` in ``tests/``) must check something: an ``assert``, a
   ``pytest.raises``/``warns``/``fail``, or a call of a helper that does (a function of the test tree, found by
   name, that asserts itself or calls one that does). An ``assert`` whose condition is ``... or True`` (or any
   constant truth) is refused wherever it is: it passes whatever the code does.
2. **No absolute path of a build machine in the product.** ``fabfile/`` and ``templates/`` name no path under a
   developer's or a CI machine's own folders (``/work/``, ``/home/``, ``/Users/``, ``/builds/``), in code or in a
   comment: such a path means nothing on the user's machine, and data the product cites belongs in the repository.

    .venv/bin/python -m tools.hygiene [ROOT]

Silent and exit 0 when both hold; one line per break (``path:line: what``) and exit 1 otherwise.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

# pytest's own ways of checking (pytest.raises, pytest.warns, pytest.fail, pytest.approx inside an assert), and
# unittest's ``self.assert*``: a call of one of these is a check.
CHECKING_CALLS = frozenset({"raises", "warns", "fail", "deprecated_call", "xfail"})
BUILD_MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|Users|builds)/[\w.-]")
PRODUCT = ("fabfile", "templates")


def _called_names(fn: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                names.add(f.id)
            elif isinstance(f, ast.Attribute):
                names.add(f.attr)
    return names


def _checks_directly(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Raise):   # a helper that raises AssertionError (or any error) on a bad state
            return True
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in CHECKING_CALLS or name.startswith("assert"):
                return True
    return False


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _always_true(test: ast.expr) -> bool:
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_always_true(v) for v in test.values)
    return False


def test_breaks(root: Path) -> list[str]:
    """Assertion-free tests and assertions that always hold, under ``root/tests``."""
    trees = {p: ast.parse(p.read_text(), str(p)) for p in sorted((root / "tests").rglob("*.py"))}
    # Which names check something: fixed point over every function of the test tree, by simple name (a helper
    # is found wherever it is defined; two helpers of one name that differ would only make the rule lenient).
    bodies: dict[str, list[ast.AST]] = {}
    for tree in trees.values():
        for fn in _functions(tree):
            bodies.setdefault(fn.name, []).append(fn)
    checking = {name for name, fns in bodies.items() if any(_checks_directly(f) for f in fns)}
    calls = {name: set().union(*(_called_names(f) for f in fns)) for name, fns in bodies.items()}
    grew = True
    while grew:
        grew = False
        for name, called in calls.items():
            if name not in checking and called & checking:
                checking.add(name)
                grew = True
    breaks = []
    for path, tree in trees.items():
        rel = path.relative_to(root)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert) and _always_true(node.test):
                breaks.append(f"{rel}:{node.lineno}: this assert holds whatever the code does")
        if not path.name.startswith("test_"):
            continue
        for fn in _functions(tree):
            if fn.name.startswith("test_") and fn.name not in checking:
                breaks.append(f"{rel}:{fn.lineno}: {fn.name} checks nothing (no assert, no pytest.raises, "
                              "no helper that checks)")
    return breaks


def path_breaks(root: Path) -> list[str]:
    """Absolute paths of a build machine in the product's files."""
    breaks = []
    for folder in PRODUCT:
        for path in sorted((root / folder).rglob("*")):
            if not path.is_file() or path.suffix not in (".py", ".j2", ".sh", ".txt", ".md"):
                continue
            for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = BUILD_MACHINE_PATH.search(line)
                if m:
                    breaks.append(f"{path.relative_to(root)}:{no}: a build machine's absolute path "
                                  f"({line[m.start():m.start() + 40].split()[0]}): cite a file in the repository")
    return breaks


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    breaks = test_breaks(root) + path_breaks(root)
    for b in breaks:
        print(b)
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
