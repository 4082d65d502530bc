"""transformers' own pi0 (``pi0``): PaliGemma with a Gemma action expert that shares its attention.

Contract: :func:`pi0_vla` returns the (vision, projector, llm,
action_expert) modules for a :class:`~partitioner.presets.workload.Workload`.

transformers ``PI0ForConditionalGeneration`` [1]: ``vlm_config`` is a
PaliGemma (SigLIP without head, one linear projection, Gemma without an LM
head: pi0 has no text loss); ``dit_config`` is the action expert, a Gemma
of the same depth whose layers attend jointly with the VLM's. The expert
keeps a token embedding of the VLM's vocabulary that the model never runs
(counted in its parameters, ``extra_params``).

The detail, and the references cited above: ``docs/internals/presets.md``, section ``partitioner.presets.hf.pi0``.
"""
from __future__ import annotations

from dataclasses import replace

from ..spec import ModuleSpec
from ..workload import Workload
from .base import _Config
from .common import refuse, sample, siglip_tower
from .text import decoder

__all__ = ["pi0_vla", "PI0_IMAGES", "PI0_TEXT_TOKENS"]

PI0_IMAGES = 3
PI0_TEXT_TOKENS = 48


def pi0_vla(root: _Config, w: Workload) -> tuple[ModuleSpec, ...]:
    """The modules of a ``pi0`` configuration (see the module docstring)."""
    refuse(w, ("image_size", "tiles", "frames"), "pi0's SigLIP tower takes 224 px camera images (give --images)", root.source)
    images, _, text_tokens = sample(w, images=PI0_IMAGES, text_tokens=PI0_TEXT_TOKENS)
    vlm = root.sub("vlm_config", "paligemma")
    vit = siglip_tower(vlm.sub("vision_config", "siglip_vision_model"), images, prefix="model.vlm.vision_tower.")
    llm = decoder(vlm.sub("text_config", "gemma"), text_tokens, prefix="model.vlm.language_model.", attention="prefix",
                  lm_head=False)
    proj = ModuleSpec(name="projector", kind="projector", in_dim=vit.hidden, dims=(vlm.int("projection_dim", llm.hidden),),
                      tokens=images * vit.patches_per_image, source=f"Hugging Face config ({root.source or 'pi0'})",
                      fqn={"pre": ["model.vlm.multi_modal_projector"]})
    dit = decoder(root.sub("dit_config", "gemma"), 0, prefix="model.dit.", lm_head=False)
    expert = replace(dit, name="action_expert", kind="action_expert", vocab=0, extra_params=dit.vocab * dit.hidden,
                     tie_embeddings=False, tokens=root.int("chunk_size", 50), action_dim=root.int("max_action_dim", 32),
                     state_dim=root.int("max_state_dim", 32), text_tokens=0,
                     fqn={"pre": ["model.dit.embed_tokens", "embed_action_time"], "block": "model.dit.layers.{i}",
                          "post": ["model.dit.norm", "action_out_proj"]})
    return vit, proj, llm, expert
