"""``milp``: the exact slot model (:mod:`.slotmodel`) as a mixed-integer linear program.

Built with PuLP and solved by HiGHS through highspy (default) or by CBC
(``options={"backend": "cbc"}``). The model is the one ``cpsat`` solves,
linearised, with times kept in floating-point ms (no integer scaling):

* ``before[i][j] = [s_i >= j]`` (binary, order encoding of the layer -> slot
  map), non-increasing in ``i`` and ``j`` with ``s`` stepping by at most 1;
  ``active_j = before[0][j]``; slot ``j`` holds layer ``i`` when
  ``x_ij = before[i][j] - before[i][j+1]`` is 1;
* ``use[j][g][l]`` (binary): one layout per segment, i.e. per slot ``j``
  and group (module run) ``g`` it covers (``sum_l use[j][g][l] =
  cover[j][g]``, :mod:`.slotmodel`); several groups: ``size[j][s]``, one
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
  minimises T, ``iteration`` ``sum t_j + (m - 1) T``.

Time coefficients above a cap (:func:`time_cap`: twice the hint's stage
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

Options
-------
backend : {"highs", "cbc"}
    The MILP solver (default ``"highs"``).
threads : int
    Solver threads (default 1, which keeps runs reproducible).
hint : bool
    Start from the greedy plan when no ``warm_start`` is given (default True).
presolve : bool
    Run HiGHS's presolve (default False: HiGHS 1.16's presolve certified wrong
    optima -- and wrong infeasibility -- on format-v2 slot models that brute,
    CBC and HiGHS without presolve solve correctly; CBC always presolves).
log : bool
    Print the solver's log (CBC's on stderr; HiGHS writes its own to stdout).

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
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import pulp

from ..plan import PlanError, evaluate
from ..problem import Problem
from .base import Candidate, SolveRequest, SolverError, register
from .feasibility import quick_infeasibility
from .slotmodel import (
    BuildTimeout,
    SlotData,
    SlotDecisions,
    build_guard,
    build_timeout_candidate,
    decisions_from_values,
    decisions_of_plan,
    infeasible_message,
    int_option,
    model_size_refusal,
    plan_of_decisions,
    slot_data,
    stage_ceiling_ms,
    starting_plan,
)

__all__ = ["solve_milp", "build_milp", "MilpVars", "BACKENDS"]

BACKENDS = ("highs", "cbc")
# Relative margin taken off a backend's dual bound for its feasibility tolerances.
BOUND_MARGIN = 1e-7
_TOLERANCE = 1e-9
# Reserve for reading a solution back: a share of the time it took to hand the model to the
# backend (reading back and PuLP's bookkeeping take about half of it, measured) plus a
# constant (HiGHS stops up to ~0.3 s after its limit).
READBACK_SHARE = 0.6
READBACK_SECONDS = 0.3
# Time to hand a built model to the backend, as a share of the time it took to build (measured
# 0.45 for highspy and 0.5 for CBC's MPS file on the 40-layer benchmark).
HANDOVER_SHARE = 0.5
# Seconds past the deadline after which a still-running CBC process is killed.
CBC_GRACE = 0.5
# Without a hint, times above this multiple of the analytic bound are capped (time_cap).
CAP_FACTOR = 1e6
# "optimal" needs the plan's exact value within this of the proven bound.
OPTIMAL_GAP = 1e-6


@register("milp", options=("backend", "threads", "hint", "log", "presolve"))
def solve_milp(problem: Problem, request: SolveRequest) -> Candidate:
    start = time.perf_counter()
    backend = str(request.option("backend", "highs")).lower()
    if backend not in BACKENDS:
        raise SolverError(f"milp: unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    threads = int_option(request, "milp", "threads", 1)
    if problem.cluster.topology is not None:
        return Candidate("error", message="milp: custom cluster topologies are not supported by the solvers yet")
    reason = quick_infeasibility(problem)
    if reason:
        return Candidate("infeasible", message=reason)
    check = build_guard(request.deadline(start))
    refusal = model_size_refusal("milp", problem, request, start)
    if refusal:
        return Candidate("error", message=refusal)
    extra: dict = {}
    hint_plan = hint_source = None
    try:
        data = slot_data(problem, request.objective, check)
        hint_plan, hint_source = starting_plan(problem, request, extra, check)
        decisions = decisions_of_plan(data, hint_plan) if hint_plan is not None else None
        if decisions is None:
            hint_plan = hint_source = None
        ceiling = None
        if hint_plan is not None:
            value = evaluate(problem, hint_plan, data.objective).value
            ceiling = stage_ceiling_ms(data.objective, value, data.microbatches)
        began = time.perf_counter()
        with _pulp_quiet():
            lp, var = build_milp(data, check, ceiling)
        built = time.perf_counter() - began
        if decisions is not None:
            for v, value in start_values(var, data, decisions, ceiling).items():
                v.setInitialValue(value)
        # handing the model to the backend (highspy calls, or an MPS file for CBC) and reading
        # the answer back take a share of the build time: no point starting what cannot finish
        deadline = request.deadline(start)
        if deadline is not None and deadline - time.perf_counter() < HANDOVER_SHARE * built * (1 + READBACK_SHARE) + READBACK_SECONDS:
            raise BuildTimeout
    except BuildTimeout:
        return build_timeout_candidate("milp", problem, request, hint_plan, hint_source, extra)

    log = bool(request.option("log", False))
    run = _solve_highs if backend == "highs" else _solve_cbc
    with _pulp_quiet():
        if backend == "highs":
            outcome = run(lp, deadline, threads, log, hint_source is not None, bool(request.option("presolve", False)))
        else:
            outcome = run(lp, deadline, threads, log, hint_source is not None)
    extra["milp"] = {"backend": backend, "status": outcome.status_text, "hint": hint_source, "threads": threads}

    return _candidate(problem, data, backend, outcome, var, hint_plan, hint_source, extra)


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
            return Candidate("feasible", hint_plan, bound, message, extra)
        return Candidate("error", message=f"milp: {backend} found no plan ({outcome.status_text})", extra=extra)
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
    return Candidate("feasible", plan, bound, message, extra)


def _conservative(dual_bound: float | None, analytic: float) -> float:
    best = analytic * (1 - 1e-12)
    if dual_bound is not None and math.isfinite(dual_bound):
        best = max(best, dual_bound - BOUND_MARGIN * max(abs(dual_bound), 1.0))
    return max(best, 0.0)


# --------------------------------------------------------------------------- model


@dataclass
class MilpVars:
    before: list  # before[i][j] (j = 0..J), a variable or the constants 0/1
    use: list  # use[j][g][k], a binary or the constant 0
    z: dict  # (i, j, l) -> share of layer i computed in slot j in layout l
    compute: list
    send: list
    stage: list
    bottleneck: pulp.LpVariable
    node: list
    shared: list  # shared[j][k]: slots j+1 and j both on node k
    load: list  # load[j][k]: devices slot j puts on node k
    full: list
    link: list
    size: list = field(default_factory=list)  # size[j][s] (several groups only)
    pair: dict = field(default_factory=dict)  # (j, g) -> {(mu, nu): w}
    reshard: list = field(default_factory=list)  # per slot: ms of its reshards (forward + backward)


def time_cap(data: SlotData, ceiling_ms: float | None) -> float:
    """The largest time coefficient the MILP states; larger times are capped there.

    Capping only lowers the model's times, so the model's value of a plan is
    never above its true value and the backend's dual bound stays a valid
    bound on the true optimum; a solution whose true value exceeds the
    model's is not claimed optimal (:func:`_candidate`). With the hint's
    stage ceiling the cap, twice the ceiling, changes no plan that could beat
    the hint; without one, :data:`CAP_FACTOR` times the analytic bound keeps
    sentinel costs (``fwd_ms: 1e15``) out of the backend's numerics.
    """
    if ceiling_ms is not None and math.isfinite(ceiling_ms) and ceiling_ms > 0:
        return 2 * ceiling_ms
    return max(CAP_FACTOR * data.lower_bound(), 1.0)


def _capped(value: float, cap: float) -> float:
    return value if value <= cap else cap


def build_milp(data: SlotData, check=None, ceiling_ms: float | None = None) -> tuple[pulp.LpProblem, MilpVars]:
    """The MILP of ``data`` (times in ms); ``check()`` is called as it grows.

    ``ceiling_ms``: no stage of the plans of interest is slower (the hint's
    :func:`~.slotmodel.stage_ceiling_ms`); times above twice it are capped
    there, which keeps sentinel costs (``fwd_ms: 1e15``) out of the
    coefficients without changing any plan that could beat the hint.
    """
    check = check or (lambda: None)
    cap = time_cap(data, ceiling_ms)
    lp = pulp.LpProblem("partitioner", pulp.LpMinimize)
    J, L, m = data.slots, data.num_layers, data.microbatches
    N = data.problem.num_devices
    nl, ns = len(data.layouts), len(data.sizes)
    n_groups = len(data.groups)
    binary = pulp.LpBinary

    # order encoding; before[i][0] = 1, before[i][J] = 0, and s_i <= L - 1 - i
    before = [
        [1] + [pulp.LpVariable(f"ge_{i}_{j}", cat=binary) if j <= L - 1 - i else 0 for j in range(1, J)] + [0]
        for i in range(L)
    ]
    for i in range(L):
        check()
        for j in range(1, J):
            if isinstance(before[i][j], int):
                continue
            if not isinstance(before[i][j + 1], int):
                lp += before[i][j + 1] <= before[i][j]
            if i + 1 < L:
                if not isinstance(before[i + 1][j], int):
                    lp += before[i + 1][j] <= before[i][j]
                lp += before[i][j + 1] <= before[i + 1][j]
    active = [before[0][j] for j in range(J)]
    p_min = min(data.counts)
    if p_min > 1:
        lp += active[p_min - 1] == 1
    member = [[before[i][j] - before[i][j + 1] for i in range(L)] for j in range(J)]

    # one layout per segment; several groups: one size per slot, shared by its segments
    group_configs = [set(data.group_configs(g)) for g in range(n_groups)]
    cover = [[before[a][j] - before[b][j + 1] for a, b in data.groups] for j in range(J)]
    reachable = [[not (isinstance(before[a][j], int) and before[a][j] == 0) for a, _ in data.groups] for j in range(J)]
    use = [
        [
            [pulp.LpVariable(f"use_{j}_{g}_{k}", cat=binary) if k in group_configs[g] and reachable[j][g] else 0 for k in range(nl)]
            for g in range(n_groups)
        ]
        for j in range(J)
    ]
    size: list = []
    for j in range(J):
        for g in range(n_groups):
            if reachable[j][g]:
                lp += pulp.lpSum(use[j][g]) == cover[j][g]
    if n_groups == 1:
        lp += pulp.lpSum(data.layouts[k].devices * use[j][0][k] for j in range(J) for k in range(nl)) == N
        slot_size = [[pulp.lpSum(use[j][0][k] for k in range(nl) if data.size_index[k] == s) for s in range(ns)] for j in range(J)]
    else:
        size = [[pulp.LpVariable(f"size_{j}_{s}", cat=binary) for s in range(ns)] for j in range(J)]
        for j in range(J):
            lp += pulp.lpSum(size[j]) == active[j]
            for g in range(n_groups):
                for s in range(ns):
                    same = [use[j][g][k] for k in range(nl) if data.size_index[k] == s and not isinstance(use[j][g][k], int)]
                    if same:
                        lp += pulp.lpSum(same) <= size[j][s]
        lp += pulp.lpSum(d * size[j][s] for j in range(J) for s, d in enumerate(data.sizes)) == N
        slot_size = size

    # compute, exact through the layer/slot/layout shares z
    group_of = [0] * L
    for g, (a, b) in enumerate(data.groups):
        group_of[a : b + 1] = [g] * (b - a + 1)
    times = [[_capped(c.fwd_ms + c.bwd_ms, cap) if (c := layer.cost(lay)) is not None else None for lay in data.layouts]
             for layer in data.problem.layers]
    capacity = data.problem.cluster.gpu_memory_bytes
    z: dict = {}
    compute = []
    memory_rows: list[list] = [[] for _ in range(J)]
    for j in range(J):
        check()
        terms = []
        for i in range(L - j):
            shares = []
            for k in range(nl):
                if times[i][k] is None:
                    continue
                v = pulp.LpVariable(f"z_{i}_{j}_{k}", lowBound=0)
                z[i, j, k] = v
                lp += v <= use[j][group_of[i]][k]
                shares.append(v)
                terms.append(times[i][k] * v)
                if n_groups > 1:
                    need = data.memory(k, i, j)
                    if need > capacity:
                        v.upBound = 0
                    elif need:
                        memory_rows[j].append(need * v)
            lp += pulp.lpSum(shares) == member[j][i]
        c = pulp.LpVariable(f"compute_{j}", lowBound=0)
        lp += c == pulp.lpSum(terms)
        compute.append(c)

    if n_groups == 1:
        # memory and cost entries (the clauses of cpsat)
        for count, (j, k, a, r) in enumerate(data.memory_rules()):
            if count % 4096 == 0:
                check()
            lp += use[j][0][k] - before[a][j + 1] + before[r][j] <= 1
    else:
        for j in range(J):
            if memory_rows[j]:
                lp += pulp.lpSum(memory_rows[j]) <= capacity

    pair, reshard = _reshards(lp, data, before, use, cap, check) if n_groups > 1 else ({}, [0] * J)

    node, shared, load, full, link = [], [], [], [], []
    if data.placement:
        node, shared, load, full, link = _placement(lp, data, slot_size)

    send = []
    if data.transfers:
        bws = data.bandwidths
        at_most = [[pulp.lpSum(slot_size[j][: s + 1]) for s in range(ns)] for j in range(J)]
        for j in range(J - 1):
            check()
            x = pulp.LpVariable(f"send_{j}", lowBound=0)
            # [c_j = c] = before[c-1][j+1] - before[c][j+1]
            at = [None] + [before[c - 1][j + 1] - before[c][j + 1] for c in range(1, L)]
            for s, d in enumerate(data.sizes):
                for h, bw in enumerate(bws):
                    table = [0.0] + [_capped(data.send_mb[c - 1] / (d * bw), cap) for c in range(1, L)]
                    big = max(table)
                    if big == 0:
                        continue
                    expr = pulp.lpSum(table[c] * at[c] for c in range(1, L) if table[c])
                    if data.placement:
                        slack = (1 - link[j]) if h == 1 else link[j]
                    else:
                        slack = 0
                    for side in (j, j + 1):
                        lp += x >= expr - big * (1 - at_most[side][s]) - big * slack
            send.append(x)

    stage = []
    bottleneck = pulp.LpVariable("bottleneck", lowBound=_bottleneck_floor(data))
    for j in range(J):
        t = pulp.LpVariable(f"time_{j}", lowBound=0)
        terms = [compute[j]]
        if not isinstance(reshard[j], int):
            terms.append(reshard[j])
        if send:
            if j > 0:
                terms.append(send[j - 1])
            if j < J - 1:
                terms.append(send[j])
        lp += t == pulp.lpSum(terms)
        lp += bottleneck >= t
        stage.append(t)
    if data.objective == "bottleneck":
        lp += bottleneck
    else:
        lp += pulp.lpSum(stage) + (m - 1) * bottleneck
    return lp, MilpVars(before, use, z, compute, send, stage, bottleneck, node, shared, load, full, link, size, pair, reshard)


def _reshards(lp: pulp.LpProblem, data: SlotData, before, use, cap, check) -> tuple[dict, list]:
    """Boundary g inside slot j: a transport of weight ``inside`` between the two segments' meshes."""
    J, nl = data.slots, len(data.layouts)
    pair: dict = {}
    reshard: list = [0] * J
    for j in range(J):
        check()
        terms = []
        for g in range(len(data.groups) - 1):
            table = data.reshard_ms[g]
            if not table:
                continue
            last = data.groups[g][1]
            if isinstance(before[last + 1][j], int) and before[last + 1][j] == 0:
                continue
            inside = before[last + 1][j] - before[last][j + 1]
            pairs = data.mesh_pairs(g)
            w = {p: pulp.LpVariable(f"pair_{j}_{g}_{p[0]}_{p[1]}", lowBound=0, upBound=1) for p in pairs}
            for h, pos in ((g, 0), (g + 1, 1)):
                for mu in {p[pos] for p in pairs}:
                    uses = [use[j][h][k] for k in range(nl) if data.mesh_index[k] == mu and not isinstance(use[j][h][k], int)]
                    lp += pulp.lpSum(w[p] for p in pairs if p[pos] == mu) <= pulp.lpSum(uses)
            lp += pulp.lpSum(w.values()) == inside
            pair[j, g] = w
            terms += [_capped(2 * table[p], cap) * v for p, v in w.items() if p in table]
        if terms:
            r = pulp.LpVariable(f"reshard_{j}", lowBound=0)
            lp += r == pulp.lpSum(terms)
            reshard[j] = r
    return pair, reshard


