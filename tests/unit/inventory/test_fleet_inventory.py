"""Cluster and router entries of an inventory: each malformed one is refused in one sentence naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fabfile.errors import InventoryError
from fabfile.inventory import hosts as inventory_mod


# -- inventory and test bed -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, field, words", [
    ({"clusters": {"c": {"hosts": ["sim1", "sim2"], "tp": 3}}}, "clusters.c.tp", "divide"),
    ({"clusters": {"c": {"hosts": ["sim1", "simX"], "tp": 2}}}, "clusters.c.hosts", "unknown host"),
    ({"clusters": {"c": {"hosts": ["sim1"], "tp": 2}}}, "clusters.c.hosts", "at least 2"),
    ({"clusters": {"c": {"hosts": ["sim1", "sim2"], "tp": 32}}}, "clusters.c.tp", "GPUs per node"),
    ({"routers": {"r": {"host": "sim1", "group": "nope"}}}, "routers.r.group", "unknown"),
    ({"routers": {"r": {"host": "simX", "group": "sim2"}}}, "routers.r.host", "unknown host"),
])
def test_bad_cluster_and_router_inventories(tmp_path: Path, extra: dict[str, Any], field: str, words: str) -> None:
    data = {"defaults": {"python": "/p", "model": "/m", "gpus": 8}, "hosts": {
        "sim1": {"address": "10.0.0.1"}, "sim2": {"address": "10.0.0.2"}}, **extra}
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InventoryError) as e:
        inventory_mod.load(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and field in msg and words in msg, msg
