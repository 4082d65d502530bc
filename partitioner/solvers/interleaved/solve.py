"""``cpsat`` and ``milp`` under ``training.schedule: interleaved``: the exact model, one group count at a time.

The space is :mod:`.space`'s, the model
:mod:`.formulation`'s. The group count P fixes the group size,
the placement, the chunk count and every coefficient, so the search solves
one model per feasible P (the P of the best start first; a P whose
analytic bound is no better than the best value found is skipped) and
keeps the best plan; the proven bound is the least of the models' bounds
(a model proven infeasible contributes none). Each model starts from the best Megatron-LM
uniform interleaved split of its P (:func:`.space.uniform_hints`),
or the caller's ``warm_start`` when it lies in the space, and is told the
best value found so far:

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.interleaved.solve``.
"""
from __future__ import annotations

import math
import os
import time

from ...plan import Plan, PlanError, evaluate
from ...problem import Problem
from ..base import Candidate, SolveRequest
from ..cpsat.formulation import SAFE_PARAMETERS  # the presolve caveat of the slot model holds here too
from ..options import CpsatOptions, MilpOptions
from ..slot.run import HANDOVER_SHARE, MAX_EXCLUSIONS, BuildTimeout, build_guard
from ..slot.times import RESOLUTION, UNIT_CAP
from .formulation import (
    GroupData,
    MemoryUnits,
    build_cpsat,
    build_pulp,
    complete_values,
    formulation,
    group_exclusion,
    plan_of_values,
    values_of_plan,
)
from .space import group_counts, group_ids, no_group_count_message, uniform_hints

__all__ = ["solve_interleaved"]

_EPS = 2.0**-52
MILP_BOUND_MARGIN = 1e-7  # relative, for the backend's feasibility tolerances
MILP_OPTIMAL_GAP = 1e-6
# The MILP states memory as shares of the GPU on a grid of 2^-24 (6e-8) of it (.formulation.MemoryUnits): far
# above the backends' 1e-9 tolerances, so their sums are exact, and fine enough that few plans come within
# the rounding of the limit (each is cut off and the model solved again).
MILP_MEMORY_GRID_BITS = 24


def solve_interleaved(problem: Problem, request: SolveRequest, method: str) -> Candidate:
    """Plan an interleaved problem with ``method`` ("cpsat" or "milp") over the space; see the module docstring."""
    deadline = request.deadline()
    counts = group_counts(problem)
    if not counts:
        return Candidate("infeasible", message=no_group_count_message(problem))
    objective = request.objective
    hints = _hints(problem, request, counts)
    best_value, best_plan = min(((v, p) for pairs in hints.values() for v, p in pairs[:1]), default=(math.inf, None), key=lambda vp: vp[0])
    bounds, proven, notes = [], True, {}
    stopped = False  # the time limit cut a group count's solve short (or left it unsolved)
    # the group count of the best start first: its plan then caps the others' models
    for P in sorted(counts, key=lambda P: hints[P][0][0] if hints.get(P) else math.inf):
        data = GroupData.of(problem, objective, P)
        if not data.meshes:  # no config of this group size: no plan with P groups
            notes[P] = "no config of the group size"
            continue
        if data.time_lower_bound() >= best_value:
            notes[P] = f"its lower bound {data.time_lower_bound():.9g} is no better than {best_value:.9g}"
            continue
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            proven, stopped = False, True
            bounds.append(data.time_lower_bound() * (1 - 1e-12))
            notes[P] = "not solved: time limit"
            continue
        hint = hints[P][0][1] if hints.get(P) else None
        run = _run_cpsat if method == "cpsat" else _run_milp
        try:
            status, plan, bound = run(data, request, hint, best_value, deadline)
        except BuildTimeout:
            proven, stopped = False, True
            bounds.append(data.time_lower_bound() * (1 - 1e-12))
            notes[P] = "not solved: the time limit ran out while building its model"
            continue
        notes[P] = status if status != "infeasible" or not math.isfinite(best_value) else f"no plan better than {best_value:.9g}"
        proven = proven and status in ("optimal", "infeasible")
        stopped = stopped or status in ("feasible", "unknown")  # each backend stops unproven only at its time limit
        bounds.append(bound)
        if plan is not None:
            try:
                value = evaluate(problem, plan, objective).value
            except PlanError as err:  # a tolerance artefact of a backend: keep what we have
                notes[P] = f"{status}; its plan was rejected: {err}"
                proven = False
                continue
            if value < best_value:
                best_value, best_plan = value, plan
    extra = {"interleaved": {"space": "equal device groups, one mesh per group, canonical placement",
                             "groups": {str(P): s for P, s in notes.items()}}}
    bound = min(bounds + [best_value])
    if best_plan is None:
        if proven:
            return Candidate(
                "infeasible",
                message=(
                    "no interleaved plan of the searched space (equal device groups, one mesh per group) fits for "
                    f"any of the group counts {', '.join(map(str, counts))}"
                ),
                extra=extra,
            )
        return Candidate(
            "error",
            message=f"{method}: the time limit ended the search before any interleaved plan was found",
            extra=extra,
            timed_out=stopped,
        )
    tolerance = _resolution(request) if method == "cpsat" else MILP_OPTIMAL_GAP
    if proven and best_value - bound <= tolerance * best_value:
        return Candidate("optimal", best_plan, bound, "", extra)
    reason = "time limit reached or gap not closed" if not proven else "the integer time unit cannot prove optimality"
    return Candidate("feasible", best_plan, bound, f"{method}: {reason} (interleaved search); the bound is proven", extra,
                     timed_out=stopped)


