"""Scaled-down copies of the model presets for the export invariant (``test_export_invariant.py``).

:func:`scaled` keeps a preset's structure -- its modules and their kinds,
layer kinds (dense and MoE layers, multi-head latent attention, QK norms,
biases, gated MLPs, norms), expert count (at most :data:`EXPERTS`, so that
ep 2 and 4 divide it), shared experts, tied embeddings, vision towers and
projectors -- with few layers and narrow matmuls, so a framework builds
its model on CPU in a second. Widths are multiples of every tp the tests
use, and the vocabulary a multiple of 128 x tp, so megatron-core pads
nothing (its padded vocabulary would hold rows the plan never charged).
"""
from __future__ import annotations

from dataclasses import replace

from partitioner.presets import load_model
from partitioner.presets.spec import ModelSpec, ModuleSpec

__all__ = ["EXPERTS", "VIT_HIDDEN", "scaled", "scaled_module"]

EXPERTS = 8  # at most this many routed experts: ep 2 and 4 divide it
HIDDEN, HEADS, HEAD_DIM, FFN, MOE_FFN = 64, 4, 16, 128, 32
# vision towers twice as wide: the vectors a framework keeps whole on every TP rank (norms, row-parallel
# biases; the cost model divides them by tp) are then ~0.6 % of a block at tp 2, not 1.1 % (at real
# widths, 1024-1280, they are ~0.05 %)
VIT_HIDDEN, VIT_FFN = 128, 256
VOCAB = 1024  # a multiple of 128 x tp for tp <= 8: no padded rows


def _llm(m: ModuleSpec) -> ModuleSpec:
    kv = 0 if m.n_kv_heads == m.heads else 2  # GQA keeps groups (2, divisible by tp 2)
    moe = m.experts > 0
    first_dense = min(m.first_dense, 1)
    changes = dict(layers=first_dense + 3, hidden=HIDDEN, heads=HEADS, kv_heads=kv, head_dim=HEAD_DIM if m.head_dim else 0,
                   ffn=FFN, vocab=VOCAB, text_tokens=64, first_dense=first_dense, extra_params=0,
                   dense_layers=(), cross_layers=(), mtp_layers=0)
    if moe:
        changes.update(experts=min(m.experts, EXPERTS), top_k=max(2, m.top_k * min(m.experts, EXPERTS) // m.experts),
                       moe_ffn=MOE_FFN, shared_ffn=MOE_FFN if m.shared_ffn else 0,
                       expert_groups=min(m.expert_groups, 2), group_top_k=min(m.group_top_k, 1))
    if m.qk_norm_dim:
        changes.update(qk_norm_dim=HEAD_DIM)
    if m.mla:
        changes.update(q_lora_rank=32 if m.q_lora_rank else 0, kv_lora_rank=32, rope_head_dim=8, head_dim=HEAD_DIM,
                       v_head_dim=HEAD_DIM)
    return replace(m, **changes)


def scaled_module(m: ModuleSpec, llm_hidden: int = HIDDEN, vit_hidden: int = VIT_HIDDEN) -> ModuleSpec:
    """One module scaled down (its kind's fields; structure flags kept)."""
    if m.kind == "llm":
        return _llm(m)
    if m.kind == "vit":
        return replace(m, layers=3, hidden=VIT_HIDDEN, heads=HEADS, head_dim=0, ffn=VIT_FFN, image_size=m.patch * 4,
                       pos_tokens=16 if m.pos_tokens else 0, output_tokens=0, extra_params=0, window=0, full_layers=(),
                       images=1, frames=min(m.frames, 2))
    if m.kind == "projector":
        ratio = max(1, m.in_dim // max(1, m.pre_norm_dim or m.in_dim))
        dims = tuple(llm_hidden if i == len(m.dims) - 1 else 2 * llm_hidden for i in range(len(m.dims)))
        return replace(m, in_dim=vit_hidden * ratio, dims=dims, tokens=16, extra_params=0,
                       pre_norm_dim=vit_hidden * ratio if m.pre_norm_dim == m.in_dim else (vit_hidden if m.pre_norm_dim else 0),
                       deepstack=m.deepstack)
    # action expert / action head
    return replace(m, layers=2, hidden=HIDDEN // 2 if m.kind == "action_expert" else HIDDEN, heads=HEADS,
                   kv_heads=0 if m.n_kv_heads == m.heads else 2, head_dim=HEAD_DIM if m.head_dim else 0, ffn=FFN,
                   tokens=8, cond_tokens=8 if m.cond_tokens else 0, cond_dim=HIDDEN if m.cond_dim else 0,
                   action_dim=8 if m.action_dim else 0, state_dim=8 if m.state_dim else 0)


def scaled(name: str) -> ModelSpec:
    """The preset ``name`` scaled down, its structure kept (its action expert as deep as its LLM, as pi0 fuses them)."""
    spec = load_model(name)
    mods = [scaled_module(m) for m in spec.modules]
    llm = next((m for m in mods if m.kind == "llm"), None)
    mods = [replace(m, layers=llm.layers) if m.kind == "action_expert" and llm is not None else m for m in mods]
    return ModelSpec(f"{name}-scaled", tuple(mods))
