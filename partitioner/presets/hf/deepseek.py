"""DeepSeek-V2/V3-architecture language models: multi-head latent attention, DeepSeekMoE, multi-token prediction.

Contract: :func:`deepseek_decoder` turns a ``deepseek_v2``, ``deepseek_v3``
or ``kimi_k2`` text configuration into an ``llm``
:class:`~partitioner.presets.ModuleSpec`; :func:`deepseek_lm` is the
family entry of :mod:`.hf` for a top-level ``config.json`` of those types.
Every field is read with its type and range checked and the module is
checked by :func:`~partitioner.presets.checks.module_problem`, the error
naming the document's key (``n_routed_experts``, ``q_lora_rank``, ...).

More (the detail of this module): ``docs/internals/presets.md``, section ``partitioner.presets.hf.deepseek``.
"""
from __future__ import annotations

from typing import Any

from ...problem import ProblemError
from ..spec import ModuleSpec
from ..workload import Workload
from .base import _ACTIVATION, _Config
from .common import DEFAULT_TEXT_TOKENS, refuse

__all__ = ["DEEPSEEK_TYPES", "deepseek_decoder", "deepseek_lm"]

DEEPSEEK_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
_V3 = dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
           num_hidden_layers=61, num_attention_heads=128, n_shared_experts=1, n_routed_experts=256, kv_lora_rank=512,
           q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, n_group=8, topk_group=4,
           num_experts_per_tok=8, first_k_dense_replace=3, norm_topk_prob=True, num_nextn_predict_layers=1,
           hidden_act="silu", topk_method="noaux_tc", scoring_func="sigmoid",
           routed_scaling_factor=2.5)
# transformers' configuration defaults (5.24), for documents saved without a field
_DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek_v2": dict(vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, kv_lora_rank=512, q_lora_rank=1536, n_routed_experts=64,
                        n_shared_experts=2, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                        moe_intermediate_size=1407, first_k_dense_replace=0, norm_topk_prob=False,
                        num_nextn_predict_layers=0, hidden_act="silu", topk_method="greedy", scoring_func="softmax",
                        routed_scaling_factor=1.0),
    "deepseek_v3": _V3,
    "kimi_k2": _V3,
}
# ModuleSpec field -> config.json key (for errors found by the shared checks)
_KEYS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
         "kv_heads": "num_key_value_heads", "head_dim": "qk_nope_head_dim", "ffn": "intermediate_size",
         "vocab": "vocab_size", "experts": "n_routed_experts", "top_k": "num_experts_per_tok",
         "moe_ffn": "moe_intermediate_size", "shared_ffn": "n_shared_experts", "first_dense": "first_k_dense_replace",
         "dense_layers": "moe_layer_freq", "expert_groups": "n_group", "group_top_k": "topk_group",
         "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank", "rope_head_dim": "qk_rope_head_dim",
         "v_head_dim": "v_head_dim", "mtp_layers": "num_nextn_predict_layers", "router_score": "scoring_func",
         "routed_scale": "routed_scaling_factor"}
_GROUPED = ("group_limited_greedy", "noaux_tc")  # topk_method values that limit a token's experts to topk_group groups


class _DeepseekConfig(_Config):
    """A DeepSeek-family document with its type's transformers defaults."""

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if key in _DEFAULTS[self.mtype]:
            return _DEFAULTS[self.mtype][key]
        return super().get(key, default)

    def stated_null(self, key: str) -> bool:
        """Whether the document gives ``key`` as null (a None that differs from the type's default)."""
        return key in self.data and self.data[key] is None


def _choice(c: _DeepseekConfig, key: str, choices: tuple[str, ...]) -> str:
    value = c.text(key)
    if value not in choices:
        raise ProblemError(f"must be one of {', '.join(choices)}, got {value!r}", path=c.where(key), source=c.source)
    return value