def _resolution(request: SolveRequest) -> float:
    """cpsat's ``resolution`` option, or :data:`.slot.times.RESOLUTION` when it is not given."""
    options = request.options
    return (options.resolution if isinstance(options, CpsatOptions) else None) or RESOLUTION


def _cpsat_options(request: SolveRequest) -> CpsatOptions:
    assert isinstance(request.options, CpsatOptions), "cpsat's request carries its record"
    return request.options


def _milp_options(request: SolveRequest) -> MilpOptions:
    assert isinstance(request.options, MilpOptions), "milp's request carries its record"
    return request.options


def _hints(problem: Problem, request: SolveRequest, counts: list[int]) -> dict[int, list[tuple[float, Plan]]]:
    """Per P, (value, plan) starts in the space: the caller's ``warm_start`` if it is in the space,
    else the uniform splits unless ``hint`` is false."""
    out: dict[int, list[tuple[float, Plan]]] = {}
    objective, v = request.objective, problem.training.virtual_stages
    if request.warm_start is not None:
        plan = request.warm_start.with_device_ids()
        P = len(plan.stages) // v
        try:
            value = evaluate(problem, plan, objective).value
        except PlanError:
            value = None
        if value is not None and P in counts and _in_space(problem, plan, P):
            out[P] = [(value, plan)]
    if not isinstance(request.options, (CpsatOptions, MilpOptions)) or request.options.hint:
        for P in counts:
            if P not in out:
                out[P] = uniform_hints(problem, objective, P)
    return out


def _in_space(problem: Problem, plan: Plan, groups: int) -> bool:
    ids = group_ids(problem, groups)
    if any(tuple(s.device_ids or ()) != ids[c % groups] for c, s in enumerate(plan.stages)):
        return False
    return values_of_plan(GroupData.of(problem, "bottleneck", groups), plan) is not None


# --------------------------------------------------------------------------- CP-SAT


def _run_cpsat(data: GroupData, request: SolveRequest, hint: Plan | None, best_value: float, deadline):
    """(status, plan or None, proven bound in ms) of the CP-SAT model for one P."""
    from ortools.sat.python import cp_model

    p = data.problem
    L, v, m, P = p.num_layers, p.training.virtual_stages, p.microbatches, data.groups
    resolution = _resolution(request)
    bottleneck = data.objective == "bottleneck"
    count, div = (1, 1) if bottleneck else (P + m * v - 1, v)
    lower = data.time_lower_bound()
    ceiling = best_value if bottleneck else best_value / m
    upper = min(data.time_upper_bound(), ceiling)
    terms = L + 2 * v
    error_units = count * terms * (0.5 + 2.0**-10)
    if upper <= 0:
        scale = 1.0
    else:
        cap = UNIT_CAP / (count * upper)
        wanted = 3 * error_units / (resolution * lower * div) if lower > 0 else math.inf
        scale = min(wanted, cap)
    top_units = scale * upper + terms * (0.5 + 2.0**-10) + 2
    delta = max(2.0**-10, 4 * _EPS * top_units)
    group_error = terms * (0.5 + delta)
    error = count * group_error
    top = int(math.ceil(top_units + terms * delta + 1))

    def units(ms: float) -> int:
        value = scale * ms
        return top + 1 if not value < top + 1 else int(round(value))

    check = build_guard(deadline)
    spec = formulation(data, units, top, check)
    model, var = build_cpsat(spec, check)
    if hint is not None:
        values = values_of_plan(data, hint)
        if values is not None:
            for name, value in complete_values(spec, values).items():
                if name in var:
                    model.add_hint(var[name], int(round(value)))
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = int(request.seed)
    options = _cpsat_options(request)
    params.num_workers = options.num_workers or os.cpu_count() or 1
    params.absolute_gap_limit = float(error)
    params.relative_gap_limit = 0.0
    for key, value in {**SAFE_PARAMETERS, **options.parameters}.items():
        setattr(params, key, value)
    if deadline is not None:
        params.max_time_in_seconds = max(0.001, deadline - time.perf_counter())
    code = solver.solve(model)
    analytic = lower * (1 - (L + 16) * _EPS)
    if code == cp_model.INFEASIBLE:
        return "infeasible", None, math.inf
    bound = analytic
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        proven = (solver.best_objective_bound - error) / (scale * div) * (1 - (L + 16) * _EPS)
        bound = max(analytic, proven) if math.isfinite(proven) else analytic
        bound = max(math.nextafter(math.nextafter(bound, -math.inf), -math.inf), 0.0)
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        plan = plan_of_values(data, lambda name: solver.value(var[name]))
        return ("optimal" if code == cp_model.OPTIMAL else "feasible"), plan, bound
    return "unknown", None, bound


