"""Cost model and scheduler of the SGLang simulator's /generate (TEST EQUIPMENT; no model, only timing).

One engine thread runs the requests in flight as SGLang's scheduler does: new requests are admitted as a prefill
batch (their first token comes from the prefill, as in SGLang), then every running request advances by one decode
step per forward of the whole batch (continuous batching, at most ``--max-running-requests``).

Speculative (EAGLE/EAGLE3) cycle for a batch of B requests: ``steps - 1`` draft forwards
(``(draft_ms_per_step + draft_ms_per_seq·(B-1))`` each) and a draft-extend (``draft_extend_ms``, default one draft
forward's cost: so ``steps`` draft costs in all), verify ``num_draft_tokens`` D per request at
``verify_ms_base + verify_ms_per_token·D + verify_ms_per_batch_token·D·(B-1)``. Per request, draft position i is
accepted with ``accept_prob[i]`` (last value repeats) and the run stops at the first rejection, so the distribution
of accepted drafts per verify pass (not only its mean) follows the per-position rates; the pass emits 1 + accepted
tokens, streamed together as one chunk. ``accept_wrong_every`` P (issue 37) replaces the random acceptance by the
real kit's partial draft (bench/real_sglang/make_models.py): a request's tokens count up from a random slot, and a
pass from last slot a accepts drafts a + k until the first that is 0 mod P. Baseline:
``decode_ms + decode_ms_per_seq·(B-1)`` per step. At B = 1 the costs are the single-stream ones. The engine sleeps
each cost times ``time_scale`` so throughput is wall-clock.

``meta_info`` of a finished request carries the speculative fields the simulated version's
``TokenizerManager._calculate_spec_decoding_metrics`` returns (read from the real wheels; see ``spec_meta``).
"""

from __future__ import annotations

import datetime
import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from sglang._sim import nccl, runtime
from sglang._sim.profiler import Measurement

_WORDS = [
    "the", "of", "and", "to", "in", "is", "that", "it", "for", "as", "with", "was", "on", "be",
    "by", "at", "this", "from", "or", "an", "are", "which", "have", "not", "but", "all", "can",
    "will", "one", "has", "more", "their", "been", "there", "when", "so", "its", "also", "into",
    "than", "other", "some", "time", "only", "these",
]


def spec_meta(ver: tuple[int, ...], *, completion_tokens: int, verify_ct: int, correct_drafts: int, steps: int,
              num_draft_tokens: int, histogram: list[int]) -> dict[str, Any]:
    """The speculative ``meta_info`` fields of a finished request, per SGLang version (checked in the wheels'
    ``tokenizer_manager.py``): 0.4.x–0.5.3 ``spec_verify_ct`` only; 0.5.4–0.5.5 accept rate over verify·steps;
    0.5.6–0.5.10 ``spec_accept_token_num``/``spec_draft_token_num``, 0.5.9+ ``spec_accept_histogram``; 0.5.11
    ``spec_accepted_drafts``/``spec_proposed_drafts``; 0.5.12–0.5.20 ``spec_num_correct_drafts``/
    ``spec_num_proposed_drafts`` and ``spec_correct_drafts_histogram`` with the old names as aliases; 0.5.21+
    without the aliases (no ``spec_accept_histogram``). The histogram counts verify passes by correct drafts."""
    if verify_ct <= 0:
        return {}
    if ver < (0, 5, 4):
        return {"spec_verify_ct": verify_ct}
    guesses = steps if ver < (0, 5, 6) else max(0, num_draft_tokens - 1)
    proposed = verify_ct * guesses
    meta: dict[str, Any] = {}
    if ver < (0, 5, 6) or proposed > 0:
        meta["spec_accept_rate"] = correct_drafts / proposed if proposed else 0.0
        meta["spec_accept_length"] = completion_tokens / verify_ct
        if (0, 5, 6) <= ver < (0, 5, 11):
            meta["spec_accept_token_num"] = correct_drafts
            meta["spec_draft_token_num"] = proposed
        elif ver >= (0, 5, 12):
            meta["spec_num_correct_drafts"] = correct_drafts
            meta["spec_num_proposed_drafts"] = proposed
        meta["spec_verify_ct"] = verify_ct
        if (0, 5, 11) <= ver < (0, 5, 21):
            meta["spec_accepted_drafts"] = correct_drafts
            meta["spec_proposed_drafts"] = proposed
    if histogram and ver >= (0, 5, 9):
        if ver >= (0, 5, 12):
            meta["spec_correct_drafts_histogram"] = list(histogram)
        if ver < (0, 5, 21):
            meta["spec_accept_histogram"] = list(histogram)
    return meta


