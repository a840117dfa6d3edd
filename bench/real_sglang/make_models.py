"""Generate a tiny Llama target and a matching EAGLE-3 draft whose greedy outputs are known in advance.

No hub, no torch: numpy writes the safetensors files directly (bfloat16, every value exactly representable), so the
same script runs on the CPU machine (tests) and on the GPU machine (the real run).

The construction (H = hidden size = number of "slots"; slot(t) = t mod H; succ(s) = (s + 1) mod H):

* Target (``LlamaForCausalLM``, 8 layers): the embedding of token t is the one-hot vector e_slot(t); every
  attention and MLP projection is zero, so each layer adds nothing and the residual stream stays e_slot(t); the
  final RMSNorm scales it to sqrt(H)·e_slot(t); ``lm_head`` row v (for v < H) is e_pred(v), so the logits are
  sqrt(H) at v = succ(slot(t)) and 0 everywhere else. Greedy decoding therefore emits succ(slot(last token)),
  then counts up mod H: 17, 18, 19, ... A unique maximum, no ties.
* Draft (``LlamaForCausalLMEagle3``, SGLang's layout: ``midlayer.*``, ``fc``, ``norm``, ``lm_head``, ``d2t``,
  ``t2d``): it receives the target's aux hidden states (layers 2, 4, 5 of 8, each e_slot(t)); ``fc`` keeps the
  first (e_slot(t)); attention is zero; the MLP is a one-hot shift: gate = up = identity, so the product is
  non-zero only at the active slot, and ``down`` maps it to e_succ(s) - e_s, so the residual becomes e_succ(s).
  The draft's ``lm_head`` (draft vocabulary H, ``d2t`` all zero: draft id i is target id i) then proposes
  succ(succ(s)), exactly the target's next token; the next draft step starts from the draft's own pre-norm
  hidden state e_succ(s) and shifts again. So every drafted token is what the target would emit.

Prediction: with topk 1 and draft_tokens D = steps + 1, every verify pass accepts all D - 1 drafts plus the bonus
token. For a request of N new tokens (EOS ignored), SGLang 0.5.16's per-request ``meta_info.spec_accept_length``
is completion_tokens / verify_ct = N / ceil((N - 1) / D) (the first token comes from prefill); the decode log's
``accept len`` is D for every full verify pass. :func:`predicted_accept_length` computes it.

Shapes (issue 37): ``tiny`` (above, the default) and ``7b`` (Llama-2-7B: hidden 4096, 32 heads, 32 layers,
intermediate 11008), one code path; ``mini`` is a reduced-size instance of that path for the unit test. The zero
tensors are never materialised: the safetensors writer seeks over them (a sparse file), so the 7B files (13 GB)
are written in seconds on the GPU machine.

A draft that is wrong at known places (``--wrong-every P``, P >= 2): the draft's ``lm_head`` proposes slot c + 2
instead of c + 1 whenever the right token's slot is a multiple of P, so every verify pass stops at the first such
token. From a pass whose last accepted token has slot a, the drafts y_k = a + k are accepted while (a + k) mod P
!= 0; the pass yields (accepted + 1) tokens, the bonus being the target's own right token. Once a pass stopped at a
multiple of P, every later pass yields P tokens when P <= D (steady state ``accept len`` = min(P, D); slots wrap
at H, so near the wrap one pass is shorter when P does not divide H; :func:`verify_passes` counts that too).
:func:`verify_passes` replays this exactly for one request; :func:`predicted_accept_length` averages it over the
request's first slot (the load generator's prompts end in random ids), :func:`accept_length_range` bounds it.

An MoE target (issue 37 point 5; ``--shape moe``, ``moe-mini`` its reduced-size instance for the unit test):
``Qwen3MoeForCausalLM`` (SGLang 0.5.16 implements ``set_eagle3_layers_to_capture`` for it, aux layers [2, L//2,
L-3] as for Llama), every layer sparse. Attention is zero as above (q_norm/k_norm of a zero vector stay zero);
every expert's weights are zero, so the MoE block adds nothing and the residual stream still carries e_slot(t)
through every layer: the target, the aux states and therefore the draft behave exactly as the Llama shapes'. The
router (``mlp.gate``) reads that one-hot: slot s scores sqrt(H) on the top_k experts (s·top_k ... s·top_k +
top_k - 1) mod E and 0 on every other, so each slot reaches its own block of experts (:func:`experts_of`), and the
D tokens of one verify pass, consecutive slots, reach D·top_k distinct experts where a decode token reaches top_k
(:func:`verify_experts`): the weight traffic that can make verify far dearer than a decode step. The partial
draft's wrong proposal there is slot c + 1 + H/2 instead of c + 2 (same block as the slot it replaces, H/2 being
a multiple of E/top_k), so the pass's tokens stay distinct slots; which token is wrong does not change the accept
length (the draft's chain follows its own hidden state, not its proposals).

    python3 bench/real_sglang/make_models.py OUTDIR [--shape tiny|7b|mini|moe|moe-mini] [--wrong-every P]
"""