# --------------------------------------------------------------------------- MILP


def _run_milp(data: GroupData, request: SolveRequest, hint: Plan | None, best_value: float, deadline):
    """(status, plan or None, proven bound in ms) of the MILP for one P."""
    import pulp

    from ..milp.backends import READBACK_SECONDS, READBACK_SHARE, pulp_quiet, set_starts, solve_cbc, solve_highs

    p = data.problem
    m, v = p.microbatches, p.training.virtual_stages
    options = _milp_options(request)
    threads = options.threads
    lower = data.time_lower_bound()
    ceiling = best_value if data.objective == "bottleneck" else best_value / m
    cap = 2 * ceiling if math.isfinite(ceiling) else max(1e6 * lower, 1.0)

    def capped(ms: float) -> float:
        return min(ms, cap)

    check = build_guard(deadline)
    began = time.perf_counter()
    spec = formulation(data, capped, None, check, memory=MemoryUnits(p.cluster.gpu_memory_bytes, MILP_MEMORY_GRID_BITS))
    with pulp_quiet():
        lp, var = build_pulp(spec, check)
    # handing the model to the backend takes a share of the build time (milp.py): do not start what cannot finish
    built = time.perf_counter() - began
    if deadline is not None and deadline - time.perf_counter() < HANDOVER_SHARE * built * (1 + READBACK_SHARE) + READBACK_SECONDS:
        raise BuildTimeout
    starts = None
    if hint is not None:
        values = values_of_plan(data, hint)
        if values is not None:
            starts = {var[name]: value for name, value in complete_values(spec, values).items() if name in var}

    def value(name) -> float:
        return var[name].value() or 0.0

    excluded = 0
    while True:  # as the slot model's milp: a plan over the memory limit by the tolerance is cut off, then again
        with pulp_quiet():
            set_starts(starts)
            if options.backend == "highs":
                outcome = solve_highs(lp, deadline, threads, options.log, starts is not None, options.presolve)
            else:
                outcome = solve_cbc(lp, deadline, threads, options.log, starts is not None, preprocess=True)
        if not outcome.has_solution or outcome.status == "infeasible" or excluded >= MAX_EXCLUSIONS:
            break
        plan = plan_of_values(data, value)
        try:
            evaluate(p, plan, data.objective)
            break
        except PlanError as err:
            if err.rule != 6 or err.stage is None or (deadline is not None and time.perf_counter() >= deadline):
                break
            terms, rhs = group_exclusion(data, plan, err.stage, value)
            lp += pulp.lpSum(coef * var[k] for k, coef in terms.items()) <= rhs, f"exclude_{excluded}"
            excluded += 1
    div = 1 if data.objective == "bottleneck" else v
    analytic = lower * (1 - 1e-12)
    if outcome.status == "infeasible":
        return "infeasible", None, math.inf
    bound = analytic
    if outcome.bound is not None and math.isfinite(outcome.bound):
        bound = max(analytic, (outcome.bound - MILP_BOUND_MARGIN * max(abs(outcome.bound), 1.0)) / div)
    if not outcome.has_solution:
        return "unknown", None, bound
    return outcome.status, plan_of_values(data, value), bound
