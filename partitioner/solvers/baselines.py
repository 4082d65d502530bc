"""Baselines a person could apply by hand: ``uniform`` (Megatron-style) and ``balanced``.

Both use *equal submeshes and one layout for every stage*, as tools without
heterogeneous meshes do: a layout of d devices gives P = N / d stages.

* ``uniform`` -- Megatron-LM's default split: L // P layers per stage, the
  first L % P stages one more; placement in stage order.
* ``balanced`` -- the same meshes, but the layer cuts (and the placement of
  the stages on nodes) chosen optimally by the exact DP restricted to that
  layout: the best a tool without heterogeneous meshes can do.

Each tries every layout that all layers support and whose stage count the
problem allows, and returns the best.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.baselines``.
"""
from __future__ import annotations

import time
from dataclasses import replace

from ..cluster.placement import contiguous_node_assignment, node_assignment_ids
from ..plan import Plan, PlanError, Stage, evaluate
from ..problem import Layout, Problem
from .base import Candidate, SolveRequest, register
from .dp.solver import DPModel
from .errors import OutOfTime, TooLarge
from .options import Capabilities

__all__ = ["solve_uniform", "solve_balanced", "uniform_layouts", "uniform_plan"]


def uniform_layouts(problem: Problem) -> list[Layout]:
    """Configs (layouts with their variant) every layer supports whose stage count N / d the bounds allow."""
    common = set(problem.layers[0].costs)
    for layer in problem.layers[1:]:
        common &= set(layer.costs)
    out = []
    for lay in sorted(common, key=lambda l: (l.devices, l.tp, l.variant)):
        P = problem.num_devices // lay.devices
        if problem.num_devices % lay.devices == 0 and problem.stages.min <= P <= min(problem.stages.max, problem.num_layers):
            # on partial racks equal sizes need not fill the nodes' used GPUs (first-fit finds a packing if any)
            if not problem.cluster.partial or contiguous_node_assignment(problem.cluster, [lay.devices] * P) is not None:
                out.append(lay)
    return out


def uniform_plan(problem: Problem, layout: Layout) -> Plan:
    """Megatron's split for one layout: equal meshes, L // P layers each, remainder first."""
    P = problem.num_devices // layout.devices
    base, extra = divmod(problem.num_layers, P)
    sizes = [layout.devices] * P
    assignment = contiguous_node_assignment(problem.cluster, sizes)
    # equal allowed sizes that divide the devices fill the nodes first-fit (sizes divide or are multiples of a node)
    assert assignment is not None, f"{P} stages of {layout.devices} devices do not pack into the nodes"
    ids = node_assignment_ids(problem.cluster, sizes, assignment)
    stages, start = [], 0
    for p in range(P):
        count = base + (1 if p < extra else 0)
        stages.append(Stage.from_configs(start, start + count - 1, layout.devices, (layout,), ids[p]))
        start += count
    return Plan(tuple(stages))


def _no_layout(problem: Problem, method: str) -> Candidate:
    return Candidate(
        "infeasible",
        message=(
            f"{method}: no single layout is supported by every layer with a stage count N/d "
            f"inside the bounds {problem.stages.min}..{problem.stages.max}"
        ),
    )


_BOTH = frozenset({"bottleneck", "iteration"})
# uniform only evaluates its plans, so any topology; balanced runs the DP, which needs the default graph
UNIFORM_CAPABILITIES = Capabilities(schedules={"1f1b": _BOTH, "zb-h1": _BOTH}, topology=True, partial_racks=True)
BALANCED_CAPABILITIES = Capabilities(schedules={"1f1b": _BOTH, "zb-h1": _BOTH}, partial_racks=True)


@register("uniform", capabilities=UNIFORM_CAPABILITIES)
def solve_uniform(problem: Problem, request: SolveRequest) -> Candidate:
    layouts = uniform_layouts(problem)
    if not layouts:
        return _no_layout(problem, "uniform")
    deadline = request.deadline()
    best, failures = None, []
    for tried, lay in enumerate(layouts):
        if tried and deadline is not None and time.perf_counter() > deadline:  # the first layout always runs
            if best is None:
                return Candidate("error", message=f"uniform: time limit reached after {tried} of {len(layouts)} "
                                 "layouts, none of which fits", timed_out=True)
            return Candidate("feasible", best[1], message=f"uniform: time limit reached after {tried} of "
                             f"{len(layouts)} layouts; the best plan of those", timed_out=True)
        plan = uniform_plan(problem, lay)
        try:
            value = evaluate(problem, plan, request.objective).value
        except PlanError as err:
            failures.append(f"{lay.key}: {err}")
            continue
        if best is None or value < best[0]:
            best = (value, plan)
    if best is None:
        return Candidate("infeasible", message=f"uniform: no layout fits; {failures[0]}")
    return Candidate("feasible", best[1])


def _with_config(plan: Plan, config: Layout) -> Plan:
    """``plan`` with every stage in ``config`` (the DP restricted to one config returns its cuts and placement)."""
    return Plan(
        tuple(
            replace(s, dp=config.dp, tp=config.tp, variant=config.variant, configs=None, cp=config.cp, ep=config.ep, etp=config.etp)
            for s in plan.stages
        )
    )


@register("balanced", capabilities=BALANCED_CAPABILITIES)
def solve_balanced(problem: Problem, request: SolveRequest) -> Candidate:
    layouts = uniform_layouts(problem)
    if not layouts:
        return _no_layout(problem, "balanced")
    deadline = request.deadline()
    best, unfinished = None, []
    for lay in layouts:
        if deadline is not None and time.perf_counter() >= deadline:  # building a layout's tables takes time too
            unfinished.append(f"{lay.key}: time limit reached")
            continue
        P = problem.num_devices // lay.devices
        model = DPModel(problem, layouts=(lay,), stage_counts=(P, P))
        try:
            outcome = model.optimize(request.objective, model.natural_placement(), deadline, 2**31)
            if outcome.status == "optimal" and outcome.plan is None:
                outcome = model.optimize(request.objective, "bins", deadline, 2**31)
        except OutOfTime:
            unfinished.append(f"{lay.key}: time limit reached")
            continue
        except TooLarge as err:
            unfinished.append(f"{lay.key}: {err}")
            continue
        if outcome.status != "optimal" or outcome.plan is None:
            continue
        plan = _with_config(outcome.plan, lay)
        value = evaluate(problem, plan, request.objective).value
        if best is None or value < best[0]:
            best = (value, plan)
    if best is None and unfinished:
        # some layout was not searched to the end: "infeasible" would be a claim we cannot back
        return Candidate("error", message="balanced: no plan found; layouts not searched to the end: " + "; ".join(unfinished))
    if best is None:
        return Candidate("infeasible", message="balanced: no single-layout plan fits in memory")
    return Candidate("feasible", best[1])