from __future__ import annotations

import argparse
import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Shape:
    hidden: int          # also the number of slots
    heads: int
    layers: int          # EAGLE-3 captures layers [2, L//2, L-3]: three aux states, as fc expects (L >= 6)
    intermediate: int    # the dense MLP's width; an MoE shape's: each expert's (moe_intermediate_size)
    kv_heads: int = 0    # 0: as many as heads (MHA)
    head_dim: int = 0    # 0: hidden // heads
    experts: int = 0     # > 0: a Qwen3-MoE target (every layer sparse) routing each token to top_k of them
    top_k: int = 0

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads


SHAPES = {"tiny": Shape(512, 8, 8, 1024),           # 8 heads of 64 (divisible by TP 1, 2 and 8)
          "7b": Shape(4096, 32, 32, 11008),          # Llama-2-7B (MHA)
          "mini": Shape(256, 4, 12, 688),            # the 7B path at a size the unit test reads back quickly
          # Qwen3-30B-A3B's attention (32 query heads of 128, 4 KV heads) and top-8 routing, 16 layers of 64
          # experts of width 1536: 20.2 GB, of which the experts are 19.3 GB. A decode token reads 8 experts per
          # layer, a verify pass of 4 tokens 32 and one of 8 all 64 (MOE_BLOCKS below): verify reads up to 6.6×
          # the weights a decode step does.
          "moe": Shape(2048, 32, 16, 1536, kv_heads=4, head_dim=128, experts=64, top_k=8),
          # the MoE path at a size the unit test reads back quickly: the same 8 expert blocks of top_k
          "moe-mini": Shape(256, 4, 8, 64, kv_heads=2, head_dim=64, experts=16, top_k=2)}
TINY = SHAPES["tiny"]
HIDDEN, HEADS, TARGET_LAYERS, TARGET_INTERMEDIATE = TINY.hidden, TINY.heads, TINY.layers, TINY.intermediate
VOCAB = 32000           # the tool's load generator sends random ids in [100, 30000)
EPS = 1e-6
EOS = VOCAB - 1         # never emitted: only ids < hidden ever win

# A tensor to write: float32/int64/bool values, or ("zeros", shape) that the writer seeks over (a sparse hole).
Zeros = tuple[str, tuple[int, ...]]
Tensor = np.ndarray | Zeros | Callable[[], np.ndarray]


def _zeros(*shape: int) -> Zeros:
    return ("zeros", tuple(shape))


def _bf16(a: np.ndarray) -> bytes:
    """float32 → bfloat16 bytes by truncation; exact here, every value is 0, ±1 or a power of two."""
    words = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    if (words & 0xFFFF).any():  # truncation keeps the top 16 bits: exact only when the low 16 are all zero
        raise ValueError("a weight is not exactly representable in bfloat16")
    return (words >> 16).astype(np.uint16).tobytes()


def _meta(arr: Tensor) -> tuple[str, list[int], int]:
    if isinstance(arr, tuple):
        shape = list(arr[1])
        return "BF16", shape, 2 * math.prod(shape)
    if callable(arr):
        raise TypeError("resolve callables first")
    if arr.dtype == np.float32:
        return "BF16", list(arr.shape), 2 * arr.size
    if arr.dtype == np.int64:
        return "I64", list(arr.shape), 8 * arr.size
    if arr.dtype == np.bool_:
        return "BOOL", list(arr.shape), arr.size
    raise TypeError(f"unsupported dtype {arr.dtype}")


