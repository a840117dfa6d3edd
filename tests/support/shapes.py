"""A value checked against its ``TypedDict`` at run time: the keys (required, optional, none other) and each value's
type, recursively. mypy checks the code that builds and reads an agent answer; this checks the JSON the agent
really sent, so a key the code adds through a plain ``dict`` (or a ``cast``) cannot drift from the shape unseen."""

from __future__ import annotations

import types
import typing
from typing import Any, Union, get_args, get_origin, get_type_hints


def _is_typeddict(tp: object) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def problems(value: Any, tp: Any, where: str = "answer", open_shapes: frozenset[type] = frozenset()) -> list[str]:
    """Every way ``value`` differs from ``tp``, as ``path: what`` lines (empty: it has the shape).

    ``open_shapes``: TypedDicts whose instances may carry keys beyond the declared ones (a document that spreads
    another tool's figures into itself); their declared keys are still checked."""
    if tp is Any or tp is object:
        return []
    if _is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object ({tp.__name__})"]
        hints = get_type_hints(tp)
        out = [f"{where}: missing required key {k!r} ({tp.__name__})" for k in sorted(tp.__required_keys__)
               if k not in value]
        if tp not in open_shapes:
            out += [f"{where}: key {k!r} is not in {tp.__name__}" for k in sorted(value) if k not in hints]
        for k, v in value.items():
            if k in hints:
                out += problems(v, hints[k], f"{where}.{k}", open_shapes)
        return out
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        alternatives = [problems(value, a, where, open_shapes) for a in get_args(tp)]
        if any(not a for a in alternatives):
            return []
        # ``X | None`` holding something: say what is wrong with it as an X
        return min(alternatives, key=len) if value is not None else [f"{where}: None is none of {tp}"]
    if tp is type(None) or tp is None:
        return [] if value is None else [f"{where}: {value!r:.60} is not None"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, not a list"]
        (item,) = get_args(tp) or (Any,)
        return [p for i, v in enumerate(value) for p in problems(v, item, f"{where}[{i}]", open_shapes)]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object"]
        key_t, val_t = get_args(tp) or (Any, Any)
        out = [f"{where}: key {p}" for k in value for p in problems(k, key_t, f"{k!r}", open_shapes)]
        return out + [p for k, v in value.items() for p in problems(v, val_t, f"{where}[{k!r}]", open_shapes)]
    if origin is typing.Literal:
        return [] if value in get_args(tp) else [f"{where}: {value!r} is not one of {get_args(tp)}"]
    if tp is float:  # JSON has one number type: a whole number is a float too (PEP 484's numeric tower)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(tp, type):
        ok = isinstance(value, tp)
    else:
        raise TypeError(f"{where}: the checker cannot read the annotation {tp!r}")
    return [] if ok else [f"{where}: {value!r:.60} is a {type(value).__name__}, not a {tp.__name__}"]
