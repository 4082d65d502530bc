"""``milp``: the exact slot model (:mod:`.slot`) as a mixed-integer linear program.

Built with PuLP and solved by HiGHS through highspy (default) or by CBC
(``options={"backend": "cbc"}``). The model is the one ``cpsat`` solves,
linearised, with times kept in floating-point ms (no integer scaling):

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.milp.solver``.
"""
from __future__ import annotations

import math
import time

from ...plan import PlanError, evaluate
from ...problem import Problem
from ..base import Candidate, SolveRequest, register
from ..interleaved.solve import solve_interleaved
from ..options import Capabilities, MilpOptions
from ..slot.data import SlotData, SlotStart, plan_of_decisions, slot_start
from ..slot.run import (
    HANDOVER_SHARE,
    MAX_EXCLUSIONS,
    BuildTimeout,
    build_guard,
    build_timeout_candidate,
    infeasible_message,
    model_size_refusal,
)
from .formulation import build_milp, exclude_stage, read_decisions, start_values

__all__ = ["solve_milp", "build_milp", "start_values", "CAPABILITIES"]

# Relative margin taken off a backend's dual bound for its feasibility tolerances.
BOUND_MARGIN = 1e-7
# "optimal" needs the plan's exact value within this of the proven bound.
OPTIMAL_GAP = 1e-6


_BOTH = frozenset({"bottleneck", "iteration"})
CAPABILITIES = Capabilities(
    schedules={"1f1b": _BOTH, "zb-h1": _BOTH, "gpipe": _BOTH, "interleaved": _BOTH}, exact=True
)


@register("milp", options=MilpOptions, capabilities=CAPABILITIES)
def solve_milp(problem: Problem, request: SolveRequest) -> Candidate:
    if problem.training.schedule == "interleaved":  # its own space and model
        return solve_interleaved(problem, request, "milp")
    options = request.options
    assert isinstance(options, MilpOptions)
    backend, threads = options.backend, options.threads
    check = build_guard(request.deadline())
    refusal = model_size_refusal("milp", problem, request)
    if refusal:
        return Candidate("error", message=refusal, timed_out=True)
    # local: the backends subclass PuLP's solver classes, which imports PuLP (see partitioner.core.lazy)
    from .backends import READBACK_SECONDS, READBACK_SHARE, pulp_quiet, set_starts, solve_cbc, solve_highs

    extra: dict = {}
    begun = SlotStart()
    try:
        begun = slot_start(problem, request, extra, check, begun)
        data, hint_plan, hint_source, decisions = begun.data, begun.plan, begun.source, begun.decisions
        assert data is not None, "slot_start sets the tables"
        began = time.perf_counter()
        with pulp_quiet():
            lp, var = build_milp(data, check, begun.ceiling_ms)
        built = time.perf_counter() - began
        starts = start_values(var, data, decisions, begun.ceiling_ms) if decisions is not None else None
        # handing the model to the backend (highspy calls, or an MPS file for CBC) and reading
        # the answer back take a share of the build time: no point starting what cannot finish
        deadline = request.deadline()
        if deadline is not None and deadline - time.perf_counter() < HANDOVER_SHARE * built * (1 + READBACK_SHARE) + READBACK_SECONDS:
            raise BuildTimeout
    except BuildTimeout:
        return build_timeout_candidate("milp", problem, request, begun.plan, begun.source, extra)

    def run():
        if starts is not None:  # a re-solve starts from the hint again, not from the refused solution
            set_starts(starts)
        with pulp_quiet():
            if backend == "highs":
                return solve_highs(lp, deadline, threads, options.log, starts is not None, options.presolve)
            return solve_cbc(lp, deadline, threads, options.log, starts is not None)

    outcome, excluded = _solve_within_memory(problem, data, lp, var, run, deadline)
    extra["milp"] = {"backend": backend, "status": outcome.status_text, "hint": hint_source, "threads": threads}
    if excluded:
        extra["milp"]["stages_excluded"] = excluded

    return _candidate(problem, data, backend, outcome, var, hint_plan, hint_source, extra)


