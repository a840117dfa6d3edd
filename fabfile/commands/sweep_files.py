"""The sweep's files: ``sweep.json`` saved after each load (so an interrupted sweep can resume), ``report.md`` and
``sweep.png`` beside it, and reading a saved sweep back for ``--resume`` (only when it is this very sweep)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import cast

from fabfile.commands.bench import BenchParams
from fabfile.errors import FlagError
from fabfile.inventory.hosts import Host
from fabfile.plan.sweep_doc import SweepDocument
from fabfile.plan.sweep_plan import Config


def write_outputs(out_dir: Path, doc: SweepDocument) -> dict[str, str]:
    """The sweep's files beside its ``sweep.json``: ``report.md`` and, with the plot extra, ``sweep.png``; their
    paths (also under ``doc["paths"]``)."""
    from fabfile.present.sweep_report import markdown

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": str(out_dir / "sweep.json")}
    png = out_dir / "sweep.png"
    if save_plot(doc, png):
        paths["plot"] = str(png)
    else:
        # Said, not silently missing (one line under the table, and in report.md and sweep.json): the plot needs
        # matplotlib, the package's optional `plot` extra.
        doc["plot_missing"] = "no sweep.png: matplotlib is not installed (pip install 'specdeploy[plot]')"
    doc["paths"] = paths
    md = out_dir / "report.md"
    paths["report"] = str(md)
    md.write_text(markdown(doc))
    return paths


def save_plot(doc: SweepDocument, path: Path) -> bool:
    """``sweep.png``; False without matplotlib."""
    from fabfile.present.plot import sweep_figure

    fig = sweep_figure(doc)
    if fig is None:
        return False
    fig.savefig(path)
    return True


def resume_dir(path: Path) -> Path:
    return path.parent if path.name == "sweep.json" else path


def load_resume(path: Path, host: Host, cfgs: list[Config], params: BenchParams, levels: list[int],
                predict: bool) -> SweepDocument:
    """The saved sweep ``--resume DIR`` names, when it is this very sweep: the same configurations with the same
    deploy plans (plan hashes), benchmark parameters and levels; FlagError (exit 2) otherwise, nothing started."""
    f = resume_dir(path) / "sweep.json"
    try:
        saved = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise FlagError(f"--resume: cannot read {f} ({e})", "name the sweep-<id> folder an interrupted sweep "
                        "printed") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("rows"), list):
        raise FlagError(f"--resume: {f} is not a sweep's sweep.json")
    want = {c.name: c.plan_hash for c in cfgs}
    hint = "run the same `inv sweep` command with the same inventory, or start a new sweep without --resume"
    if saved.get("host") != host.name:
        raise FlagError(f"--resume: {f} is a sweep of host {saved.get('host')}, not {host.name}", hint)
    if saved.get("configs") != list(want) or not isinstance(saved.get("plan_hashes"), dict):
        raise FlagError(f"--resume: {f} swept other configurations ({', '.join(saved.get('configs') or [])})", hint)
    changed = [n for n, h in want.items() if saved["plan_hashes"].get(n) != h]
    if changed:
        raise FlagError(f"--resume: the deploy plan of {', '.join(changed)} changed since {f} was saved (the "
                        "inventory or the flags differ): its measurements are of another plan", hint)
    if saved.get("params") != json.loads(json.dumps(asdict(params))) or saved.get("concurrency_levels") != levels \
            or bool(saved.get("predict")) != predict:
        raise FlagError(f"--resume: {f} was benchmarked with other parameters (load, levels or --predict)", hint)
    # This very sweep's own document, checked above against its configurations, plans and load: the shape it wrote.
    return cast("SweepDocument", saved)


def resumed(doc: SweepDocument, saved: SweepDocument, resume: Path | None) -> set[str]:
    """Carry the saved sweep's measured rows (failed and predicted ones are measured again) into ``doc``."""
    rows = [r for r in saved["rows"] if r.get("ok") and r.get("measured", True)]
    doc["rows"] = rows
    doc["started_at"] = saved.get("started_at", doc["started_at"])
    doc["model_loads"] = int(saved.get("model_loads") or 0)
    doc["resumed"] = {"from": str(resume), "kept": [r["config"] for r in rows], "interrupted": saved.get("interrupted")}
    return {str(r["config"]) for r in rows}


def save(out_dir: Path, doc: SweepDocument) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
