"""Where a patch block goes in SGLang's source and how it is put in or taken out.

An anchor is found by parsing the module (a module-level ``def`` of a known name, never a line number), and a
block is placed only where the edited file still parses and the block runs where it must (``_verify_placement``).
Pure text in, text out: nothing here touches a file.
"""

from __future__ import annotations

import ast
import re

from .. import versions
from ..common import AgentError
from .modes import ENGINE_ANCHOR_LINE, ENGINE_DEF_RE, SCHED_DEF_RE, SENTINEL_BEGIN, SENTINEL_END, SIG_END_RE


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _newline_of(line: str) -> str:
    if line.endswith("\r\n"):
        return "\r\n"
    return "\n"


def _indent_block(block: str, indent: str, nl: str) -> str:
    out = []
    for raw in block.splitlines():
        out.append((indent + raw if raw.strip() else "") + nl)
    return "".join(out)


def _module_level_defs(lines: list[str], regex: re.Pattern[str]) -> list[int]:
    return [i for i, ln in enumerate(lines) if regex.match(ln)]


def _try_parse(text: str, path: str) -> ast.Module | None:
    try:
        return ast.parse(text, filename=path)
    except SyntaxError:
        return None  # the host Python may be older than SGLang's syntax; fall back to the line scan only


def _anchor_err(kind: str, rel: str, anchor: str, version: str, count: int, detail: str = "") -> AgentError:
    what = "not found" if kind == "anchor_not_found" else f"found {count} times"
    msg = f"Patch anchor {what} in {rel} (SGLang {version}): {anchor}."
    if detail:
        msg = msg[:-1] + " (" + detail + ")."
    return AgentError(
        kind,
        msg,
        hint="This SGLang version's source does not look as expected; use patch mode 'env' or 'plugin' "
        f"({versions.PLUGIN_SYSTEM}+), or report the version.",
        file=rel,
        anchor=anchor,
        sglang_version=version,
    )


def _find_func_end(lines: list[str], start: int) -> int:
    """Index one past the last line of the column-0 def at ``start`` (next column-0 code line)."""
    i = start + 1
    while i < len(lines):
        ln = lines[i]
        if ln.strip() and not ln[0].isspace() and not ln.startswith(("#", ")")):
            return i
        i += 1
    return i


def _the_module_level_def(text: str, lines: list[str], def_re: re.Pattern[str], name: str, rel: str,
                          version: str) -> int:
    """Line index of the one module-level ``def name(`` (a regex over the lines, confirmed by ``ast`` when this
    Python can parse the file); a missing or duplicated definition is an anchor error naming file and version."""
    defs = _module_level_defs(lines, def_re)
    tree = _try_parse(text, rel)
    if tree is not None:
        ast_defs = [n.lineno - 1 for n in tree.body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
        defs = [d for d in defs if d in ast_defs]
    if len(defs) != 1:
        raise _anchor_err("anchor_not_found" if not defs else "anchor_ambiguous", rel,
                          f"module-level 'def {name}('", version, len(defs))
    return defs[0]


def find_engine_anchor(text: str, rel: str, version: str) -> int:
    """Line index before which the engine block goes (the ``mp.set_start_method`` line)."""
    lines = _lines(text)
    start = _the_module_level_def(text, lines, ENGINE_DEF_RE, "_set_envs_and_config", rel, version)
    end = _find_func_end(lines, start)
    hits = [i for i in range(start + 1, end) if lines[i].rstrip("\r\n").rstrip() == ENGINE_ANCHOR_LINE]
    anchor2 = f"{ENGINE_ANCHOR_LINE.strip()!r} inside _set_envs_and_config"
    if len(hits) != 1:
        raise _anchor_err(
            "anchor_not_found" if not hits else "anchor_ambiguous", rel, anchor2, version, len(hits)
        )
    return hits[0]


def find_scheduler_anchor(text: str, rel: str, version: str) -> int:
    """Line index of the ``):`` line closing ``run_scheduler_process``'s signature (block goes after it)."""
    lines = _lines(text)
    start = _the_module_level_def(text, lines, SCHED_DEF_RE, "run_scheduler_process", rel, version)
    anchor2 = "line '):' closing the signature of run_scheduler_process"
    for i in range(start + 1, len(lines)):
        ln = lines[i]
        if SIG_END_RE.match(ln):
            return i
        if ln.strip() and not ln[0].isspace():
            break  # left the signature without a bare '):' line
    raise _anchor_err("anchor_not_found", rel, anchor2, version, 0)


def _verify_placement(role: str, orig: str, new: str, rel: str, version: str) -> None:
    """Self-check with ast (when this Python can parse the file): it compiles and the block sits right."""
    if _try_parse(orig, rel) is None:
        return
    try:
        tree = ast.parse(new, filename=rel)
    except SyntaxError as e:
        raise AgentError(
            "patch_verify_failed",
            f"The patched {rel} (SGLang {version}) does not parse: {e}.",
            file=rel,
            sglang_version=version,
        ) from None
    name = "_set_envs_and_config" if role == "engine" else "run_scheduler_process"
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    ok = False
    if len(fn) == 1:
        body = fn[0].body
        if role == "scheduler":
            ok = bool(body) and isinstance(body[0], ast.Import) and "specdeploy" in ast.dump(body[0])
        else:
            for j, st in enumerate(body):
                src = ast.get_source_segment(new, st) or ""
                if src.strip() == ENGINE_ANCHOR_LINE.strip():
                    ok = j > 0 and "_specdeploy" in (ast.get_source_segment(new, body[j - 1]) or "")
                    break
    if not ok:
        raise AgentError(
            "patch_verify_failed",
            f"The block did not land where expected in {rel} (SGLang {version}).",
            file=rel,
            sglang_version=version,
        )


def strip_blocks(text: str) -> str:
    """Remove every specdeploy block (sentinel lines inclusive) from ``text``."""
    out: list[str] = []
    inside = False
    for ln in _lines(text):
        s = ln.strip()
        if s.startswith(SENTINEL_BEGIN):
            inside = True
            continue
        if s.startswith(SENTINEL_END):
            inside = False
            continue
        if not inside:
            out.append(ln)
    return "".join(out)


def has_block(text: str) -> bool:
    return SENTINEL_BEGIN in text


def insert_block(role: str, original: str, block: str, rel: str, version: str) -> str:
    lines = _lines(original)
    if role == "engine":
        at = find_engine_anchor(original, rel, version)
        nl = _newline_of(lines[at])
    else:
        at = find_scheduler_anchor(original, rel, version) + 1
        nl = _newline_of(lines[at - 1])
    text = _indent_block(block, "    ", nl)
    new = "".join(lines[:at]) + text + "".join(lines[at:])
    _verify_placement(role, original, new, rel, version)
    return new
