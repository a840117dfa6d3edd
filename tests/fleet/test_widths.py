"""status, check-env, sweep and watch on a simulated host at 80 and at 200 columns: no key value (host, config,
deploy id, verdict, numbers) is ever cut to `eagle…`, and watch logging into a closed pipe ends quietly."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from fabfile.present.sweep_report import print_sweep, table_rows
from tests.simhost.fleet import Fleet, SimHost
from tests.support.invoke_cli import derived_inventory, inv_host_json, inv_json, run_inv
from tests.support.terminal import WIDTHS, closed_pipe_run, whole


def test_status_and_check_env_at_80_and_200_columns_cut_no_key_value(fleet: Fleet, sim_host: SimHost,
                                                                      tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path, hosts={"sim1": {"tp": 8, "gpus": 8}})  # 8 ranks x 6 variables
    code, doc, err = inv_host_json("deploy", "--steps", "3", inventory=inv)
    assert code == 0, err
    for width in WIDTHS:
        r = run_inv("status", inventory=inv, env={"COLUMNS": str(width)})
        assert r.returncode == 0, r.stderr
        whole(r.stdout, ["sim1", "running", "eagle3-s3-k1-d4", doc["deploy_id"], str(doc["pid"])])
        r = run_inv("check-env", inventory=inv, env={"COLUMNS": str(width)})
        assert r.returncode == 0, r.stderr
        whole(r.stdout, ["OK", "NCCL_PROTO=LL", "NCCL_BUFFSIZE=16777216"])
        assert sum(1 for ln in r.stdout.splitlines() if ln.strip().startswith("TP")) == 8  # not 48 rows
        verbose = run_inv("check-env", "--verbose", inventory=inv, env={"COLUMNS": str(width)})
        assert verbose.returncode == 0 and "NCCL environment per scheduler process" in verbose.stdout
    run_inv("stop", inventory=inv)


def test_sweep_table_at_80_and_200_columns_cuts_no_key_value(fleet: Fleet, sim_host: SimHost,
                                                             tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path)
    code, doc, err = inv_json("sweep", "--steps", "0,1", "--num-prompts", "3", "--output-len", "32",
                              "--input-len", "32", "--out", str(tmp_path / "runs"), inventory=inv, timeout=180)
    assert code == 0, err
    saved = json.loads(Path(doc["paths"]["json"]).read_text())
    keys = [cell for row in table_rows(saved) for i, cell in enumerate(row) if i != 1 and cell not in ("", "-")]
    assert any(k.startswith("eagle3-") for k in keys) and any(k.startswith("baseline") for k in keys)
    for width in WIDTHS:
        buf = io.StringIO()
        print_sweep(saved, console=Console(file=buf, width=width, color_system=None))
        whole(buf.getvalue(), [*keys, saved["sweep_id"]])
    run_inv("stop", inventory=inv)


def test_watch_at_80_columns_and_logs_into_a_closed_pipe(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> None:
    inv = derived_inventory(fleet, tmp_path)
    code, _, err = inv_host_json("deploy", "--steps", "3", inventory=inv)
    assert code == 0, err
    for width in WIDTHS:
        r = run_inv("watch", "--once", inventory=inv, env={"COLUMNS": str(width)})
        assert r.returncode == 0, r.stderr
        whole(r.stdout, ["sim1", "eagle3-s3-k1-d4", "config", "health", "accept len", "queued", "source"])
        assert all(len(ln) <= width for ln in r.stdout.splitlines()), r.stdout
    # the server has no --enable-metrics: watch does not ask /metrics (each ask left `GET /metrics 404` in its log)
    log = run_inv("logs", "--lines", "300", inventory=inv)
    assert log.returncode == 0 and "GET /metrics" not in log.stdout, log.stdout
    # `inv logs --lines 300 | head -1` wrote 636 lines of BrokenPipeError tracebacks
    code, err = closed_pipe_run("logs", "--lines", "300", inventory=inv)
    assert code in (0, 141) and "Traceback" not in err and "BrokenPipe" not in err, (code, err)
    run_inv("stop", inventory=inv)
