"""From a model preset to a plan: the baselines, the solve, the memory knobs, the schedule, throughput.

:func:`plan_model` (keyword arguments) or :func:`run_plan` (a :class:`PlanOptions`)
plans a model preset on a cluster preset against two baselines an engineer
would otherwise run: ``megatron-uniform`` (Megatron-LM / torchtitan's default
pipeline) and ``fsdp`` (one stage of all GPUs, ZeRO-3). It never reports a
plan slower than the best baseline that fits: it keeps that baseline's plan
instead and says so. The modules and packages, in the order a plan flows through them:

More (the detail of this module): ``docs/internals/planning.md``, section ``partitioner.planning``.
"""
from __future__ import annotations

from .baselines import (
    BASELINE_METHOD,
    BASELINES,
    FSDP_METHOD,
    BaselineLayout,
    fsdp_baseline,
    layer_roles,
    megatron_baseline,
    megatron_baselines,
)
from .options import PlanOptions
from .plan_model import RESOLVE_MIN_SECONDS, plan_model, run_plan
from .results import ModelPlan, simulate_plan, stage_knobs, throughput
from .run import PlanRun, microbatch_candidates, plan_options
from .search.knobs import refine_knobs, uniform_projection, variant_at

__all__ = [
    "BASELINE_METHOD",
    "FSDP_METHOD",
    "BASELINES",
    "BaselineLayout",
    "RESOLVE_MIN_SECONDS",
    "fsdp_baseline",
    "uniform_projection",
    "variant_at",
    "refine_knobs",
    "ModelPlan",
    "PlanOptions",
    "PlanRun",
    "megatron_baseline",
    "megatron_baselines",
    "plan_model",
    "plan_options",
    "run_plan",
    "throughput",
    "simulate_plan",
    "stage_knobs",
    "layer_roles",
    "microbatch_candidates",
]
