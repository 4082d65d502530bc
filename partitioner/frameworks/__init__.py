"""One home per training framework: what it runs, and plans as its settings.

Each home -- :mod:`.megatron` (Megatron-LM and Megatron Bridge),
:mod:`.torchtitan`, :mod:`.deepspeed` -- holds together its ``rules``
(``RULES``: the pipeline schedules, memory knobs, mesh and CP/EP axes and
cuts it runs, and the bytes-per-parameter count it keeps per ZeRO stage) and
its ``export`` (a plan as its settings, or why it cannot run it); a recipe
reader goes next to them. The planner's ``plan --target``
(:mod:`partitioner.planning.targets`) and the exporters read the same
``RULES``; the door :mod:`.export` reads a result and hands it to the
exporter.

More (the detail of this module): ``docs/internals/frameworks.md``, section ``partitioner.frameworks``.
"""
from __future__ import annotations

from .common import (
    LLM_ROLES,
    VISION_ROLES,
    Export,
    ExportContext,
    ExportHints,
    FrameworkRules,
    LayerHint,
    Mesh,
    MlaHints,
    MoeHints,
    PlanArgs,
    PrecisionHints,
    ScheduleTime,
)
from .registry import EXPORTERS, RULES, TARGETS, Exporter, FrameworkName, rules_of, target_memory, target_options
from .stages import StageView, stage_views

__all__ = [
    "FrameworkRules",
    "FrameworkName",
    "Mesh",
    "RULES",
    "EXPORTERS",
    "Exporter",
    "TARGETS",
    "rules_of",
    "target_memory",
    "target_options",
    "Export",
    "ExportContext",
    "ExportHints",
    "LayerHint",
    "MoeHints",
    "MlaHints",
    "PlanArgs",
    "PrecisionHints",
    "ScheduleTime",
    "StageView",
    "stage_views",
    "LLM_ROLES",
    "VISION_ROLES",
]
