"""``cpsat``: the exact slot model (:mod:`.slotmodel`) solved by OR-Tools CP-SAT.

Decisions, per slot ``j`` (stage ``P - 1 - j``, see :mod:`.slotmodel`):

* ``before[i][j] = [s_i >= j]``: the order encoding of the layer -> slot
  map, non-increasing in ``i`` and in ``j``, with ``s`` stepping down by at
  most 1 from layer to layer and ``s_i <= L - 1 - i``; slot ``j`` is active
  when ``before[0][j]``, the stage count ``P = 1 + sum_j before[0][j]`` is one
  of the feasible counts, and layer ``i`` is in slot ``j`` when
  ``x_ij = before[i][j] - before[i][j+1]`` is 1;
* ``use[j][g][l]``: one layout per segment -- per slot ``j`` and group
  (module run) ``g`` it covers, ``sum_l use[j][g][l] = cover[j][g]`` (see
  :mod:`.slotmodel`); ``size[j][s]``: one size per active slot, every
  segment's layout of that size; the devices sum to N. With one group
  (every v1 problem) ``size`` is channelled from ``use[j][0]``;
* when the placement matters, ``node[j][k]`` puts a small slot on node
  ``k``: a node holds small slots of exactly ``gpus_per_node`` devices or
  none, nodes are numbered in order of first use by slot index (symmetry
  breaking), and ``link[j]`` is true exactly when slots ``j + 1`` and ``j``
  share a node.

Times, in integer units (:func:`.slotmodel.integer_times`):

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
  (:mod:`.slotmodel`); ``reshard_j = sum 2 r w`` in units;
* ``x_j >= send[c_j][s][h]`` for the transfer between slots ``j + 1`` and
  ``j`` whenever the smaller of the two has at most ``sizes[s]`` devices
  and the link is of kind ``h`` (sends only shrink with more devices);
* ``t_j = compute_j + reshard_j + x_j + x_{j-1}``, ``T = max_j t_j``;
  ``bottleneck`` minimises T, ``iteration`` minimises ``sum t_j + (m - 1) T``.

Lower-bounding constraints (``>=``) suffice: both objectives are
non-decreasing in every stage time, so a minimiser sets each time to its
value where it matters, and every returned plan is re-evaluated exactly.

The greedy plan (or the caller's ``warm_start``) is given as a complete
hint, and its objective as an upper bound; its stage ceiling
(:func:`.slotmodel.stage_ceiling_ms`) caps every time coefficient, so a
sentinel cost (``fwd_ms: 1e18``) costs neither range nor resolution. The
bound is converted back to ms conservatively
(:func:`.slotmodel.conservative_bound`), and "optimal" is claimed only when
that bound is within the resolution of the plan's exact value (when the
times span too wide a range for the integer unit, the answer is
``feasible`` with the proven gap). Deterministic for a fixed seed with
``num_workers=1``.

Time limit: it covers building the tables, the greedy hint and the model
(a model too large to build in the time left is refused at once,
:func:`.slotmodel.model_size_refusal`; a build cut short returns the hint as
``feasible``), and CP-SAT gets what is left.

Reach: on the 4 x 8 GPU benchmark family (``tests/test_cpsat.py``) CP-SAT
proves optimality within seconds up to about 24 layers; from 32 layers on
it often finds the optimum quickly but does not close the gap within
minutes, because the LP relaxation of the slot model sees little more than
the analytic bound (total work / N): what makes extra stages or wide tensor
parallelism costly shows only once the stage sizes are fixed. Use ``dp``
for large problems and ``cpsat`` to cross-check it.

CP-SAT's presolve is switched off by default. With it, OR-Tools 9.15
certified wrong optima and wrong infeasibility on this model -- about one
random small problem in a thousand (cross-checked against ``brute``), and
some 8-16 layer benchmark problems ("optimal" plans beaten by the same
model solved without presolve); compare or-tools
issues #5274 and #5293. Switching off single presolve steps (probing,
inclusion detection, symmetry) did not remove every case; without presolve
the answers agreed with ``brute`` on 7,000 random problems.
``options={"parameters": {"cp_model_presolve": True}}`` turns it back on.

Options
-------
num_workers : int
    CP-SAT search workers (default: the machine's cores).
hint : bool
    Give the greedy plan as a hint when no ``warm_start`` is given (default True).
resolution : float
    Target relative accuracy of the integer time scale (default 1e-7).
log : bool
    Print CP-SAT's search log (on stderr).
parameters : dict
    Further CP-SAT parameters by name (``SatParameters`` fields).

References
----------
.. [1] L. Perron and F. Didier, "CP-SAT", Google OR-Tools v9
   (https://developers.google.com/optimization), 2024.
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ortools.sat.python import cp_model

from ..plan import Plan, evaluate
from ..problem import Problem
from .base import Candidate, SolveRequest, SolverError, register
from .feasibility import quick_infeasibility
from .slotmodel import (
    RESOLUTION,
    BuildTimeout,
    IntegerTimes,
    SlotData,
    SlotDecisions,
    build_guard,
    build_timeout_candidate,
    conservative_bound,
    decisions_from_values,
    decisions_of_plan,
    infeasible_message,
    int_option,
    integer_times,
    model_size_refusal,
    plan_of_decisions,
    slot_data,
    stage_ceiling_ms,
    starting_plan,
)

__all__ = ["solve_cpsat", "build_model", "hint_values", "read_decisions", "CpVars", "SAFE_PARAMETERS"]

# Solver parameters applied before the caller's (see the module docstring).
SAFE_PARAMETERS = {"cp_model_presolve": False}


@register("cpsat", options=("num_workers", "hint", "resolution", "log", "parameters"))
def solve_cpsat(problem: Problem, request: SolveRequest) -> Candidate:
    start = time.perf_counter()
    if problem.cluster.topology is not None:
        return Candidate("error", message="cpsat: custom cluster topologies are not supported by the solvers yet")
    reason = quick_infeasibility(problem)
    if reason:
        return Candidate("infeasible", message=reason)
    resolution = request.option("resolution", RESOLUTION)
    if isinstance(resolution, bool) or not isinstance(resolution, (int, float)) or not 0 < resolution < 1:
        raise SolverError(f"cpsat: option resolution must be a number in (0, 1), got {resolution!r}")
    check = build_guard(request.deadline(start))
    refusal = model_size_refusal("cpsat", problem, request, start)
    if refusal:
        return Candidate("error", message=refusal)
    extra: dict[str, Any] = {}
    hint_plan = hint_source = None
    try:
        data = slot_data(problem, request.objective, check)
        hint_plan, hint_source = starting_plan(problem, request, extra, check)
        decisions = decisions_of_plan(data, hint_plan) if hint_plan is not None else None
        if decisions is None:
            hint_plan = hint_source = None
        ceiling = None
        if hint_plan is not None:
            ceiling = stage_ceiling_ms(data.objective, _value(problem, hint_plan, data), data.microbatches)
        times = integer_times(data, float(resolution), ceiling, check)
        model, var = build_model(data, times, check)
        if decisions is not None:
            values = hint_values(var, data, times, decisions)
            for v, value in values.items():
                model.add_hint(v, value)
            # the hinted plan is feasible, so the optimum is no worse than it
            model.add(var.objective <= _objective_units(var, values, data))
    except BuildTimeout:
        return build_timeout_candidate("cpsat", problem, request, hint_plan, hint_source, extra)
    except ModelRangeError as err:
        return Candidate("error", message=str(err))

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = int(request.seed)
    params.num_workers = int_option(request, "cpsat", "num_workers", os.cpu_count() or 1)
    if request.option("log", False):  # to stderr: stdout carries the CLI's --json result
        params.log_search_progress = True
        params.log_to_stdout = False
        solver.log_callback = lambda line: print(line, file=sys.stderr)
    # the model's objective is only accurate to `error` units (integer_times):
    # closing the last units of gap would prove nothing about the contract
    params.absolute_gap_limit = float(times.error)
    params.relative_gap_limit = 0.0
    extra_parameters = request.option("parameters", {})
    if not isinstance(extra_parameters, dict):
        raise SolverError(f"cpsat: option parameters must be a mapping of CP-SAT parameters, got {extra_parameters!r}")
    for key, value in {**SAFE_PARAMETERS, **extra_parameters}.items():
        try:
            setattr(params, key, value)
        except (AttributeError, TypeError, ValueError) as err:
            raise SolverError(f"cpsat: bad CP-SAT parameter {key}={value!r}: {err}") from None
    if request.time_limit is not None:
        params.max_time_in_seconds = max(0.0, request.time_limit - (time.perf_counter() - start))
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
        status = "optimal" if code == cp_model.OPTIMAL else "feasible"
        message = "" if status == "optimal" else "cpsat: time limit reached before optimality was proven"
        if status == "optimal" and value - bound > resolution * value:
            status = "feasible"
            message = (
                f"cpsat: the integer time unit ({1 / times.scale:.3g} ms, forced by times from "
                f"{analytic:.6g} ms up to {data.upper_stage_ms():.6g} ms per stage) cannot prove "
                f"optimality to {resolution:g}; the gap is the proven one (use dp for an exact answer)"
            )
        return Candidate(status, plan, bound, message, extra)
    if code == cp_model.UNKNOWN and hint_plan is not None:
        message = f"cpsat: time limit reached; returning the {hint_source} plan"
        return Candidate("feasible", hint_plan, bound, message, extra)
    if code == cp_model.UNKNOWN:
        return Candidate("error", message="cpsat: time limit reached before any plan was found", extra=extra)
    return Candidate("error", message=f"cpsat: internal error, solver status {solver.status_name(code)}", extra=extra)


def _value(problem: Problem, plan: Plan, data: SlotData) -> float:
    return evaluate(problem, plan, data.objective).value


# --------------------------------------------------------------------------- model


@dataclass
class CpVars:
    """The model's variables, indexed by slot (empty lists where not modelled).

    ``before[i][j]`` holds the ints 1 (``j = 0``) and 0 (``j = J`` or
    ``j > L - 1 - i``) where the value is fixed; ``use[j][g][k]`` holds 0
    where slot ``j`` cannot cover group ``g`` in layout ``k``.
    """

    before: list
    use: list  # use[j][g][k]: slot j runs its segment of group g in layout k
    size: list
    at_most: list  # at_most[j][s]: slot j has at most sizes[s] devices (transfers only)
    compute: list
    send: list  # x_j: into slot j from slot j + 1, j < J - 1
    stage: list
    bottleneck: Any
    node: list
    load: list
    full: list
    shared: list
    link: list
    objective: Any
    segment: dict = field(default_factory=dict)  # (j, g) -> compute of the segment (several groups)
    memory: dict = field(default_factory=dict)  # (j, g) -> bytes (in memory units) of the segment
    pair: dict = field(default_factory=dict)  # (j, g) -> {(mu, nu): w}, the meshes across boundary g
    reshard: list = field(default_factory=list)  # per slot: units of its reshards (forward + backward)


def _minus(a, b):
    """``a - b`` for literals or the ints 0/1, folded when both are ints."""
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if isinstance(b, int):
        return a if b == 0 else a - b
    return a - b if not isinstance(a, int) or a else -b


def build_model(data: SlotData, times: IntegerTimes, check=None) -> tuple[cp_model.CpModel, CpVars]:
    """The CP-SAT model of ``data`` with times in ``times`` units; ``check()`` is called as it grows."""
    check = check or (lambda: None)
    model = cp_model.CpModel()
    J, L, m = data.slots, data.num_layers, data.microbatches
    N = data.problem.num_devices
    nl, ns = len(data.layouts), len(data.sizes)
    n_groups = len(data.groups)

    # order encoding of the layer -> slot map
    before = [
        [1] + [model.new_bool_var(f"ge{i}_{j}") if j <= L - 1 - i else 0 for j in range(1, J)] + [0] for i in range(L)
    ]
    for i in range(L):
        check()
        for j in range(1, J):
            _implies(model, before[i][j + 1], before[i][j])
            if i + 1 < L:
                _implies(model, before[i + 1][j], before[i][j])  # s is non-increasing
                _implies(model, before[i][j + 1], before[i + 1][j])  # ... by steps of at most 1
    active = [before[0][j] for j in range(J)]
    if J > 1:
        model.add_linear_expression_in_domain(sum(active), cp_model.Domain.from_values(data.counts))
    members = [[(i, before[i][j] - before[i][j + 1]) for i in range(L - j)] for j in range(J)]

    # one layout per segment (per slot and group it covers), one size per active slot; devices sum to N
    group_configs = [set(data.group_configs(g)) for g in range(n_groups)]
    cover = [[_minus(before[a][j], before[b][j + 1]) for a, b in data.groups] for j in range(J)]
    use = [
        [
            [model.new_bool_var(f"use{j}_{g}_{k}") if k in group_configs[g] and not _zero(cover[j][g]) else 0 for k in range(nl)]
            for g in range(n_groups)
        ]
        for j in range(J)
    ]
    size = [[model.new_bool_var(f"size{j}_{s}") for s in range(ns)] for j in range(J)]
    for j in range(J):
        for g in range(n_groups):
            if not _zero(cover[j][g]):
                model.add(sum(use[j][g]) == cover[j][g])
        if n_groups == 1:
            for s in range(ns):
                model.add(size[j][s] == sum(use[j][0][k] for k in range(nl) if data.size_index[k] == s))
        else:
            model.add(sum(size[j]) == active[j])
            for g in range(n_groups):
                for s in range(ns):
                    same = [use[j][g][k] for k in range(nl) if data.size_index[k] == s and not isinstance(use[j][g][k], int)]
                    if same:
                        model.add(sum(same) <= size[j][s])
    model.add(sum(d * size[j][s] for j in range(J) for s, d in enumerate(data.sizes)) == N)

    # compute
    tau = times.tau
    present = data.present
    work = [min(data.layouts[k].devices * tau[k][i] for k in range(nl) if present[k][i]) for i in range(L)]
    top = times.top
    compute, segment = [], {}
    for j in range(J):
        check()
        c = model.new_int_var(0, top, f"compute{j}")
        if n_groups == 1:
            for k in range(nl):
                if not isinstance(use[j][0][k], int):
                    model.add(c >= sum(tau[k][i] * x for i, x in members[j] if tau[k][i])).only_enforce_if(use[j][0][k])
        else:
            parts = []
            for g, (a, b) in enumerate(data.groups):
                if _zero(cover[j][g]):
                    continue
                cg = model.new_int_var(0, top, f"compute{j}_{g}")
                for k in range(nl):
                    if not isinstance(use[j][g][k], int):
                        terms = [tau[k][i] * x for i, x in members[j][a : b + 1] if tau[k][i]]
                        model.add(cg >= sum(terms)).only_enforce_if(use[j][g][k])
                segment[j, g] = cg
                parts.append(cg)
            model.add(c == sum(parts))
        for s, d in enumerate(data.sizes):
            model.add(d * c >= sum(work[i] * x for i, x in members[j] if work[i])).only_enforce_if(size[j][s])
        compute.append(c)

    memory = {}
    if n_groups == 1:
        # memory and cost entries: use[j][l] and c_j <= a  =>  c_{j-1} <= reach[a];
        # c_j <= a is "layer a is not before slot j", c_{j-1} <= r "layer r is not in slot >= j"
        for count, (j, k, a, r) in enumerate(data.memory_rules()):
            if count % 4096 == 0:
                check()
            _clause(model, [_not(use[j][0][k]), before[a][j + 1], _not(before[r][j])])
    else:
        memory = _segment_memory(model, data, members, cover, use, check)

    pair, reshard = _reshards(model, data, times, before, use, check) if n_groups > 1 else ({}, [0] * J)

    node, load, full, shared, link = [], [], [], [], []
    if data.placement:
        node, load, full, shared, link = _placement(model, data, size)

    send, at_most = [], []
    if data.transfers:
        send, at_most = _transfers(model, data, times, before, size, link, check)

    # stage times and the objective
    stage = []
    for j in range(J):
        t = model.new_int_var(0, top, f"time{j}")
        terms = [compute[j]]
        if not isinstance(reshard[j], int):
            terms.append(reshard[j])
        if send:
            if j > 0:
                terms.append(send[j - 1])
            if j < J - 1:
                terms.append(send[j])
        model.add(t == sum(terms))
        stage.append(t)
    # T >= S * (analytic bound) - stage error: each stage time is off by at most that
    floor_units = max(0, int(times.scale * _bottleneck_floor(data) - times.stage_error) - 1)
    bottleneck = model.new_int_var(min(floor_units, top), top, "bottleneck")
    model.add_max_equality(bottleneck, stage)
    objective = bottleneck if data.objective == "bottleneck" else sum(stage) + (m - 1) * bottleneck
    model.minimize(objective)
    return model, CpVars(
        before, use, size, at_most, compute, send, stage, bottleneck, node, load, full, shared, link, objective,
        segment, memory, pair, reshard,
    )


def _zero(value) -> bool:
    return isinstance(value, int) and value == 0


def memory_units(data: SlotData) -> int:
    """The gcd of every byte count and the capacity: memory is counted in these units, exactly."""
    unit = data.problem.cluster.gpu_memory_bytes
    for row in (*data.weight, *data.act):
        for v in row:
            unit = math.gcd(unit, v)
            if unit == 1:
                return 1
    return max(unit, 1)


def _segment_memory(model, data: SlotData, members, cover, use, check) -> dict:
    """Several groups: sum over segments of (weight + stash x act) in each segment's layout <= capacity."""
    J, nl = data.slots, len(data.layouts)
    unit = memory_units(data)
    capacity = data.problem.cluster.gpu_memory_bytes // unit
    limit = capacity + 1  # a layer that alone exceeds the GPU, or lacks the layout
    if 2 * (data.num_layers + 1) * limit >= 2**62:
        raise ModelRangeError(
            f"cpsat: memory sizes too large for the 64-bit integer model ({data.num_layers} layers x "
            f"{data.problem.cluster.gpu_memory_bytes} bytes); use dp"
        )
    memory = {}
    for j in range(J):
        check()
        parts = []
        for g, (a, b) in enumerate(data.groups):
            if _zero(cover[j][g]):
                continue
            mg = model.new_int_var(0, capacity, f"memory{j}_{g}")
            for k in range(nl):
                if isinstance(use[j][g][k], int):
                    continue
                terms = [min(data.memory(k, i, j) // unit if data.present[k][i] else limit, limit) * x for i, x in members[j][a : b + 1]]
                model.add(mg >= sum(terms)).only_enforce_if(use[j][g][k])
            memory[j, g] = mg
            parts.append(mg)
        if len(parts) > 1:
            model.add(sum(parts) <= capacity)
    return memory


def _reshards(model, data: SlotData, times: IntegerTimes, before, use, check) -> tuple[dict, list]:
    """Boundary g inside slot j: one w per mesh pair, on exactly the pair used; the slot pays its units."""
    J, nl = data.slots, len(data.layouts)
    pair: dict = {}
    reshard: list = [0] * J
    for j in range(J):
        check()
        terms = []
        for g in range(len(data.groups) - 1):
            units = times.reshard[g]
            if not any(units.values()):
                continue
            last = data.groups[g][1]
            inside = _minus(before[last + 1][j], before[last][j + 1])
            if _zero(inside):
                continue
            pairs = data.mesh_pairs(g)
            w = {p: model.new_bool_var(f"pair{j}_{g}_{p[0]}_{p[1]}") for p in pairs}
            for side, (h, pos) in enumerate(((g, 0), (g + 1, 1))):
                for mu in {p[pos] for p in pairs}:
                    uses = [use[j][h][k] for k in range(nl) if data.mesh_index[k] == mu and not isinstance(use[j][h][k], int)]
                    model.add(sum(w[p] for p in pairs if p[pos] == mu) <= sum(uses))
            model.add(sum(w.values()) == inside)
            pair[j, g] = w
            terms += [units[p] * v for p, v in w.items() if units.get(p, 0)]
        if terms:
            r = model.new_int_var(0, times.top, f"reshard{j}")
            model.add(r == sum(terms))
            reshard[j] = r
    return pair, reshard


class ModelRangeError(Exception):
    """The problem's numbers exceed what the integer model can carry exactly."""


def _not(literal):
    return 1 - literal if isinstance(literal, int) else ~literal


def _clause(model: cp_model.CpModel, literals: list) -> None:
    """Add ``or(literals)``, folding the fixed ones (ints 0/1)."""
    if any(isinstance(v, int) and v == 1 for v in literals):
        return
    rest = [v for v in literals if not isinstance(v, int)]
    model.add_bool_or(rest)


def _implies(model: cp_model.CpModel, a, b) -> None:
    _clause(model, [_not(a), b])


def _bottleneck_floor(data: SlotData) -> float:
    """The analytic lower bound on the slowest stage (ms), nudged down."""
    return replace(data, objective="bottleneck").lower_bound() * (1 - 1e-12)


def _transfers(
    model, data: SlotData, times: IntegerTimes, before: list, size: list, link: list, check=lambda: None
) -> tuple[list, list]:
    J, L, ns = data.slots, data.num_layers, len(data.sizes)
    kinds = [(0, None)] if not data.placement else [(0, False), (1, True)]
    at_most = [[model.new_bool_var(f"at_most{j}_{s}") for s in range(ns)] for j in range(J)]
    for j in range(J):
        for s in range(ns):
            model.add(at_most[j][s] == sum(size[j][: s + 1]))
    top = int(times.send.max())
    send = []
    for j in range(J - 1):
        check()
        x = model.new_int_var(0, top, f"send{j}")
        for s in range(ns):
            for h, linked in kinds:
                table = times.send[:, s + 1, h]
                # send[c_j] written with [c_j >= i] = before[i - 1][j + 1]
                steps = [(int(table[i] - table[i - 1]), before[i - 1][j + 1]) for i in range(1, L) if table[i] != table[i - 1]]
                expr = sum(step * literal for step, literal in steps)
                if isinstance(expr, int) and expr <= 0:
                    continue
                condition = [] if linked is None else [link[j] if linked else ~link[j]]
                for side in (j, j + 1):
                    model.add(x >= expr).only_enforce_if([at_most[side][s], *condition])
        send.append(x)
    return send, at_most


def _placement(model: cp_model.CpModel, data: SlotData, size: list) -> tuple[list, list, list, list, list]:
    J, G = data.slots, data.gpus_per_node
    # a shared node holds at least two small slots (each of at most G/2 devices)
    bins = min(data.problem.cluster.nodes, J // 2)
    small = [s for s, d in enumerate(data.sizes) if d < G]
    node, load = [], []
    for j in range(J):
        # first-use numbering: slot j can open at most node j
        row = [model.new_bool_var(f"node{j}_{k}") for k in range(min(j + 1, bins))]
        node.append(row)
        model.add(sum(row) == sum(size[j][s] for s in small))
        devices = sum(data.sizes[s] * size[j][s] for s in small)
        shares = []
        for k, on in enumerate(row):
            share = model.new_int_var(0, G // 2, f"load{j}_{k}")
            model.add(share == devices).only_enforce_if(on)
            model.add(share == 0).only_enforce_if(~on)
            shares.append(share)
            if k > 0:  # node k is opened by a later slot than node k - 1
                model.add_bool_or([node[i][k - 1] for i in range(j) if k - 1 < len(node[i])]).only_enforce_if(on)
        load.append(shares)
    full = []
    for k in range(bins):
        f = model.new_bool_var(f"full{k}")
        model.add(sum(load[j][k] for j in range(J) if k < len(load[j])) == G * f)
        full.append(f)
    shared, link = [], []
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
        shared.append(both)
        link.append(h)
    return node, load, full, shared, link


# --------------------------------------------------------------------------- hints and solutions


def hint_values(var: CpVars, data: SlotData, times: IntegerTimes, d: SlotDecisions) -> dict:
    """The value of every variable of the model under the decisions ``d``."""
    J, L = data.slots, data.num_layers
    out: dict = {}
    ends = d.ends(data)
    slot_of = [0] * L
    for j in range(d.stages):
        for i in range(d.starts[j], ends[j]):
            slot_of[i] = j
    for i in range(L):
        for j in range(1, J):
            out[var.before[i][j]] = int(slot_of[i] >= j)
    size_of = [data.size_index[k] if k >= 0 else -1 for k in d.layout]
    for j in range(J):
        for g, row in enumerate(var.use[j]):
            for k, v in enumerate(row):
                out[v] = int(j < d.stages and d.configs[j][g] == k)
        for s in range(len(data.sizes)):
            out[var.size[j][s]] = int(size_of[j] == s)
        for s, v in enumerate(var.at_most[j] if var.at_most else ()):
            out[v] = int(0 <= size_of[j] <= s)
    for j, row in enumerate(var.node):
        for k, on in enumerate(row):
            out[on] = int(d.node[j] == k)
            out[var.load[j][k]] = data.layouts[d.layout[j]].devices if d.node[j] == k else 0
    for k, f in enumerate(var.full):
        out[f] = int(k in d.node)
    for j, both in enumerate(var.shared):
        for k, w in enumerate(both):
            out[w] = int(d.node[j] == k and d.node[j + 1] == k)
        out[var.link[j]] = int(d.link[j])
    compute, reshard = [0] * J, [0] * J
    unit = memory_units(data) if var.memory else 1
    for j in range(d.stages):
        for g, (a, b) in enumerate(data.groups):
            lo, hi = max(a, d.starts[j]), min(b + 1, ends[j])
            k = d.configs[j][g]
            value = times.time_prefix[k][hi] - times.time_prefix[k][lo] if lo < hi else 0
            compute[j] += value
            if (j, g) in var.segment:
                out[var.segment[j, g]] = value
            if (j, g) in var.memory:
                out[var.memory[j, g]] = sum(data.memory(k, i, j) for i in range(lo, hi)) // unit if lo < hi else 0
    for (j, g), w in var.pair.items():
        first, second = d.configs[j][g], d.configs[j][g + 1] if j < d.stages else -1
        used = (data.mesh_index[first], data.mesh_index[second]) if j < d.stages and first >= 0 and second >= 0 else None
        for p, v in w.items():
            out[v] = int(p == used)
        if used is not None:
            reshard[j] += times.reshard[g].get(used, 0)
    send = [0] * len(var.send)
    for j in range(len(var.send)):
        if j + 1 < d.stages:
            s = min(size_of[j], size_of[j + 1]) + 1
            send[j] = int(times.send[d.starts[j], s, int(d.link[j]) if data.placement else 0])
    for j in range(J):
        out[var.compute[j]] = compute[j]
        if not isinstance(var.reshard[j], int):
            out[var.reshard[j]] = reshard[j]
        sends = (send[j - 1] if send and j > 0 else 0) + (send[j] if send and j < J - 1 else 0)
        out[var.stage[j]] = compute[j] + reshard[j] + sends
    for j, x in enumerate(var.send):
        out[x] = send[j]
    out[var.bottleneck] = max(out[t] for t in var.stage)
    return {v: value for v, value in out.items() if not isinstance(v, int)}


def _objective_units(var: CpVars, values: dict, data: SlotData) -> int:
    stages = [values[t] for t in var.stage]
    if data.objective == "bottleneck":
        return max(stages)
    return sum(stages) + (data.microbatches - 1) * max(stages)


def read_decisions(solver: cp_model.CpSolver, var: CpVars, data: SlotData) -> SlotDecisions:
    """The decisions of the solver's solution."""
    return decisions_from_values(data, var, lambda v: bool(v) if isinstance(v, int) else bool(solver.boolean_value(v)))
