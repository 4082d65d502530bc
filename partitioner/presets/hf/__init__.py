"""Hugging Face ``config.json`` import: one module per model family.

Contract: :func:`model_from_hf_config` turns a configuration document as
transformers writes it into a :class:`~partitioner.presets.ModelSpec` for
a :class:`~partitioner.presets.workload.Workload` (images, image size or
tiles, video frames, text tokens: each family tokenises them its own way);
an unsupported ``model_type`` or a missing field raises
:class:`~partitioner.problem.ProblemError` naming the field path. No
transformers installation is needed: the shapes are read from the document.

More (the detail of this module): ``docs/internals/presets.md``, section ``partitioner.presets.hf``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from ...problem import ProblemError
from ..spec import ModelSpec, ModuleSpec
from ..workload import Workload, apply_workload, check_workload, with_mtp
from . import base
from .base import _Config
from .common import DEFAULT_TEXT_TOKENS, refuse
from .deepseek import DEEPSEEK_TYPES, deepseek_lm
from .gemma import gemma3_vlm, paligemma2_vlm
from .mllama import mllama_vlm
from .pi0 import pi0_vla
from .qwen import QWEN_TYPES, qwen_vlm
from .text import decoder
from .tiling import TILING_TYPES, tiling_vlm

__all__ = ["model_from_hf_config", "HF_TYPES", "NOT_SUPPORTED"]

_TEXT_ONLY = ("qwen3", "qwen3_moe", "gemma2", "gemma3_text")
_FAMILIES: dict[str, Callable[[_Config, Workload], tuple[ModuleSpec, ...]]] = {
    **{t: qwen_vlm for t in QWEN_TYPES},
    **{t: tiling_vlm for t in TILING_TYPES},
    **{t: deepseek_lm for t in DEEPSEEK_TYPES},
    "gemma3": gemma3_vlm,
    "mllama": mllama_vlm,
    "pi0": pi0_vla,
}
HF_TYPES = tuple(sorted({*base.HF_TYPES, *_TEXT_ONLY, *_FAMILIES}))
# model types people ask for that cannot be read from config.json alone, with the reason
NOT_SUPPORTED = {
    "deepseek_vl_v2": ("DeepSeek-VL2 is remote code (not in transformers): its tiled SigLIP tower and projector have "
                       "no transformers model to check them against; its language_config alone is a deepseek_v2 "
                       "config, which imports (as a language model)"),
    "kimi_vl": ("Kimi-VL is remote code (not in transformers): its MoonViT tower has no transformers model to check "
                "it against; its text_config alone is a deepseek_v3 config, which imports (as a language model)"),
}


def _workload(workload: Workload | None, text_tokens: int | None, images: int | None, image_size: int | None) -> Workload:
    w = workload or Workload()
    changes = {k: v for k, v in (("text_tokens", text_tokens), ("images", images), ("image_size", image_size))
               if v is not None and getattr(w, k) is None}
    return check_workload(Workload(**{**w.to_dict(), **changes}))


def model_from_hf_config(
    config: Mapping[str, Any], *, source: str | None = None, workload: Workload | None = None,
    text_tokens: int | None = None, images: int | None = None, image_size: int | None = None,
) -> ModelSpec:
    """A model spec from a Hugging Face ``config.json`` (see the module docstring for the types).

    Parameters
    ----------
    config : mapping
        The document.
    source : str, optional
        Its path (for errors; the folder names the model).
    workload : Workload, optional
        What one sample holds; ``text_tokens``, ``images`` and
        ``image_size`` are shorthands for its fields.
    """
    if not isinstance(config, Mapping) or "model_type" not in config:
        raise ProblemError("is missing (not a Hugging Face config.json?)", path="model_type", source=source)
    w = _workload(workload, text_tokens, images, image_size)
    mtype = base.checked_type(config["model_type"], "model_type", source)
    if mtype in NOT_SUPPORTED:
        raise ProblemError(f"unsupported model_type {mtype!r}: {NOT_SUPPORTED[mtype]}", path="model_type", source=source)
    root = _Config(config, str(mtype), "", source)
    name = Path(source).parent.name if source else str(mtype)
    title = f"{mtype} from config.json"
    text_model = config.get("text_config", {}).get("model_type") if isinstance(config.get("text_config"), Mapping) else None
    if mtype in _TEXT_ONLY:
        refuse(w, ("images", "image_size", "tiles", "frames"), f"{mtype} is a language model", source)
        modules: tuple[ModuleSpec, ...] = (decoder(root, w.text_tokens if w.text_tokens is not None else DEFAULT_TEXT_TOKENS,
                                                   prefix="model."),)
    elif mtype in _FAMILIES:
        modules = _FAMILIES[mtype](root, w)
    elif mtype == "paligemma" and text_model == "gemma2":
        modules = paligemma2_vlm(root, w)
    elif mtype in base.HF_TYPES:
        refuse(w, ("tiles",), f"{mtype} does not tile images", source)
        if mtype != "qwen2_vl":
            refuse(w, ("frames",), f"{mtype} takes no video", source)
        if mtype not in ("qwen2_vl",):
            refuse(w, ("image_size",), f"{mtype}'s encoder has a fixed image size (learned positions)", source)
        kwargs = {k: v for k, v in (("text_tokens", w.text_tokens), ("images", w.images), ("image_size", w.image_size))
                  if v is not None}
        spec = base.model_from_hf_config(config, source=source, **kwargs)
        if w.frames:
            spec = apply_workload(spec, Workload(frames=w.frames))
        return base.checked_model(with_mtp(spec, w.mtp_layers), source) if (w.frames or w.mtp_layers is not None) else spec
    else:
        raise ProblemError(f"unsupported model_type {mtype!r} (supported: {', '.join(HF_TYPES)})", path="model_type",
                           source=source)
    spec = ModelSpec(name=name, modules=modules, title=title, source=source)
    return base.checked_model(with_mtp(spec, w.mtp_layers), source)
