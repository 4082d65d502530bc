"""Language models of the 2025-26 families: Qwen3 (dense and MoE), Gemma 2/3, GLM-4(.5)V text, mllama text.

Contract: :func:`decoder` turns a text configuration (a top-level
``config.json`` or a VLM's ``text_config``) of one of :data:`TEXT_TYPES`
into an ``llm`` :class:`~partitioner.presets.ModuleSpec`; MoE fields are
read whatever transformers version named them.

What each family adds to the Llama block (transformers' modeling files):

More (the detail of this module): ``docs/internals/presets.md``, section ``partitioner.presets.hf.text``.
"""
from __future__ import annotations

from typing import Any

from ...problem import ProblemError
from ..spec import ModuleSpec
from .base import _ACTIVATION, _Config

__all__ = ["TEXT_TYPES", "decoder"]

_QWEN3 = ("qwen3", "qwen3_moe", "qwen3_vl_text", "qwen3_vl_moe_text")
TEXT_TYPES = (*_QWEN3, "gemma2", "gemma3_text", "glm4v_text", "glm4v_moe_text", "qwen2_5_vl_text", "mllama_text_model",
              "llama", "mistral", "qwen2", "gemma")


_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")  # the routed experts, by transformers version
# ModuleSpec field -> text configuration key (the experts' key is whichever of _EXPERT_KEYS the document gives)
_KEYS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
         "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "ffn": "intermediate_size", "vocab": "vocab_size",
         "top_k": "num_experts_per_tok", "moe_ffn": "moe_intermediate_size", "shared_ffn": "n_shared_experts",
         "first_dense": "first_k_dense_replace", "moe_every": "decoder_sparse_step", "dense_layers": "mlp_only_layers",
         "cross_layers": "cross_attention_layers", "window": "sliding_window", "full_layers": "layer_types"}


def _first(c: _Config, keys: tuple[str, ...], default: Any) -> tuple[str, Any]:
    """The first of ``keys`` the document gives and its value (an integer), else ``(keys[0], default)``."""
    for key in keys:
        if c.data.get(key) is not None:
            return key, c.int(key)
    return keys[0], default


def _int_list(c: _Config, key: str) -> tuple[int, ...]:
    value = c.data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise ProblemError(f"must be a list of layer indices, got {value!r}", path=f"{c.path}.{key}" if c.path else key,
                           source=c.source)
    return tuple(value)


def _windows(c: _Config, layers: int) -> tuple[int, tuple[int, ...]]:
    """(sliding window in tokens, the layers with full attention) from ``layer_types`` (0, () without a window)."""
    window = c.data.get("sliding_window")
    types = c.data.get("layer_types")
    if not window or not isinstance(types, list) or "sliding_attention" not in types:
        return 0, ()
    if len(types) != layers:
        raise ProblemError(f"has {len(types)} entries for {layers} layers", path=f"{c.path}.layer_types" if c.path else "layer_types",
                           source=c.source)
    return c.int("sliding_window"), tuple(i for i, t in enumerate(types) if t != "sliding_attention")


def decoder(c: _Config, text_tokens: int, *, prefix: str = "", attention: str = "causal", lm_head: bool = True) -> ModuleSpec:
    """The ``llm`` module of text configuration ``c`` (one of :data:`TEXT_TYPES`)."""
    mtype = c.mtype
    if mtype not in TEXT_TYPES:
        raise ProblemError(f"unsupported text model_type {mtype!r} (supported: {', '.join(TEXT_TYPES)})",
                           path=f"{c.path}.model_type" if c.path else "model_type", source=c.source)
    # the divisors first, each at least 1 (the module check names the rest by their keys, below)
    hidden, heads = c.int("hidden_size", minimum=1), c.int("num_attention_heads", minimum=1)
    layers = c.int("num_hidden_layers", minimum=1)
    gemma = mtype in ("gemma2", "gemma3_text", "gemma")
    experts_key, experts = _first(c, _EXPERT_KEYS, 0)
    moe: dict[str, Any] = {}
    if experts and mtype in ("qwen3_moe", "qwen3_vl_moe_text", "glm4v_moe_text"):
        moe_ffn = c.int("moe_intermediate_size", minimum=1)
        moe = dict(experts=experts, top_k=c.int("num_experts_per_tok", minimum=1), moe_ffn=moe_ffn,
                   shared_ffn=c.int("n_shared_experts", 0) * moe_ffn, first_dense=c.int("first_k_dense_replace", 0),
                   moe_every=c.int("decoder_sparse_step", 1, minimum=1), dense_layers=_int_list(c, "mlp_only_layers"),
                   norm_topk=c.flag("norm_topk_prob", True))
        if mtype == "glm4v_moe_text":  # transformers' Glm4vMoeTextTopkRouter scores by sigmoid (+ a correction bias buffer)
            moe.update(router_score="sigmoid", routed_scale=c.number("routed_scaling_factor", 1.0))
    head_dim = c.int("head_dim", hidden // heads, minimum=1)  # a given head_dim is a width (0 is no head)
    qk_norm = mtype in (*_QWEN3, "gemma3_text")
    if mtype in ("qwen2", "qwen2_5_vl_text", "glm4v_text"):
        qkv_bias = True
    else:
        qkv_bias = c.flag("attention_bias", False)
    cross = _int_list(c, "cross_attention_layers") if mtype == "mllama_text_model" else ()
    vocab = c.int("vocab_size")
    window, full = _windows(c, layers)
    act = c.get("hidden_activation", c.get("hidden_act", "silu")) if gemma else c.get("hidden_act", "silu")
    spec = ModuleSpec(
        name="llm",
        kind="llm",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=c.int("num_key_value_heads", heads),
        head_dim=head_dim,
        ffn=c.int("intermediate_size"),
        gated=True,
        qkv_bias=qkv_bias,
        norm="rmsnorm",
        activation=_ACTIVATION.get(str(act), "gelu"),
        qk_norm=qk_norm,
        qk_norm_dim=head_dim if (qk_norm or cross) else 0,
        block_norms=4 if mtype in ("gemma2", "gemma3_text", "glm4v_text") else 2,
        vocab=vocab,
        extra_params=8 * hidden if cross else 0,  # mllama: vocab + 8 embedding rows
        tie_embeddings=c.flag("tie_word_embeddings", gemma),
        text_tokens=text_tokens,
        attention=attention,
        lm_head=lm_head,
        cross_layers=cross,
        window=window,
        full_layers=full,
        source=f"Hugging Face config ({c.source or mtype})",
        fqn={"pre": [f"{prefix}embed_tokens"], "block": f"{prefix}layers.{{i}}",
             "post": [f"{prefix}norm", "lm_head"]},
        **moe,
    )
    return c.checked(spec, {**_KEYS, "experts": experts_key})
