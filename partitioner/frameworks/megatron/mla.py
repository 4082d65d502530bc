"""Megatron-LM's arguments for latent attention, multi-token prediction and group routing (:func:`mla_args`).

Megatron-LM (``megatron/training/arguments.py``, core_r0.16; Megatron-Core
0.16.1 ``MLATransformerConfig`` and ``gpt_layer_specs``) [1]:

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.megatron.mla``.
"""
from __future__ import annotations

from types import MappingProxyType

from ...presets import MlaHints

__all__ = ["MLA_FLAGS", "mla_args", "latent_attention"]

# MlaHints field -> Megatron-LM argument (the value follows it; 0 leaves the argument out)
MLA_FLAGS = MappingProxyType({
    "q_lora_rank": "--q-lora-rank",
    "kv_lora_rank": "--kv-lora-rank",
    "qk_head_dim": "--qk-head-dim",
    "qk_pos_emb_head_dim": "--qk-pos-emb-head-dim",
    "v_head_dim": "--v-head-dim",
    "mtp_layers": "--mtp-num-layers",
    "expert_groups": "--moe-router-num-groups",
    "group_top_k": "--moe-router-group-topk",
    "router_score": "--moe-router-score-function",
})
_LATENT = ("qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "q_lora_rank", "kv_lora_rank")  # MLA's own widths


def latent_attention(hints: MlaHints | None) -> tuple[dict[str, object], list[str]]:
    """Megatron-Core's ``MLATransformerConfig`` fields of ``hints``' latent attention and the Megatron-LM
    arguments that set them (both empty without latent attention).

    ``qk_layernorm`` is the norm of the query and key-value latents (DeepSeek-V3's ``q_a_layernorm``,
    ``kv_a_layernorm``); ``q_lora_rank`` None when the query has no down-projection (DeepSeek-V2-Lite),
    as Megatron-LM leaves ``--q-lora-rank`` unset. Multi-token prediction and group routing are written
    by the exporter from the plan's stages and the MoE hints, not here.
    """
    if hints is None or not hints.kv_lora_rank:
        return {}, []
    core: dict[str, object] = {"multi_latent_attention": True, "qk_layernorm": True,
                               "q_lora_rank": hints.q_lora_rank or None}
    core.update({name: getattr(hints, name) for name in _LATENT if name != "q_lora_rank"})
    flags = ["--multi-latent-attention", "--qk-layernorm"]
    flags += [f"{MLA_FLAGS[name]} {getattr(hints, name)}" for name in _LATENT if getattr(hints, name)]
    return core, flags


def mla_args(hints: MlaHints) -> list[str]:
    """Megatron-LM's arguments for ``hints`` (module docstring), in :data:`MLA_FLAGS` order."""
    args = ["--multi-latent-attention", "--qk-layernorm"] if hints.kv_lora_rank else []
    for name, flag in MLA_FLAGS.items():
        value = getattr(hints, name)
        if name in _LATENT and not hints.kv_lora_rank:
            continue
        if value:
            args += [flag, str(value)]
    return args
