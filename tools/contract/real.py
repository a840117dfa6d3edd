"""Facts read from a real SGLang release wheel: the zip is opened and its source parsed with ``ast``.

Nothing is installed and nothing of SGLang is imported or executed. Each function here answers one fact
of the contract (docs/sglang-contract.md) for one wheel; the simulator's side is in ``sim.py``.
"""

from __future__ import annotations

import ast
import re
import zipfile
from functools import cached_property
from pathlib import Path
from typing import Any

ROUTES = (
    "/health",
    "/health_generate",
    "/ready",
    "/server_info",
    "/get_server_info",
    "/model_info",
    "/get_model_info",
    "/metrics",
    "/generate",
)
READY_LINE_RE = re.compile(r"fired up and ready to roll")


class Wheel:
    """One wheel's ``sglang`` sources, parsed on demand."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.zip = zipfile.ZipFile(self.path)
        self.names = set(self.zip.namelist())
        self._trees: dict[str, ast.Module | None] = {}

    @cached_property
    def version(self) -> str:
        meta = [n for n in self.names if re.match(r"sglang-[^/]+\.dist-info/METADATA$", n)]
        for line in self.zip.read(meta[0]).decode().splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
        raise ValueError(f"{self.path.name}: no Version in METADATA")

    def text(self, member: str) -> str | None:
        if member not in self.names:
            return None
        return self.zip.read(member).decode("utf-8", "replace")

    def tree(self, member: str) -> ast.Module | None:
        if member not in self._trees:
            src = self.text(member)
            try:
                self._trees[member] = ast.parse(src) if src is not None else None
            except SyntaxError:
                self._trees[member] = None
        return self._trees[member]

    def py(self, prefix: str = "sglang/") -> list[str]:
        return sorted(n for n in self.names if n.startswith(prefix) and n.endswith(".py"))


def module_name(member: str) -> str:
    mod = member[: -len(".py")].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _qualname(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """``Class.method`` / ``function`` enclosing ``node``; ``<module>`` at top level (nested defs dropped
    as Python's own ``co_qualname`` would show them: ``outer.<locals>.inner``)."""
    names: list[str] = []
    cur = parents.get(node)
    while cur is not None:
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(cur.name)
        cur = parents.get(cur)
    if not names:
        return "<module>"
    out: list[str] = []
    for _i, n in enumerate(reversed(names)):
        out.append(n)
    # functions nested in functions get the <locals> marker, as in co_qualname
    return ".".join(out)


def _str_const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _template(node: ast.AST) -> str | None:
    """A string literal or f-string as text, each replacement field shown as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                parts.append("{" + ast.unparse(v.value) + "}")
        return "".join(parts)
    return None


# ----------------------------------------------------------------------------------------------- flags


def _literal_list(node: ast.AST | None, module: ast.Module | None) -> list[str] | None:
    """The choices of an argument: a literal list/tuple/set, or a module-level name bound to one."""
    if node is None:
        return None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        vals = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return [str(v) for v in vals] if len(vals) == len(node.elts) else None
    if isinstance(node, ast.Name) and module is not None:
        for st in module.body:
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in st.targets):
                return _literal_list(st.value, module)
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == node.id:
                return _literal_list(st.value, module)
    return None


def _choices_of(call: ast.Call, module: ast.Module | None) -> list[str] | str:
    for kw in call.keywords:
        if kw.arg == "choices":
            got = _literal_list(kw.value, module)
            return sorted(got) if got is not None else "dynamic"
    return "any"


def flags(w: Wheel) -> dict[str, list[str] | str]:
    """Every ``--flag`` ``launch_server`` accepts → its choices (sorted list, ``any`` or ``dynamic``).

    Two ways SGLang declares them: ``parser.add_argument("--x", ...)`` (server_args.py, all versions) and,
    from 0.5.20, annotated fields ``name: A[T, "help" | Arg(...)]`` that ``add_cli_args_from_dataclass`` turns
    into ``--name`` (plus ``Arg(aliases=..., cli_name=...)``, skipped with ``no_cli=True``).
    """
    out: dict[str, list[str] | str] = {}
    members = ["sglang/srt/server_args.py", *w.py("sglang/srt/arg_groups/")]
    for member in members:
        tree = w.tree(member)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                names = [s for s in (_str_const(a) for a in node.args) if s and s.startswith("--")]
                for n in names:
                    out[n] = _choices_of(node, tree)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                ann = node.annotation
                if not (
                    isinstance(ann, ast.Subscript)
                    and isinstance(ann.value, ast.Name)
                    and ann.value.id in ("A", "Annotated")
                    and isinstance(ann.slice, ast.Tuple)
                    and len(ann.slice.elts) >= 2
                ):
                    continue
                typ, meta = ann.slice.elts[0], ann.slice.elts[1]
                field = node.target.id
                choices: list[str] | str = "any"
                lit = [
                    n
                    for n in ast.walk(typ)
                    if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "Literal"
                ]
                if lit:
                    got = _literal_list(
                        lit[0].slice if isinstance(lit[0].slice, ast.Tuple) else ast.Tuple(elts=[lit[0].slice]),
                        tree,
                    )
                    choices = sorted(got) if got is not None else "dynamic"
                if _str_const(meta) is not None:
                    names = ["--" + field.replace("_", "-")]
                elif isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "Arg":
                    kws = {k.arg: k.value for k in meta.keywords}
                    if isinstance(kws.get("no_cli"), ast.Constant) and kws["no_cli"].value is True:  # type: ignore[union-attr]
                        continue
                    names = [_str_const(kws.get("cli_name")) or "--" + field.replace("_", "-")]
                    names += _literal_list(kws.get("aliases"), tree) or []
                    if "choices" in kws:
                        got = _literal_list(kws["choices"], tree)
                        choices = sorted(got) if got is not None else "dynamic"
                else:
                    continue
                for n in names:
                    out[n] = choices
    return dict(sorted(out.items()))


# ----------------------------------------------------------------------------------------------- routes


def routes(w: Wheel) -> dict[str, str | None]:
    """Each contract route → the methods SGLang serves it with (``GET``, ``POST,PUT``), ``mount`` for the
    Prometheus app that ``--enable-metrics`` mounts on ``/metrics``, or None when the version lacks it."""
    found: dict[str, str] = {}
    tree = w.tree("sglang/srt/entrypoints/http_server.py")
    if tree is not None:
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for d in node.decorator_list:
                if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.args):
                    continue
                path = _str_const(d.args[0])
                if path is None:
                    continue
                if d.func.attr == "api_route":
                    ms = [k.value for k in d.keywords if k.arg == "methods"]
                    methods = sorted(_literal_list(ms[0], tree) or []) if ms else ["GET"]
                elif d.func.attr in ("get", "post", "put", "delete"):
                    methods = [d.func.attr.upper()]
                else:
                    continue
                prev = found.get(path, "")
                found[path] = ",".join(sorted(set(filter(None, prev.split(","))) | set(methods)))
    for member in w.py("sglang/srt/"):
        src = w.text(member) or ""
        if 'Mount("/metrics"' in src:
            found.setdefault("/metrics", "mount")
    return {r: found.get(r) for r in ROUTES}


def health_runs_generate(w: Wheel) -> bool | None:
    """Whether ``/health`` is served by the same handler as ``/health_generate`` (a one-token generate)."""
    tree = w.tree("sglang/srt/entrypoints/http_server.py")
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            paths = {
                _str_const(d.args[0])
                for d in node.decorator_list
                if isinstance(d, ast.Call) and d.args and _str_const(d.args[0])
            }
            if "/health" in paths:
                return "/health_generate" in paths
    return None


# ----------------------------------------------------------------------------------------------- log lines


def ready_line(w: Wheel) -> str | None:
    tree = w.tree("sglang/srt/entrypoints/http_server.py")
    if tree is None:
        return None
    for node in ast.walk(tree):
        s = _str_const(node)
        if s and READY_LINE_RE.search(s):
            return s
    return None


def _function_with(w: Wheel, needle: str, prefix: str = "sglang/srt/managers/") -> tuple[str, ast.AST] | None:
    """The innermost function whose literals start with ``needle`` (first module that has one)."""
    for member in w.py(prefix) + [m for m in w.py("sglang/srt/") if not m.startswith(prefix)]:
        src = w.text(member) or ""
        if needle not in src:
            continue
        tree = w.tree(member)
        if tree is None:
            continue
        best = None
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    t = _template(sub) if isinstance(sub, (ast.Constant, ast.JoinedStr)) else None
                    if t is not None and t.startswith(needle):
                        if best is None or (node.lineno >= best.lineno):  # type: ignore[attr-defined]
                            best = node
                        break
        if best is not None:
            return member, best
    return None


def _msg_templates(fn: ast.AST) -> list[str]:
    """The string pieces assigned or appended to ``msg`` in source order, fields as ``{}``."""
    pieces: list[tuple[int, int, str]] = []
    for node in ast.walk(fn):
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AugAssign):
            target = node.target
        if not (isinstance(target, ast.Name) and target.id == "msg"):
            continue
        val = node.value  # type: ignore[attr-defined]
        t = _template(val)
        if t is not None:
            pieces.append((node.lineno, node.col_offset, re.sub(r"\{[^{}]*\}", "{}", t)))
    return [p[2] for p in sorted(pieces)]


def decode_batch(w: Wheel) -> dict[str, Any]:
    """The ``Decode batch`` line as SGLang builds it: head, speculative piece, tail, trailing ", ", rate."""
    found = _function_with(w, "Decode batch")
    if found is None:
        return {}
    member, fn = found
    pieces = []
    for p in _msg_templates(fn):
        # Up to 0.4.5.post3 each branch builds the whole line in one f-string: split it where later releases do.
        body = re.search(r"accept len|cuda graph|gen throughput", p) if p.startswith("Decode batch") else None
        if body is None:
            pieces.append(p)
            continue
        tail_at = re.search(r"cuda graph|gen throughput", p)
        pieces += [p[: body.start()]] + ([p[body.start(): tail_at.start()]] if tail_at and tail_at.start() >
                                         body.start() else []) + ([p[tail_at.start():]] if tail_at else [])
    head_piece = next((p for p in pieces if p.startswith("Decode batch")), "")
    m = re.match(r"Decode batch( \[\{\}\]|\{\})?([.,])", head_piece)
    head = "Decode batch" + ((m.group(1) if m and m.group(1) == " [{}]" else "") + m.group(2) if m else "?")
    spec = next((p for p in pieces if p.startswith("accept len")), None)
    tail = next((p for p in pieces if "gen throughput" in p), None)
    src = ast.unparse(fn)
    total = re.search(r"total_draft_tokens = (.+)", src)
    if "draft_per_round" in src or "num_correct_drafts" in src:
        rate = "(accept_len - 1) / (draft_tokens - 1)"
    elif "accept rate" in (spec or "") and total and re.search(r"num_steps\b.*\+ 1", total.group(1)):
        rate = "accept_len / (steps + 1)"
    elif "accept rate" in (spec or ""):
        rate = "accept_len / draft_tokens"
    else:
        rate = None
    if tail is not None:
        tail = tail.replace("{}graph", "cuda graph").replace("{}: {}, gen", "cuda graph: {}, gen")
        tail = tail.replace("{'cuda graph' if self.device == 'cuda' else 'cpu graph'}", "cuda graph")
    return {
        "where": f"{module_name(member)}:{getattr(fn, 'name', '?')}",
        "head": head,
        "spec": spec,
        "tail": tail,
        "trailing_comma": bool(tail and tail.endswith(", ")),
        "accept_rate": rate,
    }


def server_args_line(w: Wheel) -> dict[str, Any]:
    """How the launcher logs its arguments: ``server_args=ServerArgs(...)`` (the dataclass repr) or, where
    SGLang logs a dict instead, ``server_args={...}``."""
    tree = w.tree("sglang/srt/entrypoints/engine.py")
    if tree is None:
        return {}
    parents = _parents(tree)
    shapes: set[str] = set()
    where: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        vals = node.values
        if not (vals and isinstance(vals[0], ast.Constant) and str(vals[0].value) == "server_args="):
            continue
        fv = vals[1] if len(vals) > 1 else None
        if not isinstance(fv, ast.FormattedValue):
            continue
        if isinstance(fv.value, ast.Name):
            shapes.add("server_args=ServerArgs(")
        elif (
            isinstance(fv.value, ast.Call)
            and isinstance(fv.value.func, ast.Attribute)
            and fv.value.func.attr.endswith("dict")
        ):
            shapes.add("server_args={")
        elif isinstance(fv.value, ast.Call) and isinstance(fv.value.func, ast.Name):
            helper = next(
                (f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == fv.value.func.id), None
            )
            body = ast.unparse(helper) if helper else ""
            shapes.add("server_args={" if "dict" in body else f"server_args=<{fv.value.func.id}()>")
        where.add(_qualname(node, parents))
    return {"shape": sorted(shapes), "where": sorted(where)}


# ----------------------------------------------------------------------------------------------- titles


def titles(w: Wheel) -> dict[str, Any]:
    """Process titles SGLang sets with ``setproctitle``; the scheduler's prefix parts in order, each with the
    attribute that turns it on (``dp`` when a DP rank is given, else ``<x>_size`` > 1)."""
    literal: set[str] = set()
    parts: list[tuple[str, str]] = []
    for member in w.py("sglang/srt/"):
        src = w.text(member) or ""
        if "setproctitle(" not in src:
            continue
        tree = w.tree(member)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "setproctitle"
                and node.args
            ):
                continue
            t = _template(node.args[0])
            if t is None:
                continue
            if t.startswith("sglang::scheduler{"):
                fn = next(
                    f
                    for f in ast.walk(tree)
                    if isinstance(f, ast.FunctionDef) and any(n is node for n in ast.walk(f))
                )
                if parts:
                    continue
                for st in ast.walk(fn):
                    if not isinstance(st, ast.If):
                        continue
                    for inner in st.body:
                        if (
                            isinstance(inner, ast.AugAssign)
                            and isinstance(inner.target, ast.Name)
                            and inner.target.id == "prefix"
                        ):
                            piece = _template(inner.value) or ""
                            name = re.match(r"\s*([A-Z_]+)\{", piece)
                            cond = ast.unparse(st.test)
                            size = re.search(r"(?:configured_)?(\w+_size)(?:\(\))?\s*>\s*1", cond)
                            on = size.group(1) if size else ("dp" if "is not None" in cond else cond)
                            if name:
                                parts.append((name.group(1), on))
                parts.sort(key=lambda p: 0)  # keep source order (ast.walk visits Ifs in order here)
                if not parts:
                    parts = _assigned_title_parts(fn)
            else:
                literal.add(re.sub(r"\{[^{}]*\}", "{}", t))
    return {"scheduler_parts": [f"{n}:{on}" for n, on in parts], "other": sorted(literal)}


def _assigned_title_parts(fn: ast.AST) -> list[tuple[str, str]]:
    """Up to 0.4.6.post1 the prefix is assigned whole, ``prefix = f" TP{tp_rank}"`` or, with a DP rank,
    ``f" DP{dp_rank} TP{tp_rank}"``: a part in every assignment is always there (``always``), the others come
    with the DP rank."""
    shapes = []
    for st in ast.walk(fn):
        if (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                and st.targets[0].id == "prefix"):
            shapes.append(re.findall(r"([A-Z_]+)\{", _template(st.value) or ""))
    if not shapes:
        return []
    longest = max(shapes, key=len)
    return [(n, "always" if all(n in sh for sh in shapes) else "dp") for n in longest]


def render_scheduler_title(parts: list[str], ctx: dict[str, Any]) -> str:
    """The title a scheduler gets for ``ctx`` (sizes and ranks), from the prefix parts."""
    ranks = {"DP": "dp_rank", "PP": "pp_rank", "TP": "tp_rank", "EP": "ep_rank", "ATTN_CP": "attn_cp_rank",
             "MOE_DP": "moe_dp_rank"}
    prefix = ""
    for p in parts:
        name, on = p.split(":", 1)
        active = (on == "always" or (ctx.get("dp_rank") is not None if on == "dp" else int(ctx.get(on, 1)) > 1))
        if active:
            prefix += f" {name}{ctx.get(ranks.get(name, ''), 0)}"
    return "sglang::scheduler" + prefix.replace(" ", "_")


# ----------------------------------------------------------------------------------------------- plugins


def load_plugins_sites(w: Wheel) -> list[str]:
    """Every ``module:qualname`` that calls ``load_plugins()`` (``<module>`` for top-level code)."""
    out: set[str] = set()
    for member in w.py("sglang/"):
        src = w.text(member) or ""
        if "load_plugins()" not in src:
            continue
        tree = w.tree(member)
        if tree is None:
            continue
        parents = _parents(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "load_plugins":
                out.add(f"{module_name(member)}:{_qualname(node, parents)}")
    return sorted(out)


# ----------------------------------------------------------------------------------------------- env writes


def _env_write(node: ast.AST) -> tuple[str, str, ast.AST | None] | None:
    """``os.environ["X"] = v`` → (X, "set", v); ``os.environ.setdefault("X", v)`` → (X, "setdefault", v)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        t = node.targets[0]
        if (
            isinstance(t, ast.Subscript)
            and ast.unparse(t.value) == "os.environ"
            and _str_const(t.slice) is not None
        ):
            return str(_str_const(t.slice)), "set", node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "setdefault"
        and ast.unparse(node.func.value) == "os.environ"
        and node.args
        and _str_const(node.args[0]) is not None
    ):
        return str(_str_const(node.args[0])), "setdefault", node.args[1] if len(node.args) > 1 else None
    return None


