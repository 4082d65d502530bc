"""The names of the recompute settings: Megatron-Core's modules, torchtitan's per-op policy, their spelling.

Contract: a recompute *setting* is ``none``, ``selective``, ``full``,
``op`` or a set of Megatron-Core ``recompute_modules`` joined by ``+`` in
:data:`MODULES` order (``layernorm+moe_act``); :func:`canonical_setting`
spells a setting canonically, :func:`modules_of` and :func:`setting_of`
convert between a setting and its modules. Names only, no costs (those
are :mod:`.recompute`'s), so that :mod:`~partitioner.costs.options` can check a setting
without importing the cost terms.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.memory.recompute_names``.
"""
from __future__ import annotations

from typing import Iterable

__all__ = ["MODULES", "OP", "SETTINGS", "ABSORBED", "modules_of", "setting_of", "canonical_setting", "is_module_setting",
           "replays_attention", "replays_experts"]

MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts", "moe")
"""Megatron-Core's ``recompute_modules`` choices, in the order a setting's name lists them [30]_.

References
----------
.. [30] NVIDIA Megatron-Core 0.16.1, ``transformer/transformer_config.py``
   (``recompute_modules``: core_attn, moe_act, layernorm, mla_up_proj, mlp,
   moe, shared_experts; default core_attn).
"""

OP = "op"
"""torchtitan's per-op selective activation checkpointing [31]_.

References
----------
.. [31] torchtitan 0.3.0, ``torchtitan/distributed/activation_checkpoint.py``
   (``SelectiveAC``, the per-op policy).
"""

SETTINGS = ("none", "selective", "full", OP)
"""The settings that are not module sets (``selective`` is the module set ``core_attn``)."""

ABSORBED = {"moe": ("moe_act", "shared_experts")}
"""Modules a module contains: checkpointing the MoE layer frees what ``moe_act`` and ``shared_experts`` free."""


def modules_of(setting: str) -> frozenset[str]:
    """The Megatron modules a setting recomputes (``selective``: ``core_attn``); empty for none, full, op.

    Raises ValueError for a name that is neither a setting nor ``+``-joined modules.
    """
    if setting == "selective":
        return frozenset({"core_attn"})
    if setting in SETTINGS:
        return frozenset()
    parts = setting.split("+")
    unknown = [p for p in parts if p not in MODULES]
    if unknown or not parts:
        raise ValueError(f"unknown recompute setting {setting!r} (none, selective, full, op, or modules of "
                         f"{', '.join(MODULES)} joined by '+')")
    return frozenset(parts)


def setting_of(modules: Iterable[str]) -> str:
    """The canonical setting of a module set: ``none`` when empty, ``selective`` for ``core_attn`` alone, else the
    modules in :data:`MODULES` order joined by ``+``, without those ``moe`` contains."""
    mods = set(modules)
    for outer, inner in ABSORBED.items():
        if outer in mods:
            mods -= set(inner)
    if not mods:
        return "none"
    if mods == {"core_attn"}:
        return "selective"
    return "+".join(m for m in MODULES if m in mods)


def canonical_setting(setting: str) -> str:
    """``setting`` in its canonical spelling (ValueError if unknown)."""
    if setting in SETTINGS:
        return setting
    return setting_of(modules_of(setting))


def is_module_setting(setting: str) -> bool:
    """Whether ``setting`` is a Megatron module set other than ``selective`` (a name :data:`SETTINGS` lacks)."""
    return setting not in SETTINGS


def replays_attention(setting: str) -> bool:
    """Whether the backward replays the attention core's forward (full, or a set with ``core_attn``)."""
    return setting == "full" or "core_attn" in modules_of(setting)


def replays_experts(setting: str) -> bool:
    """Whether the backward replays the routed experts' GEMMs: full, ``moe`` (the MoE layer's checkpoint) or
    ``op`` (torchtitan's per-op policy saves no grouped GEMM output)."""
    return setting in ("full", OP) or "moe" in modules_of(setting)
