"""Megatron-LM and Megatron Bridge: what they run, and plans as their settings.

Modules
-------
rules
    :data:`RULES`: the schedules, knobs, mesh and CP/EP axes, cuts and
    bytes-per-parameter counts Megatron-LM has (read by ``plan --target
    megatron`` and by the exporter).
export
    :func:`export_megatron`: a plan as Megatron-LM flags
    (``--pipeline-model-parallel-layout``) or a Megatron Bridge MIMO grid.
mla
    :func:`mla_args`: the arguments of latent attention, multi-token
    prediction and group-limited routing (:class:`~partitioner.presets.MlaHints`).
moe
    :func:`moe_router_settings`: the MoE performance and router settings
    (grouped GEMM, fused permutation, score function, load balancing, groups).
bridge
    :data:`BRIDGE_RECIPES`: the VLMs with a Megatron Bridge recipe, whose
    plans export as that recipe's launch with Hydra overrides.

A reader of Megatron recipes (a Megatron-LM argument list, a Bridge recipe)
belongs here too, as ``recipe.py`` next to the exporter it mirrors.
"""
from __future__ import annotations

from .bridge import BRIDGE_COMMIT, BRIDGE_RECIPES
from .export import CHECKED_WITH, export_megatron, megatron_layout, mimo_grid, parse_megatron_layout
from .mla import MLA_FLAGS, mla_args
from .moe import moe_router_settings
from .rules import RULES

__all__ = ["RULES", "CHECKED_WITH", "export_megatron", "megatron_layout", "parse_megatron_layout", "mimo_grid",
           "MLA_FLAGS", "mla_args", "moe_router_settings", "BRIDGE_RECIPES", "BRIDGE_COMMIT"]
