"""After the readiness endpoint says ready: does the server answer, and does its speculation speculate?

SGLang's readiness endpoints can pass while the server cannot serve: ``/health`` answering 200 after the scheduler
died (sglang#6624), a server that passes ``/health`` and hangs on real requests (sglang#22779), EAGLE-3 stuck at
accept length 1 after an upgrade, where speculation only costs time (sglang#24795). So a deploy calls its server
ready only after:

* one real generation: ``POST /generate`` with ``input_ids`` (so a ``--skip-tokenizer-init`` server takes it too),
  a few new tokens, bounded in time; an answer is correct when it is HTTP 200 with ``meta_info.completion_tokens``
  >= 1 and ``text`` or ``output_ids``;
* for a speculative configuration, a short burst whose ``meta_info`` gives the accept length: Σ completion_tokens /
  Σ ``spec_verify_ct`` (every SGLang release reports ``spec_verify_ct`` for a speculative request; 0.5.4+ also
  ``spec_accept_length``, the same ratio per request). At or below ``accept_gate`` the deploy fails.

How long the burst is: ``BURST_REQUESTS`` at once (a small batch, so a server that serves one request but stalls at
batch > 1 fails here) of ``BURST_TOKENS`` each. Its cost is the server's own generation time (on the seed machine's
costs, 8 verify passes of ~44 ms at accept length 4: ~0.35 s). 128 tokens are plenty for the verdict: speculation
that is never accepted measures 32/31 = 1.03 per request, far from any working EAGLE-3 (2 and up) and below the
default gate 1.1; a working one measures its accept length within a few hundredths (~30 verify passes).

Stdlib only; every request is bounded (socket timeouts, and a deadline over the whole gate).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import TYPE_CHECKING, Any, TypedDict

from ..common import AgentError
from ..measure import loadgen

if TYPE_CHECKING:  # the shapes are annotations only: building them costs ~10 ms a call (verbs.py)
    from ..protocol import Accept, FirstRequest

# Token ids small enough for any tokenizer's vocabulary; the content does not matter, the answer does.
PROMPT_IDS = [100, 200, 300, 400, 500, 600, 700, 800]
FIRST_TOKENS = 8
BURST_REQUESTS = 4
BURST_TOKENS = 32

ACCEPT_HINT = ("check the draft path, the SGLang version's speculative flags, the topk/draft-token combination; "
               "or lower accept_gate (0 turns the gate off)")


def _target(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def _post(host: str, port: int, body: dict[str, Any], api_key: str | None, timeout: float) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", "/generate", body=json.dumps(body).encode(), headers=headers)
        resp = conn.getresponse()
        raw = resp.read(1 << 20)
    finally:
        conn.close()
    if resp.status != 200:
        raise ValueError(f"HTTP {resp.status}: {raw[:200].decode('utf-8', 'replace').strip()}")
    data = json.loads(raw.decode("utf-8", "replace"))
    if not isinstance(data, dict):
        raise ValueError("the answer is not a JSON object")
    return data


class _Background:
    """``fn`` running in its own thread, read with a bound: a server that accepts the connection and trickles bytes
    would outlast any socket timeout."""

    def __init__(self, fn: Any) -> None:
        self.box: dict[str, Any] = {}
        self.started = time.monotonic()

        def run() -> None:
            try:
                self.box["out"] = fn()
            except BaseException as e:  # reported to the reader by result()
                self.box["err"] = e

        self.thread = threading.Thread(target=run, name="gate-request", daemon=True)
        self.thread.start()

    def result(self, seconds: float) -> Any:
        """What ``fn`` returned (or raised); TimeoutError when it has not finished ``seconds`` after it started."""
        self.thread.join(max(0.0, self.started + seconds - time.monotonic()))
        if self.thread.is_alive():
            raise TimeoutError(f"no complete answer within {seconds:g} s")
        if "err" in self.box:
            raise self.box["err"]
        return self.box["out"]


def _bounded(fn: Any, seconds: float) -> Any:
    return _Background(fn).result(seconds)


def first_request(listen: str, port: int, api_key: str | None, timeout: float) -> FirstRequest:
    """One real generation. Returns its latency and what came back; raises AgentError("generate_failed")."""
    host = _target(listen)
    body = {"input_ids": PROMPT_IDS, "sampling_params": {"max_new_tokens": FIRST_TOKENS, "temperature": 0.0,
                                                         "ignore_eos": True}}
    t0 = time.monotonic()
    what = f"POST http://{host}:{port}/generate ({FIRST_TOKENS} tokens)"
    try:
        data = _bounded(lambda: _post(host, port, body, api_key, timeout), timeout)
    except TimeoutError as e:
        raise AgentError("generate_failed", f"the server said it was ready, but a real request hung: {what}: {e}",
                         "the scheduler may be dead or stuck behind a passing health check; see the log excerpt "
                         "(`inv logs`), and check the GPUs", timed_out=True) from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise AgentError("generate_failed", f"the server said it was ready, but a real request failed: {what}: "
                         f"{type(e).__name__ if not str(e) else e}",
                         "the server cannot serve: read the log (`inv logs`) for the error") from None
    latency = round(time.monotonic() - t0, 3)
    meta = data.get("meta_info") if isinstance(data.get("meta_info"), dict) else {}
    tokens = int(meta.get("completion_tokens") or 0)
    has_output = bool(data.get("text")) or bool(data.get("output_ids"))
    if tokens < 1 or not has_output:
        raise AgentError("generate_failed", f"the server said it was ready, but a real request came back empty: "
                         f"{what} answered {json.dumps(data)[:200]}",
                         "the server cannot serve: read the log (`inv logs`) for the error")
    return {"latency_s": latency, "completion_tokens": tokens, "timeout_s": timeout}


class Burst(TypedDict):
    """The accept-length burst's outcome: the requests' pooled ``meta_info`` (``loadgen``), how many, how long."""

    meta: dict[str, Any]
    requests: int
    output_len: int
    elapsed_s: float


class AcceptBurst:
    """A short burst of streamed requests, started now; :meth:`result` gives the accept length from their final
    ``meta_info``. A deploy starts it beside the first real request: both are the server's generation time, and
    run together they cost the longer of the two instead of their sum (~0.08 s less on the seed machine's costs)."""

    def __init__(self, listen: str, port: int, api_key: str | None, timeout: float, *,
                 requests: int = BURST_REQUESTS, output_len: int = BURST_TOKENS) -> None:
        host = _target(listen)
        self.requests, self.output_len, self.timeout = requests, output_len, timeout
        self.run = _Background(lambda: loadgen.run(host, port, concurrency=requests, input_len=len(PROMPT_IDS),
                                                   output_len=output_len, num_prompts=requests, warmup=0,
                                                   api_key=api_key, timeout=timeout))

    def result(self) -> Burst:
        requests, output_len = self.requests, self.output_len
        try:
            out = self.run.result(self.timeout)
        except TimeoutError as e:
            raise AgentError("generate_failed", f"the accept-length burst ({requests} requests of {output_len} "
                             f"tokens) did not finish: {e}", "the server stalls under a small load; see the log "
                             "(`inv logs`)", timed_out=True) from None
        if out["failed"]:
            raise AgentError("generate_failed", f"{out['failed']} of {requests} requests of the accept-length burst "
                             f"failed: {(out.get('errors') or ['?'])[0]}",
                             "the server cannot serve a small load: read the log (`inv logs`)")
        return {"meta": out.get("meta") or {}, "requests": requests, "output_len": output_len,
                "elapsed_s": round(time.monotonic() - self.run.started, 3)}


def judge_accept(burst: Burst, gate: float) -> Accept:
    """The accept length the burst measured, judged against ``gate``; raises AgentError("accept_gate")."""
    meta = burst["meta"]
    n = burst["requests"]
    source = "meta_info completion_tokens / spec_verify_ct"
    if not meta.get("verify_ct"):
        raise AgentError("accept_gate", f"the speculative configuration reported no verify passes over {n} "
                         "requests (meta_info has no spec_verify_ct): the server is not speculating, so the draft "
                         "model is not being used",
                         ACCEPT_HINT, measured=None, gate=gate)
    length = float(meta["accept_len"])
    result: Accept = {"accept_length": round(length, 3), "source": source, "requests": n,
              "completion_tokens": meta.get("completion_tokens"), "verify_ct": meta.get("verify_ct"), "gate": gate,
              "draft_acceptance": meta.get("draft_acceptance")}
    if length <= gate:
        raise AgentError("accept_gate", f"EAGLE accept length {length:.2f} over {n} requests "
                         f"({meta.get('completion_tokens')} tokens in {meta.get('verify_ct')} verify passes, from "
                         f"{source}) is at or below accept_gate {gate:g}: the draft model is not being accepted, so "
                         "speculation costs time and gains nothing",
                         ACCEPT_HINT, **result)
    return result
