"""Output read well at 80 and at 200 columns, in a terminal or piped to a file: no key value (host, config, deploy
id, verdict, numbers) is ever cut to `eagle…`; check-env's default is a compact ranks × variables matrix, with the
long table under --verbose; a closed pipe ends quietly."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from fabfile.present import checkenv_report
from fabfile.present.sweep_report import print_sweep, table_rows
from tests.support.cli import host_doc
from tests.support.invoke_cli import run_inv
from tests.support.terminal import WIDTHS, closed_pipe_run, whole

VARS = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}


def _evaluation(bad_rank: int | None = None) -> dict[str, object]:
    rows = []
    for rank in range(8):
        for var, value in VARS.items():
            different = rank == bad_rank and var == "NCCL_ALGO"
            rows.append({"label": f"TP{rank}", "rank": rank, "pid": 41230 + rank, "var": var, "expected": value,
                         "observed": "Tree" if different else value, "evidence": "nccl_log" if rank else "environ",
                         "status": "different" if different else "proven"})
    return {"ok": bad_rank is None, "rows": rows, "summary": {"proven": len(rows) - (bad_rank is not None)},
            "hints": []}


def _render(fn: object, width: int, *args: object) -> str:
    buf = io.StringIO()
    fn(*args, Console(file=buf, width=width, color_system=None))  # type: ignore[operator]
    return buf.getvalue()


@pytest.mark.parametrize("width", WIDTHS)
def test_check_env_default_is_a_compact_matrix_with_details_only_for_unproven_cells(width: int) -> None:
    text = _render(checkenv_report.render_matrix, width, _evaluation(bad_rank=5), {"sglang_version": "0.5.23"})
    lines = text.splitlines()
    matrix = [ln for ln in lines if ln.strip().startswith("TP")]
    assert len(matrix) == 8 + 1  # one line per rank, plus the one detail line of the unproven cell
    assert max(len(ln) for ln in lines[:10]) <= width
    whole(text, [f"TP{r}" for r in range(8)] + [str(41230 + r) for r in range(8)] + ["DIFF", "NOT PROVEN"])
    whole(text, [f"{k}={v}" for k, v in VARS.items()])  # the expected values, once
    assert "TP5 pid 41235 NCCL_ALGO: different, expected Ring, observed Tree (start environ)" not in text
    assert "TP5 pid 41235 NCCL_ALGO: different, expected Ring, observed Tree (NCCL log)" in text
    assert "L NCCL log" in text and "E start environ" in text and "--verbose" in text
    long = _render(checkenv_report.render_table, width, _evaluation(bad_rank=5), {})
    assert len(long.splitlines()) > len(lines)  # --verbose: every cell in its own row


def test_check_env_legend_never_says_proven_without_evidence() -> None:
    """With no proven cell the legend read `ok = proven (no evidence)`, as if a cell could be proven without
    evidence; with proven cells it names the letters' evidence."""
    ev = _evaluation()
    for row in ev["rows"]:  # type: ignore[attr-defined]
        row["status"], row["evidence"] = "unconfirmed", None
    text = _render(checkenv_report.render_matrix, 200, ev, {})
    assert "no evidence" not in text and "ok = proven (no cell here is)" in text, text
    text = _render(checkenv_report.render_matrix, 200, _evaluation(), {})
    assert "ok = proven by E start environ, L NCCL log;" in text, text


