"""Tiling VLMs: InternVL (``internvl``), Idefics3 and SmolVLM (``idefics3``, ``smolvlm``), LLaVA-OneVision.

Contract: :func:`tiling_vlm` returns the (vision, projector, llm) modules
of one of :data:`TILING_TYPES` for a :class:`~partitioner.presets.workload.Workload`.
Each image is cut into tiles of the encoder's own size; every tile runs
through the encoder on its own (an image of the batch); the projector's
tokens follow each family's tokenisation:

* InternVL [1] -- ``dynamic_preprocess``: a square image of side ``S``
becomes the largest ``n x n`` grid of 448 px tiles with ``n^2 <= 12``
(``max_patches``) and ``n^2 * 448^2 < 2 S^2``, plus a thumbnail when ``n >
1``; pixel shuffle by ``downsample_ratio`` (0.5: 1024 patches -> 256
tokens per tile); the class token is dropped.

The detail, and the references cited above: ``docs/internals/presets.md``, section ``partitioner.presets.hf.tiling``.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ...problem import ProblemError
from ..spec import ModuleSpec
from ..workload import Workload
from .base import _Config
from .common import image_side, refuse, sample, siglip_tower
from .text import decoder

__all__ = ["TILING_TYPES", "tiling_vlm", "internvl_tiles", "idefics3_tiles", "llava_onevision_grid"]

TILING_TYPES = ("internvl", "idefics3", "smolvlm", "llava_onevision")
INTERNVL_MAX_TILES = 12  # InternVLProcessor / GotOcr2ImageProcessor ``max_patches``
IDEFICS3_MAX_TILES_PER_SIDE = 4  # Idefics3ImageProcessor: longest_edge = 4 x the tile size
LLAVA_OV_MAX_GRID = 6  # image_grid_pinpoints go up to 2304 = 6 x 384 px
LLAVA_OV_MAX_TILES = 9  # anyres_max_9


def internvl_tiles(side: int | None, tile: int) -> int:
    """Tiles of a square image of ``side`` px (thumbnail included) under InternVL's dynamic preprocessing."""
    if side is None:
        return 1
    n = 1
    while (n + 1) ** 2 <= INTERNVL_MAX_TILES and (n + 1) ** 2 * tile * tile < 2 * side * side:
        n += 1
    return n * n + (1 if n > 1 else 0)


def idefics3_tiles(side: int | None, tile: int) -> int:
    """Tiles of a square image of ``side`` px (the downscaled whole image included) for Idefics3 / SmolVLM."""
    if side is None:
        return 1
    n = min(math.ceil(side / tile), IDEFICS3_MAX_TILES_PER_SIDE)
    return n * n + (1 if n > 1 else 0)


def llava_onevision_grid(side: int | None, tile: int) -> int:
    """The side ``n`` of LLaVA-OneVision's anyres grid for a square image of ``side`` px."""
    return 1 if side is None else max(1, min(math.ceil(side / tile), LLAVA_OV_MAX_GRID))


