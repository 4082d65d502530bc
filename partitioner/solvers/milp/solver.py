"""``milp``: the exact slot model (:mod:`.slot`) as a mixed-integer linear program.

Built with PuLP and solved by HiGHS through highspy (default) or by CBC
(``options={"backend": "cbc"}``). The model is the one ``cpsat`` solves,
linearised, with times kept in floating-point ms (no integer scaling):

* ``before[i][j] = [s_i >= j]`` (binary, order encoding of the layer -> slot
  map), non-increasing in ``i`` and ``j`` with ``s`` stepping by at most 1;
  ``active_j = before[0][j]``; slot ``j`` holds layer ``i`` when
  ``x_ij = before[i][j] - before[i][j+1]`` is 1;
* ``use[j][g][l]`` (binary): one layout per segment, i.e. per slot ``j``
  and group (module run) ``g`` it covers (``sum_l use[j][g][l] =
  cover[j][g]``, :mod:`.slot`); several groups: ``size[j][s]``, one
  size per active slot shared by its segments; the devices sum to N;
* compute ``sum_{i,l} (fwd + bwd)_{il} z_ijl`` with continuous
  ``z_ijl`` (``sum_l z_ijl = x_ij``, ``z_ijl <= use[j][g(i)][l]``, no ``z``
  for a missing cost entry), which is exact at integer ``x``, ``use``;
* memory and cost entries: one group, the clauses ``use_j0l and c_j <= a  =>
  c_{j-1} <= reach[a]``; several groups, ``sum_{i,l} (weight + stash_j
  act)_{il} z_ijl <= capacity`` (``z`` fixed at 0 where one layer alone
  does not fit);
* reshards (several groups): per slot and group boundary a transport
  ``w[mu, nu] >= 0`` between the two segments' meshes, row sums
  ``<= mesh use``, total ``inside[j][g]``: exactly the pair used at integer
  ``use``; ``reshard_j = sum 2 r w``;
* transfers ``x_j >= send[c_j][s][h] - M (...)`` whenever the smaller of
  the two stages has at most ``sizes[s]`` devices and the link is of kind ``h``;
* placement (when it matters): small slots on nodes filled exactly, nodes
  opened in order of first use, ``link_j`` = the two slots share a node;
* ``t_j = compute_j + reshard_j + x_j + x_{j-1} <= T``; ``bottleneck``
  minimises T, ``iteration`` ``sum t_j + (m - 1) T``;
* schedules (:mod:`.slot.schedule`): the memory rules use the schedule's stash
  (1F1B and ZB-H1 ``min(m, j + 1)``, GPipe ``m``); ZB-H1's and GPipe's
  ``iteration`` estimates are stated exactly from two parts per slot, each
  linear in the shares ``z`` (:mod:`.parts`): ZB-H1 minimises ``sum u_j
  + Z`` with ``u_j = t_j - W_j`` and ``Z >= (m - 1) u_j + k_P W_j - (k_P -
  k_J) W_max active[P]`` per feasible count ``P > j`` (``k_P = max(m - P + 1,
  1)``, ``active[P]``: more than P stages, so only the chosen count's factor
  binds); GPipe minimises ``sum F + (m - 1) max F + sum B + (m - 1) max B``
  with ``F_j`` = forward compute + reshards + ``x_{j-1}``, ``B_j`` = backward
  compute + reshards + ``x_j``.

Time coefficients above a cap (:func:`.formulation.time_cap`: twice the hint's stage
ceiling, else 1e6 x the analytic bound) are capped: sentinel costs stay out
of the backends' numerics, the dual bound stays valid (capping only lowers
times), and a plan whose exact value exceeds the proven bound by more than
1e-6 is reported ``feasible``, not ``optimal``.

Time limit: it covers building (refused at once when the model cannot be
built in the time left; a build cut short returns the hint), handing the
model to the backend (skipped when it cannot finish), the backend's run
(HiGHS: the time left after the hand-over, plus an interrupt callback; CBC:
the time left when its command is made, in wall-clock seconds, and a kill
half a second past the deadline) and reading the answer back.

HiGHS runs without presolve by default (option ``presolve``): HiGHS 1.16's
presolve certified wrong optima and wrong infeasibility on format-v2 slot
models (found against ``brute``; CBC and HiGHS without presolve were right).
Both backends run with a zero relative and absolute MIP gap and tightened
feasibility tolerances, so that "optimal" is optimal up to floating-point
tolerance; the reported bound is the backend's dual bound less a relative
``1e-7`` margin for those tolerances. The returned value is recomputed
exactly by :func:`~partitioner.plan.evaluate`.

Options: :class:`~partitioner.solvers.options.MilpOptions` (``backend``,
``threads``, ``hint``, ``presolve``, ``log``), checked by
:func:`~partitioner.solvers.solve` before the method runs.

References
----------
.. [1] Q. Huangfu and J. A. J. Hall, "Parallelizing the dual revised simplex
   method", Mathematical Programming Computation 10 (2018) (HiGHS).
.. [2] J. Forrest et al., "coin-or/Cbc", https://github.com/coin-or/Cbc.
.. [3] S. Mitchell, M. O'Sullivan and I. Dunning, "PuLP: a linear
   programming toolkit for Python", 2011.
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