def _guards(node: ast.AST, parents: dict[ast.AST, ast.AST], stop: ast.AST) -> list[str]:
    """The conditions under which ``node`` runs inside ``stop``: enclosing ``if`` tests (negated in else)."""
    out: list[str] = []
    child, cur = node, parents.get(node)
    while cur is not None and cur is not stop:
        if isinstance(cur, ast.If) and child is not cur.test:
            test = ast.unparse(cur.test)
            out.append(test if any(child is s for s in cur.body) else f"not ({test})")
        child, cur = cur, parents.get(cur)
    return list(reversed(out))


def env_writes(w: Wheel, fn_name: str = "_set_envs_and_config") -> list[dict[str, Any]]:
    """The environment writes of ``engine.py::_set_envs_and_config``, in order, with their guards."""
    tree = w.tree("sglang/srt/entrypoints/engine.py")
    if tree is None:
        return []
    fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == fn_name]
    if not fns:
        return []
    fn = fns[0]
    parents = _parents(fn)
    out = []
    for node in ast.walk(fn):
        got = _env_write(node)
        if got is None:
            continue
        var, how, val = got
        out.append(
            {
                "line": node.lineno,  # type: ignore[attr-defined]
                "var": var,
                "how": how,
                "value": _str_const(val) if _str_const(val) is not None else (ast.unparse(val) if val else None),
                "when": _guards(node, parents, fn),
            }
        )
    return sorted(out, key=lambda r: r["line"])


