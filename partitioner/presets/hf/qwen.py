"""Dynamic-resolution VLMs: Qwen2.5-VL, Qwen3-VL (dense and MoE), GLM-4.1V and GLM-4.5V.

Contract: :func:`qwen_vlm` returns the (vision, projector, llm) modules of
a ``qwen2_5_vl``, ``qwen3_vl``, ``qwen3_vl_moe``, ``glm4v`` or
``glm4v_moe`` configuration for a :class:`~partitioner.presets.workload.Workload`.

Tokenisation (the processors' ``smart_resize``): an image of side ``S``
(a multiple of ``patch x merge``) is ``(S / patch)^2`` patches; a video
clip of ``F`` frames is ``F / temporal_patch`` groups of them (one group
for an image), and its patches attend jointly in the encoder. The merger
joins ``merge x merge`` neighbours: ``(S / patch / merge)^2`` tokens per
image or frame group enter the decoder. ``fps`` does not change the count
(it spaces Qwen2.5-VL's temporal positions).

More (the detail of this module): ``docs/internals/presets.md``, section ``partitioner.presets.hf.qwen``.
"""
from __future__ import annotations

from typing import Any

from ...problem import ProblemError
from ..spec import ModuleSpec
from ..workload import Workload
from .base import _ACTIVATION, _Config
from .common import DEFAULT_IMAGE_SIZE, refuse, sample
from .text import decoder

__all__ = ["QWEN_TYPES", "qwen_vlm"]

QWEN_TYPES = ("qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe")
_TEXT = {"qwen2_5_vl": "qwen2_5_vl_text", "qwen3_vl": "qwen3_vl_text", "qwen3_vl_moe": "qwen3_vl_moe_text",
         "glm4v": "glm4v_text", "glm4v_moe": "glm4v_moe_text"}


# ModuleSpec field -> vision_config key (the projector's widths come from the encoder's)
_VIT_KEYS = {"layers": "depth", "hidden": "hidden_size", "heads": "num_heads", "ffn": "intermediate_size",
             "patch": "patch_size", "channels": "in_channels", "temporal_patch": "temporal_patch_size",
             "pos_tokens": "num_position_embeddings", "window": "window_size", "full_layers": "fullatt_block_indexes"}
_MERGER_KEYS = {"in_dim": "hidden_size", "pre_norm_dim": "hidden_size", "dims": "out_hidden_size",
                "deepstack": "deepstack_visual_indexes"}
_ARGUMENTS = ("images", "image_size", "frames")  # the workload's, not the document's


def _vision(mtype: str, c: _Config, side: int, images: int, frames: int) -> tuple[ModuleSpec, ModuleSpec]:
    # the divisors first, each at least 1 (the module checks name the rest by their keys)
    patch, merge = c.int("patch_size", minimum=1), c.int("spatial_merge_size", minimum=1)
    tp = c.int("temporal_patch_size", minimum=1)
    if side % (patch * merge):
        raise ProblemError(f"image size {side} is not a multiple of patch x merge = {patch * merge}",
                           path="workload.image_size", source=c.source)
    if frames > 1 and frames % tp:
        raise ProblemError(f"{frames} frames are not a multiple of the temporal patch {tp}", path="workload.frames",
                           source=c.source)
    h, heads, out = c.int("hidden_size"), c.int("num_heads"), c.int("out_hidden_size")
    act = _ACTIVATION.get(str(c.get("hidden_act")), "gelu")
    src = f"Hugging Face config ({c.source or mtype})"
    common: dict[str, Any] = dict(name="vision", kind="vit", layers=c.int("depth"), hidden=h, heads=heads, fused_qkv=True,
                                  activation=act, patch=patch, image_size=side, images=images, frames=frames,
                                  channels=c.int("in_channels", 3), temporal_patch=tp, final_norm=False, source=src,
                                  fqn={"pre": ["model.visual.patch_embed"], "block": "model.visual.blocks.{i}"})
    merged = h * merge * merge
    tokens = images * (side // patch // merge) ** 2 * max(1, frames // tp)
    proj: dict[str, Any] = dict(name="projector", kind="projector", in_dim=merged, tokens=tokens, source=src,
                                fqn={"pre": ["model.visual.merger"]})
    if mtype == "qwen2_5_vl":
        window = (c.int("window_size") // patch) ** 2
        vit = ModuleSpec(**common, ffn=c.int("intermediate_size"), gated=True, bias=True, norm="rmsnorm", pos_embed="none",
                         patch_bias=False, window=window, full_layers=_indices(c, "fullatt_block_indexes"))
        merger = ModuleSpec(**proj, norm="rmsnorm", pre_norm_dim=h, dims=(merged, out))
    elif mtype in ("qwen3_vl", "qwen3_vl_moe"):
        vit = ModuleSpec(**common, ffn=c.int("intermediate_size"), bias=True, norm="layernorm", pos_embed="learned",
                         pos_tokens=c.int("num_position_embeddings"), patch_bias=True)
        merger = ModuleSpec(**proj, norm="layernorm", pre_norm_dim=h, dims=(merged, out),
                            deepstack=len(_indices(c, "deepstack_visual_indexes")))
    else:  # glm4v, glm4v_moe
        pos = (c.int("image_size", minimum=1) // patch) ** 2
        vit = ModuleSpec(**{**common, "final_norm": True}, ffn=out, gated=True, bias=False,
                         qkv_bias=bool(c.get("attention_bias", False)), norm="rmsnorm", pos_embed="learned",
                         pos_tokens=pos, patch_bias=True, extra_params=h)  # the RMSNorm after the patch embedding
        merger = ModuleSpec(**proj, dims=(out, out, c.int("intermediate_size"), out), gated=True, proj_bias=False,
                            extra_params=out + 2 * out)  # the downsampling convolution's bias, the LayerNorm
    return c.checked(vit, _VIT_KEYS, _ARGUMENTS), c.checked(merger, _MERGER_KEYS, _ARGUMENTS)


def _indices(c: _Config, key: str) -> tuple[int, ...]:
    """Field ``key``: a list of block indices (absent: none); the module check bounds them by the blocks."""
    value = c.data.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise ProblemError(f"must be a list of block indices, got {value!r}", path=c.where(key), source=c.source)
    return tuple(value)


def qwen_vlm(root: _Config, w: Workload) -> tuple[ModuleSpec, ...]:
    """The modules of a dynamic-resolution VLM (see the module docstring)."""
    refuse(w, ("tiles",), "a dynamic-resolution encoder takes the image size, not tiles", root.source)
    images, frames, text_tokens = sample(w)
    text = root.sub("text_config", _TEXT[root.mtype])
    text = _Config(text.data, _TEXT[root.mtype], text.path, text.source)
    llm = decoder(text, text_tokens, prefix="model.language_model.")
    vit, merger = _vision(root.mtype, root.sub("vision_config", root.mtype + "_vision"), w.image_size or DEFAULT_IMAGE_SIZE,
                          images, frames)
    return vit, merger, llm
