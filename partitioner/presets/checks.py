"""What a model or a cluster must satisfy, whichever door it comes in by.

Contract: :func:`module_problem`, :func:`model_problem` and
:func:`cluster_problem` return the first thing wrong with a spec as a
``(field, reason)`` pair (``field`` is a :class:`~.spec.ModuleSpec` /
:class:`~.spec.ClusterSpec` field name, ``""`` for the module as a whole),
or ``None``; they never raise and never divide before the divisors are
known to be positive. Each door names the field its own way: the YAML
presets as ``modules[i].heads`` (:mod:`.files`), Hugging Face
``config.json`` files by their own keys, e.g.
``text_config.num_attention_heads`` (:mod:`.hf`), and spec objects given
to the API as ``modules[i].heads`` (:func:`check_model`,
:func:`check_cluster`).

More (the detail of this module): ``docs/internals/presets.md``, section ``partitioner.presets.checks``.
"""
from __future__ import annotations

import math
import string
from dataclasses import fields
from typing import Any, Mapping

from ..core.limits import (
    MAX_BLOCK_NORMS,
    MAX_BYTES,
    MAX_CHANNELS,
    MAX_GBPS,
    MAX_GPUS_PER_NODE,
    MAX_IMAGE_SIZE,
    MAX_IMAGES,
    MAX_MODULE_LAYERS,
    MAX_MODULES,
    MAX_PARAMS,
    MAX_PASSES,
    MAX_PROJECTOR_DEPTH,
    MAX_TFLOPS,
    MAX_TOKENS,
    MAX_VOCAB,
    MAX_WIDTH,
    MIN_GBPS,
    MIN_TFLOPS,
)
from ..problem import ProblemError
from .spec import GPU_GENERATIONS, MODULE_KINDS, ClusterSpec, ModelSpec, ModuleSpec, module_params

__all__ = [
    "FIELD_RANGES",
    "FLOAT_RANGES",
    "BOOL_FIELDS",
    "CHOICES",
    "TRANSFORMER_KINDS",
    "LAYER_LIST_FIELDS",
    "field_problem",
    "module_problem",
    "model_problem",
    "cluster_problem",
    "check_model",
    "check_cluster",
]

# (least, greatest) of every integer field of ModuleSpec; a field a kind needs is also checked >= 1 (_NEEDED)
FIELD_RANGES: dict[str, tuple[int, int]] = {
    "layers": (1, MAX_MODULE_LAYERS),
    "hidden": (0, MAX_WIDTH),
    "heads": (1, MAX_WIDTH),
    "kv_heads": (0, MAX_WIDTH),  # 0: as many as heads
    "head_dim": (0, MAX_WIDTH),  # 0: hidden / heads
    "ffn": (0, MAX_WIDTH),
    "patch": (1, MAX_IMAGE_SIZE),
    "image_size": (1, MAX_IMAGE_SIZE),
    "images": (1, MAX_IMAGES),
    "channels": (1, MAX_CHANNELS),
    "temporal_patch": (1, MAX_IMAGES),
    "frames": (1, MAX_IMAGES),
    "extra_tokens": (0, MAX_TOKENS),
    "output_tokens": (0, MAX_TOKENS),
    "pos_tokens": (0, MAX_TOKENS),
    "feature_layer": (-MAX_MODULE_LAYERS, -1),
    "in_dim": (0, MAX_WIDTH),
    "tokens": (0, MAX_TOKENS),
    "pre_norm_dim": (0, MAX_WIDTH),
    "vocab": (0, MAX_VOCAB),
    "text_tokens": (0, MAX_TOKENS),
    "action_dim": (0, MAX_WIDTH),
    "state_dim": (0, MAX_WIDTH),
    "cond_tokens": (0, MAX_TOKENS),
    "cond_dim": (0, MAX_WIDTH),
    "passes": (1, MAX_PASSES),
    # mixture of experts
    "experts": (0, MAX_WIDTH),
    "top_k": (0, MAX_WIDTH),
    "moe_ffn": (0, MAX_WIDTH),
    "shared_ffn": (0, MAX_WIDTH),
    "first_dense": (0, MAX_MODULE_LAYERS),
    "moe_every": (1, MAX_MODULE_LAYERS),
    "expert_groups": (0, MAX_WIDTH),
    "group_top_k": (0, MAX_WIDTH),
    # multi-head latent attention, multi-token prediction
    "q_lora_rank": (0, MAX_WIDTH),
    "kv_lora_rank": (0, MAX_WIDTH),
    "rope_head_dim": (0, MAX_WIDTH),
    "v_head_dim": (0, MAX_WIDTH),
    "mtp_layers": (0, MAX_MODULE_LAYERS),
    # other block variants
    "cross_tokens": (0, MAX_TOKENS),
    "block_norms": (0, MAX_BLOCK_NORMS),
    "qk_norm_dim": (0, MAX_WIDTH),
    "extra_params": (0, MAX_PARAMS),
    "tiles": (1, MAX_IMAGES),
    "window": (0, MAX_TOKENS),
    "deepstack": (0, MAX_MODULE_LAYERS),
}
# (least, greatest) of every real-valued field of ModuleSpec
FLOAT_RANGES: dict[str, tuple[float, float]] = {
    # routed_scaling_factor: positive; 1e-3..1e3 holds every published value (DeepSeek-V2 16, V3 2.5, Kimi-K2 2.827)
    "routed_scale": (1e-3, 1e3),
}
BOOL_FIELDS = frozenset({"gated", "bias", "qkv_bias", "patch_bias", "pool_head", "layerscale", "qk_norm", "dropout",
                         "fused_qkv", "final_norm", "pre_norm", "tie_embeddings", "lm_head", "frozen", "rotary",
                         "proj_bias", "norm_topk"})
