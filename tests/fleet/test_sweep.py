"""`inv bench` and `inv sweep` end to end over real SSH against the simulated fleet.

The simulator's cost model (tests/simhost/sim/README.md) decides tok/s and accept length from the configuration:
a speculative cycle costs ``draft_ms_per_step·steps + verify_ms_base + verify_ms_per_token·(steps+1)`` and emits
1 + the accepted drafts (position i accepted with ``accept_prob[i]``, the run stopping at the first rejection);
the baseline costs ``decode_ms`` per token. ``expected_tok_s`` below is that model; the sweep must find its best.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.simhost.fleet import Fleet, SimHost
from tests.support import waiting
from tests.support.cli import host_doc, run_cli
from tests.support.invoke_cli import (
    INV,
    ROOT,
    derived_inventory,
    http_get,
    inv_host_json,
    inv_json,
    run_inv,
    sglang_pids,
)

FAST = {"time_scale": 0.5, "load_seconds": 0.1}
BENCH = ["--num-prompts", "3", "--output-len", "32", "--input-len", "32"]


def expected_tok_s(cfg: dict[str, Any], steps: int) -> float:
    """Single-stream decode tok/s the cost model gives (sim defaults where the test does not set a key)."""
    c: dict[str, Any] = {"decode_ms": 12.2, "verify_ms_base": 14.2, "verify_ms_per_token": 1.5,
                         "draft_ms_per_step": 1.5, "accept_prob": [0.8, 0.6, 0.45, 0.3, 0.2], **cfg}
    if steps == 0:
        return 1000.0 / float(c["decode_ms"])
    probs = [float(p) for p in c["accept_prob"]]
    emitted, run = 1.0, 1.0
    for i in range(steps):
        run *= probs[i] if i < len(probs) else probs[-1]
        emitted += run
    cycle = float(c["draft_ms_per_step"]) * steps + float(c["verify_ms_base"]) + \
        float(c["verify_ms_per_token"]) * (steps + 1)
    return 1000.0 * emitted / cycle


@pytest.fixture
def inventory(fleet: Fleet, sim_host: SimHost, tmp_path: Path) -> Path:
    return derived_inventory(fleet, tmp_path, defaults={"sglang_args": ["--enable-metrics",
                                                                        "--decode-log-interval", "5"]})


def _server_steps(host: SimHost) -> int | None:
    status, body = http_get(host, "/server_info")
    if status != 200:
        log = host.exec("tail -n 30 /root/sglang-logs/*.log; cat /root/.specdeploy/current.json").stdout
        raise AssertionError(f"/server_info: {body}\n{log}")
    info = json.loads(body)
    return info["speculative_num_steps"] if info.get("speculative_algorithm") else 0


def test_bench_reads_every_metric_source_and_stores_the_result(inventory: Path, sim_host: SimHost,
                                                               tmp_path: Path) -> None:
    sim_host.set_sim_config(**FAST)
    code, _doc, err = inv_host_json("deploy", "--steps", "2", inventory=inventory)
    assert code == 0, err
    runs = tmp_path / "runs"
    code, r, err = inv_host_json("bench", *BENCH, "--client", "builtin", "--out", str(runs), inventory=inventory)
    assert code == 0, err
    assert r["client"] == "loadgen" and r["completed"] == 3 and r["failed"] == 0
    assert r["config_name"] == "eagle3-s2-k1-d3"
    # Every source SGLang offers answered, and they agree on the accept length.
    src = r["accept_len_sources"]
    assert r["accept_len_source"] == "meta_info"
    for name in ("meta_info", "decode_log", "prometheus", "server_info"):
        assert src[name] is not None and 1.0 <= src[name] <= 3.0, (name, src)
    assert abs(src["meta_info"] - src["decode_log"]) < 0.3
    assert r["decode_log"]["lines"] >= 2
    assert r["accept_rate_meaning"].startswith("(accept_len - 1)")  # the sim runs 0.5.23
    assert r["accept_rate"] == pytest.approx((r["decode_log"]["accept_len"] - 1) / 2, abs=0.02)
    # The cycle time is the cost model's (2·1.5 + 14.2 + 1.5·3 = 21.7 ms, scaled to wall-clock by time_scale), as
    # the client measures it: a loaded machine only makes it longer, so the bound is one-sided (the formula itself
    # is checked on fixed figures in tests/unit/remote/measure).
    assert r["cycle_ms"] >= 21.7 * 0.5 * 0.85
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert {"mean", "median", "p99"} <= set(r[key]), key
    assert r["output_tok_s"] > 0
    # Stored locally and on the host.
    local = runs / "sim1" / f"{r['bench_id']}.json"
    assert json.loads(local.read_text())["bench_id"] == r["bench_id"]
    on_host = json.loads(sim_host.exec(["cat", f"/root/.specdeploy/bench/{r['bench_id']}.json"]).stdout)
    assert on_host["output_tok_s"] == r["output_tok_s"]
    # The person's view names the figures.
    p = run_inv("bench", *BENCH, "--out", str(runs), inventory=inventory)
    assert p.returncode == 0, p.stderr
    for words in ("tok/s", "TTFT", "TPOT", "ITL", "accept length", "accept rate"):
        assert words in p.stdout, p.stdout
    # each accept length with its window and sample size (they differ because their windows do)
    assert f"over {r['completed']} requests" in p.stdout and "over the mean of " in p.stdout, p.stdout
    assert r["accept_len_windows"]["meta_info"].startswith(f"{r['completed']} requests"), r["accept_len_windows"]


def test_bench_uses_sglangs_own_bench_serving_when_the_host_has_it(inventory: Path, sim_host: SimHost,
                                                                   tmp_path: Path) -> None:
    sim_host.set_sim_config(**FAST)
    code, _doc, err = inv_host_json("deploy", "--steps", "1", inventory=inventory)
    assert code == 0, err
    code, r, err = inv_host_json("bench", *BENCH, "--out", str(tmp_path), inventory=inventory)
    assert code == 0, err
    assert r["client"] == "sglang.bench_serving" and r["completed"] == 3
    assert r["output_tok_s"] > 0 and r["ttft_ms"]["median"] > 0 and r["itl_ms"]["p95"] > 0
    # No per-request meta_info from bench_serving: the run's decode log lines come first.
    assert r["accept_len_source"] == "decode_log" and r["accept_len_sources"]["bench_serving"] is not None
    assert 1.0 <= r["accept_len"] <= 2.0
    assert r["cycle_ms"] >= 18.7 * 0.5 * 0.75  # one-sided, as above; TPOT × the decode log's accept length
    assert sim_host.exec(["test", "-s", f"/root/.specdeploy/bench/{r['bench_id']}.sglang.jsonl"]).returncode == 0


def test_bench_picks_a_client_whose_dataset_the_hosts_sglang_has(inventory: Path, sim_host: SimHost,
                                                                  tmp_path: Path) -> None:
    """0.4.5's bench_serving has no random-ids dataset (the others download ShareGPT): auto uses the built-in client
    there and says why; asking for SGLang's client is a sentence, not bench_serving's argparse error."""
    sim_host.set_version("0.4.5")
    sim_host.set_sim_config(**FAST)
    code, doc, err = inv_host_json("deploy", "--steps", "1", inventory=inventory)
    assert code == 0, err
    assert doc["sglang_version"] == "0.4.5"
    code, r, err = inv_host_json("bench", *BENCH, "--out", str(tmp_path), inventory=inventory)
    assert code == 0, err
    assert r["client"] == "loadgen" and r["completed"] == 3
    code, r, err = inv_host_json("bench", *BENCH, "--client", "sglang", "--out", str(tmp_path), inventory=inventory)
    assert code != 0
    message = r["error"]["message"]
    assert "random-ids" in message and "sharegpt, random, generated-shared-prefix" in message, message
    assert "Traceback" not in err


def test_bench_auto_falls_back_when_sglangs_bench_serving_cannot_import(inventory: Path, sim_host: SimHost,
                                                                        tmp_path: Path) -> None:
    """Real SGLang 0.5.16 on an H200 (docs/real-sglang.md): bench_serving.py exists but dies on `import datasets`,
    so its --help lists nothing. auto uses the built-in client and names the missing module; --client sglang says
    so in one sentence."""
    sim_host.set_sim_config(**FAST, bench_serving_missing_module="datasets")
    code, _doc, err = inv_host_json("deploy", "--steps", "1", inventory=inventory)
    assert code == 0, err
    code, r, err = inv_host_json("bench", *BENCH, "--out", str(tmp_path), inventory=inventory)
    assert code == 0, err
    assert r["client"] == "loadgen" and r["completed"] == 3
    assert r["accept_len_source"] == "meta_info" and r["accept_len"] is not None
    p = run_inv("bench", *BENCH, "--out", str(tmp_path), inventory=inventory)
    assert p.returncode == 0 and "No module named 'datasets'" in p.stdout + p.stderr, p.stdout + p.stderr
    code, doc, err = inv_host_json("bench", *BENCH, "--client", "sglang", "--out", str(tmp_path), inventory=inventory)
    assert code == 1 and "No module named 'datasets'" in doc["error"]["message"], doc["error"]
    assert "Traceback" not in err



def test_bench_against_a_server_with_an_api_key_never_shows_the_key(fleet: Fleet, sim_host: SimHost,
                                                                    tmp_path: Path) -> None:
    inventory = derived_inventory(fleet, tmp_path, defaults={"sglang_args": ["--api-key", "k3y-s3cr3t"]})
    sim_host.set_sim_config(**FAST)
    code, _doc, err = inv_host_json("deploy", "--steps", "1", inventory=inventory)
    assert code == 0, err
    r = run_inv("bench", *BENCH, "--client", "builtin", "--out", str(tmp_path / "runs"), "--json", inventory=inventory)
    assert r.returncode == 0, r.stderr
    assert host_doc(json.loads(r.stdout))["completed"] == 3  # the requests were authorised
    assert "k3y-s3cr3t" not in r.stdout + r.stderr
    assert all("k3y-s3cr3t" not in p.read_text() for p in (tmp_path / "runs").rglob("*.json"))


def test_bench_without_a_server_says_so(inventory: Path, sim_host: SimHost, tmp_path: Path) -> None:
    code, doc, err = inv_host_json("bench", *BENCH, "--out", str(tmp_path), inventory=inventory)
    assert code == 1 and doc["ok"] is False
    assert doc["error"]["kind"] == "RemoteError" and "no server" in doc["error"]["message"]
    assert "deploy one first" in err


def _sweep(inventory: Path, runs: Path, steps: str, *extra: str) -> tuple[int, dict[str, Any], str, float]:
    t0 = time.monotonic()
    code, doc, err = inv_json("sweep", "--steps", steps, *BENCH, "--out", str(runs), *extra, inventory=inventory,
                              timeout=120)
    return code, doc, err, time.monotonic() - t0


def test_sweep_runs_its_fastest_measured_configuration_and_reports_it(inventory: Path, sim_host: SimHost,
                                                                       tmp_path: Path) -> None:
    cost = {"accept_prob": [0.95, 0.95, 0.05]}
    sim_host.set_sim_config(**FAST, **cost)
    model = {s: expected_tok_s(cost, s) for s in (0, 1, 2, 3)}
    assert min(model[s] for s in (1, 2, 3)) > 1.25 * model[0]  # every speculative configuration clearly wins
    code, doc, err, took = _sweep(inventory, tmp_path, "0,1,2,3")
    assert code == 0, err
    print(f"sweep of 4 configurations took {took:.1f} s")
    rows = {r["config"]: r for r in doc["rows"]}
    assert list(rows) == ["baseline", "eagle3-s1-k1-d2", "eagle3-s2-k1-d3", "eagle3-s3-k1-d4"]
    assert all(r["ok"] for r in doc["rows"]), doc["rows"]
    # Each configuration's figures are wall-clock measurements of a few hundred milliseconds of decoding, and on a
    # loaded machine they move with it: one whole run measured the 1-step configuration at x1.51 where the model
    # says x1.27. So the test checks what holds under any load: the winner is the fastest configuration this run
    # measured, and it is speculative, as the model's x1.27-x1.60 over the baseline says (a stall costs the
    # baseline, one token per step, the most). How closely the measurements follow the cost model is a benchmark's
    # figure on a quiet machine (bench/sweep_predict.py, the full grid), not a test's.
    fastest = max(doc["rows"], key=lambda r: r["speedup"])["config"]
    # The winner is the fastest when it wins beyond its interval; else a tie, broken by the stated rule (issue 40)
    d = doc["ranking"]["1"]
    assert d["fastest"] == fastest and (d["clear"] or (fastest in d["tied"] and d["tie_break"])), d
    chosen = fastest if d["clear"] else d["winner"]
    assert doc["winner"] == chosen and doc["running"] == chosen and not doc["baseline_wins"], doc["rows"]
    assert fastest != "baseline" and min(rows[c]["speedup"] for c in rows if c != "baseline") > 1.0, doc["rows"]
    # The model's 2.85 tokens per cycle, less the last cycle of each request, clipped at --output-len: counted, not
    # timed.
    assert 2.4 <= rows["eagle3-s2-k1-d3"]["accept_len"] <= 2.9
    # A load can only slow a step down: never faster than the model's 12.2 ms at time scale 0.5.
    assert rows["baseline"]["decode_ms_per_token"] >= 12.2 * 0.5 * 0.95
    # Break-even per configuration; all three win in this model.
    verdicts = {r["config"]: r["verdict"] for r in doc["analysis"]["rows"]}
    assert set(verdicts.values()) == {"wins"}
    # The winner runs on the host; the outputs exist.
    assert _server_steps(sim_host) == rows[chosen]["steps"]
    out = Path(doc["paths"]["report"]).parent
    assert out.parent == tmp_path / "sim1" and out.name.startswith("sweep-")
    report = (out / "report.md").read_text()
    said = f"winner: {fastest}" if d["clear"] else f"chose {chosen} (tie-break: {d['tie_break']})"
    assert said in report and "## Break-even" in report and "sweep.png" in report
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "sweep.json").read_text())["winner"] == chosen
    assert all(Path(r["bench_path"]).exists() for r in doc["rows"])


def test_sweep_says_when_speculation_loses_and_keeps_the_baseline(inventory: Path, sim_host: SimHost,
                                                                  tmp_path: Path) -> None:
    # The seed's situation: a verify pass far dearer than a decode step, a middling drafter.
    cost = {"verify_ms_base": 26.0, "accept_prob": [0.5, 0.3]}
    sim_host.set_sim_config(**FAST, **cost)
    model = {s: expected_tok_s(cost, s) for s in (0, 1, 2)}
    assert max(model, key=lambda s: model[s]) == 0
    code, doc, err, took = _sweep(inventory, tmp_path, "1,2")   # the baseline is added
    assert code == 0, err
    print(f"sweep of 3 configurations took {took:.1f} s")
    assert [r["config"] for r in doc["rows"]] == ["baseline", "eagle3-s1-k1-d2", "eagle3-s2-k1-d3"]
    assert doc["winner"] == "baseline" and doc["baseline_wins"] and doc["running"] == "baseline"
    for r in doc["analysis"]["rows"]:
        assert r["verdict"] in ("loses", "cannot win") and r["needed_accept_len"] > r["accept_len"], r
    assert _server_steps(sim_host) == 0
    report = (Path(doc["paths"]["report"])).read_text()
    assert "speculation loses to the baseline" in report
    # The person's table says so too (same run on the analysis of the file).
    p = run_inv("analyze", "--sweep", doc["paths"]["json"])
    assert p.returncode == 0, p.stderr
    # The same verdicts as the document's: which of "loses" and "cannot win" a row gets depends on what was measured
    # (a loaded run measured both as "cannot win"), the table must say what the analysis says.
    for r in doc["analysis"]["rows"]:
        assert r["config"] in p.stdout and r["verdict"] in p.stdout, (r, p.stdout)


def test_sweep_keep_leaves_the_named_configuration(inventory: Path, sim_host: SimHost, tmp_path: Path) -> None:
    sim_host.set_sim_config(**FAST, accept_prob=[0.95, 0.95])
    code, doc, err, _ = _sweep(inventory, tmp_path, "0,1", "--keep", "baseline")
    assert code == 0, err
    assert doc["winner"] == "eagle3-s1-k1-d2" and doc["running"] == "baseline"
    assert _server_steps(sim_host) == 0


def test_sweep_flags_are_checked_before_touching_anything(inventory: Path, tmp_path: Path) -> None:
    for args, words in [(("--steps", "one,two"), "--steps"), (("--steps", ""), "--steps"),
                        (("--steps", "0,1", "--keep", "eagle3-s9-k1-d10"), "--keep"),
                        (("--steps", "1,1"), "--steps"), (("--steps", "1", "--topk", "2"), "--draft-tokens"),
                        (("--steps", "1", "--concurrency", "0"), "--concurrency"),
                        (("--steps", "1", "--client", "curl"), "--client"),
                        (("--steps", "1", "--concurrency", "1,x"), "--concurrency"),
                        (("--steps", "1", "--concurrency", "8,8"), "--concurrency"),
                        (("--steps", "1", "--target-ci", "0"), "--target-ci"),
                        (("--steps", "1", "--target-ci", "two"), "--target-ci"),
                        (("--steps", "1", "--num-prompts", "5", "--target-ci", "2"), "--target-ci"),
                        (("--steps", "1", "--min-requests", "10", "--max-requests", "5"), "--max-requests"),
                        (("--steps", "1,2,3", "--predict", "--client", "sglang"), "--client"),
                        (("--steps", "1", "--client", "sglang"), "--client")]:
        r = run_cli("sweep", *args, "--out", str(tmp_path), inventory=inventory)
        assert r.returncode == 2, (args, r.stderr)
        assert words in r.stderr, (args, r.stderr)
    assert not (tmp_path / "sim1").exists()
    r = run_cli("analyze", "--baseline-ms", "12.2")
    assert r.returncode == 2 and "--verify-ms" in r.stderr
    r = run_cli("analyze", "--baseline-ms", "12.2", "--verify-ms", "29", "--steps", "2", "--accept-len", "1.75",
                "--json")
    be = json.loads(r.stdout)
    assert r.returncode == 0 and be["verdict"] == "loses" and round(be["needed_accept_len"], 2) == 2.38


def test_ctrl_c_during_a_sweep_leaves_no_half_started_server(inventory: Path, sim_host: SimHost,
                                                             tmp_path: Path) -> None:
    # A load long enough that the Ctrl-C below lands inside the second deploy even on a loaded machine (with 1 s, a
    # slow reader of stderr once saw the whole sweep end first).
    sim_host.set_sim_config(**{**FAST, "load_seconds": 3.0})
    argv = [*INV, "sweep", "--steps", "0,1,2", *BENCH, "--out", str(tmp_path), "--inventory", str(inventory)]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    # Ctrl-C as in a terminal: a suite started in the background by a shell (`cmd &`) has SIGINT ignored, every
    # child inherits that, and Python then never raises KeyboardInterrupt (seen: SigIgn 0x1001007 in the sweep).
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    seen = ""
    deadline = waiting.deadline()
    while "[2/3] eagle3-s1-k1-d2: deploying" not in seen:
        line = proc.stderr.readline()
        assert line and time.monotonic() < deadline, seen
        seen += line
    time.sleep(0.5)  # inside the second deploy (its server is loading)
    assert proc.poll() is None, "the sweep ended before the Ctrl-C could be sent"
    masks = [ln for ln in Path(f"/proc/{proc.pid}/status").read_text().splitlines() if ln.startswith("Sig")]
    proc.send_signal(signal.SIGINT)
    _out, rest = proc.communicate(timeout=60)
    err = seen + rest
    assert proc.returncode == 130, f"{err}\nthe sweep's signal masks: {masks}"
    assert "interrupted" in err and ("now running:" in err or "no server is running" in err), err
    # Whatever the interrupted deploy did, the host has a whole server (launcher + every rank, healthy) or none.
    pids = sglang_pids(sim_host)
    launchers = [p for p, c in pids if "sglang.launch_server" in c]
    schedulers = [p for p, c in pids if c.startswith("sglang::scheduler")]
    if "now running:" in err:
        assert len(launchers) == 1 and len(schedulers) == 2
        assert http_get(sim_host, "/health")[0] == 200
    else:
        assert not launchers and not schedulers
    partial = json.loads(next(tmp_path.glob("sim1/sweep-*/sweep.json")).read_text())
    assert partial["interrupted"]["during"] == "eagle3-s1-k1-d2"
    assert [r["config"] for r in partial["rows"]] == ["baseline"]


# -- inv sweep --predict -----------------------------------------------------------------------------------------------
PEAK = {"accept_prob": [0.9, 0.85, 0.8, 0.25, 0.1], "draft_ms_per_step": 2.0}   # best at 3 steps of 0..7


def test_sweep_predict_finds_the_true_winner_in_three_model_loads(inventory: Path, sim_host: SimHost,
                                                                  tmp_path: Path) -> None:
    sim_host.set_sim_config(**FAST, **PEAK)
    model = {s: expected_tok_s(PEAK, s) for s in range(8)}
    best = max(model, key=lambda s: model[s])
    assert best == 3 and model[3] > 1.04 * max(v for s, v in model.items() if s != 3)
    code, doc, err = inv_json("sweep", "--steps", "0,1,2,3,4,5,6,7", "--predict", "--input-len", "32",
                              "--output-len", "64", "--num-prompts", "8", "--out", str(tmp_path),
                              inventory=inventory, timeout=300)
    assert code == 0, err
    pred = doc["prediction"]
    # With SGLang's device timer (measured phases): the baseline and 7 steps predict, the winner confirms. Without
    # it (the derived cycle fit) 1 step is measured too, for the fit's second point.
    timed = pred["methods"]["1"].startswith("measured phases")
    loaded = {"baseline", "eagle3-s3-k1-d4", "eagle3-s7-k1-d8"} | (set() if timed else {"eagle3-s1-k1-d2"})
    assert doc["model_loads"] == len(loaded) and doc["grid_loads"] == 8
    how = {r["config"]: r["measured"] for r in doc["rows"]}
    assert [r["config"] for r in doc["rows"]] == ["baseline"] + [f"eagle3-s{s}-k1-d{s + 1}" for s in range(1, 8)]
    assert {c for c, m in how.items() if m} == loaded
    pred = doc["prediction"]
    assert pred["histogram_source"] == "meta_info" and pred["histogram_config"] == "eagle3-s7-k1-d8"
    assert pred["winners"] == {"1": "eagle3-s3-k1-d4"}
    assert doc["winner"] == "eagle3-s3-k1-d4" and doc["running"] == "eagle3-s3-k1-d4"
    assert doc["predicted_tok_s"] > 0 and doc["measured_tok_s"] > 0
    assert _server_steps(sim_host) == 3
    # The person's table marks each row measured or predicted and says what the sweep cost.
    p = run_inv("analyze", "--sweep", doc["paths"]["json"])
    assert p.returncode == 0, p.stderr
    report = Path(doc["paths"]["report"]).read_text()
    assert "| eagle3-s5-k1-d6 | predicted |" in report and "| eagle3-s3-k1-d4 | measured |" in report
    # the count on the same terms as the plan said it before the first load (issue 40, point 3)
    assert f"model loads: {len(loaded)} to measure (the full grid: 8; planned: 2 to 4)" in report, report


def test_sweep_adaptive_length_stops_each_configuration_when_its_interval_is_narrow(inventory: Path,
                                                                                     sim_host: SimHost,
                                                                                     tmp_path: Path) -> None:
    sim_host.set_sim_config(**FAST)
    code, doc, err = inv_json("sweep", "--steps", "0,3", "--input-len", "32", "--output-len", "48",
                              "--target-ci", "4", "--min-requests", "3", "--max-requests", "40",
                              "--out", str(tmp_path), inventory=inventory, timeout=300)
    assert code == 0, err
    assert doc["params"]["target_ci"] == 0.04 and doc["params"]["num_prompts"] == 40
    rows = {r["config"]: r for r in doc["rows"]}
    for r in rows.values():
        assert r["client"] == "loadgen"
        assert r["tok_s_ci"] <= 0.04 or r["requests"] == 40, r
    # Decode steps of fixed cost: the baseline's interval narrows on its own, well before the cap (how many requests
    # that takes depends on the machine's timing noise: three on a quiet machine, four seen on a loaded one); the
    # speculative row's acceptance draws vary by themselves, so it needs more than the minimum.
    assert rows["baseline"]["tok_s_ci"] <= 0.04 and rows["baseline"]["requests"] < 40, rows["baseline"]
    assert rows["eagle3-s3-k1-d4"]["requests"] > 3
    report = Path(doc["paths"]["report"]).read_text()
    assert f"±{rows['eagle3-s3-k1-d4']['tok_s_ci']:.1%}" in report and "adaptive length" in report


def test_sweep_reports_the_winner_per_concurrency_level(inventory: Path, sim_host: SimHost, tmp_path: Path) -> None:
    # A verify pass whose cost grows fast with the batch: speculation wins alone and loses at 4 in flight.
    cost = {"verify_ms_per_batch_token": 3.0}
    sim_host.set_sim_config(**FAST, **cost)
    code, doc, err = inv_json("sweep", "--steps", "0,1", "--concurrency", "1,4", "--num-prompts", "8",
                              "--input-len", "32", "--output-len", "32", "--out", str(tmp_path),
                              inventory=inventory, timeout=300)
    assert code == 0, err
    assert doc["concurrency_levels"] == [1, 4]
    for r in doc["rows"]:
        assert [lv["concurrency"] for lv in r["levels"]] == [1, 4]   # one load served both levels
    # Each level's winner is that level's fastest measured row. Which row that is, is the measurement's to say: the
    # cost model above makes speculation win alone and lose at 4 in flight, and a quiet machine measures exactly that,
    # but two loaded runs measured the margins (x1.18 alone) the other way, so the test does not pin them.
    # A level's winner is its fastest row beyond the intervals, else the tie's stated choice (issue 40, point 2).
    def fastest(c: int) -> str:
        top = str(max(doc["rows"], key=lambda r: next(lv for lv in r["levels"] if lv["concurrency"] == c)["tok_s"])
                  ["config"])
        d = doc["ranking"][str(c)]
        assert d["fastest"] == top and (d["clear"] or top in d["tied"]), d
        return str(d["winner"])
    assert doc["winners"] == {"1": fastest(1), "4": fastest(4)}
    # The first level's winner is left running; a baseline winner is loaded again after the last configuration.
    assert doc["winner"] == doc["running"] == fastest(1)
    assert _server_steps(sim_host) == (1 if fastest(1) == "eagle3-s1-k1-d2" else 0)
    assert doc["model_loads"] == 2 or fastest(1) != "eagle3-s1-k1-d2"   # one load per configuration
    report = Path(doc["paths"]["report"]).read_text()
    assert "tok/s @1" in report and "tok/s @4" in report
    assert re.search(rf"winner per concurrency: 1: {fastest(1)}( \(tie[^)]*\))?, 4: {fastest(4)}", report), report
    p = run_inv("sweep", "--steps", "0,1", "--concurrency", "1,4", "--num-prompts", "4", "--input-len", "16",
                "--output-len", "16", "--out", str(tmp_path), inventory=inventory, timeout=300)
    assert p.returncode == 0, p.stderr
    # The person's summary names the winners this run measured (its sweep.json). Four short requests overlap less
    # on a loaded machine, so which configuration wins at 4 is the measurement's to say, not this test's.
    data = next(line.split("data: ", 1)[1].strip() for line in p.stdout.splitlines() if "data: " in line)
    won = json.loads(Path(data).read_text())["winners"]
    flat = " ".join(p.stdout.split())
    assert re.search(rf"winner per concurrency: 1: {won['1']}( \(tie[^)]*\))?, 4: {won['4']}", flat), p.stdout


def test_sweep_predict_on_a_version_without_the_histogram_reads_the_stream(inventory: Path, sim_host: SimHost,
                                                                           tmp_path: Path) -> None:
    # SGLang 0.5.7 returns no accepted-drafts histogram in meta_info (the wheels: 0.5.9 added it): the sweep
    # derives it from the tokens each verify pass streamed.
    sim_host.set_version("0.5.7")
    sim_host.set_sim_config(**FAST, **PEAK)
    code, doc, err = inv_json("sweep", "--steps", "0,1,2,3", "--predict", "--input-len", "32", "--output-len", "48",
                              "--num-prompts", "6", "--out", str(tmp_path), inventory=inventory, timeout=300)
    assert code == 0, err
    pred = doc["prediction"]
    assert pred["histogram_source"] == "stream" and pred["histogram_config"] == "eagle3-s3-k1-d4"
    # Passes that accepted 0..3 drafts; the last pass of each request (maybe cut short) is left out.
    assert len(pred["histogram"]) <= 4 and sum(pred["histogram"]) > 6 * 8
    assert [r["config"] for r in pred["rows"]] == ["eagle3-s1-k1-d2", "eagle3-s2-k1-d3", "eagle3-s3-k1-d4"]
    assert {r["config"]: r["measured"] for r in doc["rows"]}["eagle3-s2-k1-d3"] is (
        pred["winners"]["1"] == "eagle3-s2-k1-d3")
