"""The MILP of the slot model (PuLP): variables, constraints, start values and solutions.

The formulation is described in :mod:`.milp` (the method); the tables it is
built from in :mod:`.slot.data`. Times stay in floating-point milliseconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ...core.lazy import lazy_module
from ..slot.data import SlotData, SlotDecisions, decisions_from_values, reshard_sites, stage_terms
from ..slot.schedule import T
from .parts import MilpPartVars, part_objective, part_start_values

if TYPE_CHECKING:
    import pulp
else:
    pulp = lazy_module("pulp")

__all__ = ["MilpVars", "build_milp", "start_values", "read_decisions", "time_cap", "CAP_FACTOR", "exclude_stage"]

# Without a hint, times above this multiple of the analytic bound are capped (time_cap).
CAP_FACTOR = 1e6


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
    parts: MilpPartVars | None = None  # ZB-H1's and GPipe's iteration estimates (their objective's parts)


def time_cap(data: SlotData, ceiling_ms: float | None) -> float:
    """The largest time coefficient the MILP states; larger times are capped there.

    Capping only lowers the model's times, so the model's value of a plan is
    never above its true value and the backend's dual bound stays a valid
    bound on the true optimum; a solution whose true value exceeds the
    model's is not claimed optimal (:func:`.solver._candidate`). With the hint's
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
    :func:`~.slot.times.stage_ceiling_ms`); times above twice it are capped
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
    saved: dict = {}  # (layer, layout) -> the most tied bytes that entry can save (format v3)
    for _, k, row in data.ties:
        for kk, v in enumerate(row):
            saved[k, kk] = saved.get((k, kk), 0) + v
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
                if data.linear_memory:
                    need = data.memory(k, i, j)
                    if need - saved.get((i, k), 0) > capacity:
                        v.upBound = 0
                    elif need:  # as a share of the GPU: bytes are ~1e10, the tolerances absolute
                        memory_rows[j].append(need / capacity * v)
            lp += pulp.lpSum(shares) == member[j][i]
        c = pulp.LpVariable(f"compute_{j}", lowBound=0)
        lp += c == pulp.lpSum(terms)
        compute.append(c)

    for j in range(J):  # tied weights: a slot holding both layers of a tie counts the tied bytes once less
        for n, (tj, k, row) in enumerate(data.ties):
            shares = [(kk, z[k, j, kk]) for kk, v in enumerate(row) if v and (k, j, kk) in z]
            if tj >= L - j or not shares:
                continue
            both = [(kk, pulp.LpVariable(f"tied_{j}_{n}_{kk}", lowBound=0, upBound=1)) for kk, _ in shares]
            for (kk, w), (_, zv) in zip(both, shares):
                lp += w <= zv
                memory_rows[j].append(-row[kk] / capacity * w)
            lp += pulp.lpSum(w for _, w in both) <= member[j][tj]

    if not data.linear_memory:
        # memory and cost entries (the clauses of cpsat)
        for count, (j, k, a, r) in enumerate(data.memory_rules()):
            if count % 4096 == 0:
                check()
            lp += use[j][0][k] - before[a][j + 1] + before[r][j] <= 1
    else:
        for j in range(J):
            if memory_rows[j]:
                lp += pulp.lpSum(memory_rows[j]) <= 1

    pair, reshard = _reshards(lp, data, before, use, cap, check) if n_groups > 1 else ({}, [0] * J)

    node: list = []
    shared: list = []
    load: list = []
    full: list = []
    link: list = []
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
        lp += t == pulp.lpSum(stage_terms(j, compute, reshard, send))
        lp += bottleneck >= t
        stage.append(t)
    parts = None
    if data.parts != (T,):  # ZB-H1's and GPipe's iteration estimates (milp.parts)
        objective, parts = part_objective(lp, data, z, cap, before, pair, reshard, send, check)
        lp += objective
    elif data.objective == "bottleneck":
        lp += bottleneck
    else:
        lp += pulp.lpSum(stage) + (m - 1) * bottleneck
    return lp, MilpVars(
        before, use, z, compute, send, stage, bottleneck, node, shared, load, full, link, size, pair, reshard, parts
    )