_MAYBE_NONE = frozenset({"qkv_bias", "patch_bias", "rotary"})  # None: as ``bias`` (rotary: by kind)
# fields holding block indices of the module (each in 0..layers - 1, checked against layers in module_problem)
LAYER_LIST_FIELDS = ("dense_layers", "cross_layers", "full_layers")
# the parts of ``fqn`` (export hints): module names before the blocks, after them, and templates with {i}
_FQN_LISTS, _FQN_TEMPLATES = ("pre", "post"), ("block", "mtp")
CHOICES: dict[str, tuple[str, ...]] = {
    "activation": ("gelu", "gelu_tanh", "silu", "quick_gelu"),
    "norm": ("layernorm", "rmsnorm"),
    "pos_embed": ("learned", "none"),
    "attention": ("causal", "prefix", "bidirectional"),
    "router_score": ("softmax", "sigmoid"),
}
TRANSFORMER_KINDS = ("vit", "llm", "action_expert", "action_head")
# fields a kind needs positive (beyond FIELD_RANGES' least values)
_NEEDED: dict[str, tuple[str, ...]] = {
    "vit": ("hidden", "ffn"),
    "projector": ("in_dim", "tokens"),
    "llm": ("hidden", "ffn", "vocab"),
    "action_expert": ("hidden", "ffn", "tokens", "action_dim"),
    "action_head": ("hidden", "ffn", "tokens", "action_dim", "cond_dim"),
}
_STRING_FIELDS = ("name", "kind", "source")
_SPEC_FIELDS = tuple(f.name for f in fields(ModuleSpec))

Problem = tuple[str, str]  # (field, reason)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _layer_list_problem(value: Any) -> str | None:
    """Why ``value`` is not a list of distinct block indices (in 0..MAX_MODULE_LAYERS - 1), or None."""
    if not isinstance(value, (tuple, list)) or len(value) > MAX_MODULE_LAYERS:
        return f"must be a list of at most {MAX_MODULE_LAYERS} block indices, got {value!r}"
    for i in value:
        if not _is_int(i) or not 0 <= i < MAX_MODULE_LAYERS:
            return f"every block index must be an integer in 0..{MAX_MODULE_LAYERS - 1}, got {i!r}"
    if len(set(value)) != len(value):
        return "names a block twice"
    return None


def _template_problem(value: str) -> str | None:
    """Why ``value`` is not a module-name template whose only field is ``{i}`` (the block index), or None."""
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as e:
        return f"is not a module-name template ({e}), got {value!r}"
    for _, field_name, spec, conversion in parts:
        if field_name is not None and (field_name != "i" or spec or conversion):
            return f"may hold only {{i}} (the block index) as a field, got {value!r}"
    return None


def _fqn_problem(value: Any) -> str | None:
    """Why ``value`` is not the export hints of a module (``pre``/``post``: lists of names, ``block``/``mtp``:
    a name template with ``{i}``), or None."""
    if not isinstance(value, Mapping):
        return f"must be an object (pre, block, post, mtp: module names), got {value!r}"
    for part, names in value.items():
        if part in _FQN_LISTS:
            if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
                return f"{part}: must be a list of module names, got {names!r}"
        elif part in _FQN_TEMPLATES:
            if not isinstance(names, str):
                return f"{part}: must be a module name with {{i}} for the block index, got {names!r}"
            why = _template_problem(names)
            if why is not None:
                return f"{part}: {why}"
        else:
            return f"unknown part {part!r} (parts: {', '.join(_FQN_LISTS + _FQN_TEMPLATES)})"
    return None


