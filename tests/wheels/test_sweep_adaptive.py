"""The releases that have SGLang's adaptive speculation (``--speculative-adaptive``), as the tool's table says, match
the real wheels."""

from __future__ import annotations

import zipfile

import pytest

from fabfile.plan.versioncheck import _releases_with
from fabfile.remote import versions
from tests.support.sim import Sim, http, sim  # noqa: F401 (the fixture)


@pytest.mark.wheels
def test_the_boundaries_match_the_wheels() -> None:
    from tools.wheels import fetch_wheel

    assert _releases_with(lambda f, fl: "--speculative-adaptive" in fl).startswith(versions.SPECULATIVE_ADAPTIVE)
    for release, has in (("0.5.10", False), ("0.5.11", True)):
        with zipfile.ZipFile(fetch_wheel(release)["path"]) as z:
            assert ("sglang/srt/speculative/adaptive_spec_params.py" in z.namelist()) is has, release
    for release, has in (("0.5.12", False), ("0.5.13", True)):
        with zipfile.ZipFile(fetch_wheel(release)["path"]) as z:
            text = z.read("sglang/srt/observability/metrics_collector.py").decode()
            assert ('name="sglang:spec_num_steps"' in text) is has, release
