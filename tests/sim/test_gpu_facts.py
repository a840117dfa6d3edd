"""check-env's GPU facts (issue 42): how many GPUs, their names and what links them, from one ``nvidia-smi`` run
(``nvlink -s``), and from ``-L`` and ``topo -m`` as before on a driver that lists no GPU there. Against the
simulated host's ``nvidia-smi``, behind a wrapper on PATH that logs every run (real processes, real PATH lookup)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.simhost.sim.install import write_config
from tests.support.sim import Sim

ROOT = Path(__file__).resolve().parents[2]
READ = "import json; from fabfile.remote.evidence import interconnect; print(json.dumps(interconnect.gpu_facts()))"


def facts(sim: Sim, tmp_path: Path, *, refuse_nvlink: bool = False) -> tuple[dict[str, object], list[str]]:
    """The agent's facts, read through a wrapper that logs each run's arguments (and, with ``refuse_nvlink``,
    answers ``nvlink`` as a driver without that query would: a usage error)."""
    wrap = tmp_path / "wrap"
    wrap.mkdir(exist_ok=True)
    log = tmp_path / "runs.log"
    log.write_text("")
    refuse = 'if [ "$1" = nvlink ]; then echo "Invalid combination of input arguments." >&2; exit 2; fi\n' \
        if refuse_nvlink else ""
    (wrap / "nvidia-smi").write_text(f'#!/bin/sh\necho "$*" >> {log}\n{refuse}exec {sim.bin / "nvidia-smi"} "$@"\n')
    (wrap / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{wrap}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run([sys.executable, "-c", READ], capture_output=True, text=True, cwd=ROOT, env=env,
                         check=True, timeout=60).stdout
    return json.loads(out), log.read_text().splitlines()


@pytest.mark.parametrize("link", ["pcie", "nvlink"])
def test_one_query_names_the_gpus_and_their_link(sim: Sim, tmp_path: Path, link: str) -> None:
    sim.install("0.5.7", gpus=4, gpu_name="NVIDIA H200", interconnect=link)
    got, runs = facts(sim, tmp_path)
    assert runs == ["nvlink -s"]
    assert got == {"count": 4, "names": ["NVIDIA H200"] * 4, "interconnect": link, "source": "nvidia-smi nvlink -s"}


def test_a_driver_without_the_query_is_read_as_before(sim: Sim, tmp_path: Path) -> None:
    sim.install("0.5.7", gpus=4, gpu_name="NVIDIA H200", interconnect="nvlink")
    got, runs = facts(sim, tmp_path, refuse_nvlink=True)
    assert runs[0] == "nvlink -s" and sorted(runs[1:]) == ["-L", "topo -m"]
    assert got == {"count": 4, "names": ["NVIDIA H200"] * 4, "interconnect": "nvlink",
                   "source": "nvidia-smi -L + topo -m"}
    write_config(sim.prefix, {"gpus": 1, "interconnect": "pcie"})
    one, _ = facts(sim, tmp_path)
    assert one["count"] == 1 and one["interconnect"] == "single"