def field_problem(name: str, value: Any, kind: str) -> str | None:
    """Why ``value`` cannot be field ``name`` of a module of ``kind`` (its type and range), or None.

    A field the kind needs (``_NEEDED``) must be at least 1. Every field of
    :class:`~.spec.ModuleSpec` has its check here.
    """
    if name in LAYER_LIST_FIELDS:
        return _layer_list_problem(value)
    if name == "fqn":
        return _fqn_problem(value)
    if name == "dims":
        if not isinstance(value, tuple) or not 1 <= len(value) <= MAX_PROJECTOR_DEPTH:
            return f"must be a list of 1..{MAX_PROJECTOR_DEPTH} widths, got {value!r}"
        for d in value:
            if not _is_int(d) or not 1 <= d <= MAX_WIDTH:
                return f"every width must be an integer in 1..{MAX_WIDTH}, got {d!r}"
    elif name in FIELD_RANGES:
        lo, hi = FIELD_RANGES[name]
        lo = max(lo, 1) if name in _NEEDED.get(kind, ()) else lo
        if not _is_int(value):
            return f"must be an integer, got {value!r}"
        if not lo <= value <= hi:
            return f"must be in {lo}..{hi}, got {value}"
    elif name in FLOAT_RANGES:
        return _number_problem(value, *FLOAT_RANGES[name], integer=False)
    elif name in BOOL_FIELDS:
        if not isinstance(value, bool) and not (value is None and name in _MAYBE_NONE):
            return f"must be true or false, got {value!r}"
    elif name in CHOICES:
        if value not in CHOICES[name]:
            return f"must be one of {', '.join(CHOICES[name])}, got {value!r}"
    elif name in _STRING_FIELDS:
        if not isinstance(value, str):
            return f"must be a string, got {value!r}"
    return None


def _attention_problem(spec: ModuleSpec) -> Problem | None:
    """Heads, KV heads and head width of a transformer module (fields already in range)."""
    if not spec.head_dim and spec.hidden % spec.heads:
        return "heads", f"hidden {spec.hidden} is not divisible by heads {spec.heads} (give head_dim)"
    if spec.kv_heads > spec.heads:
        return "kv_heads", f"{spec.kv_heads} key-value heads are more than the {spec.heads} attention heads"
    if spec.heads % spec.n_kv_heads:
        return "kv_heads", f"the {spec.heads} attention heads are not a multiple of the {spec.n_kv_heads} key-value heads"
    if spec.attn_dim > MAX_WIDTH:
        return "heads", f"heads x head_dim = {spec.attn_dim} is more than {MAX_WIDTH}"
    return None