def nccl_writes(w: Wheel) -> list[dict[str, Any]]:
    """Every write of an ``NCCL_*`` variable anywhere in ``sglang/srt`` (where, how, value, guards)."""
    out = []
    for member in w.py("sglang/srt/"):
        src = w.text(member) or ""
        if "NCCL_" not in src or "os.environ" not in src:
            continue
        tree = w.tree(member)
        if tree is None:
            continue
        parents = _parents(tree)
        for node in ast.walk(tree):
            got = _env_write(node)
            if got is None or not got[0].startswith("NCCL_"):
                continue
            var, how, val = got
            fn = parents.get(node)
            while fn is not None and not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fn = parents.get(fn)
            out.append(
                {
                    "var": var,
                    "how": how,
                    "value": _str_const(val) if _str_const(val) is not None else (ast.unparse(val) if val else None),
                    "where": f"{module_name(member)}:{_qualname(node, parents)}",
                    "when": _guards(node, parents, fn) if fn is not None else [],
                }
            )
    return sorted(out, key=lambda r: (r["where"], r["var"], r["how"]))


def facts(w: Wheel) -> dict[str, Any]:
    """Every contract fact of one wheel."""
    return {
        "version": w.version,
        "flags": flags(w),
        "routes": routes(w),
        "health_runs_generate": health_runs_generate(w),
        "ready_line": ready_line(w),
        "decode_batch": decode_batch(w),
        "server_args_line": server_args_line(w),
        "titles": titles(w),
        "load_plugins": load_plugins_sites(w),
        "env_writes": env_writes(w),
        "nccl_writes": nccl_writes(w),
    }


