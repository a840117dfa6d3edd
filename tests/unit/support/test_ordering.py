"""The order the workers get tests in (tests/support/ordering.py): longest first, each module's tests together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.ordering import longest_first


@dataclass(frozen=True)
class Item:
    path: Path
    name: str
    seconds: float = 0.0
    tier: int = 0


def test_modules_go_by_their_longest_test_and_stay_together() -> None:
    a, b, c = Path("tests/fleet/test_a.py"), Path("tests/fleet/test_b.py"), Path("tests/unit/test_c.py")
    items = [Item(a, "a1", 3.0), Item(a, "a2"), Item(a, "a3", 50.0),
             Item(b, "b1", 40.0), Item(b, "b2", 45.0),
             Item(c, "c1", tier=3), Item(c, "c2", 2.0, tier=3)]
    ordered = [i.name for i in longest_first(items, length=lambda i: i.seconds, rank=lambda i: i.tier)]
    # a (its longest is 50 s) before b (45 s); within a module, longest first: the module fixture a2 shares with a1
    # and a3 is built once, and the 50 s test still starts first
    assert ordered == ["a3", "a1", "a2", "b2", "b1", "c2", "c1"]


def test_tests_with_no_recorded_length_go_by_tier_in_collection_order() -> None:
    unit, fleet = Path("tests/unit/test_u.py"), Path("tests/fleet/test_f.py")
    items = [Item(unit, "u1", tier=3), Item(unit, "u2", tier=3), Item(fleet, "f1", tier=2), Item(fleet, "f2", tier=2)]
    ordered = [i.name for i in longest_first(items, length=lambda i: i.seconds, rank=lambda i: i.tier)]
    assert ordered == ["f1", "f2", "u1", "u2"]