def write_safetensors(path: Path, tensors: dict[str, Tensor]) -> None:
    """Header first (every size is known from the shapes), then each tensor streamed; zeros are holes."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, arr in tensors.items():
        dtype, shape, size = _meta(arr() if callable(arr) else arr)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for arr in tensors.values():
            value = arr() if callable(arr) else arr
            if isinstance(value, tuple):
                f.seek(_meta(value)[2], 1)
            elif value.dtype == np.float32:
                f.write(_bf16(value))
            else:
                f.write(np.ascontiguousarray(value).tobytes())
        f.truncate(8 + len(head) + offset)
    tmp.replace(path)


def _eye(n: int) -> np.ndarray:
    return np.eye(n, dtype=np.float32)


def _pred_rows(rows: int, hidden: int, wrong_every: int = 0, far: bool = False) -> np.ndarray:
    """lm_head whose row v (v < hidden) is e_{(v-1) mod hidden}: the logit of v is high when slot v-1 is active.

    wrong_every P: for each v with v mod P == 0 the one of e_{v-1} moves from row v to row v+1, so state v-1
    proposes v+1 (wrong) while state v still proposes v+1 (right): every state keeps one unique maximum (each
    column holds one 1). far (the MoE shapes): it moves to row v + hidden/2 instead, a slot no other token of the
    verify pass has, so a pass's tokens stay distinct slots (each routed to its own experts)."""
    w = np.zeros((rows, hidden), dtype=np.float32)
    for v in range(hidden):
        wrong = (v + hidden // 2 if far else v + 1) % hidden
        row = wrong if wrong_every and v % wrong_every == 0 else v
        w[row, (v - 1) % hidden] = 1.0
    return w


def _embedding(hidden: int) -> np.ndarray:
    e = np.zeros((VOCAB, hidden), dtype=np.float32)
    e[np.arange(VOCAB), np.arange(VOCAB) % hidden] = 1.0
    return e


def _common_config(shape: Shape) -> dict[str, object]:
    return {"model_type": "llama", "hidden_size": shape.hidden, "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.heads, "head_dim": shape.hidden // shape.heads, "vocab_size": VOCAB,
            "max_position_embeddings": 4096, "rms_norm_eps": EPS, "rope_theta": 10000.0, "hidden_act": "silu",
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": EOS,
            "attention_bias": False, "mlp_bias": False}


def experts_of(slot: int, shape: Shape) -> list[int]:
    """The experts slot s routes to: the block of top_k starting at expert (s · top_k) mod E. There are
    E / top_k blocks, so slots that differ mod E / top_k reach disjoint sets of experts."""
    return [(slot * shape.top_k + j) % shape.experts for j in range(shape.top_k)]


def verify_experts(steps: int, shape: Shape) -> int:
    """Distinct experts per layer one verify pass of D = steps + 1 tokens reaches (decode: top_k). A pass's tokens
    are consecutive slots (the far wrong proposal shares the block of the slot it replaced), so D · top_k up to E."""
    return min(shape.experts, (steps + 1) * shape.top_k)


def moe_traffic(shape: Shape) -> dict[str, Any]:
    """The MoE target's bf16 weights (GB) and what one forward of n tokens (consecutive slots, n = 1 decode, 4 and 8
    verify) reads of them: each layer's attention, router and norms once, min(E, n · top_k) experts, the lm_head
    (the n embedding rows it reads are negligible)."""
    h, q, kv = shape.hidden, shape.heads * shape.hd, shape.kv * shape.hd
    expert = 3 * h * shape.intermediate * 2
    dense = (2 * q * h + 2 * kv * h + shape.experts * h + 2 * shape.hd + 2 * h) * 2
    head = VOCAB * h * 2
    total = shape.layers * (dense + shape.experts * expert) + 2 * head + 2 * h

    def read(n: int) -> float:
        return (shape.layers * (dense + min(shape.experts, n * shape.top_k) * expert) + head) / 1e9

    return {"total_gb": total / 1e9, "experts_gb": shape.layers * shape.experts * expert / 1e9,
            "read_gb": {n: read(n) for n in (1, 4, 8)}}


def _router(shape: Shape) -> np.ndarray:
    """mlp.gate [E, H]: column s has a 1 at each expert of experts_of(s). The gate reads the post-attention RMSNorm
    of the residual sqrt(H)·e_slot, so those top_k experts score sqrt(H) and every other 0: a strict top-k."""
    w = np.zeros((shape.experts, shape.hidden), dtype=np.float32)
    s = np.arange(shape.hidden)
    for j in range(shape.top_k):
        w[(s * shape.top_k + j) % shape.experts, s] = 1.0
    return w


def _moe_target_tensors(shape: Shape) -> dict[str, Tensor]:
    """Qwen3MoeForCausalLM's checkpoint names (SGLang 0.5.16's load_weights: q/k/v_proj stacked into qkv_proj,
    mlp.experts.{e}.gate/up/down_proj into FusedMoE's w13/w2, mlp.gate the router)."""
    h, m, q, kv = shape.hidden, shape.intermediate, shape.heads * shape.hd, shape.kv * shape.hd
    router = _router(shape)
    t: dict[str, Tensor] = {"model.embed_tokens.weight": lambda: _embedding(h)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = _zeros(q, h)
        t[p + "self_attn.k_proj.weight"] = _zeros(kv, h)
        t[p + "self_attn.v_proj.weight"] = _zeros(kv, h)
        t[p + "self_attn.o_proj.weight"] = _zeros(h, q)
        t[p + "self_attn.q_norm.weight"] = np.ones(shape.hd, dtype=np.float32)
        t[p + "self_attn.k_norm.weight"] = np.ones(shape.hd, dtype=np.float32)
        t[p + "mlp.gate.weight"] = router
        for e in range(shape.experts):
            t[p + f"mlp.experts.{e}.gate_proj.weight"] = _zeros(m, h)
            t[p + f"mlp.experts.{e}.up_proj.weight"] = _zeros(m, h)
            t[p + f"mlp.experts.{e}.down_proj.weight"] = _zeros(h, m)
        t[p + "input_layernorm.weight"] = np.ones(h, dtype=np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(h, dtype=np.float32)
    t["model.norm.weight"] = np.ones(h, dtype=np.float32)
    t["lm_head.weight"] = lambda: _pred_rows(VOCAB, h)
    return t


def target_tensors(shape: Shape = TINY) -> dict[str, Tensor]:
    if shape.moe:
        return _moe_target_tensors(shape)
    h, m = shape.hidden, shape.intermediate
    t: dict[str, Tensor] = {"model.embed_tokens.weight": lambda: _embedding(h)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[p + f"self_attn.{proj}.weight"] = _zeros(h, h)
        t[p + "mlp.gate_proj.weight"] = _zeros(m, h)
        t[p + "mlp.up_proj.weight"] = _zeros(m, h)
        t[p + "mlp.down_proj.weight"] = _zeros(h, m)
        t[p + "input_layernorm.weight"] = np.ones(h, dtype=np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(h, dtype=np.float32)
    t["model.norm.weight"] = np.ones(h, dtype=np.float32)
    t["lm_head.weight"] = lambda: _pred_rows(VOCAB, h)
    return t


def _down_scale(hidden: int) -> float:
    """1/κ as a power of two, κ = silu(n)·n with n = sqrt(H) the RMSNorm output of a one-hot vector (κ ≈ H)."""
    n = 1.0 / math.sqrt(1.0 / hidden + EPS)
    kappa = n * n / (1.0 + math.exp(-n))
    return 2.0 ** -round(math.log2(kappa))


def draft_tensors(shape: Shape = TINY, wrong_every: int = 0) -> dict[str, Tensor]:
    h = shape.hidden

    def shift() -> np.ndarray:   # column j: e_succ(j) - e_j, scaled so the residual becomes exactly e_succ(j)
        s = np.zeros((h, h), dtype=np.float32)
        j = np.arange(h)
        s[(j + 1) % h, j] += 1.0
        s[j, j] -= 1.0
        return s * np.float32(_down_scale(h))

    def fc() -> np.ndarray:
        w = np.zeros((h, 3 * h), dtype=np.float32)
        w[:, :h] = _eye(h)
        return w

    return {
        "embed_tokens.weight": lambda: _embedding(h),
        "fc.weight": fc,
        "midlayer.hidden_norm.weight": np.ones(h, dtype=np.float32),
        "midlayer.input_layernorm.weight": np.ones(h, dtype=np.float32),
        "midlayer.post_attention_layernorm.weight": np.ones(h, dtype=np.float32),
        "midlayer.self_attn.q_proj.weight": _zeros(h, 2 * h),
        "midlayer.self_attn.k_proj.weight": _zeros(h, 2 * h),
        "midlayer.self_attn.v_proj.weight": _zeros(h, 2 * h),
        "midlayer.self_attn.o_proj.weight": _zeros(h, h),
        "midlayer.mlp.gate_proj.weight": lambda: _eye(h),
        "midlayer.mlp.up_proj.weight": lambda: _eye(h),
        "midlayer.mlp.down_proj.weight": shift,
        "norm.weight": np.ones(h, dtype=np.float32),
        "lm_head.weight": lambda: _pred_rows(h, h, wrong_every, far=shape.moe),
        "d2t": np.zeros(h, dtype=np.int64),
        "t2d": np.arange(VOCAB) < h,
    }


def target_config(shape: Shape) -> dict[str, object]:
    if not shape.moe:
        return {**_common_config(shape), "architectures": ["LlamaForCausalLM"], "num_hidden_layers": shape.layers,
                "intermediate_size": shape.intermediate}
    # transformers 5.12.1's Qwen3MoeConfig fields (head_dim is read by SGLang's Qwen3MoeDecoderLayer);
    # decoder_sparse_step 1 and no mlp_only_layers: every layer is sparse, as SGLang 0.5.16's Qwen3-MoE assumes.
    return {**_common_config(shape), "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "num_hidden_layers": shape.layers, "num_key_value_heads": shape.kv, "head_dim": shape.hd,
            "intermediate_size": shape.intermediate * shape.top_k, "moe_intermediate_size": shape.intermediate,
            "num_experts": shape.experts, "num_experts_per_tok": shape.top_k, "norm_topk_prob": True,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False,
            "output_router_logits": False, "router_aux_loss_coef": 0.0}


def _check_moe(shape: Shape) -> None:
    blocks = shape.experts // shape.top_k
    if shape.experts % shape.top_k or (shape.hidden // 2) % blocks:
        # the far wrong proposal (slot + H/2) must fall in the block of the slot it replaces
        raise ValueError(f"an MoE shape needs experts divisible by top_k and hidden/2 by experts/top_k: {shape}")


def write(out: Path, shape: Shape | str = TINY, wrong_every: int = 0) -> dict[str, Path]:
    if isinstance(shape, str):
        shape = SHAPES[shape]
    if wrong_every == 1 or wrong_every < 0:
        raise ValueError("wrong_every must be 0 (always right) or at least 2")
    if shape.moe:
        _check_moe(shape)
    target, draft = out / "target", out / "draft"
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    cfg = target_config(shape)
    (target / "config.json").write_text(json.dumps(cfg, indent=1))
    (target / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": EOS}))
    write_safetensors(target / "model.safetensors", target_tensors(shape))
    dcfg = {**_common_config(shape), "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
            "intermediate_size": shape.hidden, "draft_vocab_size": shape.hidden}
    (draft / "config.json").write_text(json.dumps(dcfg, indent=1))
    write_safetensors(draft / "model.safetensors", draft_tensors(shape, wrong_every))
    (out / "made.json").write_text(json.dumps({"shape": shape.__dict__, "wrong_every": wrong_every}))
    return {"target": target, "draft": draft}


def verify_passes(first_slot: int, new_tokens: int, steps: int, wrong_every: int = 0,
                  hidden: int = HIDDEN) -> list[int]:
    """Tokens each verify pass yields for one request (topk 1, greedy chain verification, D = steps + 1).

    first_slot: slot of the first new token (from prefill). A pass from last slot a accepts drafts y_k = a + k
    (k = 1..steps) up to the first whose slot ((a + k) mod hidden) is 0 mod P, then adds the target's bonus."""
    passes, produced, a = [], 1, first_slot
    while produced < new_tokens:
        accepted = 0
        for k in range(1, steps + 1):
            if wrong_every and ((a + k) % hidden) % wrong_every == 0:
                break
            accepted += 1
        passes.append(accepted + 1)
        produced += accepted + 1
        a += accepted + 1
    return passes


def _per_start(new_tokens: int, steps: int, wrong_every: int, hidden: int) -> list[float]:
    starts = range(hidden) if wrong_every else range(1)
    return [new_tokens / len(verify_passes(s, new_tokens, steps, wrong_every, hidden)) for s in starts]


def predicted_accept_length(new_tokens: int, steps: int, wrong_every: int = 0, hidden: int = HIDDEN) -> float:
    """SGLang's meta_info.spec_accept_length for one request (completion_tokens / verify_ct), averaged over the
    request's first slot (always right, P = 0: N / ceil((N - 1) / D) for every request)."""
    per = _per_start(new_tokens, steps, wrong_every, hidden)
    return sum(per) / len(per)


def accept_length_range(new_tokens: int, steps: int, wrong_every: int = 0,
                        hidden: int = HIDDEN) -> tuple[float, float]:
    """The lowest and highest per-request accept length over every first slot: a mean over requests lies within."""
    per = _per_start(new_tokens, steps, wrong_every, hidden)
    return min(per), max(per)


def steady_accept_len(steps: int, wrong_every: int = 0) -> int:
    """The decode log's ``accept len`` once a pass has stopped at a multiple of P: min(P, D)."""
    d = steps + 1
    return min(wrong_every, d) if wrong_every else d


def greedy_target(last_token: int, n: int, hidden: int = HIDDEN) -> list[int]:
    """The tokens the target emits after a prompt ending in ``last_token`` (the construction's closed form)."""
    out, s = [], last_token % hidden
    for _ in range(n):
        s = (s + 1) % hidden
        out.append(s)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="models")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--wrong-every", type=int, default=0, help="P: the draft is wrong where the slot is 0 mod P")
    a = ap.parse_args()
    paths = write(Path(a.out), a.shape, a.wrong_every)
    print(json.dumps({k: str(v) for k, v in paths.items()}))
