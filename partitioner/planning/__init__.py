"""From a model preset to a plan: the baselines, the solve, the memory knobs, the schedule, throughput.

:func:`plan_model` (keyword arguments) or :func:`run_plan` (a :class:`PlanOptions`)
plans a model preset on a cluster preset against two baselines an engineer
would otherwise run: ``megatron-uniform`` (Megatron-LM / torchtitan's default
pipeline) and ``fsdp`` (one stage of all GPUs, ZeRO-3). It never reports a
plan slower than the best baseline that fits: it keeps that baseline's plan
instead and says so. The modules, in the order a plan flows through them:

* :mod:`.options`: :class:`PlanOptions`, every setting, documented field by field;
* :mod:`.run`: :class:`PlanRun`, the options resolved once (target rules, cost options, schedule keys, counts, deadline);
* :mod:`.plan_model`: :func:`plan_model` and :func:`run_plan`, the steps in order;
* :mod:`.screening`: each microbatch count's problems, baselines and screen;
* :mod:`.baselines`: the two baselines (:func:`megatron_baseline`, :func:`fsdp_baseline`);
* :mod:`.knobs` and :mod:`.knob_solve`: the method per uniform knob setting, then each segment's own knobs;
* :mod:`.schedules` (choice, report, search): the pipeline schedule
  picked by simulation, its candidates and the ``schedules`` report;
* :mod:`.exact` and :mod:`.dominance`: one exact solve of the kept candidate's whole problem (each
  segment choosing its knobs inside it), after an exact reduction of dominated configs;
* :mod:`.assemble` and :mod:`.results`: the :class:`ModelPlan` returned, its typed sections, throughput;
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
from .knobs import refine_knobs, uniform_projection, variant_at
from .options import PlanOptions
from .plan_model import RESOLVE_MIN_SECONDS, plan_model, run_plan
from .results import ModelPlan, simulate_plan, stage_knobs, throughput
from .run import PlanRun, microbatch_candidates, plan_options

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