def test_check_env_matrix_numbers_its_columns_when_the_variables_do_not_fit() -> None:
    ev = _evaluation()
    for row in list(ev["rows"]):  # type: ignore[arg-type]
        for extra in ("NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "NCCL_CROSS_NIC", "NCCL_MIN_NCHANNELS"):
            ev["rows"].append({**row, "var": extra})  # type: ignore[attr-defined]
    text = _render(checkenv_report.render_matrix, 80, ev, {})
    assert "columns: 1 = NCCL_PROTO" in text and "10 = NCCL_MIN_NCHANNELS" in text
    assert all(len(ln) <= 80 for ln in text.splitlines() if ln.strip().startswith("TP"))


def test_render_piped_shows_every_file_whole_and_a_closed_pipe_ends_quietly() -> None:
    """`inv render | less` showed the launch script cropped at 80 columns (`--model-path /root/models/kim`) while
    its header says it can be run by hand; `inv render | head -1` must end as `cat` does, without a traceback."""
    r = run_inv("render", "--steps", "3", env={"COLUMNS": "80"})
    doc = host_doc(json.loads(run_inv("render", "--steps", "3", "--json").stdout))
    assert r.returncode == 0, r.stderr
    for path, text in doc["files"].items():
        for line in text.splitlines():
            if "SPECDEPLOY_DEPLOY_ID" in line or "rendered" in line or "deploys/" in line:
                continue  # the deploy id and time differ between the two renders
            assert line in r.stdout, (path, line)
    assert max(len(ln) for t in doc["files"].values() for ln in t.splitlines()) > 80  # the case that was cut
    for args in (("render",), ("render", "--json"), ("analyze", "--baseline-ms", "12", "--verify-ms", "20")):
        code, err = closed_pipe_run(*args)
        assert code in (0, 141) and err == "", (args, code, err)


def _deploy_result(ok: bool) -> object:
    from fabfile.errors import EnvNotProvenError
    from fabfile.inventory import hosts as inventory
    from fabfile.plan.deploy_plan import Options, build
    from fabfile.results.deploys import DeployResult

    plan = build(inventory.load(Path(__file__).parents[3] / "inventory.yaml").hosts["gpu1"], Options(steps=3))
    scheds = [{"title": f"sglang::scheduler_TP{i}", "pid": 41230 + i} for i in range(8)]
    timings = dict.fromkeys(("connect", "preflight", "lock", "patch", "stop", "gpu_clean", "start", "wait_ready",
                             "first_request", "accept_gate", "verify_env", "record"), 1.25)
    if ok:
        return DeployResult(host="gpu1", ok=True, plan=plan, sglang_version="0.5.23", patch_mode="plugin",
                            timings=timings, record={"pid": 41229, "schedulers": scheds, "log_path": plan.log_path})
    ev = _evaluation(bad_rank=None)
    for row in ev["rows"]:  # type: ignore[attr-defined]
        if row["var"] == "NCCL_P2P_LEVEL":
            row.update(status="unconfirmed", observed=None)
    ev["ok"] = False
    ev["hints"] = [{"code": f"nccl_ignores_value_{r}", "severity": "error", "vars": ["NCCL_P2P_LEVEL"],
                    "pids": [41230 + r], "message": f"TP{r} (pid {41230 + r}): NCCL ignores the value: write SYS"}
                   for r in range(8)]
    err = EnvNotProvenError("check-env: NCCL_P2P_LEVEL is not proven in 8 of 8 ranks", "see the hints", host="gpu1",
                            verify={"evaluation": ev, "evidence": {"facts": {}}})
    return DeployResult(host="gpu1", ok=False, plan=plan, error=err, timings=timings)


@pytest.mark.parametrize("width", WIDTHS)
def test_deploy_summary_wraps_long_lines_and_names_the_tunnel(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`schedulers:` and `timings:` ran past 200 columns and wrap; the address is the remote host's, so the line
    that reaches it from here (`ssh -L`) is printed, whole, as are the `ready at` and `deploy id:` lines (issue 40:
    a command, an id or a path is never wrapped)."""
    from fabfile.present import deploy_report

    buf = io.StringIO()
    monkeypatch.setattr(deploy_report, "out", Console(file=buf, width=width, color_system=None))
    deploy_report.deploy_summary(_deploy_result(ok=True))  # type: ignore[arg-type]
    text = buf.getvalue()
    whole_lines = ("✓ gpu1 ready at", "  from this machine: ssh", "  log: ")
    assert all(len(ln) <= width for ln in text.splitlines() if not ln.startswith(whole_lines)), text
    tunnel = [ln for ln in text.splitlines() if "ssh -N -L" in ln]
    assert len(tunnel) == 1 and tunnel[0].endswith("gpu1  then http://127.0.0.1:8000"), text
    assert any("deploy id: " in ln and " plan: " in ln for ln in text.splitlines()), text
    flat = " ".join(text.split())
    assert "ssh -N -L 8000:127.0.0.1:8000 gpu1" in flat and "sglang::scheduler_TP7 (pid 41237)" in flat
    assert "record 1.25s" in flat


def test_a_failed_deploy_shows_the_compact_matrix_and_one_hint_per_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed check-env printed 182 lines: a 56-row table and 16 near-identical per-rank hints, the fix last."""
    from fabfile.present import deploy_report, output

    buf = io.StringIO()
    console = Console(file=buf, width=80, color_system=None)
    monkeypatch.setattr(deploy_report, "err", console)
    monkeypatch.setattr(output, "err", console)
    deploy_report.deploy_summary(_deploy_result(ok=False))  # type: ignore[arg-type]
    text = buf.getvalue()
    assert len(text.splitlines()) < 40, text
    assert sum(1 for ln in text.splitlines() if ln.strip().startswith("TP")) <= 8 + 8  # matrix + unproven cells
    assert text.count("NCCL ignores the value") == 1, text
    assert text.count("NCCL_P2P_LEVEL: unconfirmed, expected SYS") == 1, text  # one line for the 8 ranks
    assert "NCCL environment per scheduler process (ranks × variables)" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_analyze_never_cuts_a_config_name(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from fabfile.present import analyze_report as report

    rows = [{"config": f"eagle3-s{s}-k8-d{8 * s}", "cycle_ms": 20.0 + s, "needed_accept_len": 1.5 + s / 10,
             "max_accept_len": s + 1, "accept_len": 2.2, "predicted_tok_s": 101.5 + s,
             "verdict": "beats the baseline by 12%", "sentence": "needs 1.6, got 2.2: faster"} for s in (3, 10)]
    buf = io.StringIO()
    monkeypatch.setattr(report, "out", Console(file=buf, width=width, color_system=None))
    report.print_analysis({"baseline_ms": 12.2, "rows": rows})
    whole(buf.getvalue(), ["eagle3-s3-k8-d24", "eagle3-s10-k8-d80", "104.5", "111.5"])


def test_progress_shows_sglangs_loading_lines_not_the_tools_own_probes() -> None:
    from fabfile.present.progress import Reporter

    r = Reporter("sim1", enabled=False)
    r.event({"event": "log", "lines": ["[2026-12-01 09:00:01 TP0] Load weight end. type=Qwen3ForCausalLM, mem=15 GB",
                                       'INFO:     127.0.0.1:51234 - "GET /ready HTTP/1.1" 503 Service Unavailable']})
    assert r.last_line.endswith("Load weight end. type=Qwen3ForCausalLM, mem=15 GB")
    r.event({"event": "log", "lines": ['INFO:     127.0.0.1:51236 - "GET /ready HTTP/1.1" 503 Service Unavailable']})
    assert "Load weight end" in r.last_line  # a probe line alone changes nothing


def test_a_sweep_without_matplotlib_says_why_there_is_no_plot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the plot extra, sweep.png was silently missing."""
    import sys

    from fabfile.commands.sweep_files import write_outputs
    from fabfile.present import sweep_report as report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    doc: dict[str, object] = {"sweep_id": "s1", "host": "sim1", "params": {}, "rows": [], "analysis": {}}
    paths = write_outputs(tmp_path, doc)
    assert "plot" not in paths and not (tmp_path / "sweep.png").exists()
    buf = io.StringIO()
    report.print_sweep(doc, console=Console(file=buf, width=80, color_system=None))
    said = " ".join(buf.getvalue().split())
    assert "no sweep.png: matplotlib is not installed (pip install 'specdeploy[plot]')" in said, said


def test_a_sweep_without_matplotlib_says_so_in_one_line_and_in_its_report(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The sentence ran to 137 characters (two lines at 80 columns) and report.md did not mention the plot at all."""
    import sys

    from fabfile.commands.sweep_files import write_outputs
    from fabfile.present import sweep_report as report

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    doc: dict[str, object] = {"sweep_id": "s1", "host": "sim1", "params": {}, "rows": [], "analysis": {}}
    write_outputs(tmp_path, doc)
    buf = io.StringIO()
    report.print_sweep(doc, console=Console(file=buf, width=80, color_system=None))
    said = [ln for ln in buf.getvalue().splitlines() if "sweep.png" in ln or "matplotlib" in ln or "plot]" in ln]
    assert len(said) == 1 and len(said[0]) <= 80 and "pip install 'specdeploy[plot]'" in said[0], said
    assert "no sweep.png: matplotlib is not installed" in (tmp_path / "report.md").read_text()


def test_a_sweep_row_shows_one_tok_s_and_labels_the_others() -> None:
    """One configuration showed 102.1 (measured), `pred 103.9` in the same cell and 103.1 in the break-even line."""
    rows = [{"config": "baseline", "steps": 0, "ok": True, "measured": True, "tok_s": 82.0},
            {"config": "eagle3-s2-k1-d3", "steps": 2, "topk": 1, "ok": True, "measured": True, "tok_s": 102.1,
             "tok_s_ci": 0.018, "predicted_tok_s": 103.9, "accept_len": 1.9}]
    doc = {"sweep_id": "s1", "host": "sim1", "rows": rows, "analysis": {"rows": []}, "prediction": {
        "rows": [{}], "histogram_config": "eagle3-s2-k1-d3", "histogram": [3, 4], "histogram_source": "meta_info",
        "winners": {"1": "eagle3-s2-k1-d3"}}, "winner": "eagle3-s2-k1-d3"}
    cell = table_rows(doc)[1][2]
    assert "102.1" in cell and "103.9" not in cell, cell
    buf = io.StringIO()
    print_sweep(doc, console=Console(file=buf, width=200, color_system=None))
    assert "eagle3-s2-k1-d3 predicted 103.9, measured 102.1" in buf.getvalue(), buf.getvalue()


def test_the_tunnel_line_goes_through_the_inventorys_own_ssh_config() -> None:
    from fabfile.present.deploy_report import tunnel_line

    result = _deploy_result(ok=True)
    host = result.plan.host  # type: ignore[attr-defined]
    assert tunnel_line(host) == ("from this machine: ssh -N -L 8000:127.0.0.1:8000 gpu1  then http://127.0.0.1:8000")
    assert "ssh -F '/srv/fleet/ssh config' -N -L 8000" in str(tunnel_line(host, Path("/srv/fleet/ssh config")))


@pytest.mark.parametrize("width", WIDTHS)
def test_check_env_verbose_table_cuts_no_value(width: int) -> None:
    """`check-env --verbose` at 80 columns cut the expected buffer size to `167772…` and its heads to `expect…`."""
    text = _render(checkenv_report.render_table, width, _evaluation(bad_rank=5), {})
    whole(text, ["16777216", "NCCL_MAX_NCHANNELS", "expected", "different", "start environ"])
    assert all(len(ln) <= width for ln in text.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_status_routers_table_cuts_no_url_and_says_a_missing_pid_with_the_one_dash(
        width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The routers table cut the router's URL to `http://gpu1:3…` at 80 columns and printed a missing pid as None."""
    from fabfile.commands.operations import server_view
    from fabfile.inventory import hosts as inventory
    from fabfile.present import hosts_report
    from fabfile.results.hosts import HostOutcome, HostsResult

    host = inventory.load(Path(__file__).parents[3] / "inventory.yaml").hosts["gpu1"]
    up: dict[str, object] = {
        "running": True, "record": {"deploy_id": "d-1", "config_name": "eagle3-s3-k1-d4", "pid": 7},
        "health": {"status": 200, "path": "/health_generate"},
        "routers": [{"name": "front", "running": True, "pid": None, "listen": "0.0.0.0", "port": 30000,
                     "health": 200, "workers": [{"url": "http://10.0.0.1:8000", "health": 200}]}]}
    up["state"] = server_view(up)
    buf = io.StringIO()
    monkeypatch.setattr(hosts_report, "out", Console(file=buf, width=width, color_system=None))
    hosts_report.print_status(HostsResult([HostOutcome(host, data=up)]))
    text = buf.getvalue()
    whole(text, [f"http://{host.ssh_host}:30000", "eagle3-s3-k1-d4"])
    assert "None" not in text, text


@pytest.mark.parametrize("width", WIDTHS)
def test_watch_prints_a_missing_figure_with_the_same_dash_as_every_table(
        width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four helpers printed `-` for a missing value and watch's printed `—`."""
    from fabfile.present import watch_report

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    monkeypatch.setattr(watch_report, "out", console)
    row = {"host": "gpu1", "config_name": "eagle3-s3-k1-d4", "running": True, "health": {"status": 200},
           "tok_s": None, "accept_len": 2.1, "running_req": 1, "queue_req": None, "source": None, "age_s": None}
    watch_report.WatchView(as_json=False, once=True).sample([row], {}, {}, {}, {})
    text = buf.getvalue()
    assert "—" not in text and "eagle3-s3-k1-d4" in text, text
    if width == 200:
        cells = [c.strip() for c in next(ln for ln in text.splitlines() if "gpu1" in ln).split("│")]
        assert cells[4] == "-" and cells[7] == "-", cells  # tok/s, queued


@pytest.mark.parametrize("width", WIDTHS)
def test_a_rollout_table_never_cuts_the_configuration_running_now(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a long note, the rollout table at 80 columns cut what runs on the host to `eagle3-s10-k8-…`."""
    from fabfile.inventory import hosts as inventory
    from fabfile.plan.deploy_plan import Options, build
    from fabfile.present import rollout_report
    from fabfile.results.deploys import DeployResult, HostRollout, RolloutResult

    host = inventory.load(Path(__file__).parents[3] / "inventory.yaml").hosts["gpu1"]
    plan = build(host, Options(steps=10, topk=8, draft_tokens=80))
    row = HostRollout(host, 1, DeployResult(host="gpu1", ok=True, plan=plan), outcome="deployed",
                      config_now=plan.config_name, pid_now=41229,
                      observe_error="the host answered status but its record disagrees with the running server",
                      observed={"state": "running", "config": plan.config_name, "problem": None})
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    monkeypatch.setattr(rollout_report, "out", console)
    monkeypatch.setattr(rollout_report, "err", console)
    later = HostRollout(host, 2, outcome="not started (rollout stopped)")
    rollout_report.print_rollout(RolloutResult("rolling", [["gpu1"], ["gpu1"]], [row, later], stopped_after_batch=1))
    whole(buf.getvalue(), ["eagle3-s10-k8-d80", "41229", "deployed"])
