"""What the family importers share: the workload's defaults and refusals, SigLIP-shaped towers.

Contract: :func:`sample` fills a :class:`~partitioner.presets.workload.Workload`
with the importers' defaults; :func:`refuse` raises a
:class:`~partitioner.problem.ProblemError` for workload fields a family
cannot take; :func:`siglip_tower` builds the SigLIP-shaped encoders
(``siglip_vision_model``, ``idefics3_vision``, ``smolvlm_vision``) without
the attention-pooling head none of these VLMs runs.
"""
from __future__ import annotations

from dataclasses import replace

from ...problem import ProblemError
from ..spec import ModuleSpec
from ..workload import Workload
from .base import _Config, _vit

__all__ = ["DEFAULT_TEXT_TOKENS", "DEFAULT_IMAGE_SIZE", "sample", "refuse", "siglip_tower", "image_side"]

DEFAULT_TEXT_TOKENS = 2048
DEFAULT_IMAGE_SIZE = 448  # dynamic-resolution encoders, when no image size is given


def sample(w: Workload, *, images: int = 1, text_tokens: int = DEFAULT_TEXT_TOKENS) -> tuple[int, int, int]:
    """(images, frames, text tokens) of ``w``, with the given defaults."""
    return (w.images or images, w.frames or 1, w.text_tokens if w.text_tokens is not None else text_tokens)


def refuse(w: Workload, fields: tuple[str, ...], why: str, source: str | None) -> None:
    """Raise for the first of ``fields`` that ``w`` sets."""
    for key in fields:
        if getattr(w, key) is not None:
            raise ProblemError(f"not applicable: {why}", path=f"workload.{key}", source=source)


def image_side(c: _Config, key: str) -> int:
    """A side from a field that transformers writes as an integer or as a [height, width] pair (square only)."""
    value = c.get(key)
    if isinstance(value, list) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ProblemError(f"must be a positive integer (or a square [h, w] pair), got {value!r}",
                           path=f"{c.path}.{key}" if c.path else key, source=c.source)
    return value


def siglip_tower(c: _Config, images: int, *, prefix: str, feature_layer: int = -1, tiles: int = 1) -> ModuleSpec:
    """A SigLIP-shaped tower (patch embedding with bias, learned positions, LayerNorm blocks with biases, post-norm),
    ``images`` images each cut in ``tiles`` independent crops, no pooling head."""
    as_siglip = _Config(c.data, "siglip_vision_model", c.path, c.source)
    vit = _vit(as_siglip, images * tiles, prefix=prefix, feature_layer=feature_layer)
    return replace(vit, pool_head=False, fqn={"pre": [f"{prefix}embeddings"], "block": f"{prefix}encoder.layers.{{i}}",
                                               "post": [f"{prefix}post_layernorm"]})
