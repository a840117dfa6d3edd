"""Cost model of the SGLang simulator's /generate (TEST EQUIPMENT; no model, only timing).

Speculative (EAGLE/EAGLE3) cycle: draft ``steps`` tokens (``draft_ms_per_step`` each), verify
``num_draft_tokens`` D at ``verify_ms_base + verify_ms_per_token * D``; draft position i is accepted
with ``accept_prob[i]`` (last value repeats), the run stops at the first rejection, and the cycle emits
1 + accepted tokens.  Baseline: ``decode_ms`` per token.  Sleeps the cost times ``time_scale`` so
throughput is real wall-clock.  Requests are served one at a time (batch size 1).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from sglang._sim import runtime

_WORDS = [
    "the", "of", "and", "to", "in", "is", "that", "it", "for", "as", "with", "was", "on", "be",
    "by", "at", "this", "from", "or", "an", "are", "which", "have", "not", "but", "all", "can",
    "will", "one", "has", "more", "their", "been", "there", "when", "so", "its", "also", "into",
    "than", "other", "some", "time", "only", "these",
]


class Generator:
    def __init__(self, server_args: Any, cfg: dict[str, Any], infos: list[dict[str, Any]], tp0_prefix: str):
        self.sa = server_args
        self.cfg = cfg
        self.ver = runtime.version()
        self.lock = threading.Lock()
        self.stats_lock = threading.Lock()
        self.rng = random.Random(int(cfg.get("seed", 42)))
        self.tp0_prefix = tp0_prefix
        info0 = infos[0] if infos else {}
        self.max_total_num_tokens = int(info0.get("max_total_num_tokens") or 1_000_000)
        self.spec = server_args.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE")
        self.steps = int(server_args.speculative_num_steps or 0)
        self.num_draft = int(server_args.speculative_num_draft_tokens or (self.steps + 1))
        factor = 1.0
        factors = cfg.get("nccl_cost_factors") or {}
        for k, v in (info0.get("nccl_env") or {}).items():
            factor *= float(factors.get(f"{k}={v}", 1.0))
        self.comm_factor = factor
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

    # -------------------------------------------------------------- costs (ms of simulated GPU time)
    def cycle_ms(self) -> float:
        c = self.cfg
        verify = float(c["verify_ms_base"]) + float(c["verify_ms_per_token"]) * self.num_draft
        return (float(c["draft_ms_per_step"]) * self.steps + verify) * self.comm_factor

    def decode_ms(self) -> float:
        return float(self.cfg["decode_ms"]) * self.comm_factor

    def _accepted(self) -> int:
        probs = [float(p) for p in (self.cfg.get("accept_prob") or [0.0])]
        n = 0
        for i in range(max(0, self.num_draft - 1)):
            p = probs[i] if i < len(probs) else probs[-1]
            if self.rng.random() >= p:
                break
            n += 1
        return n

    # -------------------------------------------------------------- logging
    def _log(self, msg: str) -> None:
        # Printed from the TP0 scheduler's perspective (its log prefix), as SGLang's stats rank does.
        runtime.write_all(2, f"[{runtime.now_stamp()}{self.tp0_prefix}] {msg}\n".encode())

    def _decode_line(self, num_tokens: int) -> str:
        now = time.perf_counter()
        gap = max(now - self.window_start, 1e-9)
        self.last_gen_throughput = self.window_tokens / gap
        head = "Decode batch." if self.ver < (0, 5, 0) else "Decode batch,"
        usage = num_tokens / self.max_total_num_tokens
        msg = f"{head} #running-req: {self.num_running}, #token: {num_tokens}, token usage: {usage:.2f}, "
        if self.spec and self.window_forward_ct:
            al = self.window_tokens / self.window_forward_ct
            self.last_accept_length = al
            if self.ver >= (0, 5, 11):
                rate = (al - 1) / (self.num_draft - 1) if self.num_draft > 1 else 0.0
            else:
                rate = al / self.num_draft if self.num_draft else 0.0
            self.last_accept_rate = rate
            msg += f"accept len: {al:.2f}, "
            if self.ver >= (0, 5, 5):
                msg += f"accept rate: {rate:.2f}, "
        msg += (
            f"cuda graph: {not self.sa.disable_cuda_graph}, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: 0"
        )
        if self.ver < (0, 5, 11):
            msg += ", "
        self.window_tokens = 0
        self.window_forward_ct = 0
        self.window_accepted_drafts = 0
        self.window_start = now
        return msg

    def _prefill_line(self, n: int) -> str:
        head = "Prefill batch." if self.ver < (0, 5, 0) else "Prefill batch,"
        msg = (
            f"{head} #new-seq: 1, #new-token: {n}, #cached-token: 0, token usage: "
            f"{n / self.max_total_num_tokens:.2f}, #running-req: {self.num_running}, #queue-req: 0"
        )
        return msg + (", " if self.ver < (0, 5, 11) else "")

    # -------------------------------------------------------------- generation
    def generate(
        self,
        prompt_tokens: int,
        max_new_tokens: int,
        on_chunk: Callable[[str, int], None] | None = None,
    ) -> dict[str, Any]:
        scale = float(self.cfg.get("time_scale", 1.0))
        interval = max(1, int(self.sa.decode_log_interval or 40))
        start = time.perf_counter()
        with self.lock:
            self.num_running = 1
            t = time.perf_counter()
            prefill = float(self.cfg["prefill_ms_base"]) + float(self.cfg["prefill_ms_per_token"]) * prompt_tokens
            self._log(self._prefill_line(prompt_tokens))
            t += prefill * scale / 1000
            _sleep_until(t)
            out_words: list[str] = []
            verify_ct = 0
            accepted_total = 0
            while len(out_words) < max_new_tokens:
                if self.spec:
                    acc = self._accepted()
                    emitted = min(1 + acc, max_new_tokens - len(out_words))
                    cost = self.cycle_ms()
                    verify_ct += 1
                    accepted_total += acc
                else:
                    emitted = 1
                    cost = self.decode_ms()
                t += cost * scale / 1000
                _sleep_until(t)
                new = [self.rng.choice(_WORDS) for _ in range(emitted)]
                out_words.extend(new)
                with self.stats_lock:
                    self.forward_ct += 1
                    self.window_forward_ct += 1
                    self.window_tokens += emitted
                    self.generation_tokens_total += emitted
                    if self.spec:
                        self.cum_spec_tokens += emitted
                        self.cum_spec_forward += 1
                    if self.forward_ct % interval == 0:
                        self._log(self._decode_line(prompt_tokens + len(out_words)))
                if on_chunk is not None:
                    on_chunk("".join(" " + w for w in new), len(out_words))
            self.num_running = 0
        with self.stats_lock:
            self.prompt_tokens_total += prompt_tokens
            self.num_requests_total += 1
        n = len(out_words)
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": n},
            "prompt_tokens": prompt_tokens,
            "completion_tokens": n,
            "cached_tokens": 0,
            "e2e_latency": time.perf_counter() - start,
        }
        if self.spec:
            meta["spec_verify_ct"] = verify_ct
            meta["spec_accept_length"] = n / verify_ct if verify_ct else 0.0
            proposed = verify_ct * max(1, self.num_draft - 1)
            meta["spec_accept_rate"] = accepted_total / proposed if proposed else 0.0
            meta["spec_accept_token_num"] = accepted_total
            meta["spec_draft_token_num"] = proposed
        return {"text": "".join(" " + w for w in out_words), "meta_info": meta}

    @property
    def avg_spec_accept_length(self) -> float | None:
        if not self.spec or not self.cum_spec_forward:
            return None
        return self.cum_spec_tokens / self.cum_spec_forward


def _sleep_until(t: float) -> None:
    d = t - time.perf_counter()
    if d > 0:
        time.sleep(d)
