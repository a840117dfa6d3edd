"""What the agent imports for a read-only verb (issue 42): every call starts a fresh Python on the host, so a status,
gpus, logs, check-env or watch call loads its own room and nothing of the deploy's, and never builds the protocol's
TypedDicts (the shapes are annotations for mypy and the tests; building them cost ~10 ms of every call). Behaviour,
not timing: which modules a fresh interpreter holds after the call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
# What a status call does not need: the protocol's shapes, the deploy, nvidia-smi's queries, and subprocess (only
# starting a server or nvidia-smi needs it).
HEAVY = ("fabfile.remote.protocol", "fabfile.remote.serve.deploy", "fabfile.remote.gpus", "subprocess",
         "fabfile.remote.serve.server")  # the launch's half: status and watch read health from serve/health


def loaded(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-I", "-c", code + "\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return list(json.loads(out.splitlines()[-1]))


def test_a_status_call_loads_neither_the_deploy_nor_the_protocol_shapes(tmp_path: Path) -> None:
    code = (f"import json, sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom fabfile.remote import verbs\n"
            "from fabfile.remote.common import EventSink\n"
            f"answer = verbs.STATUS.function()({{'state_dir': {str(tmp_path)!r}}}, EventSink())\n"
            "assert answer['running'] is False and answer['record'] is None, answer")
    modules = loaded(code)
    assert "fabfile.remote.serve.hoststatus" in modules  # the verb ran
    assert [m for m in HEAVY if m in modules] == []


def test_the_other_read_only_verbs_import_their_room_without_the_protocol_shapes() -> None:
    for verb in ("GPUS", "LOGS", "CHECK_ENV", "WATCH"):
        modules = loaded(f"import json, sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom fabfile.remote import verbs\n"
                         f"verbs.{verb}.function()")
        assert "fabfile.remote.protocol" not in modules, verb
        assert "fabfile.remote.serve.deploy" not in modules, verb


def test_check_env_imports_neither_dataclasses_nor_shutil() -> None:
    # dataclasses pulls inspect (dis, tokenize, ast) and execs each class's methods; shutil pulls bz2, lzma and
    # zlib, for one PATH lookup that Popen does itself: both were milliseconds of every check-env on the host.
    # The verb's door (evidence/checkenv) imports the judge once the GPU query runs: both are what a call loads.
    modules = loaded(f"import json, sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom fabfile.remote import verbs\n"
                     "verbs.CHECK_ENV.function()\nimport fabfile.remote.evidence.judge")
    assert "fabfile.remote.evidence.gather" in modules  # the verb's room was imported
    assert [m for m in ("dataclasses", "shutil", "inspect") if m in modules] == []


def test_check_env_starts_its_gpu_query_before_the_judge_loads(tmp_path: Path) -> None:
    """The query (one ``nvidia-smi`` run, the longest part of a check-env call on a real host) starts before the
    judge and the gatherer are imported, so their import runs beside it: what was imported when the process
    started, told by a stand-in ``nvidia-smi`` on PATH."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    code = (f"import json, os, subprocess, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
            f"os.environ['PATH'] = {str(tmp_path)!r} + ':' + os.environ['PATH']\n"
            "seen = []\nreal = subprocess.Popen.__init__\n"
            "def spy(self, args, *a, **k):\n"
            "    seen.append((list(args), 'fabfile.remote.evidence.judge' in sys.modules))\n"
            "    real(self, args, *a, **k)\n"
            "subprocess.Popen.__init__ = spy\n"
            "from fabfile.remote import verbs\nfrom fabfile.remote.common import EventSink\n"
            f"answer = verbs.CHECK_ENV.function()({{'state_dir': {str(tmp_path / 'state')!r}, 'expected': {{}}}},"
            " EventSink())\n"
            "print(json.dumps({'seen': seen, 'gpus': answer['evidence']['facts']['gpus']}))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["seen"][0] == [["nvidia-smi", "nvlink", "-s"], False], got["seen"]
    assert got["gpus"]["names"] == ["NVIDIA H200"], got["gpus"]  # the query's answer reached the evidence



def test_a_check_env_that_gives_up_early_leaves_no_gpu_query_behind(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The door starts the query before the judge reads the request: a request the judge refuses (or the call's
    deadline) must not leave an ``nvidia-smi`` running behind the agent."""
    from fabfile.remote import gpus, verbs
    from fabfile.remote.common import EventSink

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexec sleep 30\n")  # a query that hangs
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    started: list[gpus.Queries] = []
    real_init = gpus.Queries.__init__

    def spy(self: gpus.Queries, *args: Any, **kw: Any) -> None:
        real_init(self, *args, **kw)
        started.append(self)

    monkeypatch.setattr(gpus.Queries, "__init__", spy)
    (tmp_path / "state").mkdir()
    request: Any = {"state_dir": str(tmp_path / "state"), "expected": ["not", "a", "mapping"]}
    with pytest.raises(Exception):  # noqa: B017 (whichever error the judge refuses it with)
        verbs.CHECK_ENV.function()(request, EventSink())
    assert len(started) == 1 and started[0].running, "the door started no query"
    assert None not in [proc.poll() for _, proc in started[0].running], "nvidia-smi still runs after the verb gave up"