def _llava_onevision_tokens(n: int, per_side: int) -> int:
    """Decoder tokens of one image: base features, the grid's (interpolated) features and a newline per row."""
    rows = per_side * n
    ratio = math.sqrt(rows * rows / (LLAVA_OV_MAX_TILES * per_side * per_side))
    if ratio > 1.1:
        rows = int(rows // ratio)
    return per_side * per_side + rows * rows + rows


def _feature_layer(root: _Config, layers: int) -> int:
    """``vision_feature_layer`` as a negative block index (one layer only)."""
    layer = root.get("vision_feature_layer", -1)
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise ProblemError(f"only one feature layer is supported, got {layer!r}", path="vision_feature_layer",
                           source=root.source)
    if layer >= 0:
        layer -= layers + 1
    if not -layers <= layer <= -1:
        raise ProblemError(f"selects no block of {layers}", path="vision_feature_layer", source=root.source)
    return layer


def _pixel_shuffle(root: _Config) -> int:
    """InternVL's pixel-shuffle factor, ``1 / downsample_ratio``: the ratio must be 1 / n for a whole n >= 1
    (0.5 in every released InternVL: 2 x 2 patches per token)."""
    ratio = root.get("downsample_ratio", 0.5)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ProblemError(f"must be a number in (0, 1], got {ratio!r}", path="downsample_ratio", source=root.source)
    shuffle = round(1 / ratio)
    if abs(shuffle * ratio - 1) > 1e-9:
        raise ProblemError(f"must be 1 / n for a whole n (0.5: 2 x 2 patches per token), got {ratio!r}",
                           path="downsample_ratio", source=root.source)
    return shuffle


def tiling_vlm(root: _Config, w: Workload) -> tuple[ModuleSpec, ...]:
    """The modules of a tiling VLM (see the module docstring)."""
    mtype, source = root.mtype, root.source
    images, frames, text_tokens = sample(w)
    src = f"Hugging Face config ({source or mtype})"
    if mtype == "internvl":
        refuse(w, ("frames",), "InternVL samples video frames as separate images (give --images)", source)
        vc = root.sub("vision_config", "internvl_vision")
        tile, patch = image_side(vc, "image_size"), image_side(vc, "patch_size")
        tiles = w.tiles or internvl_tiles(w.image_size, tile)
        h = vc.int("hidden_size")
        vit = ModuleSpec(
            name="vision", kind="vit", layers=vc.int("num_hidden_layers"), hidden=h, heads=vc.int("num_attention_heads"),
            ffn=vc.int("intermediate_size"), bias=True, qkv_bias=bool(vc.get("attention_bias", False)),
            norm="layernorm" if vc.get("norm_type", "layer_norm") == "layer_norm" else "rmsnorm",
            layerscale=True, qk_norm=bool(vc.get("use_qk_norm", False)), activation="gelu", patch=patch, image_size=tile,
            images=images * tiles, channels=vc.int("num_channels", 3), extra_tokens=1, patch_bias=True,
            output_tokens=(tile // patch) ** 2, final_norm=not bool(vc.get("use_mean_pooling", True)),
            feature_layer=_feature_layer(root, vc.int("num_hidden_layers")),
            source=src, fqn={"pre": ["model.vision_tower.embeddings"], "block": "model.vision_tower.encoder.layer.{i}"})
        llm = decoder(root.sub("text_config", "qwen2"), text_tokens, prefix="model.language_model.")
        shuffle = _pixel_shuffle(root)
        per_tile = (tile // patch) ** 2 // (shuffle * shuffle)
        proj = ModuleSpec(name="projector", kind="projector", pre_norm_dim=h * shuffle * shuffle, in_dim=h * shuffle * shuffle,
                          dims=(llm.hidden, llm.hidden), tokens=images * tiles * per_tile, source=src,
                          fqn={"pre": ["model.multi_modal_projector"]})
        return vit, proj, llm
    if mtype in ("idefics3", "smolvlm"):
        refuse(w, ("frames",), f"{mtype} samples video frames as separate images (give --images)", source)
        vc = root.sub("vision_config", f"{mtype}_vision")
        tile, patch = vc.int("image_size", minimum=1), vc.int("patch_size", minimum=1)
        tiles = w.tiles or idefics3_tiles(w.image_size, tile)
        vit = siglip_tower(vc, images, prefix="model.vision_model.", tiles=tiles)
        llm = decoder(root.sub("text_config", "llama"), text_tokens, prefix="model.text_model.")
        s = root.int("scale_factor", 2, minimum=1)
        per_tile = (tile // patch) ** 2 // (s * s)
        proj = ModuleSpec(name="projector", kind="projector", in_dim=vit.hidden * s * s, dims=(llm.hidden,), proj_bias=False,
                          tokens=images * tiles * per_tile, source=src, fqn={"pre": ["model.connector"]})
        return vit, proj, llm
    # llava_onevision
    vc = root.sub("vision_config", "siglip_vision_model")
    tile, patch = vc.int("image_size", minimum=1), vc.int("patch_size", minimum=1)
    per_side = tile // patch
    layer = _feature_layer(root, vc.int("num_hidden_layers"))
    llm = decoder(root.sub("text_config", "qwen2"), text_tokens, prefix="model.language_model.")
    if w.frames is not None:
        refuse(w, ("tiles", "image_size"), "LLaVA-OneVision video frames are single 384 px crops", source)
        vit = siglip_tower(vc, images * frames, prefix="model.vision_tower.", feature_layer=layer)
        pooled = math.ceil(per_side / 2)
        tokens = images * (frames * pooled * pooled + 1)
    else:
        n = math.isqrt(w.tiles) if w.tiles else llava_onevision_grid(w.image_size, tile)
        if w.tiles is not None and n * n != w.tiles:
            raise ProblemError(f"LLaVA-OneVision tiles form a square grid, got {w.tiles}", path="workload.tiles", source=source)
        vit = siglip_tower(vc, images, prefix="model.vision_tower.", feature_layer=layer,
                           tiles=n * n + 1)
        tokens = images * _llava_onevision_tokens(n, per_side)
    proj = ModuleSpec(name="projector", kind="projector", in_dim=vit.hidden, dims=(llm.hidden, llm.hidden), tokens=tokens,
                      extra_params=llm.hidden, source=src,  # image_newline
                      fqn={"pre": ["model.multi_modal_projector", "model.image_newline"]})
    return replace(vit, frozen=False), proj, llm
