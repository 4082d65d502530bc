"""Megatron-LM and Megatron Bridge: what they run, and plans as their settings.

Modules
-------
rules: :data:`RULES`: the schedules, knobs, mesh and CP/EP axes, cuts and bytes-per-parameter counts Megatron-LM has.
export: :func:`export_megatron`: a plan as Megatron-LM flags, a Megatron Bridge recipe launch or a MIMO grid.
bridge: :data:`BRIDGE_RECIPES`: the VLMs with a Megatron Bridge recipe, and their launch with Hydra overrides.
moe: :func:`moe_router_settings`: the MoE performance and router settings (grouped GEMM, routing, balancing).
recipe: a Megatron-LM argument list or a Megatron Bridge config read as a recipe (the importer).
fp8: :func:`~.fp8.megatron_fp8`: an FP8 plan as Megatron-LM settings.
mla: :func:`mla_args`: the arguments of latent attention, multi-token prediction and group-limited routing.
"""
from __future__ import annotations

from .bridge import BRIDGE_COMMIT, BRIDGE_RECIPES
from .export import CHECKED_WITH, export_megatron, megatron_layout, mimo_grid, parse_megatron_layout
from .mla import MLA_FLAGS, mla_args
from .moe import moe_router_settings
from .rules import RULES

__all__ = ["RULES", "CHECKED_WITH", "export_megatron", "megatron_layout", "parse_megatron_layout", "mimo_grid",
           "MLA_FLAGS", "mla_args", "moe_router_settings", "BRIDGE_RECIPES", "BRIDGE_COMMIT"]