def deepseek_decoder(c: _Config, text_tokens: int, *, mtp_layers: int | None = None, prefix: str = "model.",
                     head: str = "lm_head") -> ModuleSpec:
    """The ``llm`` module of a ``deepseek_v2`` / ``deepseek_v3`` / ``kimi_k2`` configuration (module docstring).

    ``mtp_layers`` (a workload's) overrides ``num_nextn_predict_layers``;
    ``prefix`` and ``head`` name the blocks and the output layer for export.
    """
    if c.mtype not in DEEPSEEK_TYPES:
        raise ProblemError(f"unsupported text model_type {c.mtype!r} (supported: {', '.join(DEEPSEEK_TYPES)})",
                           path=c.where("model_type"), source=c.source)
    d = _DeepseekConfig(c.data, c.mtype, c.path, c.source)
    heads, layers = d.int("num_attention_heads", minimum=1), d.int("num_hidden_layers", minimum=1)
    hidden = d.int("hidden_size", minimum=1)
    if d.data.get("num_key_value_heads") is not None and d.int("num_key_value_heads") != heads:
        raise ProblemError(f"multi-head latent attention gives every one of the {heads} heads its own key and value: "
                           f"must equal num_attention_heads, got {d.data['num_key_value_heads']!r}",
                           path=d.where("num_key_value_heads"), source=d.source)
    if d.mtype == "deepseek_v2" and hidden % heads:  # DeepseekV2Config.validate_architecture
        raise ProblemError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}",
                           path=d.where("num_attention_heads"), source=d.source)
    experts = 0 if d.stated_null("n_routed_experts") else d.int("n_routed_experts", minimum=1)
    moe: dict[str, Any] = {}
    if experts:
        moe_ffn = d.int("moe_intermediate_size", minimum=1)
        first = d.int("first_k_dense_replace", 0)
        freq = d.int("moe_layer_freq", 1, minimum=1)
        top_k = d.int("num_experts_per_tok", minimum=1)
        moe = dict(experts=experts, top_k=top_k, moe_ffn=moe_ffn,
                   shared_ffn=(d.int("n_shared_experts", 0) if not d.stated_null("n_shared_experts") else 0) * moe_ffn,
                   first_dense=first, dense_layers=tuple(i for i in range(first, layers) if i % freq),
                   norm_topk=d.flag("norm_topk_prob", False),
                   router_score=_choice(d, "scoring_func", ("softmax", "sigmoid")),
                   routed_scale=d.number("routed_scaling_factor"))
        if (d.mtype != "deepseek_v2" or d.text("topk_method") in _GROUPED) and not d.stated_null("n_group"):
            moe.update(expert_groups=d.int("n_group", minimum=1), group_top_k=d.int("topk_group", minimum=1))
    mtp = d.int("num_nextn_predict_layers", 0) if mtp_layers is None else mtp_layers
    spec = ModuleSpec(
        name="llm",
        kind="llm",
        layers=layers,
        hidden=hidden,
        heads=heads,
        head_dim=d.int("qk_nope_head_dim", minimum=1),
        ffn=d.int("intermediate_size", minimum=1),
        gated=True,
        bias=d.flag("mlp_bias", False),
        qkv_bias=d.flag("attention_bias", False),
        norm="rmsnorm",
        activation=_ACTIVATION.get(d.text("hidden_act"), "gelu"),
        vocab=d.int("vocab_size", minimum=1),
        tie_embeddings=d.flag("tie_word_embeddings", False),
        text_tokens=text_tokens,
        q_lora_rank=0 if d.stated_null("q_lora_rank") else d.int("q_lora_rank", minimum=1),
        kv_lora_rank=d.int("kv_lora_rank", minimum=1),
        rope_head_dim=d.int("qk_rope_head_dim", minimum=1),
        v_head_dim=d.int("v_head_dim", minimum=1),
        mtp_layers=mtp,
        source=f"Hugging Face config ({d.source or d.mtype})",
        fqn={"pre": [f"{prefix}embed_tokens"], "block": f"{prefix}layers.{{i}}", "post": [f"{prefix}norm", head],
             "mtp": f"{prefix}layers.{{i}}"},  # DeepSeek's checkpoints keep MTP module j as layer num_hidden_layers + j
        **moe,
    )
    return d.checked(spec, _KEYS)


def deepseek_lm(root: _Config, w: Workload) -> tuple[ModuleSpec, ...]:
    """The one module of a top-level ``deepseek_v2`` / ``deepseek_v3`` / ``kimi_k2`` ``config.json``."""
    refuse(w, ("images", "image_size", "tiles", "frames"), f"{root.mtype} is a language model", root.source)
    tokens = w.text_tokens if w.text_tokens is not None else DEFAULT_TEXT_TOKENS
    return (deepseek_decoder(root, tokens, mtp_layers=w.mtp_layers),)