# ----------------------------------------------------------------------------------------------- env behaviour


class _Stub:
    """Stands in for every name ``_set_envs_and_config`` uses that the contract does not model (logger,
    signal, mp, assert_pkg_version, set_ulimit, ...): callable, any attribute, falsy, equal to nothing."""

    def __call__(self, *a: Any, **k: Any) -> _Stub:
        return _Stub()

    def __getattr__(self, name: str) -> _Stub:
        return _Stub()

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())

    def __contains__(self, item: Any) -> bool:
        return False

    def __int__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 0

    def __gt__(self, other: Any) -> bool:
        return False

    def __lt__(self, other: Any) -> bool:
        return False


class _Args:
    """``server_args`` for a scenario: the scenario's attributes, the contract defaults, else a falsy stub (off)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        return _Stub()  # an option the scenario does not set: off (falsy, 0, callable)


def run_env_function(w: Wheel, env: dict[str, str], args: dict[str, Any]) -> dict[str, str | None]:
    """Run the wheel's own ``_set_envs_and_config`` source on ``env`` and ``args`` and return what it wrote.

    Only that one function is compiled, with ``os.environ`` replaced by a plain dict and every other name it
    uses replaced by a stub; nothing of SGLang is imported. Assumptions, the same on the simulator side: the
    launcher runs in the main thread, the GPUs are not an MNNVL fabric (H200s), the KV-shard gather is off.
    """
    import os as real_os
    import random
    import time
    import types

    from tools.contract.probe import DEFAULTS, diff

    src = w.text("sglang/srt/entrypoints/engine.py") or ""
    tree = ast.parse(src)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_set_envs_and_config")
    fn.decorator_list = []
    mod = ast.Module(body=[fn], type_ignores=[])
    environ = dict(env)
    fake_os = types.SimpleNamespace(environ=environ, getpid=real_os.getpid, path=real_os.path)
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
    glb: dict[str, Any] = {name: _Stub() for name in names}
    glb.update(
        os=fake_os,
        time=time,
        random=random,
        str=str,
        int=int,
        bool=bool,
        resolving_view=lambda x: x,
        is_mnnvl_fabric_device=lambda: False,
        get_bool_env_var=lambda name, default="false": environ.get(name, default).lower() in ("1", "true"),
    )
    exec(compile(mod, f"<{w.version} engine.py>", "exec"), glb)
    glb["_set_envs_and_config"](_Args({**DEFAULTS, **args}))
    return diff(env, environ)


def _env_default(w: Wheel, name: str) -> str | None:
    """The default of ``envs.NAME`` from ``sglang/srt/environ.py`` (``NAME = EnvInt(8)`` → ``"8"``)."""
    m = re.search(rf"^\s*{name}\s*=\s*Env\w+\(\s*([^,)]+)", w.text("sglang/srt/environ.py") or "", re.M)
    return ast.literal_eval(m.group(1)).__str__() if m else None


def deterministic_writes(w: Wheel) -> dict[str, str | None]:
    """What ``--enable-deterministic-inference`` with TP > 1 writes (SGLang's argument post-processing)."""
    out: dict[str, str | None] = {}
    for r in nccl_writes(w):
        if "deterministic" not in r["where"]:
            continue
        val = r["value"]
        m = re.fullmatch(r"str\(envs\.(\w+)\.get\(\)\)", val or "")
        if m:
            val = _env_default(w, m.group(1))
        elif r["value"] == "nchannels":
            src = w.text(r["where"].split(":")[0].replace(".", "/") + ".py") or ""
            m2 = re.search(r"nchannels = str\(envs\.(\w+)\.get\(\)\)", src)
            val = _env_default(w, m2.group(1)) if m2 else None
        out[r["var"]] = val
    return dict(sorted(out.items()))


SPEC_ARCHS = ["LlamaForCausalLM", "Qwen3ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
              "GptOssForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "MiMoV2ForCausalLM",
              "Grok1ForCausalLM"]


def spec_defaults(w: Wheel, arch: str, algorithm: str) -> tuple[int, int, int] | None:
    """(steps, topk, draft tokens) SGLang picks when ``--speculative-num-steps`` is not given: the wheel's own
    ``auto_choose_speculative_params`` compiled alone and run on a model of architecture ``arch``."""
    import builtins
    import json
    import os
    import tempfile
    import types

    hf = types.SimpleNamespace(architectures=[arch])
    for member in ("sglang/srt/server_args.py", "sglang/srt/arg_groups/speculative_hook.py"):
        src = w.text(member)
        if src is None:
            continue
        tree = ast.parse(src)
        fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
               and n.name in ("auto_choose_speculative_params", "_auto_choose_speculative_params")]
        if not fns:
            continue
        fn = fns[0]
        fn.decorator_list = []
        names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        # Builtins stay themselves: a stubbed ValueError cannot be raised (0.4.x raises one when the model has no
        # config.json), a stubbed open() reads nothing.
        glb: dict[str, Any] = {name: _Stub() for name in names if not hasattr(builtins, name)}
        glb.update(json=json, os=os, get_config=lambda *a, **k: hf, resolving_view=lambda x: x)
        exec(compile(ast.Module(body=[fn], type_ignores=[]), f"<{w.version} {member}>", "exec"), glb)
        with tempfile.TemporaryDirectory(prefix="contract-model-") as model:
            # Up to 0.4.x the function reads <model_path>/config.json itself.
            Path(model, "config.json").write_text(json.dumps({"architectures": [arch]}))
            args = _Args({"speculative_algorithm": algorithm, "model_path": model, "json_model_override_args": "{}",
                          "trust_remote_code": False, "revision": None, "decrypted_config_file": None})
            args.get_model_config = lambda: types.SimpleNamespace(hf_config=hf)  # type: ignore[attr-defined]
            args.get_hf_config = lambda: hf  # type: ignore[attr-defined]
            func = glb[fn.name]
            got = func(args, arch) if len(fn.args.args) == 2 else func(args)
        return (int(got[0]), int(got[1]), int(got[2]))
    return None


def bench_serving_flags(w: Wheel) -> dict[str, list[str] | str]:
    """``python -m sglang.bench_serving``'s flags → choices (from 0.5.15 that module re-exports
    ``sglang.benchmark.serving``, whose parser is read instead)."""
    out: dict[str, list[str] | str] = {}
    members = ["sglang/bench_serving.py"]
    if "sglang.benchmark.serving" in (w.text(members[0]) or ""):
        members.append("sglang/benchmark/serving.py")
    for member in members:
        tree = w.tree(member)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                for n in (s for s in (_str_const(a) for a in node.args) if s and s.startswith("--")):
                    out[n] = _choices_of(node, tree)
    return dict(sorted(out.items()))
