"""``xdist_group`` that works on pytest 9: a plugin the suite loads (tests/conftest.py's ``pytest_plugins``).

pytest-xdist 3.8 puts a test in its group by writing ``item._nodeid = "<id>@<group>"`` in its own collection
hook, and ``--dist loadgroup`` sends every id with the same ``@<group>`` to one worker. From pytest 9.2 a node's id
is ``item._id`` (a structured ``NodeId``), so that write changes nothing: every test marked
``xdist_group("runner-pid-namespace")`` was spread over the workers, and a sim test's local deploy stopped the
simulated servers another worker had just started. After xdist's hook, the group's id is carried into ``_id``.
"""

from __future__ import annotations

import pytest

# The group of every test that starts SGLang-titled processes in the runner's own PID namespace (the sim tier, the
# wheels tier's contract checks): a `local` deploy's stop step stops every such process it finds there, so they run
# on one worker, one after another (tests/conftest.py).
RUNNER_PID_NAMESPACE = "runner-pid-namespace"


def pytest_configure(config: pytest.Config) -> None:
    # xdist declares the marker only when it is loaded; a run in one process (`-p no:xdist`) would warn of an
    # unknown mark on each module that names a group.
    config.addinivalue_line("markers", "xdist_group(name): run every test of this group on one worker")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        grouped = item.__dict__.get("_nodeid")
        if isinstance(grouped, str) and "@" in grouped and item.nodeid != grouped and hasattr(item, "_id"):
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(grouped)
