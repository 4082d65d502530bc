"""What one training sample holds: images, their size or tiles, video frames, text tokens.

Contract: :class:`Workload` is the user's description of a sample (every
field optional: ``None`` keeps the model's own default);
:func:`check_workload` validates it (a
:class:`~partitioner.problem.ProblemError` naming the option);
:func:`apply_workload` changes a preset's modules to it (images, frames,
text tokens; the image side of dynamic-resolution encoders);
:func:`sequence_summary` states the sequence lengths a model's modules
imply, for the ``plan`` output. The per-family tokenisation of imported
models (dynamic resolution, tiling, pixel shuffle, anyres) is in
:mod:`.hf`; it fills the same fields.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..core.limits import MAX_FPS, MAX_MODULE_LAYERS, MIN_FPS
from ..problem import ProblemError
from .spec import ModelSpec, ModuleSpec

__all__ = ["Workload", "check_workload", "apply_workload", "with_mtp", "sequence_summary"]


@dataclass(frozen=True)
class Workload:
    """One training sample, as the user states it (``None``: the model's default).

    Parameters
    ----------
    images : int
        Images per sample (with ``frames``: video clips per sample).
    image_size : int
        Side of the (square) source image in pixels. Dynamic-resolution
        encoders (Qwen-VL, GLM-4V) see it as it is; tiling encoders
        (InternVL, Idefics3/SmolVLM, LLaVA-OneVision, mllama) cut it into
        tiles of their own size.
    tiles : int
        Tiles (crops) per image for tiling encoders, instead of deriving
        them from ``image_size``.
    frames : int
        Frames per video clip.
    fps : float
        Frame rate the frames were sampled at: shown with the clip length
        it implies (``frames / fps`` seconds); the token counts depend on
        ``frames`` only.
    text_tokens : int
        Text tokens per sample entering the language model.
    mtp_layers : int
        Multi-token prediction modules trained after the language model's
        last block (DeepSeek-V3's ``num_nextn_predict_layers``, Megatron's
        ``--mtp-num-layers``; 0: none). Training only: they are not run at
        inference. ``None`` keeps the model's own count.
    """

    images: int | None = None
    image_size: int | None = None
    tiles: int | None = None
    frames: int | None = None
    fps: float | None = None
    text_tokens: int | None = None
    mtp_layers: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def check_workload(w: Workload | None) -> Workload:
    """``w`` (or an empty workload) after checking each given field: a positive integer, ``mtp_layers`` in
    0..MAX_MODULE_LAYERS, ``fps`` a number in MIN_FPS..MAX_FPS (so the clip length is a finite number)."""
    if w is None:
        return Workload()
    for key, value in w.to_dict().items():
        if key == "mtp_layers":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_MODULE_LAYERS:
                raise ProblemError(f"must be an integer in 0..{MAX_MODULE_LAYERS}, got {value!r}", path=f"workload.{key}")
            continue
        if key == "fps":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_FPS <= value <= MAX_FPS:
                raise ProblemError(f"must be a number of frames per second in {MIN_FPS:g}..{MAX_FPS:g}, got {value!r}",
                                   path=f"workload.{key}")
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(f"must be a positive integer, got {value!r}", path=f"workload.{key}")
    return w


def with_mtp(model: ModelSpec, mtp_layers: int | None) -> ModelSpec:
    """``model`` with ``mtp_layers`` multi-token prediction modules on its language model (None: unchanged).

    A model without a language model that has an output head cannot take
    them (:class:`~partitioner.problem.ProblemError` at ``workload.mtp_layers``).
    """
    if mtp_layers is None:
        return model
    llm = model.llm
    if llm is None or not llm.lm_head:
        if mtp_layers == 0:
            return model
        raise ProblemError("multi-token prediction needs a language model with its output head", path="workload.mtp_layers",
                           source=model.source)
    return replace(model, modules=tuple(replace(m, mtp_layers=mtp_layers) if m is llm else m for m in model.modules))


def _scaled(m: ModuleSpec, vit: ModuleSpec, new_vit: ModuleSpec) -> ModuleSpec:
    """A projector's tokens after its encoder's tokens per sample changed (its merge ratio kept)."""
    old = vit.images * vit.patches_per_clip
    new = new_vit.images * new_vit.patches_per_clip
    tokens = m.tokens * new // old
    if tokens * old != m.tokens * new:
        raise ProblemError(f"{m.name}: {m.tokens} tokens from {old} patches do not scale to {new} patches",
                           path="workload")
    return replace(m, tokens=tokens)


def apply_workload(model: ModelSpec, w: Workload | None) -> ModelSpec:
    """``model`` (a preset) with the sample ``w`` describes.

    ``images`` and ``frames`` set every vision encoder's images and frames
    per clip; ``image_size`` the side of encoders without learned position
    embeddings (dynamic resolution: a learned table fixes the side of the
    others, which a preset cannot tile); the projectors' tokens follow their
    encoder's patches in the same ratio. ``text_tokens`` sets the language
    model's, ``mtp_layers`` its multi-token prediction modules
    (:func:`with_mtp`); ``tiles`` is for imported tiling models only.
    """
    w = check_workload(w)
    model = with_mtp(model, w.mtp_layers)
    if w.tiles is not None:
        raise ProblemError("tiles apply to imported tiling models (InternVL, Idefics3, SmolVLM, LLaVA-OneVision, mllama)",
                           path="workload.tiles", source=model.source)
    vits = model.of_kind("vit")
    new: dict[str, ModuleSpec] = {}
    for v in vits:
        changes: dict[str, Any] = {}
        if w.images is not None:
            changes["images"] = w.images
        if w.frames is not None:
            if w.frames % v.temporal_patch:
                raise ProblemError(f"{w.frames} frames are not a multiple of {v.name}'s temporal patch {v.temporal_patch}",
                                   path="workload.frames", source=model.source)
            changes["frames"] = w.frames
        if w.image_size is not None:
            if v.pos_embed == "learned":
                raise ProblemError(f"{v.name} has learned position embeddings for {v.image_size} px images: "
                                   "its image size is fixed", path="workload.image_size", source=model.source)
            if w.image_size % v.patch:
                raise ProblemError(f"{w.image_size} is not a multiple of {v.name}'s patch {v.patch}",
                                   path="workload.image_size", source=model.source)
            changes["image_size"] = w.image_size
        new[v.name] = replace(v, **changes)
    modules = []
    for m in model.modules:
        if m.kind == "vit":
            m = new[m.name]
        elif m.kind == "projector" and vits:
            # a projector maps the encoder before it
            before = [v for v in vits if model.modules.index(v) < model.modules.index(m)]
            if before:
                m = _scaled(m, before[-1], new[before[-1].name])
        elif m.kind == "llm" and w.text_tokens is not None:
            m = replace(m, text_tokens=w.text_tokens)
        modules.append(m)
    return replace(model, modules=tuple(modules))


def sequence_summary(model: ModelSpec, w: Workload | None = None) -> dict[str, Any]:
    """The sequence lengths ``model``'s modules imply per sample (for the ``plan`` output).

    ``vision_tokens`` per encoder (tokens its attention sees per sample),
    ``image_tokens`` (entering the language model's sequence, or its
    cross-attention for mllama), ``text_tokens`` and ``llm_tokens``, and the
    workload as given (with the clip length when ``fps`` is known).
    """
    doc: dict[str, Any] = {}
    if w is not None and w.to_dict():
        doc["workload"] = w.to_dict()
        if w.fps and w.frames:
            doc["workload"]["clip_seconds"] = round(w.frames / w.fps, 3)
    doc["vision_tokens"] = {v.name: v.images * v.tokens_per_image for v in model.of_kind("vit")}
    llm = model.llm
    if llm is not None and llm.cross_layers:
        doc["cross_attention_tokens"] = llm.cross_tokens
    else:
        doc["image_tokens"] = model.image_tokens
    if llm is not None:
        doc["text_tokens"] = llm.text_tokens
        doc["llm_tokens"] = model.llm_tokens
        if llm.mtp_layers:
            doc["mtp_layers"] = llm.mtp_layers
    return doc