def _bottleneck_floor(data: SlotData) -> float:
    return replace(data, objective="bottleneck").lower_bound() * (1 - 1e-12)


def _placement(lp: pulp.LpProblem, data: SlotData, slot_size: list) -> tuple[list, list, list, list, list]:
    J, G = data.slots, data.gpus_per_node
    bins = min(data.problem.cluster.nodes, J // 2)
    small = [s for s, d in enumerate(data.sizes) if d < G]
    half = G // 2
    node, load = [], []
    for j in range(J):
        row = [pulp.LpVariable(f"node_{j}_{k}", cat=pulp.LpBinary) for k in range(min(j + 1, bins))]
        node.append(row)
        lp += pulp.lpSum(row) == pulp.lpSum(slot_size[j][s] for s in small)
        devices = pulp.lpSum(data.sizes[s] * slot_size[j][s] for s in small)
        shares = []
        for k, on in enumerate(row):
            e = pulp.LpVariable(f"load_{j}_{k}", lowBound=0, upBound=half)
            lp += e <= half * on
            lp += e <= devices
            lp += e >= devices - half * (1 - on)
            shares.append(e)
            if k > 0:
                lp += on <= pulp.lpSum(node[i][k - 1] for i in range(j) if k - 1 < len(node[i]))
        load.append(shares)
    full = []
    for k in range(bins):
        f = pulp.LpVariable(f"full_{k}", cat=pulp.LpBinary)
        lp += pulp.lpSum(load[j][k] for j in range(J) if k < len(load[j])) == G * f
        full.append(f)
    shared, link = [], []
    for j in range(J - 1):
        both = []
        for k in range(min(len(node[j]), len(node[j + 1]))):
            w = pulp.LpVariable(f"shared_{j}_{k}", lowBound=0, upBound=1)
            lp += w <= node[j][k]
            lp += w <= node[j + 1][k]
            lp += w >= node[j][k] + node[j + 1][k] - 1
            both.append(w)
        h = pulp.LpVariable(f"link_{j}", lowBound=0, upBound=1)
        lp += h == pulp.lpSum(both)
        shared.append(both)
        link.append(h)
    return node, shared, load, full, link


# --------------------------------------------------------------------------- start values and solutions


def start_values(var: MilpVars, data: SlotData, d: SlotDecisions, ceiling_ms: float | None = None) -> dict:
    """Every variable's value under the decisions ``d`` (a MIP start)."""
    cap = time_cap(data, ceiling_ms)
    J, L = data.slots, data.num_layers
    out: dict = {}
    ends = d.ends(data)
    slot_of = [0] * L
    for j in range(d.stages):
        for i in range(d.starts[j], ends[j]):
            slot_of[i] = j
    group_of = [0] * L
    for g, (a, b) in enumerate(data.groups):
        group_of[a : b + 1] = [g] * (b - a + 1)
    config_of = [d.configs[slot_of[i]][group_of[i]] for i in range(L)]
    for i in range(L):
        for j in range(1, J):
            if not isinstance(var.before[i][j], int):
                out[var.before[i][j]] = int(slot_of[i] >= j)
    for j in range(J):
        for g, row in enumerate(var.use[j]):
            for k, v in enumerate(row):
                if not isinstance(v, int):
                    out[v] = int(j < d.stages and d.configs[j][g] == k)
        for s, v in enumerate(var.size[j] if var.size else ()):
            out[v] = int(j < d.stages and data.size_index[d.layout[j]] == s)
    for (i, j, k), v in var.z.items():
        out[v] = int(j < d.stages and slot_of[i] == j and config_of[i] == k)
    times = [0.0] * J
    for i in range(L):
        cost = data.problem.layers[i].cost(data.layouts[config_of[i]])
        times[slot_of[i]] += _capped(cost.fwd_ms + cost.bwd_ms, cap)
    for j, c in enumerate(var.compute):
        out[c] = times[j]
    reshard = [0.0] * J
    for (j, g), w in var.pair.items():
        first, second = (d.configs[j][g], d.configs[j][g + 1]) if j < d.stages else (-1, -1)
        used = (data.mesh_index[first], data.mesh_index[second]) if first >= 0 and second >= 0 else None
        for p, v in w.items():
            out[v] = int(p == used)
        if used is not None and used in data.reshard_ms[g]:
            reshard[j] += _capped(2 * data.reshard_ms[g][used], cap)
    for j, r in enumerate(var.reshard):
        if not isinstance(r, int):
            out[r] = reshard[j]
    sends = []
    for j, x in enumerate(var.send):
        value = 0.0
        if j + 1 < d.stages:
            smaller = min(data.layouts[d.layout[j]].devices, data.layouts[d.layout[j + 1]].devices)
            bw = data.bandwidths[int(d.link[j])] if data.placement else data.bandwidths[0]
            value = _capped(data.send_mb[d.starts[j] - 1] / (smaller * bw), cap)
        out[x] = value
        sends.append(value)
    stage = []
    for j, t in enumerate(var.stage):
        value = times[j] + reshard[j] + (sends[j - 1] if sends and j > 0 else 0.0) + (sends[j] if sends and j < J - 1 else 0.0)
        out[t] = value
        stage.append(value)
    out[var.bottleneck] = max(max(stage), var.bottleneck.lowBound or 0.0)
    for j, row in enumerate(var.node):
        for k, on in enumerate(row):
            out[on] = int(d.node[j] == k)
            devices = data.layouts[d.layout[j]].devices if d.layout[j] >= 0 else 0
            out[var.load[j][k]] = devices if d.node[j] == k else 0
    for k, f in enumerate(var.full):
        out[f] = int(any(d.node[j] == k for j in range(J)))
    for j, both in enumerate(var.shared):
        for k, w in enumerate(both):
            out[w] = int(d.node[j] == k and d.node[j + 1] == k)
        out[var.link[j]] = int(d.link[j])
    return out


def read_decisions(var: MilpVars, data: SlotData) -> SlotDecisions:
    """The decisions of the MILP's solution (a binary is on above 0.5)."""
    return decisions_from_values(data, var, lambda v: v if isinstance(v, int) else (v.varValue or 0.0) > 0.5)


# --------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class _Outcome:
    status: str  # optimal | feasible | infeasible | none
    status_text: str
    bound: float | None
    has_solution: bool


class _HighsWithStart(pulp.HiGHS):
    """PuLP's highspy interface, passing the variables' initial values as a MIP start."""

    def __init__(self, *args, use_start: bool = False, deadline: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.use_start = use_start
        self.deadline = deadline

    def createAndConfigureSolver(self, lp):  # noqa: N802 (PuLP's name)
        # highspy prints a banner on stdout when the first Highs object is made;
        # keep stdout clean (the CLI's --json output goes there) unless logging
        if self.msg:
            super().createAndConfigureSolver(lp)
            return
        with _quiet_stdout():
            super().createAndConfigureSolver(lp)

    def buildSolverModel(self, lp):  # noqa: N802 (PuLP's name)
        began = time.perf_counter()
        super().buildSolverModel(lp)
        if self.deadline is not None:
            # HiGHS's own clock starts now: give it what is left of the caller's limit after
            # handing the model over, less a reserve for reading the solution back
            now = time.perf_counter()
            reserve = READBACK_SHARE * (now - began) + READBACK_SECONDS
            stop = self.deadline - reserve
            lp.solverModel.setOptionValue("time_limit", max(1e-3, stop - now))
            # HiGHS checks its clock only now and then (a root LP can run seconds past the limit
            # on a loaded machine); its interrupt callbacks are polled during every solve phase
            def interrupt(event) -> None:
                if time.perf_counter() > stop:
                    event.interrupt()

            for hook in (lp.solverModel.cbSimplexInterrupt, lp.solverModel.cbIpmInterrupt, lp.solverModel.cbMipInterrupt):
                hook += interrupt
        if self.use_start:
            import highspy

            variables = lp.variables()
            solution = highspy.HighsSolution()
            solution.col_value = [float(v.varValue) if v.varValue is not None else 0.0 for v in variables]
            solution.value_valid = True
            lp.solverModel.setSolution(solution)


@contextmanager
def _pulp_quiet():
    """Hide PuLP 3's deprecation notices about its 4.0 API (the pinned range is < 4)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"pulp(\.|$)")
        yield


@contextmanager
def _quiet_stdout():
    """Silence the process's file descriptor 1 (C++ output included)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _solve_highs(
    lp: pulp.LpProblem, deadline: float | None, threads: int, log: bool, use_start: bool, presolve: bool = False
) -> _Outcome:
    import highspy

    solver = _HighsWithStart(
        msg=log,
        gapRel=0.0,
        gapAbs=0.0,
        threads=threads,
        use_start=use_start,
        deadline=deadline,
        mip_feasibility_tolerance=_TOLERANCE,
        primal_feasibility_tolerance=_TOLERANCE,
        random_seed=0,
        presolve="on" if presolve else "off",
    )
    try:
        lp.solve(solver)
    except (IndexError, pulp.PulpSolverError) as err:  # PuLP reading back a model HiGHS rejected
        return _Outcome("none", f"highs failed: {type(err).__name__}: {err}", None, False)
    h = lp.solverModel
    status = h.getModelStatus()
    info = h.getInfo()
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    text = h.modelStatusToString(status)
    stopped = status in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kInterrupt)
    bound = info.mip_dual_bound if has_solution or stopped else None
    if status == highspy.HighsModelStatus.kOptimal:
        return _Outcome("optimal", text, bound, has_solution)
    if status in (highspy.HighsModelStatus.kInfeasible,):
        return _Outcome("infeasible", text, None, False)
    return _Outcome("feasible" if has_solution else "none", text, bound, has_solution)


