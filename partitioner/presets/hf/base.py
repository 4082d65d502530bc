"""Hugging Face ``config.json`` import.

Contract: :func:`model_from_hf_config` turns a configuration document as
transformers writes it into a :class:`~.spec.ModelSpec`; an unsupported
``model_type`` or a missing field raises
:class:`~partitioner.problem.ProblemError` naming the field path.

More (the detail of this module): ``docs/internals/presets.md``, section ``partitioner.presets.hf.base``.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from ...problem import ProblemError
from ..checks import model_problem, module_problem
from ..spec import ModelSpec, ModuleSpec

__all__ = ["model_from_hf_config", "checked_model", "checked_type", "HF_TYPES"]

# transformers' configuration defaults, for documents saved without them
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, vocab_size=32000),
    "mistral": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=8, vocab_size=32000),
    "qwen2": dict(hidden_size=4096, intermediate_size=22016, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=32, vocab_size=151936),
    "gemma": dict(hidden_size=3072, intermediate_size=24576, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=16, head_dim=256, vocab_size=256000),
    "clip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                              image_size=224, patch_size=32, num_channels=3, hidden_act="quick_gelu"),
    "siglip_vision_model": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                                image_size=224, patch_size=16, num_channels=3, hidden_act="gelu_pytorch_tanh",
                                vision_use_head=True),
    "qwen2_vl_vision": dict(depth=32, embed_dim=1280, hidden_size=3584, mlp_ratio=4, num_heads=16, in_channels=3,
                            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, hidden_act="quick_gelu"),
}
_LLM = ("llama", "mistral", "qwen2", "gemma")
_VISION = ("clip_vision_model", "siglip_vision_model")
HF_TYPES = (*_LLM, *_VISION, "clip", "siglip", "llava", "paligemma", "qwen2_vl")
# transformers' configurations of these types require hidden_size % num_attention_heads == 0 whatever head_dim is
_HEADS_DIVIDE_HIDDEN = ("llama", "clip_vision_model")
# ModuleSpec field -> config.json key, per module builder (fields not listed are named as they are)
_LLM_KEYS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
             "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "ffn": "intermediate_size", "vocab": "vocab_size"}
_VIT_KEYS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
             "ffn": "intermediate_size", "patch": "patch_size", "image_size": "image_size", "channels": "num_channels"}
_QWEN2_VL_VIT_KEYS = {"layers": "depth", "hidden": "embed_dim", "heads": "num_heads", "ffn": "mlp_ratio",
                      "patch": "patch_size", "channels": "in_channels", "temporal_patch": "temporal_patch_size"}
_ARGUMENTS = ("images", "text_tokens")  # model_from_hf_config's arguments, not config fields
_ACTIVATION = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
               "silu": "silu"}


def checked_type(mtype: Any, path: str, source: str | None) -> str:
    """A ``model_type`` field: a string (anything else is refused naming ``path``, never hashed)."""
    if not isinstance(mtype, str):
        raise ProblemError(f"must be a string (a Hugging Face model type), got {mtype!r}", path=path, source=source)
    return mtype


class _Config:
    """One (sub-)configuration: its fields, the type's defaults, the path for errors."""

    def __init__(self, data: Any, mtype: str, path: str, source: str | None):
        if not isinstance(data, Mapping):
            raise ProblemError("must be an object", path=path or "config", source=source)
        checked_type(mtype, ".".join(filter(None, (path, "model_type"))), source)
        self.data, self.mtype, self.path, self.source = data, mtype, path, source

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if key in _DEFAULTS.get(self.mtype, {}):
            return _DEFAULTS[self.mtype][key]
        if default is None:
            raise ProblemError("is missing", path=f"{self.path}.{key}" if self.path else key, source=self.source)
        return default

    def where(self, key: str) -> str:
        """The path of field ``key`` in the document."""
        return ".".join(filter(None, (self.path, key)))

    def int(self, key: str, default: Any = None, minimum: int = 0) -> int:
        """Field ``key``, an integer; at least ``minimum`` when the document gives it."""
        value = self.get(key, default)
        if self.data.get(key) is None:
            minimum = 0
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            what = "non-negative" if minimum == 0 else f">= {minimum}"
            raise ProblemError(f"must be a {what} integer, got {value!r}", path=self.where(key), source=self.source)
        return value

    def number(self, key: str, default: Any = None) -> float:
        """Field ``key``, a positive finite number."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ProblemError(f"must be a positive number, got {value!r}", path=self.where(key), source=self.source)
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise ProblemError(f"must be true or false, got {value!r}", path=self.where(key), source=self.source)
        return value

    def text(self, key: str, default: Any = None) -> str:
        value = self.get(key, default)
        if not isinstance(value, str):
            raise ProblemError(f"must be a string, got {value!r}", path=self.where(key), source=self.source)
        return value

    def checked(self, spec: ModuleSpec, keys: Mapping[str, str], arguments: tuple[str, ...] = _ARGUMENTS) -> ModuleSpec:
        """``spec`` if :func:`.checks.module_problem` finds nothing wrong; else the error at this document's key."""
        found = None
        if self.mtype in _HEADS_DIVIDE_HIDDEN and spec.heads >= 1 and spec.hidden % spec.heads:
            found = "heads", f"hidden_size {spec.hidden} is not a multiple of num_attention_heads {spec.heads}"
        found = found or module_problem(spec)
        if found is None:
            return spec
        field, reason = found
        path = field if field in arguments else self.where(keys.get(field, field))
        raise ProblemError(reason, path=path, source=self.source)

    def sub(self, key: str, default_type: str) -> "_Config":
        """The sub-configuration ``key``; its ``model_type``, or ``default_type`` when it names none."""
        data = self.get(key)
        where = f"{self.path}.{key}" if self.path else key
        kind = data.get("model_type") if isinstance(data, Mapping) else None
        return _Config(data, kind or default_type, where, self.source)


