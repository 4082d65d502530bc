"""The framework homes by name: their rules, exporters and bytes-per-parameter counts.

:data:`RULES` and :data:`EXPORTERS` are gathered from the homes
(:mod:`.megatron`, :mod:`.torchtitan`, :mod:`.deepspeed`), never restated:
a framework's rules live in its ``rules`` module alone.
:func:`target_memory` and :func:`target_options` give the count a framework
keeps at a ZeRO stage (its ``RULES.memory``) as a
:class:`~partitioner.costs.ParamBytes` or as cost options.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Literal, Mapping, get_args

from ..costs import CostOptions, ParamBytes, param_memory
from ..problem import ProblemError
from . import deepspeed, megatron, torchtitan
from .common import Export, ExportContext, FrameworkRules
from .stages import StageView

__all__ = ["FrameworkName", "TARGETS", "RULES", "EXPORTERS", "Exporter", "rules_of", "target_memory", "target_options"]

FrameworkName = Literal["megatron", "torchtitan", "deepspeed"]
Exporter = Callable[[list[StageView], ExportContext], Export]

_HOMES = (megatron, torchtitan, deepspeed)
RULES: Mapping[str, FrameworkRules] = MappingProxyType({home.RULES.name: home.RULES for home in _HOMES})
EXPORTERS: Mapping[str, Exporter] = MappingProxyType({
    megatron.RULES.name: megatron.export_megatron,
    torchtitan.RULES.name: torchtitan.export_torchtitan,
    deepspeed.RULES.name: deepspeed.export_deepspeed,
})
TARGETS: tuple[FrameworkName, ...] = get_args(FrameworkName)


def rules_of(name: str, path: str = "--target") -> FrameworkRules:
    """The rules of framework ``name``; :class:`ProblemError` at ``path`` for an unknown one."""
    if name not in RULES:
        raise ProblemError(f"unknown target {name!r} (targets: {', '.join(RULES)})", path=path)
    return RULES[name]


def target_memory(target: str, zero: int = 0) -> ParamBytes:
    """The count ``target`` keeps at ZeRO stage ``zero`` (its :attr:`~.common.FrameworkRules.memory`).

    torchtitan replicates with DDP at stage 0, and shards with FSDP2 at
    stage 1 (``reshard_after_forward`` off, as the export writes it) and
    3; DeepSpeed's stage 0 with bf16 and a pipeline is ``BF16_Optimizer``.
    """
    stages = rules_of(target).memory
    if zero not in stages:
        raise ProblemError(f"{target} has no ZeRO stage {zero} (stages: {', '.join(map(str, stages))})",
                           path="--target")
    return param_memory(stages[zero])


def target_options(target: str, zero: int = 0, **more: Any) -> CostOptions:
    """Cost options whose weight memory is ``target``'s at ZeRO stage ``zero`` (:func:`target_memory`).

    ``more`` are further options (validated like :meth:`CostOptions.from_mapping`'s).
    """
    return CostOptions.from_mapping({"memory_count": target_memory(target, zero).name, **more})
