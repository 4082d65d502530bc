"""Llama 3.2 Vision (``mllama``): a tiled ViT whose states the decoder reads through cross-attention.

Contract: :func:`mllama_vlm` returns the (vision, projector, llm) modules
for a :class:`~partitioner.presets.workload.Workload`.

The vision model [1] (transformers ``MllamaVisionModel``): each image is
up to ``max_num_tiles`` tiles of ``image_size`` px (1 tile up to that size,
else the 2 x 2 grid of a square image); all tiles of an image attend
jointly through ``num_hidden_layers`` local and ``num_global_layers`` gated
global layers (one class token per tile; the 7 padding tokens per tile are
not counted). Attention projections carry no bias, the MLPs do.

The detail, and the references cited above: ``docs/internals/presets.md``, section ``partitioner.presets.hf.mllama``.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ...problem import ProblemError
from ..spec import ModuleSpec
from ..workload import Workload
from .base import _Config
from .common import refuse, sample
from .text import decoder

__all__ = ["mllama_vlm"]


def mllama_vlm(root: _Config, w: Workload) -> tuple[ModuleSpec, ...]:
    """The modules of an ``mllama`` configuration (see the module docstring)."""
    refuse(w, ("frames",), "Llama 3.2 Vision takes images, not video", root.source)
    images, _, text_tokens = sample(w)
    vc = root.sub("vision_config", "mllama_vision_model")
    tile, patch = vc.int("image_size", minimum=1), vc.int("patch_size", minimum=1)
    max_tiles = vc.int("max_num_tiles", minimum=1)
    if w.tiles is not None:
        if w.tiles > max_tiles:
            raise ProblemError(f"at most max_num_tiles = {max_tiles}, got {w.tiles}", path="workload.tiles", source=root.source)
        tiles = w.tiles
    else:
        tiles = 1 if w.image_size is None or w.image_size <= tile else min(math.ceil(w.image_size / tile) ** 2, max_tiles)
    h, ffn = vc.int("hidden_size"), vc.int("intermediate_size")
    local, glob = vc.int("num_hidden_layers"), vc.int("num_global_layers")
    positions = (tile // patch) ** 2 + 1
    aspects = vc.get("supported_aspect_ratios", [])
    if not isinstance(aspects, list):
        raise ProblemError(f"must be a list of [width, height] tile grids, got {aspects!r}",
                           path=vc.where("supported_aspect_ratios"), source=vc.source)
    ratios = len(aspects) + 1  # aspect-ratio ids, 0 for padding
    extra = (1 + ratios * max_tiles * positions * h  # gate, tile position table
             + 2 * (ratios * max_tiles * h + 1)  # pre- and post-tile embeddings with their gates
             + 2 * glob  # attention and MLP gates of the global layers
             + (local + glob) * (ffn + h))  # MLP biases (the block formula has none: attention carries no bias)
    vit = ModuleSpec(
        name="vision", kind="vit", layers=local + glob, hidden=h, heads=vc.int("attention_heads"), ffn=ffn, bias=False,
        norm="layernorm", activation="gelu", patch=patch, image_size=tile, images=images, tiles=tiles,
        channels=vc.int("num_channels", 3), extra_tokens=1, pos_tokens=positions, patch_bias=False, pre_norm=True,
        extra_params=extra, source=f"Hugging Face config ({root.source or 'mllama'})",
        fqn={"pre": ["model.vision_model"], "block": "model.vision_model.transformer.layers.{i}"})
    cross_tokens = images * tiles * positions
    llm = decoder(root.sub("text_config", "mllama_text_model"), text_tokens, prefix="model.language_model.")
    llm = replace(llm, cross_tokens=cross_tokens)
    proj = ModuleSpec(name="projector", kind="projector", in_dim=vc.int("vision_output_dim"), dims=(llm.hidden,),
                      tokens=cross_tokens, source=vit.source, fqn={"pre": ["model.multi_modal_projector"]})
    return vit, proj, llm