def _llm(c: _Config, text_tokens: int, *, prefix: str = "", attention: str = "causal") -> ModuleSpec:
    mtype = c.mtype
    if mtype not in _LLM:
        raise ProblemError(f"unsupported text model_type {mtype!r} (supported: {', '.join(_LLM)})",
                           path=f"{c.path}.model_type" if c.path else "model_type", source=c.source)
    heads = c.int("num_attention_heads")
    spec = ModuleSpec(
        name="llm",
        kind="llm",
        layers=c.int("num_hidden_layers"),
        hidden=c.int("hidden_size"),
        heads=heads,
        kv_heads=c.int("num_key_value_heads", heads),
        head_dim=c.int("head_dim", 0, minimum=1),  # absent: hidden / heads
        ffn=c.int("intermediate_size"),
        gated=True,
        qkv_bias=mtype == "qwen2" or c.flag("attention_bias", False),
        norm="rmsnorm",
        activation=_ACTIVATION.get(c.text("hidden_activation", c.text("hidden_act", "silu")), "gelu"),
        vocab=c.int("vocab_size"),
        tie_embeddings=c.flag("tie_word_embeddings", mtype == "gemma"),
        text_tokens=text_tokens,
        attention=attention,
        source=f"Hugging Face config ({c.source or mtype})",
        fqn={"pre": [f"{prefix}model.embed_tokens"], "block": f"{prefix}model.layers.{{i}}",
             "post": [f"{prefix}model.norm", f"{prefix}lm_head"]},
    )
    return c.checked(spec, _LLM_KEYS)


