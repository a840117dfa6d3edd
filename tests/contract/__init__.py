"""The simulator's contract with SGLang, derived from the real release wheels (issue 12, part A).

``python -m tests.contract --write`` regenerates ``docs/sglang-contract.md`` (version × fact: SGLang /
simulator / match) and ``fabfile/remote/evidence/sglang_env_facts.py`` (the NCCL variables each release writes);
``tests/test_contract.py`` asserts both. Modules: ``real`` (facts from a wheel's source), ``sim`` and
``probe`` (the same facts observed on the simulator), ``table`` (the comparison), ``envfacts``.
"""

from __future__ import annotations

# The oldest release `python -m tests.contract --all` checks (the newest is the index's).
OLDEST = "0.4.5"
# Releases read only for the generated tables, besides the matrix: the boundaries where a release's facts differ
# from the release before it (post releases included). A host's version is looked up as the nearest release read that
# is not newer, so a missing boundary gives a host another release's facts: `--all` names each such release (add it
# here, then `--write`). ENV_EXTRA: fabfile/remote/evidence/sglang_env_facts.py (and the spec table); SPEC_EXTRA:
# fabfile/plan/sglang_spec_facts.py only (launch flags change in almost every release).
ENV_EXTRA = ["0.4.5", "0.4.10.post2", "0.5.1", "0.5.2", "0.5.4", "0.5.4.post2", "0.5.4.post3", "0.5.5", "0.5.6",
             "0.5.8", "0.5.10", "0.5.11", "0.5.13", "0.5.14", "0.5.15", "0.5.17", "0.5.19", "0.5.21", "0.5.22"]
SPEC_EXTRA = ["0.4.5.post1", "0.4.5.post2", "0.4.5.post3", "0.4.6", "0.4.6.post2", "0.4.6.post3", "0.4.6.post4",
              "0.4.6.post5", "0.4.7", "0.4.7.post1", "0.4.8", "0.4.8.post1", "0.4.9.post1", "0.4.9.post3",
              "0.4.9.post4", "0.4.9.post5", "0.4.9.post6", "0.4.10", "0.4.10.post1", "0.5.1.post3", "0.5.3.post1",
              "0.5.3.post2", "0.5.4.post1", "0.5.5.post1", "0.5.5.post3", "0.5.6.post1", "0.5.6.post2"]


def matrix() -> list[str]:
    """The real-wheel matrix (tests/test_patch_wheels.py: pinned, newest = the tool's NEWEST_SUPPORTED)."""
    from tests import test_patch_wheels as tpw

    return list(tpw.VERSIONS)


