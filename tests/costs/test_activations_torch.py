"""The activation count against the bytes real transformers blocks keep for backward.

Each preset's transformer blocks are built with the matching Hugging Face
transformers class, in bf16 on the CPU (weights uninitialized: only shapes
matter), and run forward once under ``torch.autograd.graph.saved_tensors_hooks``;
the bytes of every distinct storage autograd saves, other than the block's
own parameters and the rotary tables shared by all layers, are what the
block keeps. The cost model's count for the same block, with the options
that describe this implementation (flash-style SDPA core, transformers'
unfused RMSNorm, no tensor parallelism), must be within 10 %.

Needs torch and transformers (optional: skipped without them)::

    python -m venv --system-site-packages .venv-torch
    .venv-torch/bin/pip install torch transformers
    .venv-torch/bin/python -m pytest tests/costs/test_activations_torch.py -q
    .venv-torch/bin/python tests/costs/test_activations_torch.py   # the table of ratios

InternLM2 (InternVL's language model) is not in transformers; it is the
Llama architecture with a fused QKV projection and is measured as a Llama block.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from partitioner.costs import block_activation_bytes  # noqa: E402
from partitioner.costs.layers import block_shape  # noqa: E402
from partitioner.presets import ModuleSpec, load_model  # noqa: E402

TOKENS = 256  # per sample (the count is linear in tokens with a flash-style core)
SAMPLES = 1
TOLERANCE = 0.10

# (preset, module, transformers block family)
BLOCKS = [
    ("llava-1.5-7b", "vision", "clip"),
    ("llava-1.5-7b", "llm", "llama"),
    ("llava-1.5-13b", "llm", "llama"),
    ("openvla-7b", "vision_dino", "dinov2"),
    ("openvla-7b", "vision_siglip", "siglip"),
    ("openvla-7b", "llm", "llama"),
    ("pi0", "vision", "siglip"),
    ("pi0", "llm", "gemma"),
    ("pi0", "action_expert", "gemma"),
    ("qwen2-vl-7b", "vision", "qwen2_vl_vision"),
    ("qwen2-vl-7b", "llm", "qwen2"),
    ("qwen2-vl-72b", "llm", "qwen2"),
    ("internvl-1.5-26b", "vision", "internvl_vision"),
    ("internvl-1.5-26b", "llm", "llama"),
    ("seed-vla-8gpu", "vision", "clip"),
    ("seed-vla-8gpu", "llm", "llama"),
    ("seed-vla-8gpu", "action_head", "llama"),
]


def _empty(cls, *args):
    """A module of ``cls`` in bf16 on the CPU without initializing its weights."""
    with torch.device("meta"):
        module = cls(*args)
    return module.to_empty(device="cpu").to(torch.bfloat16).train()


def _build(family: str, m: ModuleSpec, s: int):
    """``(block, args, kwargs, shared)``: a transformers block with ``m``'s dimensions and its inputs."""
    from transformers import (
        CLIPVisionConfig,
        Dinov2Config,
        GemmaConfig,
        LlamaConfig,
        Qwen2Config,
        SiglipVisionConfig,
    )

    x = torch.randn(SAMPLES, s, m.hidden, dtype=torch.bfloat16, requires_grad=True)
    common = dict(hidden_size=m.hidden, intermediate_size=m.ffn, num_attention_heads=m.heads)
    if family in ("llama", "qwen2", "gemma"):
        cfg_cls, mod = {
            "llama": (LlamaConfig, "llama"),
            "qwen2": (Qwen2Config, "qwen2"),
            "gemma": (GemmaConfig, "gemma"),
        }[family]
        import importlib

        modeling = importlib.import_module(f"transformers.models.{mod}.modeling_{mod}")
        extra = {"hidden_activation": "gelu_pytorch_tanh"} if family == "gemma" else {}
        cfg = cfg_cls(**common, num_key_value_heads=m.n_kv_heads, head_dim=m.d_head, num_hidden_layers=1, **extra)
        cfg._attn_implementation = "sdpa"
        layer_cls = getattr(modeling, f"{mod.capitalize()}DecoderLayer")
        rope = getattr(modeling, f"{mod.capitalize()}RotaryEmbedding")(cfg)
        pos = torch.arange(s)[None]
        cos, sin = rope(x, pos)
        block = _empty(layer_cls, cfg, 0)
        return block, (x,), dict(attention_mask=None, position_ids=pos, position_embeddings=(cos, sin)), (cos, sin)
    if family == "clip":
        cfg = CLIPVisionConfig(**common, hidden_act="quick_gelu")
        cfg._attn_implementation = "sdpa"
        from transformers.models.clip.modeling_clip import CLIPEncoderLayer

        return _empty(CLIPEncoderLayer, cfg), (x, None), {}, ()
    if family == "siglip":
        cfg = SiglipVisionConfig(**common)
        cfg._attn_implementation = "sdpa"
        from transformers.models.siglip.modeling_siglip import SiglipEncoderLayer

        return _empty(SiglipEncoderLayer, cfg), (x, None), {}, ()
    if family == "dinov2":
        cfg = Dinov2Config(hidden_size=m.hidden, num_attention_heads=m.heads, mlp_ratio=m.ffn // m.hidden)
        cfg._attn_implementation = "sdpa"
        from transformers.models.dinov2.modeling_dinov2 import Dinov2Layer

        return _empty(Dinov2Layer, cfg), (x,), {}, ()
    if family == "internvl_vision":
        from transformers.models.internvl.configuration_internvl import InternVLVisionConfig
        from transformers.models.internvl.modeling_internvl import InternVLVisionLayer

        cfg = InternVLVisionConfig(**common, use_qk_norm=m.qk_norm, norm_type="rms_norm", attention_bias=m.qkv_bias)
        cfg._attn_implementation = "sdpa"
        return _empty(InternVLVisionLayer, cfg), (x,), {}, ()
    if family == "qwen2_vl_vision":
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLVisionBlock

        cfg = Qwen2VLVisionConfig(embed_dim=m.hidden, num_heads=m.heads, mlp_ratio=m.ffn // m.hidden, hidden_act="quick_gelu")
        cfg._attn_implementation = "sdpa"
        x2 = x[0].detach().requires_grad_(True)  # the vision tower runs on (tokens, width)
        d = m.hidden // m.heads
        angles = torch.randn(s, d // 2)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        cu = torch.tensor([0, s], dtype=torch.int32)
        return _empty(Qwen2VLVisionBlock, cfg), (x2, cu), dict(position_embeddings=(cos, sin)), (cos, sin)
    raise ValueError(family)


def saved_bytes(block, args, kwargs, shared=()) -> int:
    """Bytes of the distinct storages autograd saves in one forward of ``block`` (parameters and ``shared`` excluded)."""
    skip = {p.untyped_storage().data_ptr() for p in block.parameters()}
    skip |= {t.untyped_storage().data_ptr() for t in shared}
    kept: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = block(*args, **kwargs)
    del out
    return sum(kept.values())


def measure(preset: str, module: str, family: str, tokens: int = TOKENS) -> tuple[float, float]:
    """``(measured, modelled)`` bytes of one block of ``preset``'s ``module`` over ``tokens`` tokens."""
    m = load_model(preset).module(module)
    if family in ("llama", "qwen2", "gemma"):
        m = replace(m, fused_qkv=False)  # transformers' classes project Q, K and V separately (InternLM2 fuses them)
    block, args, kwargs, shared = _build(family, m, tokens)
    measured = saved_bytes(block, args, kwargs, shared)
    model = block_activation_bytes(block_shape(m, tokens), SAMPLES, 1, flash_attention=True, fused_norm=False)
    return float(measured), model


@pytest.mark.slow
@pytest.mark.parametrize("preset, module, family", BLOCKS, ids=[f"{p}:{m}" for p, m, _ in BLOCKS])
def test_block_activations_within_10_percent_of_transformers(preset, module, family):
    measured, model = measure(preset, module, family)
    assert abs(model / measured - 1) <= TOLERANCE, (preset, module, measured, model, model / measured)


if __name__ == "__main__":  # the table in the report
    print(f"{'block':34} {'measured B/token':>17} {'model B/token':>14} {'model/measured':>15}")
    for preset, module, family in BLOCKS:
        measured, model = measure(preset, module, family)
        print(f"{preset + ':' + module:34} {measured / TOKENS:17.0f} {model / TOKENS:14.0f} {model / measured:15.3f}")
