"""``inv explain`` (and ``--explain`` on bench and sweep): the rule table of ``fabfile/plan/explain.py`` applied to a
saved profile, bench or sweep document (``--from FILE``), or to a profile of the running server(s) taken now.

A speculative bench has no baseline of its own: the break-even needs the baseline's decode step, so ``--baseline
FILE`` names one, and without it the newest saved bench of the baseline on the same host and SGLang version
(``RUNS/<host>/*.json``) is used and named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabfile.errors import FlagError
from fabfile.plan import explain
from fabfile.plan.explain import Finding, Subject
from fabfile.remote.protocol import BenchDocument


def load_document(path: str, flag: str = "--from") -> dict[str, Any]:
    """A saved profile, bench or sweep document; a sentence naming the flag (exit 2) for anything else."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FlagError(f"{flag}: no file {path}", "name a sweep.json, a bench result (RUNS/<host>/<id>.json) or a "
                        "profile's JSON (`inv profile --json`)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise FlagError(f"{flag}: cannot read {path} ({e.__class__.__name__})") from None
    except ValueError as e:
        raise FlagError(f"{flag}: {path} is not JSON ({e})", "name a document the tool wrote") from None
    hosts = doc.get("hosts") if isinstance(doc, dict) and explain.kind_of(doc) == "unknown" else None
    if isinstance(hosts, list):
        # A host command's `--json` ({"ok", "hosts": [...]}, `inv bench --json`, `inv profile --json`): its host's part
        if len(hosts) != 1:
            raise FlagError(f"{flag}: {path} holds {len(hosts)} hosts' results; it explains one at a time",
                            f"save one host's part: jq '.hosts[0]' {path}")
        doc = hosts[0]
    if isinstance(doc, dict) and isinstance(doc.get("data"), dict) and explain.kind_of(doc) == "unknown":
        doc = doc["data"]  # a host's part around its result (a profile's)
    if not isinstance(doc, dict) or explain.kind_of(doc) == "unknown":
        raise FlagError(f"{flag}: {path} is not a profile, bench or sweep result",
                        "name a sweep.json, a bench result (RUNS/<host>/<id>.json) or `inv profile --json`'s output")
    return doc


def newest_baseline(runs_dir: Path | str, host: str, version: str | None) -> tuple[BenchDocument, str] | None:
    """The newest saved bench of the baseline on ``host`` (same SGLang version), and its path."""
    from fabfile.commands.bench import saved

    found = [(d, p) for d, p in saved(runs_dir, host) if d.get("config_name") == "baseline" and
             (not version or d.get("sglang_version") == version)]
    return found[-1] if found else None


def explained(doc: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
              baseline_from: str = "") -> list[tuple[Subject, list[Finding]]]:
    return [(s, explain.explain(s)) for s in explain.subjects(doc, baseline, baseline_from)]


def for_bench(result: BenchDocument, runs_dir: Path | str,
              baseline_path: str | None = None) -> list[tuple[Subject, list[Finding]]]:
    """``inv bench --explain``: the result against ``--baseline`` or the newest saved baseline bench."""
    if baseline_path:
        return explained(result, load_document(baseline_path, "--baseline"), f"from {baseline_path}")
    found = newest_baseline(runs_dir, str(result.get("host") or ""), result.get("sglang_version"))
    if found is None or found[1] == result.get("local_path"):
        return explained(result)
    return explained(result, found[0], f"the newest baseline bench, {found[1]}")


def explain_running(inv: Any, hosts: list[Any], params: Any, baseline_path: str | None, runs_dir: Path | str,
                    on_event: Any = None, max_age_s: float | None = None,
                    ) -> tuple[list[tuple[Subject, list[Finding]]], list[dict[str, Any]], int]:
    """``inv explain`` without ``--from``: explain each running server's profile: one of the same deploy saved
    less than ``max_age_s`` ago (None: never reuse, ``--fresh``), else one taken now (``inv profile``'s own call,
    its bounded load, saved for the next). (findings, the profile documents or errors per host, each reused one
    with ``reused``: its path and age; the exit code: 1 when a host's measurement failed.)"""
    from fabfile.commands.profile import profile_host, reusable, running_deploy

    pairs: list[tuple[Subject, list[Finding]]] = []
    docs: list[dict[str, Any]] = []
    code = 0
    for h in hosts:
        old = None if max_age_s is None else reusable(runs_dir, h.name, running_deploy(inv, h), params, max_age_s)
        if old is not None:
            doc = old.doc
            docs.append({"host": h.name, "ok": True, "profile": doc,
                         "reused": {"path": old.path, "age_s": round(old.age_s, 1), "sentence": old.sentence()}})
        else:
            res = profile_host(inv, h, params, on_event=on_event, runs_dir=runs_dir)
            o = res.outcomes[0]
            if o.error is not None or not isinstance(o.data, dict):
                docs.append({"host": h.name, "ok": False, "error": o.error.as_dict() if o.error else None})
                code = max(code, res.exit_code or 1)
                continue
            doc = o.data
            docs.append({"host": h.name, "ok": True, "profile": doc})
        if baseline_path:
            pairs += explained(doc, load_document(baseline_path, "--baseline"), f"from {baseline_path}")
            continue
        found = newest_baseline(runs_dir, h.name, doc.get("sglang_version"))
        pairs += explained(doc, found[0] if found else None,
                           f"the newest baseline bench, {found[1]}" if found else "")
    return pairs, docs, code
