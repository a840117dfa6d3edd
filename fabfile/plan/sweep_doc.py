"""The shapes of ``inv sweep``'s document (``sweep.json``, its ``--json``): one row per configuration, each level's
figures, the prediction and the winner's choice. ``commands/sweep`` writes them, ``plan/sweep_plan``,
``plan/sweep_winner`` and ``plan/ranking`` decide on them, ``present/sweep_report`` and ``present/plot`` print
them; a saved document is read back for ``--resume`` (``commands/sweep_files``) and by ``inv explain``/``inv
analyze``. Every key a row carries only sometimes (a failed deploy has no figures, a predicted row no bench) is
optional: readers ask with ``.get``."""

from __future__ import annotations

from typing import Any, TypedDict


class LevelFigures(TypedDict, total=False):
    """One configuration measured at one concurrency level (``commands.sweep.level_figures``, from ``bench``'s
    answer), or predicted there; the first level's are the row's own top-level figures too."""

    concurrency: int
    bench_id: str
    bench_path: str
    client: str | None
    tok_s: float | None  # output tokens per second [the tool's load generator]
    tok_s_ci: float | None  # its relative 95 % interval (an adaptive length), None for a fixed --num-prompts
    requests: int | None
    bench_duration_s: float | None
    accept_len: float | None
    accept_rate: float | None
    accept_rate_meaning: str | None
    draft_acceptance: float | None
    cycle_ms: float | None
    cycle_ms_source: str | None
    decode_ms_per_token: float | None
    phases: dict[str, Any] | None  # the device timer's phases, as ``bench`` reports them
    ms_per_token: float | None
    ttft_ms: float | None  # medians over the level's requests
    tpot_ms: float | None
    itl_ms: float | None
    failed_requests: int | None
    accept_histogram: list[int] | None
    accept_histogram_source: str | None
    spec_num_steps: float | None  # SGLang's active step count (adaptive mode moves it)
    # what the sweep decides on them (``sweep_winner``, ``sweep_plan.add_predictions``)
    speedup: float | None  # tok/s over the baseline's at the same level
    sla_broke: list[str]  # the service limits broken here, each a short phrase
    predicted_tok_s: float | None  # the prediction it was loaded on, or the figure of a row only predicted


class SweepRow(LevelFigures, total=False):
    """One configuration of the sweep: what it is, how its deploy and bench went, its first level's figures at the
    top and every level's in ``levels``. A flat row of one level (``sweep_plan.level_rows``) has that level's
    figures at the top and no ``levels``."""

    config: str
    steps: int
    topk: int
    draft_tokens: int | None
    ok: bool
    measured: bool  # False: predicted only, never loaded
    nccl: str  # the NCCL candidate's name
    nccl_vars: int  # how many NCCL variables the candidate sets (the tie-break's "fewer changed variables")
    adaptive: bool
    deploy_s: float
    bench_s: float
    deploy_id: str
    measure: bool | None  # SGLang's device timer was on
    sglang_version: str | None
    phase: str  # where a failed row failed: deploy | bench
    error: dict[str, object]  # its error (``SpecDeployError.as_dict``)
    levels: list[LevelFigures]
    allreduce: dict[str, Any]  # the traced all-reduce figures the NCCL skip reads (``nccl_model.allreduce_figures``)
    allreduce_error: str
    allreduce_context: dict[str, Any]  # hidden size, dtype, link, TP: what sizes the all-reduces
    tok_s_high: float  # a prediction's range, where one measured count gives it
    tok_s_low: float


class Decision(TypedDict):
    """The ranking at one level (``ranking.rank``): a winner only beyond its interval, else a tie and its rule."""

    winner: str
    fastest: str
    clear: bool
    tied: list[str]  # the configurations within the fastest one's interval, fastest first
    within: float  # the widest interval among them, a fraction
    tie_break: str | None  # the rule that chose (``ranking.TIE_BREAKS``), None when clear
    tok_s: dict[str, float]  # the tied rows' measured figures


class Choice(TypedDict, total=False):
    """The winner per level, the baseline, and what stays running (``sweep_winner.choose``): keys of the sweep's
    document."""

    winner: str | None
    baseline_tok_s: float | None
    baseline_wins: bool
    kept: str | None
    keep_note: str | None
    winners: dict[str, str | None]  # level -> winner
    ranking: dict[str, Decision | None]  # level -> its decision
    sla: dict[str, object]  # the limits, their sentence and the levels none met
    winner_predicted_tok_s: float
    winner_measured_tok_s: float | None
    predicted_tok_s: float
    measured_tok_s: float | None


class SweepDocument(Choice, total=False):
    """``sweep.json``: the sweep's parameters, rows, notes, prediction, choice and files."""

    sweep_id: str
    host: str
    started_at: str
    params: dict[str, Any]  # the benchmark's ``BenchParams``
    configs: list[str]  # every configuration's name, in the sweep's order
    rows: list[SweepRow]
    concurrency_levels: list[int]
    predict: bool
    grid_loads: int
    model_loads: int
    redeploy_loads: int
    planned_loads: dict[str, int]  # least, most
    notes: list[str]
    nccl_skipped: list[dict[str, Any]]  # each skipped NCCL candidate (``nccl_skip.Skip.as_dict``) and its configs
    plan_hashes: dict[str, str]
    prediction: dict[str, Any]  # ``sweep_plan.predict_from_rows``' answer, with ``before_load``
    resumed: dict[str, object]
    interrupted: dict[str, object]
    elapsed_s: float
    bench_s: float
    analysis: dict[str, Any]  # ``analysis.analyze_sweep``
    explain: dict[str, Any]  # ``--explain``'s subjects and findings (``explain_report.document``)
    paths: dict[str, str]
    plot_missing: str
    running: str | None
    final_deploy: dict[str, object]  # the winner's redeploy (``DeployResult.as_dict``)
