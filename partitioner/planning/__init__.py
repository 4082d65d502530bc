"""From a model preset to a plan: the baselines, the solve, the memory knobs, throughput.

:func:`plan_model` (:mod:`.model`) builds the problem with
:func:`partitioner.costs.build_problem` (with the memory-knob variants of
format v2 unless the options restrict them) and two baselines an engineer
would otherwise run (:mod:`.baselines`):

* ``megatron-uniform`` (:func:`megatron_baseline`): Megatron-LM / torchtitan's
  default pipeline -- vision and projector on stage 0, decoder layers split
  evenly, one layout (dp, tp) and one knob setting (recompute, ZeRO-0/1)
  for every stage;
* ``fsdp`` (:func:`fsdp_baseline`): no pipeline -- one stage of all N GPUs,
  dp = N, ZeRO-3 (FSDP full shard) with the better recompute choice, what
  OpenVLA and pi0 were trained with.

It solves with the chosen method once per uniform knob setting (the
problem with that variant's entries as plain keys, :func:`uniform_projection`,
so that solvers of format v1 apply), then lets each stage segment pick its
own knobs for the solver's cuts and meshes (:func:`refine_knobs`, exact for
fixed cuts and meshes: stage times and memory are separable), and keeps the
plan with the shortest iteration. It reports iteration time, tokens per
second, MFU and the speed-up over the *best* baseline that fits (named),
and never reports a plan slower than that baseline: it keeps the baseline
plan instead and says so (:mod:`.results`).
"""
from __future__ import annotations

from .baselines import (
    BASELINE_METHOD,
    BASELINES,
    FSDP_METHOD,
    _try,
    _uniform_cuts,
    fsdp_baseline,
    layer_roles,
    megatron_baseline,
    megatron_baselines,
)
from .knobs import ESCALATION, _projections, refine_knobs, uniform_projection, variant_at
from .plan_model import (
    RESOLVE_MIN_SECONDS,
    _solve_with_knobs,
    microbatch_candidates,
    plan_model,
    plan_options,
)
from .results import ModelPlan, _iteration_ms, simulate_plan, stage_knobs, throughput

__all__ = [
    "BASELINE_METHOD",
    "FSDP_METHOD",
    "BASELINES",
    "fsdp_baseline",
    "uniform_projection",
    "refine_knobs",
    "ModelPlan",
    "megatron_baseline",
    "megatron_baselines",
    "plan_model",
    "throughput",
    "simulate_plan",
    "layer_roles",
    "microbatch_candidates",
]
