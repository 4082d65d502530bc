"""Gemma 3 (``gemma3``) and PaliGemma 2 (``paligemma`` with a ``gemma2`` text model).

Contract: :func:`gemma3_vlm` and :func:`paligemma2_vlm` return the
(vision, projector, llm) modules for a
:class:`~partitioner.presets.workload.Workload`.

Both use a SigLIP tower at a fixed resolution (its learned position table
fixes the side: the image size and tiles are not workload options). Gemma 3
[1]: 896 px images, 4096 patches average-pooled to ``mm_tokens_per_image``
(256) tokens, a projector of one RMS norm over the tower width and one
matrix to the text width without bias; the decoder has four norms per
block, per-head QK-norms and five sliding-window layers for each global
one.

The detail, and the references cited above: ``docs/internals/presets.md``, section ``partitioner.presets.hf.gemma``.
"""
from __future__ import annotations

from ..spec import ModuleSpec
from ..workload import Workload
from .base import _Config
from .common import refuse, sample, siglip_tower
from .text import decoder

__all__ = ["gemma3_vlm", "paligemma2_vlm"]

_FIXED = ("image_size", "tiles", "frames")


def gemma3_vlm(root: _Config, w: Workload) -> tuple[ModuleSpec, ...]:
    """The modules of a ``gemma3`` configuration."""
    refuse(w, _FIXED, "Gemma 3's SigLIP tower takes 896 px images (give --images)", root.source)
    images, _, text_tokens = sample(w)
    vit = siglip_tower(root.sub("vision_config", "siglip_vision_model"), images, prefix="model.vision_tower.")
    llm = decoder(root.sub("text_config", "gemma3_text"), text_tokens, prefix="model.language_model.")
    proj = ModuleSpec(name="projector", kind="projector", norm="rmsnorm", pre_norm_dim=vit.hidden, in_dim=vit.hidden,
                      dims=(llm.hidden,), proj_bias=False, tokens=images * root.int("mm_tokens_per_image", 256),
                      source=f"Hugging Face config ({root.source or 'gemma3'})", fqn={"pre": ["model.multi_modal_projector"]})
    return vit, proj, llm


def paligemma2_vlm(root: _Config, w: Workload) -> tuple[ModuleSpec, ...]:
    """The modules of a ``paligemma`` configuration whose text model is ``gemma2`` (PaliGemma 2)."""
    refuse(w, _FIXED, "PaliGemma's SigLIP tower has a fixed image size (give --images)", root.source)
    images, _, text_tokens = sample(w)
    vit = siglip_tower(root.sub("vision_config", "siglip_vision_model"), images, prefix="model.vision_tower.")
    llm = decoder(root.sub("text_config", "gemma2"), text_tokens, prefix="model.language_model.", attention="prefix")
    proj = ModuleSpec(name="projector", kind="projector", in_dim=vit.hidden, dims=(root.int("projection_dim", llm.hidden),),
                      tokens=images * vit.patches_per_image, source=f"Hugging Face config ({root.source or 'paligemma'})",
                      fqn={"pre": ["model.multi_modal_projector"]})
    return vit, proj, llm