class _CbcTimeout(Exception):
    """CBC was still running past the deadline and was stopped."""


class _CbcByDeadline(pulp.PULP_CBC_CMD):
    """PuLP's CBC command, held to a deadline.

    Its ``-sec`` limit is what is left of the deadline once the model file is
    written, less a reserve for reading the solution back; and since CBC
    checks its clock only between phases (its root LP and the MIP start alone
    can take seconds on a loaded machine), the process is killed
    :data:`CBC_GRACE` seconds past the deadline. Otherwise it runs as PuLP's
    ``solve_CBC`` does (MPS model, MIP start, solution file).
    """

    def __init__(self, *args, deadline: float | None = None, log_path: str, **kwargs):
        self.deadline = deadline
        self.log_path = log_path
        self.began = time.perf_counter()
        super().__init__(*args, **kwargs)

    def remaining(self) -> float:
        now = time.perf_counter()
        reserve = READBACK_SHARE * (now - self.began) + READBACK_SECONDS
        return max(0.01, round(self.deadline - now - reserve, 2))

    def solve_CBC(self, lp, use_mps=True):  # noqa: N802 (PuLP's name)
        mps, sol, mst = self.create_tmp_files(lp.name, "mps", "sol", "mst")
        try:
            variables, var_names, con_names, _ = lp.writeMPS(mps, rename=1)
            args = [self.path, mps]
            if self.optionsDict.get("warmStart", False):
                self.writesol(mst, lp, variables, var_names, con_names)
                args += ["-mips", mst]
            if self.deadline is not None:
                args += ["-sec", str(self.remaining())]
            for option in self.options + self.getOptions():
                args += ("-" + option).split()
            args += ["-solve", "-printingOptions", "all", "-solution", sol]
            wait = None if self.deadline is None else max(0.0, self.deadline - time.perf_counter()) + CBC_GRACE
            with open(self.log_path, "w", encoding="utf-8") as pipe:
                process = subprocess.Popen(args, stdout=pipe, stderr=pipe, stdin=subprocess.DEVNULL)
                try:
                    code = process.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                    raise _CbcTimeout from None
            if code != 0 or not os.path.exists(sol):
                raise pulp.PulpSolverError(f"cbc exited with code {code}")
            status, values, reduced, prices, slacks, sol_status = self.readsol_MPS(sol, lp, variables, var_names, con_names)
            lp.assignVarsVals(values)
            lp.assignVarsDj(reduced)
            lp.assignConsPi(prices)
            lp.assignConsSlack(slacks, activity=True)
            lp.assignStatus(status, sol_status)
            return status
        finally:
            self.delete_tmp_files(mps, sol, mst)


