"""The activation count against the bytes real transformers blocks keep for backward.

Each preset's transformer blocks are built with the matching Hugging Face
transformers class, in bf16 on the CPU (weights uninitialized: only shapes
matter), and run forward once under ``torch.autograd.graph.saved_tensors_hooks``;
the bytes of every distinct storage autograd saves, other than the block's
own parameters and the rotary tables shared by all layers, are what the
block keeps. The cost model's count for the same block, with the options
that describe this implementation (flash-style SDPA core, transformers'
unfused RMSNorm, no tensor parallelism), must be within 10 %, and each
group of it -- norms, attention, MLP, the block's own ops (a storage
belongs to the block child whose forward saved it first) -- within 2 %,
given the two extras transformers keeps beyond the training kernels
(:func:`implementation_extras`). The count issue 26 measured for two ViT
blocks (quick_gelu as one tensor, a fused QKV output counted by V's view)
fails that check (``test_the_issue_counts_fail_the_group_check``), and
eager attention's fp32 softmax is pinned separately. Written for
transformers 5.x (the ``hf`` extra); DESIGN.md has the finding.

Needs torch and transformers (optional: skipped without them)::

    python -m venv --system-site-packages .venv-torch
    .venv-torch/bin/pip install torch transformers
    .venv-torch/bin/python -m pytest tests/costs/memory/test_activations_torch.py -q
    .venv-torch/bin/python tests/costs/memory/test_activations_torch.py   # the table of ratios

InternLM2 (InternVL's language model) is not in transformers; it is the
Llama architecture with a fused QKV projection and is measured as a Llama block.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from partitioner.costs import block_activation_bytes  # noqa: E402
from partitioner.costs.layers import block_shape  # noqa: E402
from partitioner.costs.memory.activations import block_activation_terms  # noqa: E402
from partitioner.presets import ModuleSpec, load_model  # noqa: E402

TOKENS = 256  # per sample (the count is linear in tokens with a flash-style core)
SAMPLES = 1
TOLERANCE = 0.10
GROUP_TOLERANCE = 0.02

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
    ("qwen2-vl-72b", "vision", "qwen2_vl_vision"),
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


def _build(family: str, m: ModuleSpec, s: int, attn: str = "sdpa"):
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
        cfg._attn_implementation = attn
        layer_cls = getattr(modeling, f"{mod.capitalize()}DecoderLayer")
        rope = getattr(modeling, f"{mod.capitalize()}RotaryEmbedding")(cfg)
        pos = torch.arange(s)[None]
        cos, sin = rope(x, pos)
        block = _empty(layer_cls, cfg, 0)
        return block, (x,), dict(attention_mask=None, position_ids=pos, position_embeddings=(cos, sin)), (cos, sin)
    if family == "clip":
        cfg = CLIPVisionConfig(**common, hidden_act="quick_gelu")
        cfg._attn_implementation = attn
        from transformers.models.clip.modeling_clip import CLIPEncoderLayer

        return _empty(CLIPEncoderLayer, cfg), (x, None), {}, ()
    if family == "siglip":
        cfg = SiglipVisionConfig(**common)
        cfg._attn_implementation = attn
        from transformers.models.siglip.modeling_siglip import SiglipEncoderLayer

        return _empty(SiglipEncoderLayer, cfg), (x, None), {}, ()
    if family == "dinov2":
        cfg = Dinov2Config(hidden_size=m.hidden, num_attention_heads=m.heads, mlp_ratio=m.ffn // m.hidden)
        cfg._attn_implementation = attn
        from transformers.models.dinov2.modeling_dinov2 import Dinov2Layer

        return _empty(Dinov2Layer, cfg), (x,), {}, ()
    if family == "internvl_vision":
        from transformers.models.internvl.configuration_internvl import InternVLVisionConfig
        from transformers.models.internvl.modeling_internvl import InternVLVisionLayer

        cfg = InternVLVisionConfig(**common, use_qk_norm=m.qk_norm, norm_type="rms_norm", attention_bias=m.qkv_bias)
        cfg._attn_implementation = attn
        return _empty(InternVLVisionLayer, cfg), (x,), {}, ()
    if family == "qwen2_vl_vision":
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLVisionBlock

        cfg = Qwen2VLVisionConfig(embed_dim=m.hidden, num_heads=m.heads, mlp_ratio=m.ffn // m.hidden, hidden_act="quick_gelu")
        cfg._attn_implementation = attn
        x2 = x[0].detach().requires_grad_(True)  # the vision tower runs on (tokens, width)
        d = m.hidden // m.heads
        angles = torch.randn(s, d // 2)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        cu = torch.tensor([0, s], dtype=torch.int32)
        return _empty(Qwen2VLVisionBlock, cfg), (x2, cu), dict(position_embeddings=(cos, sin)), (cos, sin)
    raise ValueError(family)


# which group each model term belongs to: the block's child module whose forward saves the tensor
TERM_GROUPS = {
    "norm_inputs": "norms",
    "qkv_input": "attention", "q": "attention", "k": "attention", "v": "attention",
    "qkv_retained": "attention", "qk_norm_inputs": "attention", "scores": "attention",
    "softmax_stats": "attention", "attn_output": "attention",
    "mlp_input": "mlp", "mlp": "mlp",
    "layerscale_inputs": "block", "attn_dropout_mask": "block", "mlp_dropout_mask": "block",
}
GROUPS = ("norms", "attention", "mlp", "block")


def _group(child_name: str) -> str:
    """The group of a block's direct child module, by its attribute name."""
    name = child_name.lower()
    if "norm" in name:
        return "norms"
    if "attn" in name or "attention" in name:
        return "attention"
    if "mlp" in name:
        return "mlp"
    return "block"  # layer scale, drop path, and ops in the block's own forward


