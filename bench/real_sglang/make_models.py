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

    python3 bench/real_sglang/make_models.py OUTDIR     → OUTDIR/target, OUTDIR/draft
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

HIDDEN = 512            # 8 heads of 64 (divisible by TP 1, 2 and 8); also the number of slots
HEADS = 8
VOCAB = 32000           # the tool's load generator sends random ids in [100, 30000)
TARGET_LAYERS = 8       # EAGLE-3 captures layers [2, L//2, L-3] = [2, 4, 5]: three aux states, as fc expects
TARGET_INTERMEDIATE = 1024
EPS = 1e-6
EOS = VOCAB - 1         # never emitted: only ids < HIDDEN ever win


def _bf16(a: np.ndarray) -> bytes:
    """float32 → bfloat16 bytes by truncation; exact here, every value is 0, ±1 or a power of two."""
    words = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    if (words & 0xFFFF).any():  # truncation keeps the top 16 bits: exact only when the low 16 are all zero
        raise ValueError("a weight is not exactly representable in bfloat16")
    return (words >> 16).astype(np.uint16).tobytes()


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name, arr in tensors.items():
        if arr.dtype == np.float32:
            data, dtype = _bf16(arr), "BF16"
        elif arr.dtype == np.int64:
            data, dtype = np.ascontiguousarray(arr).tobytes(), "I64"
        elif arr.dtype == np.bool_:
            data, dtype = np.ascontiguousarray(arr).tobytes(), "BOOL"
        else:
            raise TypeError(f"{name}: unsupported dtype {arr.dtype}")
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    tmp.replace(path)


def _eye(n: int) -> np.ndarray:
    return np.eye(n, dtype=np.float32)


def _pred_rows(rows: int) -> np.ndarray:
    """lm_head whose row v (v < HIDDEN) is e_{(v-1) mod HIDDEN}: the logit of v is high when slot v-1 is active."""
    w = np.zeros((rows, HIDDEN), dtype=np.float32)
    for v in range(HIDDEN):
        w[v, (v - 1) % HIDDEN] = 1.0
    return w


def _embedding() -> np.ndarray:
    e = np.zeros((VOCAB, HIDDEN), dtype=np.float32)
    e[np.arange(VOCAB), np.arange(VOCAB) % HIDDEN] = 1.0
    return e


def _common_config() -> dict[str, object]:
    return {"model_type": "llama", "hidden_size": HIDDEN, "num_attention_heads": HEADS,
            "num_key_value_heads": HEADS, "head_dim": HIDDEN // HEADS, "vocab_size": VOCAB,
            "max_position_embeddings": 4096, "rms_norm_eps": EPS, "rope_theta": 10000.0, "hidden_act": "silu",
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": EOS,
            "attention_bias": False, "mlp_bias": False}


def target_tensors() -> dict[str, np.ndarray]:
    t: dict[str, np.ndarray] = {"model.embed_tokens.weight": _embedding()}
    zeros = np.zeros
    for i in range(TARGET_LAYERS):
        p = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[p + f"self_attn.{proj}.weight"] = zeros((HIDDEN, HIDDEN), dtype=np.float32)
        t[p + "mlp.gate_proj.weight"] = zeros((TARGET_INTERMEDIATE, HIDDEN), dtype=np.float32)
        t[p + "mlp.up_proj.weight"] = zeros((TARGET_INTERMEDIATE, HIDDEN), dtype=np.float32)
        t[p + "mlp.down_proj.weight"] = zeros((HIDDEN, TARGET_INTERMEDIATE), dtype=np.float32)
        t[p + "input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    t["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    t["lm_head.weight"] = _pred_rows(VOCAB)
    return t


def _down_scale() -> float:
    """1/κ as a power of two, κ = silu(n)·n with n = sqrt(H) the RMSNorm output of a one-hot vector (κ ≈ H)."""
    n = 1.0 / math.sqrt(1.0 / HIDDEN + EPS)
    kappa = n * n / (1.0 + math.exp(-n))
    return 2.0 ** -round(math.log2(kappa))


def draft_tensors() -> dict[str, np.ndarray]:
    h = HIDDEN
    shift = np.zeros((h, h), dtype=np.float32)   # column j: e_succ(j) - e_j
    for j in range(h):
        shift[(j + 1) % h, j] += 1.0
        shift[j, j] -= 1.0
    fc = np.zeros((h, 3 * h), dtype=np.float32)
    fc[:, :h] = _eye(h)
    t: dict[str, np.ndarray] = {
        "embed_tokens.weight": _embedding(),
        "fc.weight": fc,
        "midlayer.hidden_norm.weight": np.ones(h, dtype=np.float32),
        "midlayer.input_layernorm.weight": np.ones(h, dtype=np.float32),
        "midlayer.post_attention_layernorm.weight": np.ones(h, dtype=np.float32),
        "midlayer.self_attn.q_proj.weight": np.zeros((h, 2 * h), dtype=np.float32),
        "midlayer.self_attn.k_proj.weight": np.zeros((h, 2 * h), dtype=np.float32),
        "midlayer.self_attn.v_proj.weight": np.zeros((h, 2 * h), dtype=np.float32),
        "midlayer.self_attn.o_proj.weight": np.zeros((h, h), dtype=np.float32),
        "midlayer.mlp.gate_proj.weight": _eye(h),
        "midlayer.mlp.up_proj.weight": _eye(h),
        "midlayer.mlp.down_proj.weight": shift * np.float32(_down_scale()),
        "norm.weight": np.ones(h, dtype=np.float32),
        "lm_head.weight": _pred_rows(h),
        "d2t": np.zeros(h, dtype=np.int64),
        "t2d": np.arange(VOCAB) < h,
    }
    return t


def write(out: Path) -> dict[str, Path]:
    target, draft = out / "target", out / "draft"
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    cfg = {**_common_config(), "architectures": ["LlamaForCausalLM"], "num_hidden_layers": TARGET_LAYERS,
           "intermediate_size": TARGET_INTERMEDIATE}
    (target / "config.json").write_text(json.dumps(cfg, indent=1))
    (target / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": EOS}))
    write_safetensors(target / "model.safetensors", target_tensors())
    dcfg = {**_common_config(), "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
            "intermediate_size": HIDDEN, "draft_vocab_size": HIDDEN}
    (draft / "config.json").write_text(json.dumps(dcfg, indent=1))
    write_safetensors(draft / "model.safetensors", draft_tensors())
    return {"target": target, "draft": draft}


def predicted_accept_length(new_tokens: int, steps: int) -> float:
    """SGLang's meta_info.spec_accept_length for one request under these models (topk 1, D = steps + 1)."""
    d = steps + 1
    return new_tokens / math.ceil((new_tokens - 1) / d)


def greedy_target(last_token: int, n: int) -> list[int]:
    """The tokens the target emits after a prompt ending in ``last_token`` (the construction's closed form)."""
    out, s = [], last_token % HIDDEN
    for _ in range(n):
        s = (s + 1) % HIDDEN
        out.append(s)
    return out


if __name__ == "__main__":
    dest = Path(sys.argv[1] if len(sys.argv) > 1 else "models")
    paths = write(dest)
    print(json.dumps({k: str(v) for k, v in paths.items()}))
