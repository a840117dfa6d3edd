"""The generated tiny target + EAGLE-3 draft (bench/real_sglang/make_models.py) do what the real run predicts.

Reads the safetensors files back and runs SGLang 0.5.16's Llama and LlamaForCausalLMEagle3 forward math in numpy
(RMSNorm with fused residual add, zero attention, SiLU-gated MLP, aux capture at layers [2, L//2, L-3], fc over
the three aux states, the draft's pre-norm hidden state carried to the next step, d2t), so the accept length the
GPU run checks is a consequence of the weights, not of a hope. The MoE shape (Qwen3MoeForCausalLM) adds its
per-head q/k RMSNorm, GQA, the router's softmax top-k with renormalised weights and the experts' SiLU-gated MLPs.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from bench.real_sglang import make_models as mm

# One worker runs this module (`--dist loadgroup`): its model files (107 MB written and read back, 1-3 s) are built
# once, not once on each worker that happens to take one of its tests.
pytestmark = pytest.mark.xdist_group("real-sglang-models")


STORED = {"BF16": np.dtype(np.uint16), "I64": np.dtype(np.int64), "BOOL": np.dtype(np.bool_)}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        stored = STORED[meta["dtype"]]
        # a view into the file's bytes, not a copy of each tensor's slice (the file is 107 MB)
        arr = np.frombuffer(raw, dtype=stored, count=(b - a) // stored.itemsize, offset=base + a)
        if meta["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.reshape(meta["shape"])
    return out


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + eps) * w


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def mlp(x: np.ndarray, w: dict[str, np.ndarray], p: str) -> np.ndarray:
    g = w[p + "gate_proj.weight"] @ x
    u = w[p + "up_proj.weight"] @ x
    return w[p + "down_proj.weight"] @ (silu(g) * u)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict]:
    out = tmp_path_factory.mktemp("models")
    paths = mm.write(out)
    cfg = json.loads((paths["target"] / "config.json").read_text())
    dcfg = json.loads((paths["draft"] / "config.json").read_text())
    assert dcfg["architectures"] == ["LlamaForCausalLMEagle3"] and dcfg["draft_vocab_size"] == mm.HIDDEN
    assert cfg["num_hidden_layers"] == mm.TARGET_LAYERS
    return (read_safetensors(paths["target"] / "model.safetensors"),
            read_safetensors(paths["draft"] / "model.safetensors"), cfg)


def target_step(t: dict[str, np.ndarray], token: int, eps: float,
                layers: int = mm.TARGET_LAYERS) -> tuple[int, np.ndarray]:
    """One position of the target (attention contributes its o_proj of zero weights): next token, aux states."""
    residual = t["model.embed_tokens.weight"][token].copy()
    capture = [2, layers // 2, layers - 3]
    aux = []
    for i in range(layers):
        p = f"model.layers.{i}."
        if i in capture:
            aux.append(residual.copy())
        h = rmsnorm(residual, t[p + "input_layernorm.weight"], eps)
        attn = t[p + "self_attn.o_proj.weight"] @ (t[p + "self_attn.v_proj.weight"] @ h)
        residual = residual + attn
        h = rmsnorm(residual, t[p + "post_attention_layernorm.weight"], eps)
        residual = residual + mlp(h, t, p + "mlp.")
    logits = t["lm_head.weight"] @ rmsnorm(residual, t["model.norm.weight"], eps)
    top = np.flatnonzero(logits == logits.max())
    assert len(top) == 1, "the target's argmax must be unique"
    return int(top[0]), np.concatenate(aux)


def draft_step(d: dict[str, np.ndarray], hidden: np.ndarray, eps: float) -> tuple[int, np.ndarray]:
    """One EAGLE-3 draft step: token proposed (as a target id, via d2t) and the pre-norm hidden state carried on."""
    size = d["norm.weight"].shape[0]
    if hidden.shape[0] != size:
        hidden = d["fc.weight"] @ hidden
    residual = hidden
    attn = d["midlayer.self_attn.o_proj.weight"] @ np.zeros(size, dtype=np.float32)
    residual = residual + attn
    h = rmsnorm(residual, d["midlayer.post_attention_layernorm.weight"], eps)
    residual = residual + mlp(h, d, "midlayer.mlp.")
    logits = d["lm_head.weight"] @ rmsnorm(residual, d["norm.weight"], eps)
    top = np.flatnonzero(logits == logits.max())
    assert len(top) == 1, "the draft's argmax must be unique"
    return int(top[0] + d["d2t"][top[0]]), residual


def test_target_counts_up_from_the_last_prompt_token(models: tuple) -> None:
    t, _, cfg = models
    token = 12345
    emitted = []
    for _ in range(5):
        token, _aux = target_step(t, token, cfg["rms_norm_eps"])
        emitted.append(token)
    assert emitted == mm.greedy_target(12345, 5)
    assert mm.EOS not in emitted


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_every_drafted_token_is_the_targets_next_token(models: tuple, steps: int) -> None:
    t, d, cfg = models
    eps = cfg["rms_norm_eps"]
    for last in (100, 511, 4242, 29999):
        first, aux = target_step(t, last, eps)       # prefill: the first new token and the aux states
        truth = mm.greedy_target(last, steps + 1)
        assert first == truth[0]
        hidden, proposals = aux, []
        for _ in range(steps):
            tok, hidden = draft_step(d, hidden, eps)
            proposals.append(tok)
        assert proposals == truth[1:steps + 1]


def test_predicted_accept_length() -> None:
    # 128 new tokens: 1 from prefill, 127 from verify passes of D tokens each.
    assert mm.predicted_accept_length(128, 3) == 4.0
    assert mm.predicted_accept_length(128, 1) == 2.0
    assert mm.predicted_accept_length(128, 2) == pytest.approx(128 / 43)


# -- issue 37: the 7B shape's code path at a reduced size, with a draft that is wrong at known places -------------
WRONG_EVERY = 3


@pytest.fixture(scope="module")
def partial(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict]:
    out = tmp_path_factory.mktemp("mini")
    paths = mm.write(out, "mini", WRONG_EVERY)
    cfg = json.loads((paths["target"] / "config.json").read_text())
    shape = mm.SHAPES["mini"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]) == \
        (shape.hidden, shape.layers, shape.intermediate)
    return (read_safetensors(paths["target"] / "model.safetensors"),
            read_safetensors(paths["draft"] / "model.safetensors"), cfg)


def greedy_chain_request(t: dict[str, np.ndarray], d: dict[str, np.ndarray], cfg: dict, last_prompt: int,
                         new_tokens: int, steps: int, step: Callable[[int], tuple[int, np.ndarray]] | None = None,
                         verified: list[list[int]] | None = None) -> tuple[list[int], list[int]]:
    """One request served the way SGLang's EAGLE-3 worker serves it at topk 1 with greedy sampling: prefill, then
    verify passes of [last token, steps drafts]; drafts are accepted while each equals the target's argmax at the
    position before it, then the target's own token there is the bonus. Returns (tokens emitted, tokens per pass).
    step: the target's forward at one position (default: the Llama one); verified collects each pass's tokens."""
    eps, layers = cfg["rms_norm_eps"], cfg["num_hidden_layers"]
    step = step or (lambda tok: target_step(t, tok, eps, layers))
    first, aux = step(last_prompt)
    emitted, passes = [first], []
    while len(emitted) < new_tokens:
        hidden, drafts = aux, []
        for _ in range(steps):
            tok, hidden = draft_step(d, hidden, eps)
            drafts.append(tok)
        verify_in = [emitted[-1], *drafts]
        if verified is not None:
            verified.append(verify_in)
        accepted: list[int] = []
        for k, tok in enumerate(verify_in):
            want, aux = step(tok)                          # the target's token after position k
            if k < steps and drafts[k] == want:
                accepted.append(want)
                continue
            accepted.append(want)                          # the bonus: the target's own token
            break
        passes.append(len(accepted))
        emitted.extend(accepted)
    return emitted[:new_tokens], passes


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_the_partial_drafts_accept_length_is_known_in_advance(partial: tuple, steps: int) -> None:
    t, d, cfg = partial
    hidden = cfg["hidden_size"]
    new_tokens = 40
    for last in (100, 255, 4242, 29998):
        emitted, passes = greedy_chain_request(t, d, cfg, last, new_tokens, steps)
        assert emitted == mm.greedy_target(last, new_tokens, hidden), "a wrong draft must never change the output"
        assert passes == mm.verify_passes(emitted[0], new_tokens, steps, WRONG_EVERY, hidden)
        low, high = mm.accept_length_range(new_tokens, steps, WRONG_EVERY, hidden)
        assert low <= new_tokens / len(passes) <= high
    # at 4-8 draft tokens the accept length sits at P = 3, well below the draft-token count
    if steps >= 3:
        assert mm.steady_accept_len(steps, WRONG_EVERY) == WRONG_EVERY
        assert mm.predicted_accept_length(256, steps, WRONG_EVERY, hidden) == pytest.approx(3.0, abs=0.05)


def test_zero_tensors_are_holes_not_bytes(tmp_path: Path) -> None:
    # the 7B files are written on the GPU machine inside a 600 s call: the zero weights must cost no writing
    mm.write(tmp_path, "mini")
    f = tmp_path / "target" / "model.safetensors"
    holes = sum(2 * int(np.prod(v[1])) for v in mm.target_tensors(mm.SHAPES["mini"]).values() if isinstance(v, tuple))
    assert holes > 0 and f.stat().st_blocks * 512 < f.stat().st_size - holes / 2


# -- issue 37 point 5: the MoE shape's code path at a reduced size (Qwen3-MoE target, partial draft) ---------------
MOE = mm.SHAPES["moe-mini"]


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict]:
    out = tmp_path_factory.mktemp("moe-mini")
    paths = mm.write(out, "moe-mini", WRONG_EVERY)
    cfg = json.loads((paths["target"] / "config.json").read_text())
    dcfg = json.loads((paths["draft"] / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["model_type"] == "qwen3_moe"
    assert (cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"], cfg["head_dim"],
            cfg["num_key_value_heads"]) == (MOE.experts, MOE.top_k, MOE.intermediate, MOE.hd, MOE.kv)
    # the draft reads the target's three aux states through fc: its hidden size is the target's
    assert dcfg["architectures"] == ["LlamaForCausalLMEagle3"] and dcfg["hidden_size"] == cfg["hidden_size"]
    t = read_safetensors(paths["target"] / "model.safetensors")
    # lm_head rows past the slots are zero (checked once here), so their logits are 0 and a positive maximum among
    # the first H rows is the argmax over the whole vocabulary: each step reads those rows only (the test stays fast)
    assert not t["lm_head.weight"][MOE.hidden:].any()
    t["lm_head.slots"] = t["lm_head.weight"][:MOE.hidden]
    # the weight figures the real run reports (moe_traffic) are the file's own: every byte after the header
    raw = (paths["target"] / "model.safetensors").read_bytes()
    assert mm.moe_traffic(MOE)["total_gb"] * 1e9 == len(raw) - 8 - struct.unpack("<Q", raw[:8])[0]
    return t, read_safetensors(paths["draft"] / "model.safetensors"), cfg


def moe_target_step(t: dict[str, np.ndarray], token: int, cfg: dict) -> tuple[int, np.ndarray, list[set[int]]]:
    """One position of SGLang 0.5.16's Qwen3MoeForCausalLM: (next token, aux states, the experts each layer routed
    to). Attention: q/k per-head RMSNorm, GQA (each KV head serves heads / kv_heads query heads); with one position
    its output is v, through o_proj. MoE block: router logits = gate · x, softmax top-k (norm_topk_prob:
    renormalised), each chosen expert's SiLU-gated MLP weighted and summed."""
    eps, layers, hd = cfg["rms_norm_eps"], cfg["num_hidden_layers"], cfg["head_dim"]
    heads, kv, top_k = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_experts_per_tok"]
    residual = t["model.embed_tokens.weight"][token].copy()
    capture, aux, routed = [2, layers // 2, layers - 3], [], []
    for i in range(layers):
        p = f"model.layers.{i}."
        if i in capture:
            aux.append(residual.copy())
        h = rmsnorm(residual, t[p + "input_layernorm.weight"], eps)
        q = (t[p + "self_attn.q_proj.weight"] @ h).reshape(heads, hd)
        k = (t[p + "self_attn.k_proj.weight"] @ h).reshape(kv, hd)
        q = np.stack([rmsnorm(x, t[p + "self_attn.q_norm.weight"], eps) for x in q])
        k = np.stack([rmsnorm(x, t[p + "self_attn.k_norm.weight"], eps) for x in k])
        v = (t[p + "self_attn.v_proj.weight"] @ h).reshape(kv, hd)
        # zero q/k (the per-head norms keep them zero) and v: attention mixes no other position in
        assert not q.any() and not k.any() and not v.any()
        residual = residual + t[p + "self_attn.o_proj.weight"] @ np.repeat(v, heads // kv, axis=0).reshape(-1)
        x = rmsnorm(residual, t[p + "post_attention_layernorm.weight"], eps)
        logits = t[p + "mlp.gate.weight"] @ x
        order = np.argsort(-logits, kind="stable")
        chosen, rest = order[:top_k], order[top_k:]
        assert logits[chosen].min() > logits[rest].max(), "the router's top-k must be strict (no tie at the cut)"
        prob = np.exp(logits - logits.max())
        weight = prob[chosen] / prob[chosen].sum()
        out = np.zeros_like(residual)
        for w, e in zip(weight, chosen, strict=True):
            e_ = f"{p}mlp.experts.{e}."
            out += w * (t[e_ + "down_proj.weight"] @ (silu(t[e_ + "gate_proj.weight"] @ x) *
                                                       (t[e_ + "up_proj.weight"] @ x)))
        residual = residual + out
        routed.append({int(e) for e in chosen})
    logits = t["lm_head.slots"] @ rmsnorm(residual, t["model.norm.weight"], eps)
    top = np.flatnonzero(logits == logits.max())
    assert len(top) == 1 and logits.max() > 0, "the target's argmax must be unique"
    return int(top[0]), np.concatenate(aux), routed


def test_the_moe_target_counts_up_and_routes_each_slot_to_its_own_experts(moe: tuple) -> None:
    t, _, cfg = moe
    token, emitted = 12345, []
    for _ in range(5):
        slot = token % MOE.hidden
        token, _aux, routed = moe_target_step(t, token, cfg)
        emitted.append(token)
        # every layer routes the same way: the residual stream is the slot's one-hot all the way down
        assert routed == [set(mm.experts_of(slot, MOE))] * MOE.layers
    assert emitted == mm.greedy_target(12345, 5, MOE.hidden)


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_the_moe_partial_drafts_accept_length_is_known_and_a_pass_reaches_its_own_experts(moe: tuple,
                                                                                          steps: int) -> None:
    t, d, cfg = moe
    hidden, new_tokens = MOE.hidden, 40

    seen: dict[int, tuple[int, np.ndarray, list[set[int]]]] = {}

    def forward(tok: int) -> tuple[int, np.ndarray, list[set[int]]]:
        if tok not in seen:   # one position's forward depends on its token only (zero attention)
            seen[tok] = moe_target_step(t, tok, cfg)
        return seen[tok]

    def step(tok: int) -> tuple[int, np.ndarray]:
        return forward(tok)[:2]

    for last in (100, 255, 4242, 29998):
        verified: list[list[int]] = []
        emitted, passes = greedy_chain_request(t, d, cfg, last, new_tokens, steps, step, verified)
        assert emitted == mm.greedy_target(last, new_tokens, hidden), "a wrong draft must never change the output"
        assert passes == mm.verify_passes(emitted[0], new_tokens, steps, WRONG_EVERY, hidden)
        for tokens in verified:
            # the verify forward runs all D tokens (the ones after a rejection too), each routed to top_k experts
            # of its own: D · top_k distinct experts per layer where a decode token reaches top_k
            sets = [forward(tok)[2][0] for tok in tokens]
            assert len(set().union(*sets)) == sum(map(len, sets)) == mm.verify_experts(steps, MOE)
        # the wrong drafts were there and rejected (a pass shorter than D)
        if steps >= 3:
            assert min(passes) < steps + 1
    assert mm.verify_experts(7, MOE) == MOE.experts and mm.verify_experts(3, MOE) == MOE.experts // 2