class GenerateFailed(Exception):
    """A request the scheduler could not serve (the ``generate_error`` fault)."""


class _Req:
    def __init__(self, prompt_tokens: int, max_new_tokens: int, streaming: bool):
        self.prompt_tokens = prompt_tokens
        self.max_new = max(1, max_new_tokens)
        self.streaming = streaming
        self.words: list[str] = []
        self.verify_ct = 0
        self.correct_drafts = 0
        self.histogram: list[int] = []
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.aborted = False
        self.log_metrics = True  # False for SGLang's health check request
        self.start = time.perf_counter()
        self.first_slot = 0  # accept_wrong_every: the slot of the first new token (the prompt's last id + 1)

    def add_pass(self, correct: int) -> None:
        self.verify_ct += 1
        self.correct_drafts += correct
        if len(self.histogram) <= correct:
            self.histogram.extend([0] * (correct + 1 - len(self.histogram)))
        self.histogram[correct] += 1


# SGLang's DEFAULT_ADAPTIVE_CONFIG (0.5.16 wheel): candidate step counts per batch-size tier
ADAPTIVE_TIERS: dict[int, list[int]] = {1: [1, 3, 7], 8: [0, 1, 3], 32: [0, 1], 64: [0]}


class Generator:
    def __init__(self, server_args: Any, cfg: dict[str, Any], infos: list[dict[str, Any]], tp0_prefix: str):
        self.sa = server_args
        self.cfg = cfg
        self.ver = runtime.version()
        self.stats_lock = threading.Lock()
        self.rng = random.Random(int(cfg.get("seed", 42)))
        self.tp0_prefix = tp0_prefix
        info0 = infos[0] if infos else {}
        self.max_total_num_tokens = int(info0.get("max_total_num_tokens") or 1_000_000)
        self.max_running = int(getattr(server_args, "max_running_requests", None) or 48)
        self.spec = server_args.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE")
        self.steps = int(server_args.speculative_num_steps or 0)
        self.num_draft = int(server_args.speculative_num_draft_tokens or (self.steps + 1))
        factor = 1.0
        factors = cfg.get("nccl_cost_factors") or {}
        for k, v in (info0.get("nccl_env") or {}).items():
            factor *= float(factors.get(f"{k}={v}", 1.0))
        self.comm_factor = factor
        noise = float(cfg.get("deploy_noise") or 0.0)
        self.deploy_factor = random.Random(f"{cfg.get('seed', 42)}:{os.getpid()}").uniform(1 - noise, 1 + noise)
        self.probs = self.accept_probs() if self.spec else [0.0]
        self.adaptive: dict[str, float] | None = None
        if self.spec and getattr(server_args, "speculative_adaptive", False):
            tier1 = ADAPTIVE_TIERS[1]
            if self.steps not in tier1:
                self.steps = tier1[len(tier1) // 2]
            self.num_draft = self.steps + 1
            self.adaptive = {"ema": float(self.steps - 1), "n": 0}
        # scheduler state (engine thread)
        self.cv = threading.Condition()
        self.waiting: list[_Req] = []
        self.running: list[_Req] = []
        self.engine: threading.Thread | None = None
        # counters
        self.num_running = 0
        self.forward_ct = 0
        self.window_forward_ct = 0
        self.window_tokens = 0
        self.window_accepted_drafts = 0
        self.window_start = time.perf_counter()
        self.cum_spec_tokens = 0
        self.cum_spec_forward = 0
        self.last_gen_throughput = 0.0
        self.last_accept_length = 0.0
        self.last_accept_rate = 0.0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.num_requests_total = 0
        # time.time() of the last output the "detokenizer" delivered (SGLang's tokenizer_manager.last_receive_tstamp,
        # which its health-generate handler watches)
        self.last_receive_tstamp = 0.0
        # After-ready faults (set by the HTTP server once warmup is done, so the warmup itself passes, as the
        # servers of these reports did): "generate_error" fails every real request; "generate_hang" serves the
        # prefill (so SGLang's one-token health check passes) but never decodes; "scheduler_dead_health_ok": the
        # first real request kills a scheduler, the launcher does not notice and /health keeps answering 200
        # (sglang#6624), requests hang.
        self.fault: str | None = None
        self.scheduler_pids: list[int] = [int(i["pid"]) for i in infos if i.get("pid")]
        self.scheduler_dead = False
        self.tp0_pid = int(info0.get("pid") or 0)
        self.tp0_gpu = int(info0.get("gpu_id") or 0)
        self.tp0_nccl_env: dict[str, str] = dict(info0.get("nccl_env") or {})  # what TP0's NCCL read
        self.model_config = runtime.read_model_config(getattr(server_args, "model_path", None))
        layers = int(self.model_config.get("num_hidden_layers") or 2)
        self.measure = Measurement(server_args, self.ver, min(layers, 64), self.scheduler_pids)

    # -------------------------------------------------------------- costs (ms of simulated GPU time)
    def cycle_parts(self, batch: int = 1) -> dict[str, float]:
        """One cycle's parts in ms: a draft forward (``steps - 1`` of them, as SGLang's draft_forward runs: the first
        draft token comes out of the draft-extend), the verify, the draft-extend (``draft_extend_ms``, default one
        draft step's cost, so the cycle costs ``steps`` draft steps + the verify)."""
        c = self.cfg
        extra = max(0, batch - 1)
        draft = float(c["draft_ms_per_step"]) + float(c.get("draft_ms_per_seq", 0.0)) * extra
        verify = float(c["verify_ms_base"]) + float(c["verify_ms_per_token"]) * self.num_draft + \
            float(c.get("verify_ms_per_batch_token", 0.0)) * self.num_draft * extra
        extend = c.get("draft_extend_ms")
        draft_extend = draft if extend is None else float(extend) + float(c.get("draft_ms_per_seq", 0.0)) * extra
        f = self.comm_factor
        if getattr(self.sa, "disable_cuda_graph", False):  # cost knob: verify's kernels launched one by one
            verify += float(c.get("eager_verify_ms") or 0.0)
        # The all-reduces by message size (opt-in, nccl_allreduces_per_forward): verify's carry every draft token
        # of the batch, a draft forward's (and the draft-extend's) one token per request.
        draft_comm = self._allreduce_ms(batch, draft=True)
        return {"draft": draft * f + draft_comm, "verify": verify * f + self._allreduce_ms(batch * self.num_draft),
                "draft_extend": draft_extend * f + draft_comm}

    def host_ms(self) -> float:
        """The scheduler's host work per step (cost knob ``host_ms``, default 0), × ``no_overlap_host_factor``
        under --disable-overlap-schedule, × this deploy's factor (``deploy_noise``: uniform ±noise, drawn once per
        server from ``seed`` and the scheduler's pid, so each deploy of one configuration differs)."""
        ms = float(self.cfg.get("host_ms") or 0.0)
        if getattr(self.sa, "disable_overlap_schedule", False):
            ms *= float(self.cfg.get("no_overlap_host_factor", 1.0))
        return ms * self.deploy_factor

    def cycle_ms(self, batch: int = 1) -> float:
        """One draft+verify cycle of a batch of ``batch`` requests."""
        p = self.cycle_parts(batch)
        return p["draft"] * max(0, self.steps - 1) + p["verify"] + p["draft_extend"]

    def decode_ms(self, batch: int = 1) -> float:
        c = self.cfg
        return (float(c["decode_ms"]) + float(c.get("decode_ms_per_seq", 0.0)) * max(0, batch - 1)) * \
            self.comm_factor + self._allreduce_ms(batch)

    def prefill_ms(self, prompt_tokens: int) -> float:
        return float(self.cfg["prefill_ms_base"]) + float(self.cfg["prefill_ms_per_token"]) * prompt_tokens + \
            self._allreduce_ms(prompt_tokens)

    def _allreduce_ms(self, tokens: int, draft: bool = False) -> float:
        """With ``nccl_allreduces_per_forward`` set: that many all-reduces of hidden x tokens x 2 bytes per forward
        (a draft step: ``nccl_draft_allreduces_per_step``, 2 for EAGLE-3's one layer), each at the time NCCL's
        choice for its size takes on this path (``_sim/nccl.py``: LL low latency and half the bandwidth, Simple the
        opposite, LL128 on NVLink), under the NCCL_PROTO/NCCL_ALGO the TP0 scheduler's NCCL read. 0 without it
        (the fixed costs above hold)."""
        n, ms = self.allreduce_calls(tokens, draft)
        return n * ms

    def allreduce_calls(self, tokens: int, draft: bool = False) -> tuple[int, float]:
        """(all-reduces per forward, ms each) as ``_allreduce_ms`` charges them; (0, 0.0) without the opt-in or at
        TP 1. The profiler's trace gives its all-reduce kernels these durations."""
        n = int(self.cfg.get("nccl_allreduces_per_forward") or 0)
        if n and draft:
            n = int(self.cfg.get("nccl_draft_allreduces_per_step", 2))
        tp = int(getattr(self.sa, "tp_size", 1) or 1)
        if not n or tp < 2:
            return 0, 0.0
        nbytes = int(self.model_config.get("hidden_size") or 7168) * max(tokens, 1) * 2
        algo, proto = nccl.choose(nbytes, tp, self.cfg, self.tp0_nccl_env)
        return n, nccl.allreduce_us(nbytes, algo, proto, tp, str(self.cfg.get("interconnect", "pcie"))) / 1000.0

    def accept_probs(self) -> list[float]:
        """``accept_prob``, or the entry of ``accept_prob_by_config`` for this server's speculative configuration
        (``"steps,topk,draft_tokens"``, e.g. ``"3,1,4"``; ``[0.0]`` is a draft that is never accepted: the accept
        length stays at 1, as EAGLE-3 stuck after an upgrade in sglang#24795)."""
        by_config = self.cfg.get("accept_prob_by_config") or {}
        topk = int(getattr(self.sa, "speculative_eagle_topk", None) or 1)
        key = f"{self.steps},{topk},{self.num_draft}"
        probs = by_config.get(key, self.cfg.get("accept_prob"))
        return [float(p) for p in (probs or [0.0])]

    def _accepted(self, r: _Req | None = None) -> int:
        every = int(self.cfg.get("accept_wrong_every") or 0)
        if every and r is not None:  # the partial draft depends on the request's slot; the random one does not
            last = r.first_slot + max(0, len(r.words) - 1)
            n = 0
            while n < self.num_draft - 1 and (last + n + 1) % every:
                n += 1
            return n
        probs = self.probs
        n = 0
        for i in range(max(0, self.num_draft - 1)):
            p = probs[i] if i < len(probs) else probs[-1]
            if self.rng.random() >= p:
                break
            n += 1
        return n

    # -------------------------------------------------------------- logging
    def _nccl_eager(self, tokens: int) -> None:
        """The TUNING lines NCCL's rank 0 (the TP0 scheduler) prints for one eager forward's all-reduces."""
        if int(getattr(self.sa, "tp_size", 1) or 1) > 1 and self.tp0_pid and not self.cfg.get("real_cuda"):
            nccl.emit_tuning(self.tp0_pid, self.tp0_gpu, nccl.allreduce_sizes(self.model_config, tokens),
                             int(self.sa.tp_size), self.cfg, self.tp0_nccl_env)

    def _adapt(self, accepted: list[int], batch: int) -> None:
        """``--speculative-adaptive``: SGLang's AdaptiveStepSlot (adaptive_spec_params.py), in the small: an EMA of
        the accepted drafts per verify pass, recomputed every 5 passes after 10 warm-up ones, moving between the
        candidate step counts of the batch size's tier; the draft-token count follows (steps + 1, topk 1)."""
        slot = self.adaptive
        assert slot is not None
        tier = max((k for k in ADAPTIVE_TIERS if k <= max(batch, 1)), default=1)
        cands = ADAPTIVE_TIERS[tier]
        if self.steps > 0:
            slot["ema"] = 0.8 * slot["ema"] + 0.2 * sum(accepted) / len(accepted)
        slot["n"] += 1
        if slot["n"] <= 10 or (slot["n"] - 10) % 5 or self.steps not in cands:
            return
        i = cands.index(self.steps)
        old = i
        while i > 0 and slot["ema"] <= (0.5 if cands[i - 1] == 0 else cands[i - 1] - 0.5) - 0.25 * (tier == 1):
            i -= 1
        if i == old:
            while i < len(cands) - 1 and slot["ema"] > cands[i] - 0.5:
                i += 1
        if cands[i] != self.steps:
            self._log(f"Adaptive spec params updated: steps {self.steps} -> {cands[i]} "
                      f"(ema_accept_len={slot['ema']:.2f})")
            self.steps, self.num_draft = cands[i], cands[i] + 1

    def _log(self, msg: str) -> None:
        # Printed from the TP0 scheduler's perspective (its log prefix), as SGLang's stats rank does.
        runtime.write_all(2, f"[{runtime.now_stamp()}{self.tp0_prefix}] {msg}\n".encode())

    def _decode_line(self, num_tokens: int) -> str:
        now = time.perf_counter()
        gap = max(now - self.window_start, 1e-9)
        self.last_gen_throughput = self.window_tokens / gap
        # "Decode batch." until 0.5.3.x, "Decode batch [<forward ct>]," in 0.5.4 (not its post releases),
        # "Decode batch," from 0.5.4.post1
        if self.ver < (0, 5, 4):
            head = "Decode batch."
        elif self.ver < (0, 5, 4, 1):
            head = f"Decode batch [{self.forward_ct}],"
        else:
            head = "Decode batch,"
        usage = num_tokens / self.max_total_num_tokens
        msg = f"{head} #running-req: {self.num_running}, #token: {num_tokens}, token usage: {usage:.2f}, "
        if self.spec and self.window_forward_ct:
            al = self.window_tokens / self.window_forward_ct
            self.last_accept_length = al
            if self.ver >= (0, 5, 11):
                rate = (al - 1) / (self.num_draft - 1) if self.num_draft > 1 else 0.0
            elif self.ver >= (0, 5, 5, 3):
                rate = al / self.num_draft if self.num_draft else 0.0
            else:  # 0.5.3.post2-0.5.5.post2 divide by steps + 1, whatever the draft-token count (topk > 1)
                rate = al / (self.steps + 1)
            self.last_accept_rate = rate
            msg += f"accept len: {al:.2f}, "
            if self.ver >= (0, 5, 3, 2):
                msg += f"accept rate: {rate:.2f}, "
        if self.ver >= (0, 4, 6, 4):
            msg += f"cuda graph: {not self.sa.disable_cuda_graph}, "
        msg += f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: {len(self.waiting)}"
        if (0, 4, 9, 1) <= self.ver < (0, 4, 9, 3):
            msg += f", timestamp: {datetime.datetime.now().isoformat()}"
        # the trailing ", " of 0.4.5.x and 0.4.9.post3-0.5.8 (gone in 0.5.9)
        if self.ver < (0, 4, 6) or (0, 4, 9, 3) <= self.ver < (0, 5, 9):
            msg += ", "
        self.window_tokens = 0
        self.window_forward_ct = 0
        self.window_accepted_drafts = 0
        self.window_start = now
        return msg

    def _prefill_line(self, reqs: list[_Req]) -> str:
        head = "Prefill batch." if self.ver < (0, 5, 0) else "Prefill batch,"
        n = sum(r.prompt_tokens for r in reqs)
        msg = (
            f"{head} #new-seq: {len(reqs)}, #new-token: {n}, #cached-token: 0, token usage: "
            f"{n / self.max_total_num_tokens:.2f}, #running-req: {len(self.running)}, #queue-req: 0"
        )
        return msg + (", " if self.ver < (0, 5, 11) else "")

    # -------------------------------------------------------------- the engine (SGLang's scheduler loop)
    def _ensure_engine(self) -> None:
        with self.cv:
            if self.engine is None:
                self.engine = threading.Thread(target=self._loop, name="sim-scheduler", daemon=True)
                self.engine.start()

    def _loop(self) -> None:
        scale = float(self.cfg.get("time_scale", 1.0))
        interval = max(1, int(self.sa.decode_log_interval or 40))
        t = time.perf_counter()
        while True:
            with self.cv:
                while not self.waiting and not self.running:
                    self.cv.wait()
                    t = time.perf_counter()
                self.running = [r for r in self.running if not r.aborted]
                room = self.max_running - len(self.running)
                admit = [r for r in self.waiting if not r.aborted][:max(0, room)]
                self.waiting = [r for r in self.waiting if r not in admit and not r.aborted]
            if admit:
                # A prefill batch: its forward yields each new request's first token.
                self._log(self._prefill_line(admit))
                self._nccl_eager(sum(r.prompt_tokens for r in admit))
                cost = sum(self.prefill_ms(r.prompt_tokens) for r in admit)
                t = max(t, time.perf_counter()) + cost * scale / 1000
                wall0 = time.time() + (t - time.perf_counter()) - cost * scale / 1000
                _sleep_until(t)
                self.measure.prefill(wall0, cost * scale, len(admit), sum(r.prompt_tokens for r in admit))
                with self.stats_lock:
                    self.prompt_tokens_total += sum(r.prompt_tokens for r in admit if r.log_metrics)
                    self.generation_tokens_total += sum(1 for r in admit if r.log_metrics)
                for r in admit:
                    self._emit(r, 1)
                with self.cv:
                    self.running += [r for r in admit if len(r.words) < r.max_new and not r.aborted]
                continue
            batch = [r for r in self.running if not r.aborted]
            if not batch:
                continue
            if self.fault in ("generate_hang", "scheduler_dead_health_ok"):
                # No decode step ever completes; new arrivals still get their prefill (the health check's one token).
                with self.cv:
                    self.cv.wait(0.1)
                continue
            b = len(batch)
            self.num_running = b
            if getattr(self.sa, "disable_cuda_graph", False):  # eager: NCCL schedules (and logs) each all-reduce
                self._nccl_eager(b * (self.num_draft if self.spec else 1))
            cost = self.cycle_ms(b) if self.spec else self.decode_ms(b)
            # Host time outside the timed phases ("other" in a profile): slept, never recorded by the device timer.
            host = self.host_ms()
            t = max(t, time.perf_counter() - 0.05) + (cost + host) * scale / 1000
            wall0 = time.time() + (t - time.perf_counter()) - cost * scale / 1000
            _sleep_until(t)
            if self.spec:
                parts = {k: v * scale for k, v in self.cycle_parts(b).items()}
                dn, dms = self.allreduce_calls(b, draft=True)
                vn, vms = self.allreduce_calls(b * self.num_draft)
                ar = {"draft": (dn, dms * scale), "verify": (vn, vms * scale), "draft_extend": (dn, dms * scale)}
                self.measure.cycle(wall0, parts, max(0, self.steps - 1), b, ar)
            else:
                n_ar, ms_ar = self.allreduce_calls(b)
                self.measure.decode(wall0, cost * scale, b, (n_ar, ms_ar * scale))
            emitted_total = 0
            accepted: list[int] = []
            for r in batch:
                if self.spec:
                    acc = self._accepted(r)
                    accepted.append(acc)
                    r.add_pass(acc)
                    n = min(1 + acc, r.max_new - len(r.words))
                else:
                    n = 1
                emitted_total += n
                self._emit(r, n)
            with self.stats_lock:
                self.forward_ct += 1
                self.window_forward_ct += b
                self.window_tokens += emitted_total
                self.generation_tokens_total += emitted_total
                if self.spec:
                    self.cum_spec_tokens += emitted_total
                    self.cum_spec_forward += b
                if self.forward_ct % interval == 0:
                    self._log(self._decode_line(sum(r.prompt_tokens + len(r.words) for r in batch)))
            if self.adaptive is not None and accepted:
                self._adapt(accepted, b)
            with self.cv:
                self.running = [r for r in self.running if len(r.words) < r.max_new and not r.aborted]
                self.num_running = len(self.running)

    def _emit(self, r: _Req, n: int) -> None:
        new = [self.rng.choice(_WORDS) for _ in range(n)]
        r.words.extend(new)
        self.last_receive_tstamp = time.time()
        if len(r.words) >= r.max_new:
            # The last pass's tokens travel in the finished response, with the final meta_info (as in SGLang).
            r.events.put(("done", self._finish(r)))
        elif r.streaming:
            r.events.put(("chunk", ("".join(" " + w for w in new), len(r.words))))

    def _finish(self, r: _Req) -> dict[str, Any]:
        with self.stats_lock:
            self.num_requests_total += 1 if r.log_metrics else 0
        n = len(r.words)
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": n},
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": n,
            "cached_tokens": 0,
            "e2e_latency": time.perf_counter() - r.start,
        }
        if self.spec:
            if r.log_metrics:
                self.measure.finished(r.verify_ct)
            meta.update(spec_meta(self.ver, completion_tokens=n, verify_ct=r.verify_ct,
                                  correct_drafts=r.correct_drafts, steps=self.steps,
                                  num_draft_tokens=self.num_draft, histogram=r.histogram))
        return {"text": "".join(" " + w for w in r.words), "meta_info": meta}

    # -------------------------------------------------------------- one request (an HTTP handler's thread)
    def generate(
        self,
        prompt_tokens: int,
        max_new_tokens: int,
        on_chunk: Callable[[str, int], None] | None = None,
    ) -> dict[str, Any]:
        self._ensure_engine()
        if self.fault == "generate_error":
            raise GenerateFailed("CUDA error: an illegal memory access was encountered")
        if self.fault == "scheduler_dead_health_ok" and not self.scheduler_dead:
            self.scheduler_dead = True
            import os
            import signal
            rank = int(self.cfg.get("fail_rank", 0))
            if rank < len(self.scheduler_pids):
                os.kill(self.scheduler_pids[rank], signal.SIGKILL)
        r = _Req(prompt_tokens, max_new_tokens, on_chunk is not None)
        r.first_slot = self.rng.randrange(1 << 16)
        with self.cv:
            self.waiting.append(r)
            self.cv.notify()
        try:
            while True:
                kind, data = r.events.get()
                if kind == "done":
                    return dict(data)
                if on_chunk is not None:
                    on_chunk(*data)
        except BaseException:
            r.aborted = True  # the client went away: SGLang aborts the request
            raise

    def health_request(self) -> None:
        """SGLang's health check request: ``input_ids=[0]``, ``max_new_tokens=1``, ``log_metrics=False``. Its one
        token comes out of the prefill; it is not counted in the request metrics."""
        self._ensure_engine()
        r = _Req(1, 1, False)
        r.log_metrics = False
        with self.cv:
            self.waiting.append(r)
            self.cv.notify()
        r.events.get()

    @property
    def avg_spec_accept_length(self) -> float | None:
        if not self.spec or not self.cum_spec_forward:
            return None
        return self.cum_spec_tokens / self.cum_spec_forward


def _sleep_until(t: float) -> None:
    d = t - time.perf_counter()
    if d > 0:
        time.sleep(d)