def _vit(c: _Config, images: int, *, prefix: str = "", feature_layer: int = -1, drop_cls: bool = False,
         frozen: bool = False) -> ModuleSpec:
    mtype = c.mtype
    if mtype not in _VISION:
        raise ProblemError(f"unsupported vision model_type {mtype!r} (supported: {', '.join(_VISION)})",
                           path=f"{c.path}.model_type" if c.path else "model_type", source=c.source)
    clip = mtype == "clip_vision_model"
    spec = ModuleSpec(
        name="vision",
        kind="vit",
        layers=c.int("num_hidden_layers"),
        hidden=c.int("hidden_size"),
        heads=c.int("num_attention_heads"),
        ffn=c.int("intermediate_size"),
        bias=True,
        norm="layernorm",
        activation=_ACTIVATION.get(c.text("hidden_act"), "gelu"),
        patch=c.int("patch_size"),
        image_size=c.int("image_size"),
        images=images,
        channels=c.int("num_channels", 3),
        extra_tokens=1 if clip else 0,
        pre_norm=clip,
        patch_bias=not clip,
        pool_head=not clip and c.flag("vision_use_head", True),
        frozen=frozen,
        source=f"Hugging Face config ({c.source or mtype})",
        fqn={"pre": [f"{prefix}vision_model.embeddings"], "block": f"{prefix}vision_model.encoder.layers.{{i}}",
             "post": [f"{prefix}vision_model.post_layernorm"]},
    )
    spec = c.checked(spec, _VIT_KEYS)
    layers = spec.layers
    if feature_layer >= 0:  # an index into the hidden states (0: the embeddings)
        feature_layer = feature_layer - layers - 1
    if not -layers <= feature_layer <= -1:
        raise ProblemError(f"selects no block of {layers}", path="vision_feature_layer", source=c.source)
    return replace(spec, feature_layer=feature_layer, output_tokens=spec.patches_per_image if (clip and drop_cls) else 0)


