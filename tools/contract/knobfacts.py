"""``fabfile/plan/sglang_knob_facts.py``: what each SGLang release does with each launch flag and variable, from the
wheels.

How a flag is classified (per release):

- its *field* is the ``dest=`` of its ``add_argument`` call, else its first long name with ``-`` → ``_``; from
  0.5.20 the annotated dataclass field (``Arg(cli_name=..., aliases=...)`` name it too);
- **alias**: a flag whose field is another flag's own field (``--cuda-graph-max-bs`` → ``dest=cuda_graph_max_bs_decode``
  from 0.5.14): the table names the flag it stands for;
- **used**: the field (or argparse's own dest, the first long name) is read outside argument handling: read as an
  attribute (``server_args.<field>``, ``cfg.<field>``: any object, so that a doubt counts as "used") or through a
  dynamic ``getattr``/``hasattr(x, "<field>")``, ``d["<field>"]`` or ``d.get("<field>")`` (the
  ``global_server_args_dict`` of older releases) in a module of ``sglang/srt`` other than ``server_args.py`` (a name in
  a list of strings, such as ``arg_groups/field_order.py``, is no read), or, inside
  ``server_args.py``, read as ``self.<field>`` or ``getattr(x, "<field>")`` (a field that only steers other fields
  counts as used); the ``add_argument`` calls, the dataclass declaration and ``from_cli_args`` do not count;
- **unused**: parsed and read nowhere else (``--num-continuous-decode-steps`` in every 0.5.x release read);
- **removed**: accepted by an older release read and not by this one (derived by the lookup, not stored).

A variable is **overwritten** when ``engine.py::_set_envs_and_config`` assigns it a literal with no guard (``os.environ[
"CUDA_DEVICE_MAX_CONNECTIONS"] = "8"``): whatever the operator set never reaches the workers.
"""

from __future__ import annotations

import ast
import pprint
import re
from typing import Any

from tools.contract import real

SERVER_ARGS = "sglang/srt/server_args.py"
# flag → every field name its add_argument call may fill (filled by flag_fields; argparse's dest is the first long
# name, which ServerArgs.from_cli_args then copies to its own field).
synonyms: dict[str, set[str]] = {}


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def flag_fields(w: real.Wheel) -> tuple[dict[str, str], set[str]]:
    """Every ``--flag`` → the ServerArgs field it fills, and the flags declared by an ``add_argument`` call of their
    own whose ``dest=`` is another call's field (the deprecated-alias pattern; names given together in one call, or a
    dataclass field's ``aliases``, are synonyms)."""
    out: dict[str, str] = {}
    separate: set[str] = set()
    synonyms.clear()
    for member in [SERVER_ARGS, *w.py("sglang/srt/arg_groups/")]:
        tree = w.tree(member)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                names = [s for s in (_str(a) for a in node.args) if s and s.startswith("--")]
                if not names:
                    continue
                dest = next((_str(k.value) for k in node.keywords if k.arg == "dest"), None)
                field = dest or names[0][2:].replace("-", "_")
                if dest and "--" + dest.replace("_", "-") not in names:
                    separate.update(names)
                for n in names:
                    out.setdefault(n, field)
                    synonyms[n] = {field, *(x[2:].replace("-", "_") for x in names)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                ann = node.annotation
                if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name)
                        and ann.value.id in ("A", "Annotated") and isinstance(ann.slice, ast.Tuple)
                        and len(ann.slice.elts) >= 2):
                    continue
                field, meta = node.target.id, ann.slice.elts[1]
                names = ["--" + field.replace("_", "-")]
                if isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "Arg":
                    kws = {k.arg: k.value for k in meta.keywords}
                    if isinstance(kws.get("no_cli"), ast.Constant) and getattr(kws["no_cli"], "value", None) is True:
                        continue
                    names = [_str(kws.get("cli_name")) or names[0]]
                    names += [s for s in (_str(e) for e in getattr(kws.get("aliases"), "elts", [])) if s]
                elif _str(meta) is None:
                    continue
                for n in names:
                    out.setdefault(n, field)
    return dict(sorted(out.items())), separate


