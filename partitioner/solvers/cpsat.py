"""``cpsat``: the exact slot model (:mod:`.slotmodel`) solved by OR-Tools CP-SAT.

Decisions, per slot ``j`` (stage ``P - 1 - j``, see :mod:`.slotmodel`):

* ``active[j]`` (``active[0]`` true, non-increasing; ``P = sum(active)``
  takes one of the feasible stage counts) and ``start[j] = c_j``, strictly
  below ``c_{j-1}`` on an active slot, 0 on the first stage and beyond;
* ``use[j][l]``: exactly one layout on an active slot; the devices sum to N;
* ``node[j][k]`` for a small slot, when the placement matters: each node
  holds small stages of exactly ``gpus_per_node`` devices or none
  (``load`` variables), nodes numbered in order of first use by slot
  index (symmetry breaking); ``link[j]`` is true exactly when slots
  ``j + 1`` and ``j`` sit on one node.

Times, in integer units (:func:`.slotmodel.integer_times`):

* compute of slot ``j`` = ``prefix[l][c_{j-1}] - prefix[l][c_j]`` for its
  layout ``l``, two ``AddElement`` over the flattened (layout, layer) prefix table;
* memory and cost-entry rules: ``c_{j-1} <= reach[l, stash_j][c_j]`` (an element);
* the transfer into slot ``j`` from slot ``j + 1``: an element over
  (boundary layer, smaller stage size, link kind);
* ``t_j = compute_j + x_j + x_{j-1}``, ``T >= t_j``; ``bottleneck``
  minimises T, ``iteration`` minimises ``sum t_j + (m - 1) T``.

The greedy plan (or the caller's ``warm_start``) is given as a hint. The
returned value is recomputed exactly by :func:`~partitioner.plan.evaluate`;
the bound is converted back to ms conservatively
(:func:`.slotmodel.conservative_bound`). Deterministic for a fixed seed with
``num_workers=1``.

Options
-------
num_workers : int
    CP-SAT search workers (default: the machine's cores).
hint : bool
    Give the greedy plan as a hint when no ``warm_start`` is given (default True).
resolution : float
    Target relative accuracy of the integer time scale (default 1e-8).
log : bool
    Print CP-SAT's search log.

References
----------
.. [1] L. Perron and F. Didier, "CP-SAT", Google OR-Tools v9
   (https://developers.google.com/optimization), 2024.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..plan import Plan, PlanError, evaluate
from ..problem import Problem
from .base import Candidate, SolveRequest, register
from .feasibility import explain_infeasible, quick_infeasibility
from .slotmodel import (
    RESOLUTION,
    IntegerTimes,
    SlotData,
    SlotDecisions,
    conservative_bound,
    decisions_of_plan,
    integer_times,
    plan_of_decisions,
    slot_data,
)

__all__ = ["solve_cpsat", "build_model", "CpVars"]

_STATUS = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
}


@register("cpsat", options=("num_workers", "hint", "resolution", "log"))
def solve_cpsat(problem: Problem, request: SolveRequest) -> Candidate:
    start = time.perf_counter()
    if problem.cluster.topology is not None:
        return Candidate("error", message="cpsat: custom cluster topologies are not supported by the solvers yet")
    reason = quick_infeasibility(problem)
    if reason:
        return Candidate("infeasible", message=reason)
    data = slot_data(problem, request.objective)
    times = integer_times(data, float(request.option("resolution", RESOLUTION)))
    model, var = build_model(data, times)

    hint_plan, hint_source, extra = None, None, {}
    if request.warm_start is not None:
        hint_plan, why = _valid(problem, request.warm_start)
        hint_source = "warm_start" if hint_plan is not None else None
        if why:
            extra["warm_start"] = f"ignored: {why}"
    elif request.option("hint", True):
        from .greedy import solve_greedy

        greedy = solve_greedy(problem, request)
        if greedy.plan is not None:
            hint_plan, hint_source = greedy.plan, "greedy"
    if hint_plan is not None:
        decisions = decisions_of_plan(data, hint_plan)
        if decisions is not None:
            add_hint(model, var, data, decisions)
        else:
            hint_source = None

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = int(request.seed)
    params.num_workers = int(request.option("num_workers", os.cpu_count() or 1))
    params.log_search_progress = bool(request.option("log", False))
    # The model's objective is only accurate to `error` units (integer_times):
    # closing the last units of gap would prove nothing about the contract.
    params.absolute_gap_limit = float(times.error)
    params.relative_gap_limit = 0.0
    if request.time_limit is not None:
        params.max_time_in_seconds = max(0.0, request.time_limit - (time.perf_counter() - start))
    code = solver.solve(model)

    extra.update(
        {
            "cpsat": {
                "status": solver.status_name(code),
                "wall_seconds": solver.wall_time,
                "branches": solver.num_branches,
                "conflicts": solver.num_conflicts,
                "num_workers": params.num_workers,
                "hint": hint_source,
            },
            "time_unit_ms": 1.0 / times.scale,
            "model_error_ms": times.error / times.scale,
        }
    )
    analytic = data.lower_bound()
    if code == cp_model.INFEASIBLE:
        return Candidate("infeasible", message=explain_infeasible(problem), extra=extra)
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        plan = plan_of_decisions(data, read_decisions(solver, var, data))
        bound = conservative_bound(solver.best_objective_bound, times, analytic)
        message = "" if code == cp_model.OPTIMAL else "cpsat: time limit reached before optimality was proven"
        return Candidate(_STATUS[code], plan, bound, message, extra)
    if code == cp_model.UNKNOWN and hint_plan is not None:
        bound = analytic
        if solver.best_objective_bound > -float("inf"):
            bound = conservative_bound(solver.best_objective_bound, times, analytic)
        return Candidate(
            "feasible", hint_plan, bound, f"cpsat: time limit reached; returning the {hint_source} plan", extra
        )
    if code == cp_model.UNKNOWN:
        return Candidate("error", message="cpsat: time limit reached before any plan was found", extra=extra)
    return Candidate("error", message=f"cpsat: internal error, solver status {solver.status_name(code)}", extra=extra)


def _valid(problem: Problem, plan: Plan) -> tuple[Plan | None, str]:
    try:
        evaluate(problem, plan)
    except PlanError as err:
        return None, str(err)
    return plan.with_device_ids(), ""


# --------------------------------------------------------------------------- model


@dataclass
class CpVars:
    """The model's variables (lists indexed by slot; ``None`` where absent)."""

    active: list
    start: list
    use: list  # use[j][l]
    layout: list
    compute: list
    send: list  # x_j: into slot j from slot j+1, j < J-1
    stage: list  # t_j
    bottleneck: cp_model.IntVar
    node: list  # node[j][k] (placement only)
    link: list  # link[j] (placement only)
    objective: object


