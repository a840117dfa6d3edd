"""The sim tier's fixture: ``sim``, a simulator venv whose processes are killed after each test
(tests/support/sim.py)."""

from tests.support.sim import sim  # noqa: F401 - the fixture
