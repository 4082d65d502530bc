"""The CP-SAT model of the slot model: variables, constraints, hints and solutions.

The formulation is described in :mod:`.cpsat` (the method); the tables it is
built from in :mod:`.slot.data`, its integer times in :mod:`.slot.times`.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...core.lazy import lazy_module
from ..slot.data import SlotData, SlotDecisions, decisions_from_values, reshard_sites, stage_terms
from ..slot.schedule import T
from ..slot.times import IntegerTimes
from .parts import PartVars, part_hint_values, part_objective, part_objective_units, stage_compute

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:
    cp_model = lazy_module("ortools.sat.python.cp_model")

__all__ = ["CpVars", "build_model", "hint_values", "objective_units", "read_decisions", "ModelRangeError", "SAFE_PARAMETERS"]

# Solver parameters applied before the caller's (see :mod:`.solver`'s docstring; the interleaved
# model of :mod:`partitioner.solvers.interleaved.solve` takes them too). Without presolve, OR-Tools
# 9.15's "greater than at least one of" detection (auto_detect_greater_than_at_least_one_of) derived
# wrong lower bounds from the per-layout clauses ``use[j][g][l] => compute_jg >= a_l [slot active]``
# when one layout's part time is 0 (GPipe's B of a layer with bwd_ms = 0): root INFEASIBLE on a
# feasible model, or "optimal" 10.43 for 7.499 (tests/fixtures/regress_gpipe_m1_*; a deletion
# filter left 33 constraints, all satisfied by brute's plan, infeasible only with that detection on).
SAFE_PARAMETERS = {"cp_model_presolve": False, "auto_detect_greater_than_at_least_one_of": False}


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
    parts: PartVars | None = None  # ZB-H1's and GPipe's iteration estimates (compute, stage are then empty)
    tied: dict = field(default_factory=dict)  # (j, n) -> 1 when slot j holds both layers of tie n (format v3)


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

    # compute: of t, or (ZB-H1's, GPipe's iteration estimates) of each part
    parts = data.parts
    compute: list = []
    segment: dict = {}
    if parts == (T,):
        compute, segment = stage_compute(model, data, times.tau, times.top, members, use, size, cover, check)

    memory: dict = {}
    tied: dict = {}
    if not data.linear_memory:
        # memory and cost entries: use[j][l] and c_j <= a  =>  c_{j-1} <= reach[a];
        # c_j <= a is "layer a is not before slot j", c_{j-1} <= r "layer r is not in slot >= j"
        for count, (j, k, a, r) in enumerate(data.memory_rules()):
            if count % 4096 == 0:
                check()
            _clause(model, [_not(use[j][0][k]), before[a][j + 1], _not(before[r][j])])
    else:
        memory, tied = _segment_memory(model, data, members, cover, use, check)

    pair, reshard = _reshards(model, data, times, before, use, check) if n_groups > 1 else ({}, [0] * J)

    node: list = []
    load: list = []
    full: list = []
    shared: list = []
    link: list = []
    if data.placement:
        node, load, full, shared, link = _placement(model, data, size)

    send: list = []
    at_most: list = []
    if data.transfers:
        send, at_most = _transfers(model, data, times, before, size, link, check)

    if parts != (T,):
        # ZB-H1's and GPipe's iteration estimates (cpsat.parts)
        more = [before[0][P] if P < J else 0 for P in range(J + 1)]
        objective, part_vars = part_objective(
            model, data, times, parts, members, use, size, cover, more, pair, reshard, send, check
        )
        model.minimize(objective)
        return model, CpVars(
            before, use, size, at_most, compute, send, [], None, node, load, full, shared, link, objective,
            segment, memory, pair, reshard, part_vars, tied,
        )

    # stage times and the objective
    top = times.top
    stage = []
    for j in range(J):
        t = model.new_int_var(0, top, f"time{j}")
        model.add(t == sum(stage_terms(j, compute, reshard, send)))
        stage.append(t)
    # T >= S * (analytic bound) - stage error: each stage time is off by at most that
    floor_units = max(0, int(times.scale * _bottleneck_floor(data) - times.stage_error) - 1)
    bottleneck = model.new_int_var(min(floor_units, top), top, "bottleneck")
    model.add_max_equality(bottleneck, stage)
    objective = bottleneck if data.objective == "bottleneck" else sum(stage) + (m - 1) * bottleneck
    model.minimize(objective)
    return model, CpVars(
        before, use, size, at_most, compute, send, stage, bottleneck, node, load, full, shared, link, objective,
        segment, memory, pair, reshard, None, tied,
    )


def _zero(value) -> bool:
    return isinstance(value, int) and value == 0


def memory_units(data: SlotData) -> int:
    """The gcd of every byte count and the capacity: memory is counted in these units, exactly."""
    unit = data.problem.cluster.gpu_memory_bytes
    for row in (*data.weight, *data.act, *(bytes_ for _, _, bytes_ in data.ties)):
        for v in row:
            unit = math.gcd(unit, v)
            if unit == 1:
                return 1
    return max(unit, 1)


def _segment_memory(model, data: SlotData, members, cover, use, check) -> tuple[dict, dict]:
    """Sum over segments of (weight + stash x act) in each segment's layout <= capacity (several groups,
    or tied weights: a slot holding both layers of a tie counts the tied bytes of the later one's
    layout once less). Returns the segments' memory variables and the ties' "holds both" literals."""
    J, nl = data.slots, len(data.layouts)
    unit = memory_units(data)
    capacity = data.problem.cluster.gpu_memory_bytes // unit
    limit = capacity + 1  # a layer that alone exceeds the GPU, or lacks the layout
    if 2 * (data.num_layers + 1) * limit >= 2**62:
        raise ModelRangeError(
            f"cpsat: memory sizes too large for the 64-bit integer model ({data.num_layers} layers x "
            f"{data.problem.cluster.gpu_memory_bytes} bytes); use dp"
        )
    memory, tied = {}, {}
    for j in range(J):
        check()
        member = dict(members[j])
        saving: dict = {}  # layer k -> (tie literal, its tied bytes per layout in units)
        for n, (tj, k, row) in enumerate(data.ties):
            if tj in member and k in member and any(row):
                both = model.new_bool_var(f"tied{j}_{n}")
                model.add(both <= member[tj])
                model.add(both <= member[k])
                tied[j, n] = both
                saving.setdefault(k, []).append((both, [v // unit for v in row]))
        parts = []
        for g, (a, b) in enumerate(data.groups):
            if _zero(cover[j][g]):
                continue
            mg = model.new_int_var(0, capacity, f"memory{j}_{g}")
            for k in range(nl):
                if isinstance(use[j][g][k], int):
                    continue
                terms = []
                for i, x in members[j][a : b + 1]:
                    save = sum(row[k] for _, row in saving.get(i, ()))
                    need = min(data.memory(k, i, j) // unit if data.present[k][i] else limit, limit + save)
                    terms.append(need * x)
                    terms.extend(-row[k] * both for both, row in saving.get(i, ()) if row[k])
                model.add(mg >= sum(terms)).only_enforce_if(use[j][g][k])
            memory[j, g] = mg
            parts.append(mg)
        if len(parts) > 1:
            model.add(sum(parts) <= capacity)
    return memory, tied


def _reshards(model, data: SlotData, times: IntegerTimes, before, use, check) -> tuple[dict, list]:
    """Boundary g inside slot j: one 0/1 w per mesh pair, 1 on exactly the pair used; the slot pays its units."""
    pair: dict = {}
    terms: dict = {}
    for j, g, plus, minus, pairs, margins in reshard_sites(data, before, use):
        check()
        w = {p: model.new_bool_var(f"pair{j}_{g}_{p[0]}_{p[1]}") for p in pairs}
        for some, uses in margins:
            model.add(sum(w[p] for p in some) <= sum(uses))
        model.add(sum(w.values()) == _minus(plus, minus))
        pair[j, g] = w
        units = times.reshard[g]
        terms.setdefault(j, []).extend(units[p] * v for p, v in w.items() if units.get(p, 0))
    reshard: list = [0] * data.slots
    for j, parts in terms.items():
        if parts:
            reshard[j] = model.new_int_var(0, times.top, f"reshard{j}")
            model.add(reshard[j] == sum(parts))
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
    slot_of = d.slot_of(data)
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
                saved = sum(row[k] for tj, kk, row in data.ties if d.starts[j] <= tj and lo <= kk < hi)
                out[var.memory[j, g]] = (sum(data.memory(k, i, j) for i in range(lo, hi)) - saved) // unit if lo < hi else 0
    for (j, n), both in var.tied.items():
        tj, kk, _ = data.ties[n]
        out[both] = int(j < d.stages and d.starts[j] <= tj and kk < ends[j])
    pair_used = {}
    for (j, g), w in var.pair.items():
        first, second = d.configs[j][g], d.configs[j][g + 1] if j < d.stages else -1
        used = (data.mesh_index[first], data.mesh_index[second]) if j < d.stages and first >= 0 and second >= 0 else None
        pair_used[j, g] = used
        for p, v in w.items():
            out[v] = int(p == used)
        if used is not None:
            reshard[j] += times.reshard[g].get(used, 0)
    send = [0] * len(var.send)
    for j in range(len(var.send)):
        if j + 1 < d.stages:
            s = min(size_of[j], size_of[j + 1]) + 1
            send[j] = int(times.send[d.starts[j], s, int(d.link[j]) if data.placement else 0])
    for j, x in enumerate(var.send):
        out[x] = send[j]
    for j in range(J):
        if not isinstance(var.reshard[j], int):
            out[var.reshard[j]] = reshard[j]
    if var.parts is not None:
        out.update(part_hint_values(var.parts, data, times, d, pair_used, send))
        return {v: value for v, value in out.items() if not isinstance(v, int)}
    for j in range(J):
        out[var.compute[j]] = compute[j]
        sends = (send[j - 1] if send and j > 0 else 0) + (send[j] if send and j < J - 1 else 0)
        out[var.stage[j]] = compute[j] + reshard[j] + sends
    out[var.bottleneck] = max(out[t] for t in var.stage)
    return {v: value for v, value in out.items() if not isinstance(v, int)}


def objective_units(var: CpVars, values: dict, data: SlotData) -> int:
    if var.parts is not None:
        return part_objective_units(var.parts, values, data.microbatches)
    stages = [values[t] for t in var.stage]
    if data.objective == "bottleneck":
        return max(stages)
    return sum(stages) + (data.microbatches - 1) * max(stages)


def read_decisions(solver: cp_model.CpSolver, var: CpVars, data: SlotData) -> SlotDecisions:
    """The decisions of the solver's solution."""
    return decisions_from_values(data, var, lambda v: bool(v) if isinstance(v, int) else bool(solver.boolean_value(v)))


def apply_solver_options(solver: cp_model.CpSolver, request, defaults: dict) -> None:
    """The ``log`` and ``parameters`` options of a cpsat request on ``solver``, over ``defaults``.

    Logging goes to stderr (stdout carries the CLI's ``--json`` result); the parameters were checked at
    the door (:class:`~partitioner.solvers.options.CpsatOptions`).
    """
    params = solver.parameters
    options = request.options
    if options.log:
        params.log_search_progress = True
        params.log_to_stdout = False
        solver.log_callback = lambda line: print(line, file=sys.stderr)
    for key, value in {**defaults, **options.parameters}.items():
        setattr(params, key, value)
