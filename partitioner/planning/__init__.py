"""From a model preset to a plan: the baselines, the solve, the memory knobs, the schedule, throughput.

:func:`plan_model` (keyword arguments) or :func:`run_plan` (a :class:`PlanOptions`) plans a model preset on a
cluster preset against the baselines an engineer would otherwise run, and never reports a plan slower than
the best baseline that fits. The modules and packages, in the order a plan flows through them:

* :mod:`.options` and :mod:`.run`: :class:`PlanOptions`, then :class:`PlanRun`, the options resolved once;
* :mod:`.plan_model`: :func:`plan_model` and :func:`run_plan`, the steps in order;
* :mod:`.baselines`: the two baselines (:func:`megatron_baseline`, :func:`fsdp_baseline`);
* :mod:`.search`: the counts screened, the method per knob setting (and per target), the exact proof;
* :mod:`.schedules` and :mod:`.targets`: the schedule picked by simulation, each framework's space;
* :mod:`.recipes`: a stated layout (the user's recipe, a published run's) estimated as a plan;
* :mod:`.reports`, :mod:`.assemble` and :mod:`.results`: the :class:`ModelPlan` returned and its sections;
* :mod:`.records`: the records the steps pass (screened counts, baseline runs, knob solves).
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