def _qwen2_vl_vision(c: _Config, image_size: int, images: int, llm_hidden: int) -> tuple[ModuleSpec, ModuleSpec]:
    embed, merge = c.int("embed_dim"), c.int("spatial_merge_size", minimum=1)
    patch = c.int("patch_size")
    vit = ModuleSpec(
        name="vision", kind="vit", layers=c.int("depth"), hidden=embed, heads=c.int("num_heads"),
        ffn=embed * c.int("mlp_ratio"), bias=True, fused_qkv=True, norm="layernorm",
        activation=_ACTIVATION.get(c.text("hidden_act"), "gelu"), patch=patch, image_size=image_size,
        images=images, channels=c.int("in_channels", c.int("in_chans", 3)), temporal_patch=c.int("temporal_patch_size"),
        pos_embed="none", final_norm=False, patch_bias=False,
        source=f"Hugging Face config ({c.source or 'qwen2_vl'})",
        fqn={"pre": ["visual.patch_embed"], "block": "visual.blocks.{i}"},
    )
    vit = c.checked(vit, _QWEN2_VL_VIT_KEYS, (*_ARGUMENTS, "image_size"))
    if image_size % (patch * merge):
        raise ProblemError(f"image size {image_size} is not a multiple of patch x merge = {patch * merge}",
                           path="image_size", source=c.source)
    tokens = images * (image_size // patch // merge) ** 2
    merged = embed * merge * merge
    merger = ModuleSpec(name="projector", kind="projector", pre_norm_dim=embed, in_dim=merged,
                        dims=(merged, c.int("hidden_size", llm_hidden)), tokens=tokens,
                        source=f"Hugging Face config ({c.source or 'qwen2_vl'})", fqn={"pre": ["visual.merger"]})
    return vit, c.checked(merger, {"in_dim": "embed_dim", "pre_norm_dim": "embed_dim", "dims": "hidden_size"})


def model_from_hf_config(
    config: Mapping[str, Any], *, source: str | None = None, text_tokens: int = 2048, images: int = 1,
    image_size: int = 448,
) -> ModelSpec:
    """A model spec from a Hugging Face ``config.json`` (see the module docstring for the types).

    Parameters
    ----------
    config : mapping
        The document.
    text_tokens : int
        Text tokens per sample entering the decoder (on top of the image tokens).
    images : int
        Images per sample.
    image_size : int
        Image side in pixels for dynamic-resolution encoders (``qwen2_vl``).
    """
    if not isinstance(config, Mapping) or "model_type" not in config:
        raise ProblemError("is missing (not a Hugging Face config.json?)", path="model_type", source=source)
    mtype = checked_type(config["model_type"], "model_type", source)
    root = _Config(config, mtype, "", source)
    name = Path(source).parent.name if source else str(mtype)
    title = f"{mtype} from config.json"
    if mtype in ("clip", "siglip"):
        modules: tuple[ModuleSpec, ...] = (_vit(root.sub("vision_config", f"{mtype}_vision_model"), images),)
    elif mtype in _VISION:
        modules = (_vit(root, images),)
    elif mtype in _LLM:
        modules = (_llm(root, text_tokens),)
    elif mtype == "llava":
        vc, tc = root.sub("vision_config", "clip_vision_model"), root.sub("text_config", "llama")
        layer = config.get("vision_feature_layer", -2)
        if not isinstance(layer, int) or isinstance(layer, bool):
            raise ProblemError(f"only one feature layer is supported, got {layer!r}", path="vision_feature_layer", source=source)
        strategy = root.text("vision_feature_select_strategy", "default")
        if strategy not in ("default", "full"):
            raise ProblemError(f"must be default or full, got {strategy!r}", path="vision_feature_select_strategy",
                               source=source)
        drop_cls = strategy == "default"
        vit = _vit(vc, images, prefix="vision_tower.", feature_layer=layer, drop_cls=drop_cls, frozen=True)
        vit = replace(vit, pool_head=False)  # LLaVA takes hidden states: a SigLIP head would not run
        llm = _llm(tc, text_tokens, prefix="language_model.")
        per_image = vit.patches_per_image + (0 if drop_cls else vit.extra_tokens)
        proj = ModuleSpec(name="projector", kind="projector", in_dim=vit.hidden, dims=(llm.hidden, llm.hidden),
                          tokens=images * per_image, source=f"Hugging Face config ({source or mtype})",
                          fqn={"pre": ["multi_modal_projector"]})
        modules = (vit, proj, llm)
    elif mtype == "paligemma":
        vc, tc = root.sub("vision_config", "siglip_vision_model"), root.sub("text_config", "gemma")
        vit = _vit(vc, images, prefix="vision_tower.")
        llm = _llm(tc, text_tokens, prefix="language_model.", attention="prefix")
        proj = ModuleSpec(name="projector", kind="projector", in_dim=vit.hidden, dims=(root.int("projection_dim", llm.hidden),),
                          tokens=images * vit.patches_per_image, source=f"Hugging Face config ({source or mtype})",
                          fqn={"pre": ["multi_modal_projector"]})
        modules = (replace(vit, pool_head=False), root.checked(proj, {"dims": "projection_dim"}), llm)
    elif mtype == "qwen2_vl":
        # the text fields: under text_config (transformers 5), or at the top level (older versions)
        text = _Config(config["text_config"], "qwen2", "text_config", source) if "text_config" in config else _Config(config, "qwen2", "", source)
        llm = _llm(text, text_tokens)
        vit, merger = _qwen2_vl_vision(root.sub("vision_config", "qwen2_vl_vision"), image_size, images, llm.hidden)
        modules = (vit, merger, llm)
    else:
        raise ProblemError(f"unsupported model_type {mtype!r} (supported: {', '.join(sorted(HF_TYPES))})",
                           path="model_type", source=source)
    # every module passed its own checks: what is left is how they fit together
    return checked_model(ModelSpec(name=name, modules=modules, title=title, source=source), source)


def checked_model(model: ModelSpec, source: str | None) -> ModelSpec:
    """``model`` if :func:`.checks.model_problem` finds nothing wrong, else the error at ``MODULE.FIELD``.

    The importers of this module name the document's keys module by module
    (:meth:`_Config.checked`); this is the net under every family's import.
    """
    found = model_problem(model)
    if found is not None:
        index, field, reason = found
        path = field if field in _ARGUMENTS or index is None else ".".join(filter(None, (model.modules[index].name, field)))
        raise ProblemError(reason, path=path, source=source)
    return model

