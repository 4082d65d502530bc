"""The memory knobs: uniform knob settings as format-v1 problems, and the per-segment choice.

:func:`uniform_projection` gives the problem in which every layer's plain keys
hold one variant's entries (so that solvers of format v1 apply);
:func:`refine_knobs` then lets each stage segment pick its own knobs for a
plan's cuts and meshes (exact for fixed cuts and meshes: stage times and memory
are separable).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import replace
from types import MappingProxyType
from typing import Iterable, Iterator, Mapping

from ...plan import Evaluation, Plan, Stage
from ...plan.schedules import stash as schedule_stash
from ...problem import Layer, LayerCost, Layout, Problem
from ..baselines import _try

__all__ = ["uniform_projection", "variant_at", "refine_knobs", "ESCALATION", "escalation"]

# --------------------------------------------------------------------------- memory knobs


def uniform_projection(problem: Problem, variant: str) -> Problem | None:
    """The problem without variants in which every layer's plain keys hold its ``variant`` entries.

    A mesh with one replica has no ZeRO variants (they equal their ZeRO-0
    twin there): it takes the twin's entry. A plan of the projection, each
    stage given :func:`variant_at` its mesh, is a plan of ``problem`` with
    the same value. None when some layer has no entry left.

    Format v1 (one config per stage) unless some key has cp, ep or etp:
    then format v3, the keys keeping those axes (and so one config per
    module segment, as v3 has it) and the layers their ties. A v1
    projection drops ``tied_to``: each stage then counts a tied copy whole,
    which only overstates memory, so its plans stay valid on ``problem``.
    """
    if not variant and problem.version == 1:
        return problem
    five_d = any(c.cp > 1 or c.ep > 1 or c.etp > 1 for layer in problem.layers for c in layer.costs)
    layers = []
    at: dict[int, str] = {}  # replicas (dp x cp) -> the variant's key there
    projected: dict[int, Mapping[Layout, LayerCost]] = {}  # id(costs) -> its projection: layers sharing a table share it
    for layer in problem.layers:
        table = projected.get(id(layer.costs))
        if table is None:
            costs: dict[str, tuple[Layout, LayerCost]] = {}
            for c in layer.costs:
                replicas = c.dp * c.cp
                if replicas not in at:
                    at[replicas] = variant_at(problem, replicas, variant)
                if c.variant == at[replicas]:
                    plain = replace(c, variant="")
                    cost = layer.costs[c]
                    costs[plain.key] = (plain, cost if five_d else _plain_cost(replace(cost, tied_weight_bytes=0)))
            if not costs:
                return None
            # the entries in key order, as the format-v1 document Problem.from_dict would read them
            table = projected[id(layer.costs)] = MappingProxyType({lay: cost for _, (lay, cost) in sorted(costs.items())})
        layers.append(Layer(layer.name, layer.module, layer.out_bytes, table, layer.tied_to if five_d else None))
    # the same problem as Problem.from_dict of the projected document, without writing and re-reading it
    return replace(problem, layers=tuple(layers), version=3 if five_d else 1, variants=MappingProxyType({}), source=None)


def variant_at(problem: Problem, replicas: int, variant: str) -> str:
    """``variant`` at ``replicas`` = dp x cp ranks holding the same weights: without its ZeRO part when there is
    one (ZeRO and Megatron's distributed optimizer shard over the data- and context-parallel ranks)."""
    if replicas > 1 or not variant.startswith("zero"):
        return variant
    return "+".join(variant.split("+")[1:])


def _plain_cost(cost: LayerCost) -> LayerCost:
    """``cost`` as format v1 reads it back: the B/W split kept only when both parts are given."""
    if (cost.bwd_input_ms is None) == (cost.bwd_weight_ms is None):
        return cost
    return replace(cost, bwd_input_ms=None, bwd_weight_ms=None)


def refine_knobs(problem: Problem, plan: Plan, objective: str | None = None,
                 max_combinations: int = 4096) -> tuple[Plan, Evaluation] | None:
    """``plan`` with each segment's variant chosen to minimize its stage's time, memory permitting.

    Cuts, stage sizes, meshes and placement stay. A stage's time and memory
    depend only on its own segments' entries (the reshards and transfers
    only on meshes), so choosing each stage's variants alone minimizes
    every stage time, and with them both objectives: for the given cuts
    and meshes the result is optimal. Among equally fast choices the one
    needing the least memory wins (ZeRO-1 over ZeRO-0). Stages with more than
    ``max_combinations`` variant combinations pick one variant for all
    their segments. None when some stage fits with no combination.
    """
    objective = objective or problem.objective
    if not problem.variants:
        return _try(problem, plan, objective)
    if problem.training.schedule == "interleaved":  # a group's memory couples its v chunks: not separable
        return _try(problem, plan, objective)
    names = [""] + list(problem.variants)
    memory = problem.cluster.gpu_memory_bytes
    P, m = plan.num_stages, problem.microbatches
    stashes = schedule_stash(problem.training.schedule, P, m)  # 1F1B and ZB-H1: min(m, P - p); GPipe: m
    stages = []
    for p, stage in enumerate(plan.stages):
        stash = stashes[p]
        segs = stage.segment_configs(problem)
        options = []
        for (a, b), config in segs:
            per = {}
            for v in names:
                key = replace(config, variant=v)
                entries = [problem.layers[i].costs.get(key) for i in range(a, b + 1)]
                found = [e for e in entries if e is not None]
                if len(found) == len(entries):
                    per[v] = (sum(e.fwd_ms + e.bwd_ms for e in found), sum(e.weight_bytes for e in found),
                              sum(e.act_bytes for e in found))
            options.append(per)
        combos = math.prod(len(o) for o in options)
        choices = (itertools.product(*(list(o) for o in options)) if combos <= max_combinations
                   else ((v,) * len(options) for v in names if all(v in o for o in options)))
        best = None
        for combo in choices:
            time = sum(o[v][0] for o, v in zip(options, combo))
            need = sum(o[v][1] for o, v in zip(options, combo)) + stash * sum(o[v][2] for o, v in zip(options, combo))
            if need <= memory and (best is None or (time, need) < best[:2]):  # ties: the smaller memory
                best = (time, need, combo)
        if best is None:
            return None
        configs = [replace(c, variant=v) for ((_, c), v) in zip(segs, best[2])]
        stages.append(Stage.from_configs(stage.first_layer, stage.last_layer, stage.devices, configs, stage.device_ids))
    return _try(problem, Plan(tuple(stages)), objective)


# Uniform knob settings in the order "fast" solves them, stopping at the first that has a plan:
# ZeRO-1 costs no time over ZeRO-0 in this model and only saves memory (its projection dominates
# ZeRO-0's); recompute and ZeRO-3 add time to save memory. knob_solves="all" solves every setting.
ESCALATION = ("zero1", "zero1+recompute-selective", "zero1+recompute-full", "zero3", "zero3+recompute-selective",
              "zero3+recompute-full")


def escalation(names: Iterable[str]) -> tuple[str, ...]:
    """:data:`ESCALATION` with the module-recompute settings among ``names`` (variant names, in the order the cost
    model emitted them: the module sets from the cheapest) slotted in after each ZeRO stage's selective recompute
    and before its full recompute."""
    names = list(names)
    out: list[str] = []
    for v in ESCALATION:
        if v.endswith("+recompute-full"):
            zero = v.split("+")[0]
            out += [n for n in names if n.startswith(zero + "+recompute-") and n not in ESCALATION and n not in out]
        out.append(v)
    return tuple(out)


def _projections(problem: Problem, which: str = "all") -> Iterator[tuple[str, Problem]]:
    """(variant, v1 problem) for the uniform knob settings of ``problem`` (just the problem for v1), each built when asked for.

    ``which``: ``all`` (every setting), ``escalate`` (the :data:`ESCALATION`
    order, then the remaining settings).
    """
    if problem.version < 2 or not problem.variants:
        yield "", problem
        return
    settings = ["", *problem.variants]
    if which == "escalate":
        order = escalation(settings)
        settings = [v for v in order if v in settings] + [v for v in settings if v not in order]
    for v in settings:
        proj = uniform_projection(problem, v)
        if proj is not None:
            yield v, proj