def build_model(data: SlotData, times: IntegerTimes) -> tuple[cp_model.CpModel, CpVars]:
    """The CP-SAT model of ``data`` with times in ``times`` units."""
    model = cp_model.CpModel()
    J, L, m = data.slots, data.num_layers, data.microbatches
    N, G = data.problem.num_devices, data.gpus_per_node
    nl = len(data.layouts)

    # stage count and cut points
    active = [model.new_bool_var(f"active{j}") for j in range(J)]
    model.add(active[0] == 1)
    for j in range(J - 1):
        model.add_implication(active[j + 1], active[j])
    model.add_linear_expression_in_domain(sum(active), cp_model.Domain.from_values(data.counts))
    start = [model.new_int_var(0, max(0, L - 1 - j), f"start{j}") for j in range(J)]
    end = [L] + start[:-1]  # c_{j-1}: one past the last layer of slot j
    for j in range(J):
        model.add(start[j] + 1 <= end[j]).only_enforce_if(active[j])
        if j + 1 < J:
            model.add(start[j] == 0).only_enforce_if(~active[j + 1])
    model.add(start[J - 1] == 0)

    # one layout per active slot; devices sum to N
    use = [[model.new_bool_var(f"use{j}_{k}") for k in range(nl)] for j in range(J)]
    layout = [model.new_int_var(0, nl - 1, f"layout{j}") for j in range(J)]
    for j in range(J):
        model.add(sum(use[j]) == active[j])
        model.add(layout[j] == sum(k * use[j][k] for k in range(nl)))
    model.add(sum(data.layouts[k].devices * use[j][k] for j in range(J) for k in range(nl)) == N)

    # compute: prefix[l][c_{j-1}] - prefix[l][c_j] for the slot's layout l; the
    # elements share their index c_j, so CP-SAT encodes each c_j once
    compute = []
    top_compute = max(max(row[-1] for row in times.time_prefix), 0)
    at = [[None] * nl for _ in range(J)]
    for j in range(J):
        for k in range(nl):
            table = times.time_prefix[k]
            at[j][k] = model.new_int_var(min(table), max(table), f"prefix{j}_{k}")
            model.add_element(start[j], table, at[j][k])
    for j in range(J):
        c = model.new_int_var(0, top_compute, f"compute{j}")
        for k in range(nl):
            end_value = times.time_prefix[k][L] if j == 0 else at[j - 1][k]
            model.add(c == end_value - at[j][k]).only_enforce_if(use[j][k])
        model.add(c == 0).only_enforce_if(~active[j])
        compute.append(c)

    # memory and cost entries: the slot ends within reach of its start
    for j in range(J):
        for k in range(nl):
            table = [int(v) for v in data.reach_of(k, j)]
            if min(table[: L - j]) >= L:  # reaches the end from every start: no constraint
                continue
            reach = model.new_int_var(0, L, f"reach{j}_{k}")
            model.add_element(start[j], table, reach)
            model.add(end[j] <= reach).only_enforce_if(use[j][k])

    # placement: small slots on nodes, links between adjacent slots
    node, link = [], []
    if data.placement:
        node, link = _placement(model, data, use, active)

    # transfers into slot j from slot j+1
    send = []
    if data.transfers:
        S, H = len(data.sizes), len(data.bandwidths)
        table = [int(v) for v in times.send.reshape(-1)]
        size_code = [sum((data.size_index[k] + 1) * use[j][k] for k in range(nl)) for j in range(J)]
        for j in range(J - 1):
            smaller = model.new_int_var(0, S, f"smaller{j}")
            a = model.new_int_var(0, S, f"size_code{j}")
            b = model.new_int_var(0, S, f"size_code_prev{j}")
            model.add(a == size_code[j])
            model.add(b == size_code[j + 1])
            model.add_min_equality(smaller, [a, b])
            index = (start[j] * (S + 1) + smaller) * H + (link[j] if data.placement else 0)
            x = model.new_int_var(0, max(table), f"send{j}")
            model.add_element(index, table, x)
            send.append(x)

    # stage times and the objective
    top = top_compute + 2 * (max(times.send.reshape(-1)) if data.transfers else 0)
    stage = []
    for j in range(J):
        t = model.new_int_var(0, top, f"time{j}")
        terms = [compute[j]]
        if data.transfers:
            if j > 0:
                terms.append(send[j - 1])
            if j < J - 1:
                terms.append(send[j])
        model.add(t == sum(terms))
        stage.append(t)
    floor_units = max(0, int(times.scale * _bottleneck_floor(data)) - 2)
    bottleneck = model.new_int_var(min(floor_units, top), top, "bottleneck")
    model.add_max_equality(bottleneck, stage)
    if data.objective == "bottleneck":
        objective = bottleneck
    else:
        objective = sum(stage) + (m - 1) * bottleneck
    model.minimize(objective)
    return model, CpVars(active, start, use, layout, compute, send, stage, bottleneck, node, link, objective)


