"""What ``inv render`` and ``inv deploy --dry-run`` print for a person: the plan, the launch command and every
file, highlighted. ``fabfile.commands.render_plan.plan_document`` is the JSON form."""

from __future__ import annotations

from typing import Any

from rich.syntax import Syntax

from fabfile.present.output import out
from fabfile.present.text import first_time


def describe(doc: dict[str, Any]) -> None:
    out.print(f"[bold]plan for {doc['host']}[/bold]  config {doc['config']}  plan {doc['plan_hash']}  "
              "[dim](dry run: no host touched)[/dim]")
    out.print(f"  url: {doc['url']}\n  log: {doc['log_path']}\n  patch mode: {doc['patch_mode_note']}")
    for note in doc.get("nccl_notes") or []:
        out.print(f"  nccl: {note}", markup=False, highlight=False)
    for note in doc.get("knob_notes") or []:
        out.print(f"  knob: {note}", markup=False, highlight=False)
    out.print("  steps: " + " → ".join(doc["steps"]))
    said = 0
    for note in doc.get("notes") or []:
        if first_time(note):  # once per command: the next host's plan has the same notes about the same preset
            out.print(f"  note: {note}", markup=False, highlight=False)
        else:
            said += 1
    if said:
        out.print(f"  note: {said} more, said above for another host", markup=False, highlight=False)
    out.print("[bold]launch command[/bold]")
    out.print(doc["launch_command"], markup=False, highlight=False)
    for path, text in doc["files"].items():
        out.print(f"[bold]file {path}[/bold]")
        if not out.is_terminal:
            # Piped or saved: the file byte for byte (rich cropped each line to 80 columns: the script shown ended
            # at `--model-path /root/models/kim` while its header says it can be run by hand).
            out.file.write(text if text.endswith("\n") else text + "\n")
            continue
        lexer = "bash" if path.endswith(".sh") else "python" if (path.endswith(".py") or "inserted" in path) \
            else "text"
        # In a terminal: highlighted, each line whole (a script you may run by hand is never wrapped or cut; the
        # terminal folds a long line for the eye, and a copy of it is still one line).
        out.print(Syntax(text, lexer, theme="ansi_dark", word_wrap=False), soft_wrap=True)
