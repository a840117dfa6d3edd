"""``python -m tools.contract [--write] [--all | VERSION ...]``: derive the contract from the wheels and compare.

Without ``--write`` it prints the mismatches and exits 1 if there are any. With ``--write`` it also
regenerates ``docs/sglang-contract.md``, ``fabfile/remote/evidence/sglang_env_facts.py`` and
``fabfile/plan/sglang_spec_facts.py`` and
``fabfile/plan/sglang_knob_facts.py`` (all matrix versions; the tables also read ``ENV_EXTRA`` and
``SPEC_EXTRA``, the releases where facts change between them). Wheels come from ``$SPECDEPLOY_WHEEL_CACHE`` or
the index.

``--all`` checks every release on the index from ``OLDEST`` to the newest instead of the matrix (minutes; never
part of ``./dev test``, which stays on the pinned matrix): the contract, and that the generated tables, looked up
as the tool looks them up (the nearest release read that is not newer), give each release its own facts. With
``--write`` it also replaces the every-release table in docs/sglang-contract.md (dated); a plain ``--write``
keeps that table as it is.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import sys
import time
from typing import Any

from fabfile.remote.versions import key as version_order
from tools.contract import ENV_EXTRA, OLDEST, SPEC_EXTRA, envfacts, knobfacts, matrix, real, sim, specfacts, table


def _fetch_all(versions: list[str]) -> dict[str, dict[str, Any]]:
    """The wheels, four downloads at a time (each is fetched once per cache; most are a few MB)."""
    from tools.wheels import fetch_wheel

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return dict(zip(versions, pool.map(fetch_wheel, versions), strict=True))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.contract")
    ap.add_argument("--write", action="store_true", help="regenerate the committed doc and NCCL table")
    ap.add_argument("--all", action="store_true",
                    help=f"every release on the index from {OLDEST} to the newest (not the matrix; minutes)")
    ap.add_argument("versions", nargs="*", help="versions to check (default: the matrix)")
    args = ap.parse_args(argv)
    from tools.wheels import fetch_wheel, releases_on_index

    if args.all and args.versions:
        ap.error("--all checks every release: give no versions")
    if args.write and args.versions:
        ap.error("--write regenerates every matrix version: give no versions")
    t0 = time.monotonic()
    if args.write:
        # First, so that the --all lookups below read the tables as they are committed.
        env = {}
        spec = {}
        knobs = {}
        for v in sorted(set(matrix()) | set(ENV_EXTRA) | set(SPEC_EXTRA), key=version_order):
            w = real.Wheel(fetch_wheel(v)["path"])
            if v not in SPEC_EXTRA:
                env[v] = envfacts.version_facts(w)
            spec[v] = specfacts.version_facts(w)
            knobs[v] = knobfacts.version_facts(w)
        (table.ROOT / "fabfile" / "remote" / "evidence" / "sglang_env_facts.py").write_text(envfacts.render(env))
        (table.ROOT / "fabfile" / "plan" / "sglang_spec_facts.py").write_text(specfacts.render(spec))
        (table.ROOT / "fabfile" / "plan" / "sglang_knob_facts.py").write_text(knobfacts.render(knobs))
    versions = releases_on_index(OLDEST) if args.all else (args.versions or matrix())
    infos = _fetch_all(versions)
    results = {}
    meta = {}
    every: list[table.Checked] = []
    bad = 0
    for v in versions:
        w = real.Wheel(infos[v]["path"])
        try:
            rows = table.rows(w, table.real_facts(w), sim.facts(v))
        except Exception as e:  # --all reports every release, a harness failure included, then fails
            if not args.all:
                raise
            rows = [table.Row("the check ran", f"{type(e).__name__}: {e}", "—", False)]
        lookups = table.lookups(w) if args.all else []
        results[v] = rows
        meta[v] = infos[v]["path"].name
        for r in rows:
            if not r.match:
                bad += 1
                print(f"{v}: {r.fact}\n    SGLang:    {r.sglang}\n    simulator: {r.sim}")
        for line in lookups:
            bad += 1
            print(f"{v}: {line}")
        every.append(table.Checked(v, meta[v], rows, lookups))
        print(f"{v}: {sum(r.match for r in rows)}/{len(rows)} facts match"
              + (f"; {len(lookups)} table lookups wrong" if lookups else ""), file=sys.stderr)
    wall = time.monotonic() - t0
    if args.all:
        print(f"{len(versions)} releases ({versions[0]} to {versions[-1]}) in {wall:.0f} s: "
              f"{sum(c.ok for c in every)} hold the contract", file=sys.stderr)
    if args.write:
        doc = table.ROOT / "docs" / "sglang-contract.md"
        section = (table.render_every(every, datetime.datetime.now(datetime.timezone.utc).date().isoformat())
                   if args.all else table.every_section(doc.read_text() if doc.exists() else ""))
        doc.write_text(table.render({v: results[v] for v in matrix() if v in results}, meta, section))
        for line in table.stale_rows(doc.read_text()):
            # the every-release table is kept as the last --all left it: say where it no longer agrees
            print(f"{line}: re-run with --all --write", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
