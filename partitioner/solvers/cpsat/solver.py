"""``cpsat``: the exact slot model (:mod:`.slot`) solved by OR-Tools CP-SAT.

Decisions, per slot ``j`` (stage ``P - 1 - j``, see :mod:`.slot`):

* ``before[i][j] = [s_i >= j]``: the order encoding of the layer -> slot map,
non-increasing in ``i`` and in ``j``, with ``s`` stepping down by at most 1
from layer to layer and ``s_i <= L - 1 - i``; slot ``j`` is active when
``before[0][j]``, the stage count ``P = 1 + sum_j before[0][j]`` is one of the
feasible counts, and layer ``i`` is in slot ``j`` when ``x_ij = before[i][j] -
before[i][j+1]`` is 1; * ``use[j][g][l]``: one layout per segment -- per slot
``j`` and group (module run) ``g`` it covers, ``sum_l use[j][g][l] =
cover[j][g]`` (see :mod:`.slot`); ``size[j][s]``: one size per active slot,
every segment's layout of that size; the devices sum to N.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.cpsat.solver``.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ...core.lazy import lazy_module
from ...plan import Plan, Status, evaluate
from ...problem import Problem
from ..base import Candidate, SolveRequest, register
from ..dp.method import solve_dp
from ..interleaved.solve import solve_interleaved
from ..options import Capabilities, CpsatOptions, DpOptions
from ..slot.data import SlotData, SlotStart, decisions_of_plan, plan_of_decisions, slot_start
from ..slot.run import (
    BuildTimeout,
    build_guard,
    build_timeout_candidate,
    infeasible_message,
    model_size_refusal,
)
from ..slot.times import RESOLUTION, RESOLUTION_ZB_H1, conservative_bound, integer_times, stage_ceiling_ms
from .arcflow import arcflow_reason
from .arcflow_run import solve_arcflow
from .formulation import (
    SAFE_PARAMETERS,
    ModelRangeError,
    apply_solver_options,
    build_model,
    hint_values,
    objective_units,
    read_decisions,
)

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:
    cp_model = lazy_module("ortools.sat.python.cp_model")

__all__ = ["solve_cpsat", "build_model", "hint_values", "read_decisions", "SAFE_PARAMETERS", "CAPABILITIES"]




_BOTH = frozenset({"bottleneck", "iteration"})
# zb-h1 iteration with a coarser default time unit (slot.times.RESOLUTION_ZB_H1 says why); interleaved:
# its own space of equal device groups (solvers/interleaved)
CAPABILITIES = Capabilities(
    schedules={"1f1b": _BOTH, "zb-h1": _BOTH, "gpipe": _BOTH, "interleaved": _BOTH}, exact=True
)


@register("cpsat", options=CpsatOptions, capabilities=CAPABILITIES)
def solve_cpsat(problem: Problem, request: SolveRequest) -> Candidate:
    if problem.training.schedule == "interleaved":  # its own space and model
        return solve_interleaved(problem, request, "cpsat")
    options = request.options
    assert isinstance(options, CpsatOptions)
    zb_h1_iteration = (problem.training.schedule, request.objective) == ("zb-h1", "iteration")
    resolution = options.resolution or (RESOLUTION_ZB_H1 if zb_h1_iteration else RESOLUTION)
    check = build_guard(request.deadline())
    refusal = model_size_refusal("cpsat", problem, request)
    if refusal:
        return Candidate("error", message=refusal, timed_out=True)
    extra: dict[str, Any] = {}
    begun = SlotStart()
    try:
        begun = slot_start(problem, request, extra, check, begun)
        if begun.plan is None and request.warm_start is None and options.hint:
            _dp_hint(problem, request, begun, extra)
        data, hint_plan, hint_source, decisions = begun.data, begun.plan, begun.source, begun.decisions
        assert data is not None, "slot_start sets the tables"
        times = integer_times(data, float(resolution), begun.ceiling_ms, check)
        if options.formulation == "auto" and not arcflow_reason(problem, request.objective, data):
            deadline = request.deadline()
            answer = solve_arcflow(problem, data, times, request, deadline, hint_plan, hint_source, extra, float(resolution), check)
            if answer is not None:
                return answer
        model, var = build_model(data, times, check)
        if decisions is not None:
            values = hint_values(var, data, times, decisions)
            for v, value in values.items():
                model.add_hint(v, value)
            # the hinted plan is feasible, so the optimum is no worse than it
            model.add(var.objective <= objective_units(var, values, data))
    except BuildTimeout:
        return build_timeout_candidate("cpsat", problem, request, begun.plan, begun.source, extra)
    except ModelRangeError as err:
        return Candidate("error", message=str(err))

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = int(request.seed)
    params.num_workers = options.num_workers or os.cpu_count() or 1
    # the model's objective is only accurate to `error` units (integer_times):
    # closing the last units of gap would prove nothing about the contract
    params.absolute_gap_limit = float(times.error)
    params.relative_gap_limit = 0.0
    apply_solver_options(solver, request, SAFE_PARAMETERS)
    if request.limited:
        params.max_time_in_seconds = request.left()
    code = solver.solve(model)

    extra["cpsat"] = {
        "status": solver.status_name(code),
        "wall_seconds": solver.wall_time,
        "branches": solver.num_branches,
        "conflicts": solver.num_conflicts,
        "num_workers": params.num_workers,
        "hint": hint_source,
    }
    extra["time_unit_ms"] = 1.0 / times.scale
    extra["model_error_ms"] = times.error / times.scale
    return _candidate(problem, data, times, solver, code, var, hint_plan, hint_source, extra, float(resolution))


DP_HINT_SHARE = 0.25  # of the time left: what the dp may take for a hint when the greedy heuristic found no plan


def _dp_hint(problem: Problem, request: SolveRequest, begun: SlotStart, notes: dict) -> None:
    """When the greedy heuristic found no plan (its rebalancing can miss every plan where memory binds), give
    CP-SAT the plan of ``dp`` as its hint, solved within :data:`DP_HINT_SHARE` of the time left: without a
    hint, CP-SAT found no plan at all on a 32-layer, 256-GPU problem with transfers in 600 s. The hint is
    only a start and an upper bound (the model's bound stays CP-SAT's own); ``extra["cpsat"]["hint"]``
    says ``dp``."""
    data = begun.data
    assert data is not None, "slot_start sets the tables"
    left = DP_HINT_SHARE * request.left() if request.limited else None
    if left is not None and left <= 0:
        return
    try:  # dp plans every problem cpsat is given (its capabilities cover cpsat's; interleaved went elsewhere)
        found = solve_dp(problem, SolveRequest(request.objective, time_limit=left, seed=request.seed,
                                               options=DpOptions()))
    except Exception as err:  # noqa: BLE001 -- a failed hint must not take the exact solver down
        notes["hint"] = f"dp failed: {type(err).__name__}: {err}"
        return
    if found.plan is None:
        return
    decisions = decisions_of_plan(data, found.plan)
    if decisions is None:
        return
    value = evaluate(problem, found.plan, request.objective).value
    begun.plan, begun.source, begun.decisions = found.plan, "dp", decisions
    begun.ceiling_ms = stage_ceiling_ms(request.objective, value, problem.microbatches, problem.training.schedule)


def _candidate(problem, data, times, solver, code, var, hint_plan, hint_source, extra, resolution=RESOLUTION) -> Candidate:
    """Turn the solver's answer into a candidate (plan, proven bound, message).

    "optimal" is claimed only when the proven bound is within ``resolution``
    of the plan's exact value: CP-SAT's OPTIMAL is about the integer model,
    whose unit may be coarser than that when the times span too wide a range.
    """
    analytic = data.lower_bound()
    if code == cp_model.INFEASIBLE:
        if hint_plan is not None:  # cannot happen for a correct solver: the hint is a solution
            return Candidate("error", message="cpsat: internal error, the solver rejected a valid plan", extra=extra)
        return Candidate("infeasible", message=infeasible_message(problem), extra=extra)
    bound = analytic
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        bound = conservative_bound(solver.best_objective_bound, times, analytic, data.num_layers)
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        plan = plan_of_decisions(data, read_decisions(solver, var, data))
        value = _value(problem, plan, data)
        if hint_plan is not None:
            hinted = _value(problem, hint_plan, data)
            if hinted < value:
                plan, value = hint_plan, hinted  # equal in the integer model, better after exact re-evaluation
        status: Status = "optimal" if code == cp_model.OPTIMAL else "feasible"
        message = "" if status == "optimal" else "cpsat: time limit reached before optimality was proven"
        if status == "optimal" and value - bound > resolution * value:
            status = "feasible"
            message = (
                f"cpsat: the integer time unit ({1 / times.scale:.3g} ms, forced by times from "
                f"{analytic:.6g} ms up to {data.upper_stage_ms():.6g} ms per stage) cannot prove "
                f"optimality to {resolution:g}; the gap is the proven one (use dp for an exact answer)"
            )
        return Candidate(status, plan, bound, message, extra, timed_out=code != cp_model.OPTIMAL)
    if code == cp_model.UNKNOWN and hint_plan is not None:
        message = f"cpsat: time limit reached; returning the {hint_source} plan"
        return Candidate("feasible", hint_plan, bound, message, extra, timed_out=True)
    if code == cp_model.UNKNOWN:
        return Candidate("error", message="cpsat: time limit reached before any plan was found", extra=extra,
                         timed_out=True)
    return Candidate("error", message=f"cpsat: internal error, solver status {solver.status_name(code)}", extra=extra)


def _value(problem: Problem, plan: Plan, data: SlotData) -> float:
    return evaluate(problem, plan, data.objective).value