def _solve_within_memory(problem: Problem, data: SlotData, lp, var, run, deadline: float | None):
    """``run()`` the backend, and again while its plan breaks rule 6 by the backend's tolerance: each time the
    refused stage is cut off the model (:func:`.formulation.exclude_stage`, a cut no valid plan crosses).

    The memory rows of the linear-memory model (several groups, or tied weights) hold each stage to the GPU's
    memory as a share of it, within the backends' feasibility tolerance (1e-9 relative, bytes on a GPU of
    gigabytes): a plan a few bytes over passes the model and fails :func:`~partitioner.plan.evaluate`.
    Re-solving without it gives the same status as the exact methods (``optimal`` or ``infeasible``), never
    ``error``. Returns the last outcome and the number of stages excluded. At most :data:`MAX_EXCLUSIONS`
    re-solves, and none past the deadline.
    """
    excluded = 0
    while True:
        outcome = run()
        if not outcome.has_solution or outcome.status == "infeasible":
            return outcome, excluded
        decisions = read_decisions(var, data)
        try:
            evaluate(problem, plan_of_decisions(data, decisions), data.objective)
            return outcome, excluded
        except PlanError as err:
            if err.rule != 6 or err.stage is None or excluded >= MAX_EXCLUSIONS:
                return outcome, excluded
            if deadline is not None and time.perf_counter() >= deadline:
                return outcome, excluded
            j = decisions.stages - 1 - err.stage
            first, end = decisions.starts[j], decisions.ends(data)[j]
            if not exclude_stage(lp, var, data, j, first, end - 1, decisions.configs[j]):
                return outcome, excluded
            excluded += 1


def _candidate(problem, data, backend, outcome, var, hint_plan, hint_source, extra) -> Candidate:
    """Turn the backend's answer into a candidate (plan, proven bound, message)."""
    analytic = data.lower_bound()
    bound = _conservative(outcome.bound, analytic)
    if outcome.status == "infeasible":
        if hint_plan is not None:  # cannot happen for a correct solver: the start is a solution
            message = f"milp: {backend} claimed infeasibility against a valid start; returning the {hint_source} plan"
            return Candidate("feasible", hint_plan, analytic, message, extra)
        return Candidate("infeasible", message=infeasible_message(problem), extra=extra)
    if not outcome.has_solution:
        if hint_plan is not None:
            message = f"milp: {backend} found no plan in time; returning the {hint_source} plan"
            return Candidate("feasible", hint_plan, bound, message, extra, timed_out=outcome.timed_out)
        return Candidate("error", message=f"milp: {backend} found no plan ({outcome.status_text})", extra=extra,
                         timed_out=outcome.timed_out)
    plan = plan_of_decisions(data, read_decisions(var, data))
    try:
        value = evaluate(problem, plan, data.objective).value
    except PlanError as err:  # a tolerance artefact of the backend
        if hint_plan is None:
            return Candidate("error", message=f"milp: the {backend} solution is not a valid plan: {err}", extra=extra)
        message = f"milp: {backend} returned an invalid plan ({err}); returning the {hint_source} plan"
        return Candidate("feasible", hint_plan, bound, message, extra)
    if hint_plan is not None:
        hinted = evaluate(problem, hint_plan, data.objective).value
        if hinted < value:  # the backend's tolerances let it stop at a plan no better than the start
            plan, value = hint_plan, hinted
    if outcome.status == "optimal":
        if value - bound <= OPTIMAL_GAP * value:
            return Candidate("optimal", plan, bound, "", extra)
        message = (
            f"milp: {backend} proved its model optimal, but the plan's exact value {value:.9g} exceeds the proven "
            f"bound {bound:.9g} by more than {OPTIMAL_GAP:g} (capped or tolerance-limited times); reported as feasible"
        )
        return Candidate("feasible", plan, bound, message, extra)
    message = f"milp: {backend} stopped ({outcome.status_text}) before optimality was proven"
    return Candidate("feasible", plan, bound, message, extra, timed_out=outcome.timed_out)


def _conservative(dual_bound: float | None, analytic: float) -> float:
    best = analytic * (1 - 1e-12)
    if dual_bound is not None and math.isfinite(dual_bound):
        best = max(best, dual_bound - BOUND_MARGIN * max(abs(dual_bound), 1.0))
    return max(best, 0.0)
