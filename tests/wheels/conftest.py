"""The wheels tier's session fixture (tests/support/wheels.py)."""

from tests.support.wheels import wheels  # noqa: F401 - the session fixture
