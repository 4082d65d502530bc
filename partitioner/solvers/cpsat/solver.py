"""``cpsat``: the exact slot model (:mod:`.slot`) solved by OR-Tools CP-SAT.

Decisions, per slot ``j`` (stage ``P - 1 - j``, see :mod:`.slot`):

* ``before[i][j] = [s_i >= j]``: the order encoding of the layer -> slot
  map, non-increasing in ``i`` and in ``j``, with ``s`` stepping down by at
  most 1 from layer to layer and ``s_i <= L - 1 - i``; slot ``j`` is active
  when ``before[0][j]``, the stage count ``P = 1 + sum_j before[0][j]`` is one
  of the feasible counts, and layer ``i`` is in slot ``j`` when
  ``x_ij = before[i][j] - before[i][j+1]`` is 1;
* ``use[j][g][l]``: one layout per segment -- per slot ``j`` and group
  (module run) ``g`` it covers, ``sum_l use[j][g][l] = cover[j][g]`` (see
  :mod:`.slot`); ``size[j][s]``: one size per active slot, every
  segment's layout of that size; the devices sum to N. With one group
  (every v1 problem) ``size`` is channelled from ``use[j][0]``;
* when the placement matters, ``node[j][k]`` puts a small slot on node
  ``k``: a node holds small slots of exactly ``gpus_per_node`` devices or
  none, nodes are numbered in order of first use by slot index (symmetry
  breaking), and ``link[j]`` is true exactly when slots ``j + 1`` and ``j``
  share a node.

Times, in integer units (:func:`.slot.times.integer_times`):

* ``compute_j >= sum_i tau[l][i] x_ij`` when slot ``j`` uses layout ``l``
  (several groups: ``compute_j = sum_g compute_jg`` with ``compute_jg >=
  sum_{i in g} tau[l][i] x_ij`` when ``use[j][g][l]``; ``tau`` are
  differences of exactly rounded prefix sums, so a segment's compute is off
  by at most one unit), and the redundant ``d compute_j >= sum_i work_i
  x_ij`` for a slot of ``d`` devices (``work_i`` = the least device-units of
  layer ``i``), which lets the LP see the device budget;
* memory and cost entries: one group, the clauses ``use[j][0][l] and c_j <= a
  =>  c_{j-1} <= reach[l, stash_j][a]``; several groups, ``memory_jg >=
  sum_{i in g} (weight + stash_j act)[i, l] x_ij`` when ``use[j][g][l]`` and
  ``sum_g memory_jg <= capacity``, in bytes divided by their gcd (exact; a
  missing entry counts capacity + 1);
* reshards (several groups): per slot and group boundary, a 0/1 ``w`` per
  same-size mesh pair, 1 exactly on the pair the slot's two segments use
  (:mod:`.slot`); ``reshard_j = sum 2 r w`` in units;
* ``x_j >= send[c_j][s][h]`` for the transfer between slots ``j + 1`` and
  ``j`` whenever the smaller of the two has at most ``sizes[s]`` devices
  and the link is of kind ``h`` (sends only shrink with more devices);
* ``t_j = compute_j + reshard_j + x_j + x_{j-1}``, ``T = max_j t_j``;
  ``bottleneck`` minimises T, ``iteration`` minimises ``sum t_j + (m - 1) T``.

Schedules (``training.schedule``, :mod:`.slot.schedule`): the stash of slot
``j`` is the schedule's (1F1B and ZB-H1 ``min(m, j + 1)``, GPipe ``m``), in
the memory rules above; ``bottleneck`` is max t under every schedule, and
1F1B's ``iteration`` is the estimate above. ZB-H1's and GPipe's
``iteration`` estimates are optimised exactly from two parts per slot, each
stated like ``compute_j`` from its own exactly rounded prefix sums
(:mod:`.parts`):

* ``zb-h1``: ``u_j = (fwd + bwd - W) compute + reshard_j + x_j + x_{j-1}``
  and ``W_j`` (weight gradients only); ``Z >= (m - 1) u_j + k_P W_j`` for
  each feasible stage count ``P > j``, enforced unless slot ``P`` is active
  (more than P stages), with ``k_P = max(m - P + 1, 1)``; minimises
  ``sum u_j + Z``, so Z is the max for the chosen P exactly;
* ``gpipe``: ``F_j = fwd compute + r_j + x_{j-1}`` and ``B_j = bwd compute
  + r_j + x_j`` (``r_j`` the reshards once); minimises ``sum F + (m - 1)
  max F + sum B + (m - 1) max B``.

The integer model's error counts every part of the objective (at most
``J + m - 1 + k_max`` stage errors for ZB-H1, ``2 (J + m - 1)`` for GPipe,
:func:`.slot.times.integer_times`), and the stage ceiling of the hint is the
schedule's (:func:`.slot.schedule.ceiling_ms`), so the reported bound stays a
proven lower bound.

Lower-bounding constraints (``>=``) suffice: both objectives are
non-decreasing in every stage time, so a minimiser sets each time to its
value where it matters, and every returned plan is re-evaluated exactly.

The greedy plan (or the caller's ``warm_start``) is given as a complete
hint, and its objective as an upper bound; its stage ceiling
(:func:`.slot.times.stage_ceiling_ms`) caps every time coefficient, so a
sentinel cost (``fwd_ms: 1e18``) costs neither range nor resolution. The
bound is converted back to ms conservatively
(:func:`.slot.times.conservative_bound`), and "optimal" is claimed only when
that bound is within the resolution of the plan's exact value (when the
times span too wide a range for the integer unit, the answer is
``feasible`` with the proven gap). Deterministic for a fixed seed with
``num_workers=1``.

Time limit: it covers building the tables, the greedy hint (or, where greedy
finds none, ``dp``'s plan within :data:`DP_HINT_SHARE` of the time left) and the model
(a model too large to build in the time left is refused at once,
:func:`.slot.run.model_size_refusal`; a build cut short returns the hint as
``feasible``), and CP-SAT gets what is left.

Arc-flow: when the problem is comm-free (no stage boundary carries bytes)
and has 1F1B's objective and stash (``1f1b``; ``zb-h1`` with the bottleneck
objective), format v1 or v2 (one config per module segment), ``cpsat``
solves the arc-flow model of :mod:`.arcflow` instead
(:mod:`.arcflow_run`): a path through (layer boundary, devices used, stages
from the end) states, whose relaxation at a fixed threshold on the slowest
stage is integral; it proves optima of the 64-layer, 4 x 8 GPU benchmark in
seconds. Option ``formulation: slot`` forces the slot model.

Reach of the slot model: on the 4 x 8 GPU benchmark family (``tests/test_cpsat.py``) CP-SAT
proves optimality within seconds up to about 24 layers; from 32 layers on
it often finds the optimum quickly but does not close the gap within
minutes, because the LP relaxation of the slot model sees little more than
the analytic bound (total work / N): what makes extra stages or wide tensor
parallelism costly shows only once the stage sizes are fixed. Use ``dp``
for large problems with transfers and ``cpsat`` to cross-check it.

CP-SAT's presolve is switched off by default. With it, OR-Tools 9.15
certified wrong optima and wrong infeasibility on this model -- about one
random small problem in a thousand (cross-checked against ``brute``), and
some 8-16 layer benchmark problems ("optimal" plans beaten by the same
model solved without presolve); compare or-tools
issues #5274 and #5293. Switching off single presolve steps (probing,
inclusion detection, symmetry) did not remove every case; without presolve
the answers agreed with ``brute`` on 7,000 random problems.
``options={"parameters": {"cp_model_presolve": True}}`` turns it back on.

Options: :class:`~partitioner.solvers.options.CpsatOptions` (``num_workers``,
``hint``, ``resolution``, ``log``, ``parameters``, ``formulation``), checked
by :func:`~partitioner.solvers.solve` before the method runs.

References
----------
.. [1] L. Perron and F. Didier, "CP-SAT", Google OR-Tools v9
   (https://developers.google.com/optimization), 2024.
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
