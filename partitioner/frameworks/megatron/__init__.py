"""Megatron-LM and Megatron Bridge: what they run, and plans as their settings.

Modules
-------
rules: :data:`RULES`: the schedules, knobs, mesh and CP/EP axes, cuts and bytes-per-parameter counts Megatron-LM has.
export: :func:`export_megatron`: a plan as Megatron-LM flags or a Megatron Bridge MIMO grid.
recipe: a Megatron-LM argument list or a Megatron Bridge config read as a recipe (the importer).
fp8: :func:`~.fp8.megatron_fp8`: an FP8 plan as Megatron-LM settings.
mla: :func:`mla_args`: the arguments of latent attention, multi-token prediction and group-limited routing.
"""
from __future__ import annotations

from .export import CHECKED_WITH, export_megatron, megatron_layout, mimo_grid, parse_megatron_layout
from .mla import MLA_FLAGS, mla_args
from .rules import RULES

__all__ = ["RULES", "CHECKED_WITH", "export_megatron", "megatron_layout", "parse_megatron_layout", "mimo_grid",
           "MLA_FLAGS", "mla_args"]
