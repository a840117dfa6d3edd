"""The order the suite hands its tests to the workers: longest first, a module's tests together.

Longest first, shortest last is the classic rule for filling parallel workers: a long test handed out late (the
folders' alphabetical order put the 60 s router and host-lost tests near the end) is the tail the other workers
wait for. A module's tests stay together, the module placed by its longest test, its own tests longest first:
pytest tears a module's fixtures down when the next test is another module's, so sorting single tests across
modules built a module fixture once per run of its tests (the real-run model files four times in one `-n 0` run
of tests/unit, ~2 s each).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar


class Test(Protocol):
    @property
    def path(self) -> Path: ...


T = TypeVar("T", bound=Test)


def longest_first(items: list[T], length: Callable[[T], float], rank: Callable[[T], int]) -> list[T]:
    """``items`` reordered: modules by their longest test (then by ``rank``, then by path), each module's tests by
    their own length, longest first. Equal keys keep their collection order (the sort is stable)."""
    longest: dict[Path, float] = {}
    for item in items:
        longest[item.path] = max(longest.get(item.path, 0.0), length(item))
    return sorted(items, key=lambda item: (-longest[item.path], rank(item), str(item.path), -length(item)))
