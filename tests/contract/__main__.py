"""``python -m tests.contract [--write] [VERSION ...]``: derive the contract from the wheels and compare.

Without ``--write`` it prints the mismatches and exits 1 if there are any. With ``--write`` it also
regenerates ``docs/sglang-contract.md``, ``fabfile/remote/sglang_env_facts.py`` and
``fabfile/plan/sglang_spec_facts.py`` (all matrix versions;
the NCCL table also reads ``ENV_EXTRA``). Wheels come from ``$SPECDEPLOY_WHEEL_CACHE`` or the index.
"""

from __future__ import annotations

import argparse
import sys

from tests.contract import ENV_EXTRA, envfacts, matrix, real, sim, specfacts, table, version_key


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.contract")
    ap.add_argument("--write", action="store_true", help="regenerate the committed doc and NCCL table")
    ap.add_argument("versions", nargs="*", help="versions to check (default: the matrix)")
    args = ap.parse_args(argv)
    from tests.test_patch_wheels import fetch_wheel

    versions = args.versions or matrix()
    if args.write and args.versions:
        ap.error("--write regenerates every matrix version: give no versions")
    results = {}
    meta = {}
    bad = 0
    for v in versions:
        info = fetch_wheel(v)
        w = real.Wheel(info["path"])
        rows = table.rows(w, table.real_facts(w), sim.facts(v))
        results[v] = rows
        meta[v] = info["path"].name
        for r in rows:
            if not r.match:
                bad += 1
                print(f"{v}: {r.fact}\n    SGLang:    {r.sglang}\n    simulator: {r.sim}")
        print(f"{v}: {sum(r.match for r in rows)}/{len(rows)} facts match", file=sys.stderr)
    if args.write:
        (table.ROOT / "docs" / "sglang-contract.md").write_text(table.render(results, meta))
        env = {}
        spec = {}
        for v in sorted(set(versions) | set(ENV_EXTRA), key=version_key):
            w = real.Wheel(fetch_wheel(v)["path"])
            env[v] = envfacts.version_facts(w)
            spec[v] = specfacts.version_facts(w)
        (table.ROOT / "fabfile" / "remote" / "sglang_env_facts.py").write_text(envfacts.render(env))
        (table.ROOT / "fabfile" / "plan" / "sglang_spec_facts.py").write_text(specfacts.render(spec))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