def _bottleneck_floor(data: SlotData) -> float:
    """The analytic lower bound on the slowest stage (ms), used as a redundant bound on T."""
    from dataclasses import replace

    return replace(data, objective="bottleneck").lower_bound() * (1 - 1e-12)


def _placement(model: cp_model.CpModel, data: SlotData, use: list, active: list) -> tuple[list, list]:
    J, G, nl = data.slots, data.gpus_per_node, len(data.layouts)
    # a shared node holds at least two small stages (each at most G/2 devices)
    bins = min(data.problem.cluster.nodes, J // 2)
    small = [[k for k in range(nl) if data.small(k)] for _ in range(J)]
    node = []
    loads: list[list] = [[] for _ in range(bins)]
    for j in range(J):
        # first-use numbering: slot j can only open node <= j
        row = [model.new_bool_var(f"node{j}_{k}") for k in range(min(j + 1, bins))]
        node.append(row)
        model.add(sum(row) == sum(use[j][k] for k in small[j]))
        devices = sum(data.layouts[k].devices * use[j][k] for k in small[j])
        for k, on in enumerate(row):
            share = model.new_int_var(0, G // 2, f"load{j}_{k}")
            model.add(share == devices).only_enforce_if(on)
            model.add(share == 0).only_enforce_if(~on)
            loads[k].append(share)
            if k > 0:  # node k is opened after node k-1
                model.add_bool_or([node[i][k - 1] for i in range(j) if k - 1 < len(node[i])]).only_enforce_if(on)
    for k in range(bins):
        full = model.new_bool_var(f"full{k}")
        model.add(sum(loads[k]) == G * full)
    link = []
    for j in range(J - 1):
        both = []
        for k in range(min(len(node[j]), len(node[j + 1]))):
            w = model.new_bool_var(f"shared{j}_{k}")
            model.add_implication(w, node[j][k])
            model.add_implication(w, node[j + 1][k])
            model.add_bool_or([~node[j][k], ~node[j + 1][k], w])
            both.append(w)
        h = model.new_bool_var(f"link{j}")
        model.add(h == sum(both))
        link.append(h)
    return node, link


# --------------------------------------------------------------------------- hints and solutions


def add_hint(model: cp_model.CpModel, var: CpVars, data: SlotData, d: SlotDecisions) -> None:
    """Hint the decisions of a plan (the solver completes the rest)."""
    J = data.slots
    for j in range(J):
        model.add_hint(var.active[j], j < d.stages)
        model.add_hint(var.start[j], d.starts[j])
        for k in range(len(data.layouts)):
            model.add_hint(var.use[j][k], d.layout[j] == k)
        model.add_hint(var.layout[j], max(d.layout[j], 0))
        if var.node:
            for k, on in enumerate(var.node[j]):
                model.add_hint(on, d.node[j] == k)
    for j, h in enumerate(var.link):
        model.add_hint(h, d.link[j])


def read_decisions(solver: cp_model.CpSolver, var: CpVars, data: SlotData) -> SlotDecisions:
    J = data.slots
    P = sum(int(solver.boolean_value(a)) for a in var.active)
    starts = tuple(int(solver.value(s)) if j < P else 0 for j, s in enumerate(var.start))
    layout = tuple(
        next(k for k, u in enumerate(var.use[j]) if solver.boolean_value(u)) if j < P else -1 for j in range(J)
    )
    node = [-1] * J
    for j, row in enumerate(var.node):
        for k, on in enumerate(row):
            if solver.boolean_value(on):
                node[j] = k
    link = tuple(bool(solver.boolean_value(h)) for h in var.link) or tuple(False for _ in range(J - 1))
    return SlotDecisions(P, starts, layout, tuple(node), link)