def saved_bytes_by_group(block, args, kwargs, shared=()) -> dict[str, int]:
    """Bytes of the distinct storages autograd saves in one forward of ``block``, per group.

    A storage is counted once, in the group of the child module whose forward
    saved it first (tensors saved by the block's own forward, outside every
    child, are ``block``). Parameters and ``shared`` (rotary tables every
    layer shares) are left out; a view counts its whole storage, which it
    keeps alive.
    """
    skip = {p.untyped_storage().data_ptr() for p in block.parameters()}
    skip |= {t.untyped_storage().data_ptr() for t in shared}
    kept: dict[int, tuple[str, int]] = {}
    current = ["block"]
    handles = []

    def enter(group):
        def hook(module, inputs) -> None:
            current.append(group)

        return hook

    def leave(module, inputs, output) -> None:
        current.pop()

    for name, child in block.named_children():
        handles.append(child.register_forward_pre_hook(enter(_group(name))))
        handles.append(child.register_forward_hook(leave))

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip and storage.data_ptr() not in kept:
            kept[storage.data_ptr()] = (current[-1], storage.nbytes())
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = block(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    del out
    groups = dict.fromkeys(GROUPS, 0)
    for group, nbytes in kept.values():
        groups[group] += nbytes
    return groups


def saved_bytes(block, args, kwargs, shared=()) -> int:
    """Bytes of the distinct storages autograd saves in one forward of ``block`` (parameters and ``shared`` excluded)."""
    return sum(saved_bytes_by_group(block, args, kwargs, shared).values())


def implementation_extras(family: str, m: ModuleSpec, s: int) -> dict[str, float]:
    """Bytes transformers' eager/SDPA code keeps beyond what the training kernels keep, per group.

    * ``qwen2_vl_vision``: without flash attention, ``VisionAttention`` runs
      SDPA once per image and joins the outputs with ``torch.cat`` -- a copy,
      which the output projection saves while SDPA keeps its own output:
      ``2 s b h`` more than the flash-attention-2 path, whose varlen output is
      reshaped (a view) into the projection.
    * ``gemma``: ``GemmaRMSNorm`` multiplies by ``1 + weight`` in fp32 before
      casting back, so it keeps the fp32 upcast and the fp32 normalized
      output (8 B per element) where Llama's keeps fp32 upcast and bf16
      output (6 B, the cost model's ``fused_norm=False``): ``2 x 2 s b h``.
    """
    sbh = float(s * SAMPLES * m.hidden)
    if family == "qwen2_vl_vision":
        return {"attention": 2 * sbh}
    if family == "gemma":
        return {"norms": m.block_norms * 2 * sbh}
    return {}


def _module(preset: str, module: str, family: str) -> ModuleSpec:
    m = load_model(preset).module(module)
    if family in ("llama", "qwen2", "gemma"):
        m = replace(m, fused_qkv=False)  # transformers' classes project Q, K and V separately (InternLM2 fuses them)
    return m


@functools.lru_cache(maxsize=None)
def _measured(preset: str, module: str, family: str, tokens: int, attn: str = "sdpa") -> dict[str, int]:
    """What the transformers block keeps, per group (cached: each block is built once per run)."""
    block, args, kwargs, shared = _build(family, _module(preset, module, family), tokens, attn)
    return saved_bytes_by_group(block, args, kwargs, shared)


def model_groups(m: ModuleSpec, tokens: int, **options) -> dict[str, float]:
    """The cost model's terms for one block of ``m`` (no tensor parallelism) summed per group."""
    options = {"flash_attention": True, "fused_norm": False, **options}
    model = dict.fromkeys(GROUPS, 0.0)
    for name, nbytes in block_activation_terms(block_shape(m, tokens), SAMPLES, 1, **options).items():
        model[TERM_GROUPS[name]] += nbytes
    return model


def measure_groups(preset: str, module: str, family: str, tokens: int = TOKENS) -> tuple[dict, dict]:
    """``(measured, modelled)`` bytes per group of one block of ``preset``'s ``module`` over ``tokens`` tokens.

    The modelled bytes are the cost model's terms (flash-style SDPA core,
    transformers' unfused RMSNorm, no tensor parallelism) grouped by
    :data:`TERM_GROUPS`, plus :func:`implementation_extras`.
    """
    m = _module(preset, module, family)
    model = model_groups(m, tokens)
    for group, nbytes in implementation_extras(family, m, tokens).items():
        model[group] += nbytes
    return _measured(preset, module, family, tokens), model


def measure(preset: str, module: str, family: str, tokens: int = TOKENS) -> tuple[float, float]:
    """``(measured, modelled)`` bytes of one block of ``preset``'s ``module`` over ``tokens`` tokens.

    The modelled bytes are the cost model's alone (no implementation extras).
    """
    m = _module(preset, module, family)
    measured = sum(_measured(preset, module, family, tokens).values())
    model = block_activation_bytes(block_shape(m, tokens), SAMPLES, 1, flash_attention=True, fused_norm=False)
    return float(measured), model


def test_transformers_is_the_tested_version():
    """The hf extra's transformers (5.x) is what this file measures; older majors save other tensors."""
    import transformers

    assert int(transformers.__version__.split(".")[0]) >= 5, transformers.__version__


@pytest.mark.slow
@pytest.mark.parametrize("preset, module, family", BLOCKS, ids=[f"{p}:{m}" for p, m, _ in BLOCKS])
def test_block_activations_within_10_percent_of_transformers(preset, module, family):
    measured, model = measure(preset, module, family)
    assert abs(model / measured - 1) <= TOLERANCE, (preset, module, measured, model, model / measured)


@pytest.mark.slow
@pytest.mark.parametrize("preset, module, family", BLOCKS, ids=[f"{p}:{m}" for p, m, _ in BLOCKS])
def test_each_group_within_2_percent_of_transformers(preset, module, family):
    """Norms, attention, MLP and the block's own ops each match what transformers keeps (per-group 2 %)."""
    measured, model = measure_groups(preset, module, family)
    for group in GROUPS:
        if measured[group] == 0 and model[group] == 0:
            continue
        assert measured[group] > 0, (group, measured, model)
        assert abs(model[group] / measured[group] - 1) <= GROUP_TOLERANCE, (group, measured, model)


# the two ViT blocks issue 26 found off, and the counts its numbers match (see DESIGN.md, "Activations as
# transformers keeps them"): quick_gelu as one tensor, and a fused QKV projection counted by V's own view
MISCOUNTS = [
    ("qwen2-vl-7b", "vision", "qwen2_vl_vision", dict(activation="gelu"), "mlp"),
    ("qwen2-vl-7b", "vision", "qwen2_vl_vision", dict(fused_qkv=False), "attention"),
    ("seed-vla-8gpu", "vision", "clip", dict(activation="gelu"), "mlp"),
]


@pytest.mark.parametrize("preset, module, family, change, group", MISCOUNTS,
                         ids=[f"{p}:{m}:{next(iter(c))}" for p, m, _, c, _ in MISCOUNTS])
def test_the_issue_counts_fail_the_group_check(preset, module, family, change, group):
    """The test can fail: a model that counts quick_gelu as one tensor, or V without the projection it keeps alive, is off by more than 2 %."""
    measured, _ = measure_groups(preset, module, family)
    m = replace(_module(preset, module, family), **change)
    model = model_groups(m, TOKENS)
    for g, nbytes in implementation_extras(family, m, TOKENS).items():
        model[g] += nbytes
    assert abs(model[group] / measured[group] - 1) > 5 * GROUP_TOLERANCE, (group, measured, model)


def test_eager_attention_keeps_fp32_softmax_and_bf16_probabilities():
    """transformers' eager attention keeps 6 B per score entry where the model's non-flash count keeps Megatron's 2.

    ``eager_attention_forward`` takes the softmax in fp32 (its output, 4 B
    per entry, is saved for the softmax backward) and casts it to bf16 (2 B,
    saved by the probabilities @ V matmul); Megatron-LM's fused
    scale-mask-softmax keeps only its bf16 output (Korthikanti's ``2as^2b``).
    The flash statistics (``4asb``) are absent.
    """
    preset, module, family = "seed-vla-8gpu", "vision", "clip"
    m = _module(preset, module, family)
    eager = _measured(preset, module, family, TOKENS, "eager")
    model = model_groups(m, TOKENS, flash_attention=False)
    fp32_softmax = 4.0 * m.heads * SAMPLES * TOKENS * TOKENS
    assert eager["attention"] == pytest.approx(model["attention"] + fp32_softmax, rel=GROUP_TOLERANCE)
    assert eager["mlp"] == pytest.approx(model["mlp"], rel=GROUP_TOLERANCE)



if __name__ == "__main__":  # the table in the report
    import transformers

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {TOKENS} tokens; bytes per token")
    print(f"{'block':34} {'measured':>9} {'model':>9} {'ratio':>6}  " + "  ".join(f"{g + ' m/meas':>16}" for g in GROUPS))
    for preset, module, family in BLOCKS:
        measured, model = measure(preset, module, family)
        gm, gd = measure_groups(preset, module, family)
        cells = "  ".join(f"{gd[g] / max(gm[g], 1):16.3f}" if gm[g] or gd[g] else f"{'-':>16}" for g in GROUPS)
        print(f"{preset + ':' + module:34} {measured / TOKENS:9.0f} {model / TOKENS:9.0f} {model / measured:6.3f}  {cells}")