def _arg_handling(member: str) -> bool:
    # From 0.5.20 ``arg_groups/`` also holds hooks that act on the fields (cuda_graph_hook.py): not argument handling.
    return member == SERVER_ARGS


# Reads, found in the text (a regular expression is ten times faster than parsing every module of 56 wheels, and a
# comment or docstring naming ``x.<field>`` only errs towards "used").
_ATTR = re.compile(r"\.([A-Za-z_]\w*)\b")
_STRING_READ = re.compile(r"""(?:\b(?:getattr|hasattr)\(\s*[\w.]+\s*,\s*|\[\s*|\.get\(\s*)["'](\w+)["']""")
_SELF_READ = re.compile(r"\bself\.([A-Za-z_]\w*)\b(?!\s*(?::[^=\n]*)?=(?!=))")
_SELF_GETATTR = re.compile(r"""\bgetattr\(\s*self\s*,\s*["'](\w+)["']""")


def _read_fields(w: real.Wheel, fields: set[str]) -> set[str]:
    """The fields read outside argument handling (see the module docstring)."""
    reads: set[str] = set()
    for member in w.py("sglang/srt/"):
        text = w.text(member) or ""
        if _arg_handling(member):
            reads.update(_SELF_READ.findall(text))
            reads.update(_SELF_GETATTR.findall(text))
        else:
            reads.update(_ATTR.findall(text))
            reads.update(_STRING_READ.findall(text))
    return reads & fields


def overwritten_env(w: real.Wheel) -> dict[str, str]:
    """Variables ``_set_envs_and_config`` assigns a literal unconditionally → that literal."""
    return {wr["var"]: wr["value"] for wr in real.env_writes(w)
            if wr["how"] == "set" and not wr["when"] and wr["value"] is not None
            and re.fullmatch(r"[\w:.,-]*", wr["value"])}


def version_facts(w: real.Wheel) -> dict[str, Any]:
    fields, separate = flag_fields(w)
    own = {f[2:].replace("-", "_"): f for f in fields}  # field → the flag named after it
    def names(flag: str) -> set[str]:  # argparse's own dest (first long name) and the field ServerArgs copies it to
        return {fields[flag], flag[2:].replace("-", "_"), *synonyms.get(flag, ())}

    reads = _read_fields(w, {n for f in fields for n in names(f)})
    aliases = {f: own[fd] for f, fd in fields.items() if f in separate and own.get(fd) not in (None, f)}
    unused = sorted(f for f, fd in fields.items() if f not in aliases and not names(f) & reads)
    return {"unused": unused, "aliases": dict(sorted(aliases.items())), "overwritten_env": overwritten_env(w)}


def render(table: dict[str, dict[str, Any]]) -> str:
    body = pprint.pformat(table, width=116, sort_dicts=False)
    return (
        '"""What each SGLang release does with each launch flag and variable (generated; do not edit).\n\n'
        "Regenerate with ``python -m tools.contract --write``: read from the real release wheels by\n"
        "``tools/contract/knobfacts.py`` (its docstring says how \"used\" is decided;\n"
        "``tests/wheels/test_knob_facts.py`` fails when this table drifts from them).\n"
        "Keys are the releases read, oldest first (every release the spec table reads); look a host version up\n"
        "through ``fabfile.plan.knob_effects``. Per release: ``unused`` (flags parsed and read nowhere else),\n"
        "``aliases`` (flag → the flag it stands for), ``overwritten_env`` (variable → the value SGLang assigns it\n"
        "unconditionally at launch).\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from typing import Any\n\n"
        f"KNOB_FACTS: dict[str, dict[str, Any]] = {body}\n"
    )