def _moe_problem(spec: ModuleSpec) -> Problem | None:
    """Experts, their width, top-k and groups (fields already in range); nothing to check without experts."""
    if not spec.experts:
        for name in ("top_k", "moe_ffn", "expert_groups", "group_top_k"):
            if getattr(spec, name):
                return name, f"{name} {getattr(spec, name)} is given but the module has no experts"
        return None
    if spec.top_k < 1:
        return "top_k", f"a MoE module routes each token to at least 1 expert, got {spec.top_k}"
    if spec.top_k > spec.experts:
        return "top_k", f"{spec.top_k} experts per token are more than the {spec.experts} experts"
    if spec.moe_ffn < 1:
        return "moe_ffn", f"a MoE module needs its experts' width, got {spec.moe_ffn}"
    if spec.expert_groups:
        if spec.experts % spec.expert_groups:
            return "expert_groups", f"the {spec.experts} experts do not split into {spec.expert_groups} equal groups"
        if not 1 <= spec.group_top_k <= spec.expert_groups:
            return "group_top_k", f"must be in 1..{spec.expert_groups} (the expert groups), got {spec.group_top_k}"
        if spec.top_k > spec.group_top_k * (spec.experts // spec.expert_groups):
            return "top_k", (f"{spec.top_k} experts per token do not fit in {spec.group_top_k} group(s) of "
                             f"{spec.experts // spec.expert_groups} experts")
    elif spec.group_top_k:
        return "group_top_k", "is given without expert_groups"
    return None


def _mla_problem(spec: ModuleSpec) -> Problem | None:
    """Multi-head latent attention and multi-token prediction fields (already in range)."""
    if not spec.mla:
        for name in ("q_lora_rank", "rope_head_dim", "v_head_dim"):
            if getattr(spec, name):
                return name, f"{name} is for multi-head latent attention, which needs kv_lora_rank >= 1"
    else:
        if spec.kind != "llm":
            return "kv_lora_rank", "multi-head latent attention is modelled in a language model (kind llm) only"
        if spec.cross_layers:
            return "kv_lora_rank", "multi-head latent attention has no cross-attention layers"
        if spec.fused_qkv or spec.qk_norm:
            return ("fused_qkv" if spec.fused_qkv else "qk_norm"), "does not apply to multi-head latent attention"
        if spec.kv_heads not in (0, spec.heads):
            return "kv_heads", (f"multi-head latent attention gives every one of the {spec.heads} heads its own key and "
                                f"value: kv_heads must be {spec.heads} (or 0), got {spec.kv_heads}")
        for name in ("head_dim", "rope_head_dim", "v_head_dim"):
            if getattr(spec, name) < 1:
                return name, f"multi-head latent attention needs {name} >= 1, got {getattr(spec, name)}"
        for width, what in ((spec.heads * spec.qk_head_dim, "heads x (head_dim + rope_head_dim)"),
                            (spec.heads * spec.v_dim, "heads x v_head_dim")):
            if width > MAX_WIDTH:
                return "heads", f"{what} = {width} is more than {MAX_WIDTH}"
    if spec.mtp_layers:
        if spec.kind != "llm" or not spec.lm_head:
            return "mtp_layers", "multi-token prediction needs a language model with its output head (kind llm, lm_head)"
    return None


def _vit_problem(spec: ModuleSpec) -> Problem | None:
    """Image, patch, video and feature-layer relations of a vision encoder (fields already in range)."""
    if spec.patch > spec.image_size:
        return "patch", f"patch {spec.patch} is larger than the image ({spec.image_size} px)"
    if -spec.feature_layer > spec.layers:
        return "feature_layer", f"{spec.feature_layer} is before the first of {spec.layers} blocks"
    if spec.frames > 1 and spec.frames % spec.temporal_patch:
        return "frames", f"frames {spec.frames} is not a multiple of temporal_patch {spec.temporal_patch}"
    per_sample = spec.images * spec.tokens_per_image
    if per_sample > MAX_TOKENS:
        return "image_size", (f"{spec.images} image(s) of {spec.tokens_per_image} tokens make {per_sample} tokens "
                              f"per sample, more than {MAX_TOKENS}")
    return None


def module_problem(spec: ModuleSpec) -> Problem | None:
    """The first thing wrong with one module, as ``(field, reason)``, or None (see the module docstring)."""
    if spec.kind not in MODULE_KINDS:
        return "kind", f"must be one of {', '.join(MODULE_KINDS)}, got {spec.kind!r}"
    for name in _SPEC_FIELDS:
        if name == "dims" and spec.kind != "projector":
            continue
        why = field_problem(name, getattr(spec, name), spec.kind)
        if why is not None:
            return name, why
    for name in LAYER_LIST_FIELDS:
        beyond = [i for i in getattr(spec, name) if i >= spec.layers]
        if beyond:
            return name, f"block {beyond[0]} is beyond the module's {spec.layers} blocks"
    if spec.kind != "projector":
        found = (_attention_problem(spec) or _mla_problem(spec) or _moe_problem(spec)
                 or (_vit_problem(spec) if spec.kind == "vit" else None))
        if found is not None:
            return found
    params = module_params(spec)
    if params > MAX_PARAMS:
        return "", f"{params:.3g} parameters, more than {MAX_PARAMS:.3g} (2^44) in one module"
    return None


def model_problem(model: ModelSpec) -> tuple[int | None, str, str] | None:
    """The first thing wrong with a model, as ``(module index or None, field, reason)``, or None.

    ``None`` as the index means the model's field ``field`` (``modules``).
    """
    modules = model.modules
    if not isinstance(modules, tuple) or not 1 <= len(modules) <= MAX_MODULES:
        count = len(modules) if isinstance(modules, (tuple, list)) else modules
        return None, "modules", f"must hold 1..{MAX_MODULES} modules, got {count!r}"
    for i, m in enumerate(modules):
        if not isinstance(m, ModuleSpec):
            return i, "", f"must be a ModuleSpec, got {type(m).__name__}"
        found = module_problem(m)
        if found is not None:
            return (i, *found)
    names = [m.name for m in modules]
    if len(set(names)) != len(names):
        return None, "modules", "module names must be unique"
    llms = [i for i, m in enumerate(modules) if m.kind == "llm"]
    if len(llms) > 1:
        return None, "modules", "at most one llm module"
    for i, m in enumerate(modules):
        if m.kind == "action_expert" and (not llms or modules[llms[0]].layers != m.layers):
            return i, "layers", ("an action expert shares attention with the llm at every layer: "
                                 "it needs an llm with the same layer count")
    if llms and model.llm_tokens > MAX_TOKENS:
        return llms[0], "text_tokens", (f"{model.image_tokens} image tokens + {modules[llms[0]].text_tokens} text tokens "
                                        f"make {model.llm_tokens} tokens per sample, more than {MAX_TOKENS}")
    if llms and modules[llms[0]].cross_layers and modules[llms[0]].cross_tokens < 1:
        return llms[0], "cross_tokens", "cross-attention layers need the tokens they attend to (cross_tokens >= 1)"
    if llms and model.llm_tokens < 1:
        return llms[0], "text_tokens", "the language model needs at least one token per sample (text or image tokens)"
    for i, m in enumerate(modules):
        if m.deepstack and (not llms or m.deepstack > modules[llms[0]].layers):
            return i, "deepstack", (f"{m.deepstack} DeepStack mergers feed the first {m.deepstack} language-model layers: "
                                    f"it needs an llm of at least that many layers")
    return None


def _number_problem(value: Any, lo: float, hi: float, integer: bool) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not _is_int(value)):
        return f"must be {'an integer' if integer else 'a number'}, got {value!r}"
    if not (math.isfinite(value) and lo <= value <= hi):
        return f"must be in {lo:g}..{hi:g}, got {value!r}"
    return None


