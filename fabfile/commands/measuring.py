"""The command line's three measuring commands, ``inv bench``, ``inv profile`` and ``inv explain``, as a task hands
them over: the live progress line, one host or several, ``--explain`` on a bench, and the result for the command
line. The measuring itself is ``bench``, ``profile`` and ``explain`` (which never print); this module sits above all
three, because ``explain`` reads saved benches and profiles and a bench's ``--explain`` reads ``explain``."""

from __future__ import annotations

from pathlib import Path

from fabfile.commands.bench import BenchParams, bench_host, bench_hosts, host_document
from fabfile.commands.profile import ProfileParams, profile_host, profile_hosts
from fabfile.commands.result import CommandResult
from fabfile.errors import FlagError, SpecDeployError
from fabfile.inventory.hosts import Host, Inventory
from fabfile.present.output import out as console
from fabfile.present.output import print_error
from fabfile.present.progress import BenchProgress
from fabfile.remote.protocol import ExplainedBench
from fabfile.results.hosts import hosts_document


def bench_command(inv: Inventory, hosts: list[Host], params: BenchParams, runs_dir: Path | str, *,
                  explain: bool = False, baseline: str | None = None, as_json: bool = False) -> CommandResult:
    """``inv bench``: several hosts at once (``bench_hosts``), or one with its progress line and, with
    ``--explain``, the sentences of its measured cycle against ``--baseline`` or the newest saved baseline bench."""
    from fabfile.present.bench_report import print_result

    if len(hosts) > 1:
        if explain:
            raise FlagError("--explain: explains one host's benchmark at a time; name one --host")
        return bench_hosts(inv, hosts, params, runs_dir)
    h = hosts[0]
    progress = BenchProgress(h.name, enabled=not as_json)
    try:
        result = bench_host(inv, h, params, runs_dir, on_event=progress.event)
    except SpecDeployError as e:
        # For people the error is printed by `cli` (a sentence on stderr); --json still gets its one document.
        return CommandResult(hosts_document([host_document(h, None, e)]), lambda: None, error=e)
    finally:
        progress.close()
    if not explain:
        return CommandResult(hosts_document([host_document(h, result, None)]), lambda: print_result(result, console))
    from fabfile.commands.explain import for_bench
    from fabfile.present.explain_report import document, print_explained

    pairs = for_bench(result, runs_dir, baseline)
    explained: ExplainedBench = {**result, "explain": document(pairs)}

    def for_people() -> None:
        print_result(result, console)
        print_explained(pairs, console)

    return CommandResult(hosts_document([host_document(h, explained, None)]), for_people)


def profile_command(inv: Inventory, hosts: list[Host], params: ProfileParams, runs_dir: Path | str, *,
                    verbose: bool = False, as_json: bool = False) -> CommandResult:
    """``inv profile``: each host under its own load at once (one block per host, then each failure), or one host
    with its progress line."""
    from fabfile.present.profile_report import print_result

    if len(hosts) > 1:
        result = profile_hosts(inv, hosts, params, runs_dir=runs_dir)

        def for_people() -> None:
            print_result(result, console, verbose=verbose)
            for o in result.outcomes:
                if o.error is not None:
                    print_error(o.error)

        return CommandResult(result, for_people, result.exit_code)
    progress = BenchProgress(hosts[0].name, enabled=not as_json, prefix="profile ")
    try:
        result = profile_host(inv, hosts[0], params, on_event=progress.event, runs_dir=runs_dir)
    finally:
        progress.close()
    error = result.outcomes[0].error
    if error is not None:
        return CommandResult(result, lambda: print_error(error), result.exit_code)
    return CommandResult(result, lambda: print_result(result, console, verbose=verbose), result.exit_code)


def explain_rules() -> CommandResult:
    """``inv explain --rules``: the rule table."""
    from fabfile.plan.explain import rules_table
    from fabfile.present.explain_report import print_rules

    return CommandResult({"rules": rules_table()}, lambda: print_rules(console))


def explain_file(path: str, baseline: str | None) -> CommandResult:
    """``inv explain --from FILE``: a saved profile, bench or sweep document, against ``--baseline``."""
    from fabfile.commands.explain import explained, load_document
    from fabfile.present.explain_report import document, print_explained

    doc = load_document(path)
    pairs = explained(doc, load_document(baseline, "--baseline") if baseline else None,
                      f"from {baseline}" if baseline else "")
    return CommandResult(document(pairs), lambda: print_explained(pairs, console))


def explain_command(inv: Inventory, hosts: list[Host], params: ProfileParams, baseline: str | None,
                    runs_dir: Path | str, *, max_age_s: float | None, as_json: bool = False) -> CommandResult:
    """``inv explain`` on the running servers: each one's profile (a recent one of the same deploy reused unless
    ``max_age_s`` is None), with the progress line of a profile taken now."""
    from fabfile.commands.explain import explain_running
    from fabfile.present.explain_report import document, print_explained

    progress = BenchProgress(",".join(h.name for h in hosts), enabled=not as_json, prefix="profile ")
    try:
        pairs, docs, code = explain_running(inv, hosts, params, baseline, runs_dir, on_event=progress.event,
                                            max_age_s=max_age_s)
    finally:
        progress.close()

    def for_people() -> None:
        for d in docs:
            if not d["ok"]:
                console.print(f"{d['host']}: the profile failed: {(d['error'] or {}).get('message')}", markup=False)
            elif d.get("reused"):
                console.print(f"{d['host']}: {d['reused']['sentence']}", markup=False, highlight=False)
        print_explained(pairs, console)

    return CommandResult(hosts_document(docs, **document(pairs)), for_people, code)
