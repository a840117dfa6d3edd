"""The generated tiny target + EAGLE-3 draft (bench/real_sglang/make_models.py) do what the real run predicts.

Reads the safetensors files back and runs SGLang 0.5.16's Llama and LlamaForCausalLMEagle3 forward math in numpy
(RMSNorm with fused residual add, zero attention, SiLU-gated MLP, aux capture at layers [2, L//2, L-3], fc over
the three aux states, the draft's pre-norm hidden state carried to the next step, d2t), so the accept length the
GPU run checks is a consequence of the weights, not of a hope.
"""

from __future__ import annotations

import json
import struct
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
                         new_tokens: int, steps: int) -> tuple[list[int], list[int]]:
    """One request served the way SGLang's EAGLE-3 worker serves it at topk 1 with greedy sampling: prefill, then
    verify passes of [last token, steps drafts]; drafts are accepted while each equals the target's argmax at the
    position before it, then the target's own token there is the bonus. Returns (tokens emitted, tokens per pass)."""
    eps, layers = cfg["rms_norm_eps"], cfg["num_hidden_layers"]
    first, aux = target_step(t, last_prompt, eps, layers)
    emitted, passes = [first], []
    while len(emitted) < new_tokens:
        hidden, drafts = aux, []
        for _ in range(steps):
            tok, hidden = draft_step(d, hidden, eps)
            drafts.append(tok)
        verify_in = [emitted[-1], *drafts]
        accepted: list[int] = []
        for k, tok in enumerate(verify_in):
            want, aux = target_step(t, tok, eps, layers)   # the target's token after position k
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