def cluster_problem(cluster: ClusterSpec) -> Problem | None:
    """The first thing wrong with a cluster spec, as ``(field, reason)``, or None."""
    bounds = (
        ("gpus_per_node", 1, MAX_GPUS_PER_NODE, True),
        ("gpu_memory_bytes", 1, MAX_BYTES, True),
        ("peak_tflops", MIN_TFLOPS, MAX_TFLOPS, False),
        ("intra_node_GBps", MIN_GBPS, MAX_GBPS, False),
        ("inter_node_GBps", MIN_GBPS, MAX_GBPS, False),
    )
    for name, lo, hi, integer in bounds:
        why = _number_problem(getattr(cluster, name), lo, hi, integer)
        if why is not None:
            return name, why
    for name in ("name", "gpu", "title"):
        if not isinstance(getattr(cluster, name), str):
            return name, f"must be a string, got {getattr(cluster, name)!r}"
    if cluster.generation != "" and cluster.generation not in GPU_GENERATIONS:
        return "generation", f"must be one of {', '.join(GPU_GENERATIONS)}, got {cluster.generation!r}"
    sizes = cluster.stage_sizes
    if sizes is not None:
        g = cluster.gpus_per_node
        if not isinstance(sizes, tuple) or not sizes or any(isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= g for s in sizes):
            return "stage_sizes", f"must be a non-empty tuple of integers in 1..{g} (gpus_per_node), got {sizes!r}"
        if len(set(sizes)) != len(sizes):
            return "stage_sizes", f"lists a size twice: {sizes!r}"
    return None


def check_model(model: ModelSpec, *, source: str | None = None) -> ModelSpec:
    """``model`` itself, or a :class:`ProblemError` naming ``modules[i].field`` (the API door)."""
    if not isinstance(model, ModelSpec):
        raise ProblemError(f"must be a ModelSpec, got {type(model).__name__}", path="model", source=source)
    found = model_problem(model)
    if found is not None:
        index, name, reason = found
        path = name if index is None else ".".join(filter(None, (f"modules[{index}]", name)))
        raise ProblemError(reason, path=path, source=source or model.source)
    return model


def check_cluster(cluster: ClusterSpec, *, source: str | None = None) -> ClusterSpec:
    """``cluster`` itself, or a :class:`ProblemError` naming the field."""
    if not isinstance(cluster, ClusterSpec):
        raise ProblemError(f"must be a ClusterSpec, got {type(cluster).__name__}", path="cluster", source=source)
    found = cluster_problem(cluster)
    if found is not None:
        raise ProblemError(found[1], path=found[0], source=source or cluster.source)
    return cluster