def _reshards(lp: pulp.LpProblem, data: SlotData, before, use, cap, check) -> tuple[dict, list]:
    """Boundary g inside slot j: a transport of weight ``inside`` between the two segments' meshes."""
    pair: dict = {}
    terms: dict = {}
    for j, g, plus, minus, pairs, margins in reshard_sites(data, before, use):
        check()
        w = {p: pulp.LpVariable(f"pair_{j}_{g}_{p[0]}_{p[1]}", lowBound=0, upBound=1) for p in pairs}
        for some, uses in margins:
            lp += pulp.lpSum(w[p] for p in some) <= pulp.lpSum(uses)
        lp += pulp.lpSum(w.values()) == plus - minus
        pair[j, g] = w
        table = data.reshard_ms[g]
        terms.setdefault(j, []).extend(_capped(2 * table[p], cap) * v for p, v in w.items() if p in table)
    reshard: list = [0] * data.slots
    for j, parts in terms.items():
        if parts:
            reshard[j] = pulp.LpVariable(f"reshard_{j}", lowBound=0)
            lp += reshard[j] == pulp.lpSum(parts)
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
    slot_of = d.slot_of(data)
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
        cost = data.problem.layers[i].costs[data.layouts[config_of[i]]]  # the plan's config has this layer's cost
        times[slot_of[i]] += _capped(cost.fwd_ms + cost.bwd_ms, cap)
    for j, c in enumerate(var.compute):
        out[c] = times[j]
    reshard = [0.0] * J
    pairs_used = {}
    for (j, g), w in var.pair.items():
        first, second = (d.configs[j][g], d.configs[j][g + 1]) if j < d.stages else (-1, -1)
        used = (data.mesh_index[first], data.mesh_index[second]) if first >= 0 and second >= 0 else None
        pairs_used[j, g] = used
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
    if var.parts is not None:
        out.update(part_start_values(var.parts, data, d, cap, pairs_used, sends))
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


def exclude_stage(lp: pulp.LpProblem, var: MilpVars, data: SlotData, slot: int, first: int, last: int,
                  configs: tuple[int, ...]) -> int:
    """Cut off one stage the contract refuses: layers ``first..last`` in the configs ``configs`` (a layout index
    per group, -1 where the stage does not cover it) on slot ``slot`` or any later slot; the number of cuts added.

    A stage's memory depends only on its layers, its configs and its stash (rule 6), and the stash does not
    fall from one slot to the next (1F1B and ZB-H1 ``min(m, j + 1)``, GPipe ``m``): a stage over the GPU's
    memory on slot j is over it on every slot after j, and no valid plan holds it there. Slot ``j`` holds
    exactly ``first..last`` when ``x[first][j] = x[last][j] = 1`` and ``x[first-1][j] = x[last+1][j] = 0``
    (``x[i][j] = before[i][j] - before[i][j+1]``); the cut says not all of those indicators and the
    ``use`` literals of its configs are 1.
    """
    L, added = data.num_layers, 0
    before = var.before
    for j in range(slot, data.slots):
        x = [before[i][j] - before[i][j + 1] for i in range(L)]
        literals = [x[first], x[last]]
        if first > 0:
            literals.append(1 - x[first - 1])
        if last < L - 1:
            literals.append(1 - x[last + 1])
        literals.extend(var.use[j][g][k] for g, k in enumerate(configs) if k >= 0)
        expr = pulp.lpSum(literals)
        if not isinstance(expr, pulp.LpAffineExpression) or not expr.keys():
            continue  # constants only: the stage cannot sit on this slot
        lp += expr <= len(literals) - 1, f"exclude_{j}_{first}_{last}_{'_'.join(map(str, configs))}"
        added += 1
    return added