def _solve_cbc(lp: pulp.LpProblem, deadline: float | None, threads: int, log: bool, use_start: bool) -> _Outcome:
    fd, path = tempfile.mkstemp(prefix="partitioner-cbc-", suffix=".log")
    os.close(fd)
    failure = None
    limit = None if deadline is None else max(0.0, deadline - time.perf_counter())
    try:
        solver = _CbcByDeadline(
            msg=False,
            gapRel=0.0,
            gapAbs=0.0,
            deadline=deadline,
            log_path=path,
            threads=threads,
            warmStart=use_start,
            timeMode="elapsed",  # wall, not CPU, seconds: on a loaded machine CPU time lags the clock
            options=[f"integerTolerance {_TOLERANCE}", f"primalTolerance {_TOLERANCE}", "randomCbcSeed 1"],
        )
        try:
            code = lp.solve(solver)
        except pulp.PulpSolverError as err:
            failure = str(err)
        except _CbcTimeout:
            failure = "stopped at the time limit"
        with open(path, encoding="utf-8", errors="replace") as f:
            text_log = f.read()
    finally:
        os.unlink(path)
    if log:
        print(text_log, file=sys.stderr)
    if failure is not None:  # e.g. the time limit ended CBC while it read the start
        tail = " | ".join(line.strip() for line in text_log.strip().splitlines()[-3:])
        return _Outcome("none", f"cbc failed: {tail or failure}", None, False)
    result = re.search(r"^Result - (.*)$", text_log, re.MULTILINE)
    text = result.group(1).strip() if result else pulp.LpStatus[code]
    bound = _cbc_number(text_log, "Lower bound")
    if lp.sol_status == pulp.LpSolutionOptimal:
        return _Outcome("optimal", text, _cbc_number(text_log, "Objective value"), True)
    if code == pulp.LpStatusInfeasible or lp.sol_status == pulp.LpSolutionInfeasible:
        # CBC says "LP relaxation infeasible or too expensive" when the time
        # limit ends its root processing: only a run that ended early proves it
        wall = _cbc_number(text_log, r"Time \(Wallclock seconds\)")
        if limit is None or (wall is not None and wall < 0.9 * limit):
            return _Outcome("infeasible", text, None, False)
        return _Outcome("none", f"{text} (at the time limit)", None, False)
    has_solution = lp.sol_status == pulp.LpSolutionIntegerFeasible
    return _Outcome("feasible" if has_solution else "none", text, bound, has_solution)


def _cbc_number(text: str, label: str) -> float | None:
    found = re.search(rf"^{label}:\s*([-+0-9.eE]+)", text, re.MULTILINE)
    return float(found.group(1)) if found else None
