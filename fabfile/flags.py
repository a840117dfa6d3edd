"""The one parser of command-line flag values: numbers, comma lists of whole numbers, local paths, choices.

Every command of the command line (``fabfile/cli``) reads its flags through here, each with the range its spec
gives (fabfile/cli/flagspec.py), so they all refuse the same bad input the same way: a
:class:`~fabfile.errors.FlagError` (exit 2, nothing touched on any host) whose one sentence names the flag, says what
is wrong ("is not a finite number", "is above the largest allowed, 86400 s") and quotes at most :data:`QUOTE_CHARS`
characters of the value. Numbers are read as people write them in ASCII (``12``, ``-1``, ``0.5``, ``2e3``): no hex,
no ``1_000``, no other scripts' digits, no ``nan``/``inf``, and a value too long to be a sane number is refused by
its length before Python is asked to convert it (``int()`` of 10,000 digits raises "Exceeds the limit (4300
digits)"). Every numeric flag has a maximum: a value above any sane one is a typo, and
an unbounded wait or count would make the tool wait or loop for ever.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal, overload

from fabfile.errors import FlagError

QUOTE_CHARS = 40
# No sane value of any flag needs more characters than this (the longest is a float with a long fraction); a longer
# one is refused by its length, so nothing here converts thousands of digits.
_MAX_NUMBER_CHARS = 64
# Paths: Linux's PATH_MAX (bytes, NUL included); a longer name fails at its first use on any file system.
_MAX_PATH_BYTES = 4095
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_NOT_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.ASCII | re.IGNORECASE)


def quote(value: Any, *, as_repr: bool = False) -> str:
    """``value`` as a message shows it: short values as typed (repr when they hold spaces or odd characters, are
    empty, or ``as_repr`` asks for a name in quotes), long ones cut to their first :data:`QUOTE_CHARS` characters
    with the full length."""
    text = str(value)
    cut = text[:QUOTE_CHARS]
    plain = cut and cut.isprintable() and not any(c.isspace() for c in cut)
    shown = cut if plain and not as_repr else repr(cut)
    if len(text) > QUOTE_CHARS:
        shown += f"…({len(text)} characters)"
    return shown


def _fmt(x: float, unit: str) -> str:
    text = str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"
    return f"{text} {unit}".rstrip() if unit else text


@overload
def number(flag: str, value: Any, *, minimum: float, maximum: float, integer: Literal[True],
           open_minimum: bool = ..., open_maximum: bool = ..., unit: str = ..., what: str = ...) -> int | None: ...


@overload
def number(flag: str, value: Any, *, minimum: float, maximum: float, integer: Literal[False] = ...,
           open_minimum: bool = ..., open_maximum: bool = ..., unit: str = ..., what: str = ...) -> float | None: ...


def number(flag: str, value: Any, *, minimum: float, maximum: float, integer: bool = False,
           open_minimum: bool = False, open_maximum: bool = False, unit: str = "",
           what: str = "") -> int | float | None:
    """``value`` as an int (``integer``) or a finite float within [minimum, maximum] (an open end excludes the bound
    itself); None stays None (the flag was not given). ``unit`` follows the bounds in messages ("86400 s"); ``what``
    names the kind of value expected ("a number of seconds")."""
    if value is None:
        return None
    what = what or ("a whole number" if integer else "a number")
    text = str(value).strip()
    if not text:
        raise FlagError(f"{flag}: an empty value is not {what}")
    shown = quote(text)
    if len(text) > _MAX_NUMBER_CHARS:
        if _INTEGER.fullmatch(text) or _DECIMAL.fullmatch(text):
            side = "below the smallest" if text.startswith("-") else "above the largest"
            bound = minimum if text.startswith("-") else maximum
            raise FlagError(f"{flag}: {shown} is {side} allowed, {_fmt(bound, unit)}")
        raise FlagError(f"{flag}: {shown} is not {what}")
    if _NOT_FINITE.fullmatch(text):
        raise FlagError(f"{flag}: {shown} is not a finite number; expected {what}")
    if integer and not _INTEGER.fullmatch(text):
        raise FlagError(f"{flag}: {shown} is not {what}")
    if not _DECIMAL.fullmatch(text):
        raise FlagError(f"{flag}: {shown} is not {what}")
    x: int | float = int(text) if integer else float(text)
    if not math.isfinite(x):  # 1e309: within the length, above the largest float
        raise FlagError(f"{flag}: {shown} is not a finite number; expected {what}")
    if x < minimum or (open_minimum and x == minimum):
        rule = "must be above" if open_minimum else "is below the smallest allowed,"
        raise FlagError(f"{flag}: {shown} {rule} {_fmt(minimum, unit)}")
    if x > maximum or (open_maximum and x == maximum):
        rule = "must be below" if open_maximum else "is above the largest allowed,"
        raise FlagError(f"{flag}: {shown} {rule} {_fmt(maximum, unit)}")
    return x


def int_list(flag: str, value: Any, *, minimum: int, maximum: int, max_items: int, what: str = "") -> list[int] | None:
    """A comma list of distinct whole numbers, each within [minimum, maximum], at most ``max_items`` of them; None
    stays None."""
    if value is None:
        return None
    text = str(value)
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise FlagError(f"{flag}: {quote(text)} is not a comma list of whole numbers" +
                        (f" ({what})" if what else ""))
    if len(items) > max_items:
        raise FlagError(f"{flag}: {len(items)} values are more than the {max_items} allowed")
    out = [n for n in (number(flag, x, minimum=minimum, maximum=maximum, integer=True) for x in items)
           if n is not None]
    if len(set(out)) != len(out):
        raise FlagError(f"{flag}: {quote(text)} lists a value twice")
    return out


def path(flag: str, value: Any) -> str | None:
    """A local file or folder named by a flag, refused up front when no file system can hold the name (empty, a NUL
    byte, longer than PATH_MAX): otherwise a sweep ran its deploys and then failed, with a traceback, writing its
    results."""
    if value is None:
        return None
    text = str(value)
    if not text:
        raise FlagError(f"{flag}: an empty value is not a path")
    if "\0" in text:
        raise FlagError(f"{flag}: a path cannot contain a NUL byte, got {quote(text)}")
    if len(text.encode("utf-8", "surrogatepass")) > _MAX_PATH_BYTES:
        raise FlagError(f"{flag}: {quote(text)} is longer than a path can be ({_MAX_PATH_BYTES} bytes)")
    return text


def choice(flag: str, value: Any, choices: Sequence[str], *, what: str = "value") -> str | None:
    """One of ``choices``; None stays None."""
    if value is None:
        return None
    if value not in choices:
        raise FlagError(f"{flag}: unknown {what} {quote(value, as_repr=True)}; choose one of {', '.join(choices)}")
    return str(value)


_DEPLOY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")


def deploy_id(flag: str, value: Any) -> str | None:
    """A deploy id as the tool writes them (``20250101T120000-a1b2c3``): letters, digits and dashes, so it names a
    record file on the host and nothing else."""
    if value is None:
        return None
    text = str(value)
    if value is True or not _DEPLOY_ID.fullmatch(text):
        raise FlagError(f"{flag}: {quote(text)} is not a deploy id (letters, digits and dashes, as `inv deploys` "
                        "lists them)")
    return text


# The ranges every command shares. Seconds: no wait of the tool (a model load, another deploy's lock, a host's
# answer, a router's health) sanely lasts more than a day; a larger value is a typo, and an hours-long silent
# wait is the failure the bounds are there to prevent.
DAY_S = 86400.0


def seconds(flag: str, value: Any, *, maximum: float = DAY_S, zero: bool = False) -> float | None:
    """A number of seconds, above 0 (or from 0 with ``zero``: "0 = at once") up to ``maximum``."""
    return number(flag, value, minimum=0.0, open_minimum=not zero, maximum=maximum, unit="s",
                  what="a number of seconds")


def whole(flag: str, value: Any, *, minimum: int, maximum: int, what: str = "") -> int | None:
    """A whole number within [minimum, maximum]."""
    return number(flag, value, minimum=minimum, maximum=maximum, integer=True, what=what)


# Flags that go together, or not: the same two sentences for every command.

def given(*pairs: tuple[str, Any]) -> list[str]:
    """The flags among ``(flag, value)`` pairs that were given: a value other than None, a switch that is on."""
    return [f for f, v in pairs if v is not None and v is not False]


def excludes(flag: str, on: Any, why: str, *others: tuple[str, Any]) -> None:
    """``flag``, when given (``on``), excludes ``others``: "--previous: starts a recorded deploy as it ran; drop
    --steps, --topk" names those given."""
    extra = given(*others)
    if on and extra:
        raise FlagError(f"{flag}: {why}; drop {', '.join(extra)}")


def only_with(needed: Any, why: str, *pairs: tuple[str, Any]) -> None:
    """Flags that mean something only with another (``needed``): the first one given is refused, "--baseline: only
    with --explain"."""
    extra = given(*pairs)
    if extra and not needed:
        raise FlagError(f"{extra[0]}: {why}")
