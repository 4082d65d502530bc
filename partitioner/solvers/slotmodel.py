"""The slot model shared by the ``cpsat`` and ``milp`` methods: its data, its plans.

Both exact solver methods optimise the same model of DESIGN.md's problem.
This module holds what they share: the precomputed tables, the conversion
between a plan and the model's decisions, and the one place where times are
scaled to integers (CP-SAT only; the MILP keeps floats).

Slots
-----
Stages are indexed from the *end* of the pipeline: slot ``j`` is stage
``p = P - 1 - j``. The 1F1B stash of slot ``j`` is then the constant
``min(m, j + 1)``, whatever the number of stages P, so a slot's memory rule
does not depend on P. Slots ``0 .. P-1`` are active; slot ``j`` covers the
layers ``c_j .. c_{j-1} - 1`` with ``c_{-1} = L`` and ``c_{P-1} = 0`` (an
inactive slot has ``c_j = 0``). Equivalently layer ``i`` sits in slot
``s_i`` with ``s_0 >= s_1 >= ... >= s_{L-1} = 0``, steps of 0 or 1, and
``P = s_0 + 1``; then ``c_j = #{i : s_i > j}``.

Memory as a reach table
-----------------------
For a stage starting at layer ``a`` in layout ``l`` with stash ``s``, the
layers it may hold form a prefix ``a .. reach - 1``: memory grows with
every added layer (all sizes are >= 0) and a layer without a cost entry for
``l`` ends the prefix. So rules 5 and 6 for a slot reduce to
``c_{j-1} <= reach[l, s][c_j]`` -- an integer comparison of layer indices,
computed here in exact integer arithmetic (no byte counts reach the
solvers, no rounding can admit an over-capacity plan or exclude a fitting one).

Segments and reshards (format v2)
---------------------------------
The *groups* are the problem's module runs (:meth:`Problem.segments` of the
whole model; a version-1 problem has one group, the whole model). A stage's
segments are its intersections with the groups, so a slot chooses one config
per (slot, group) it covers: ``use[j][g][k]``, all of the slot's size. Slot
``j`` covers group ``g = [A, B]`` exactly when ``s_A >= j >= s_B``, i.e.
``cover[j][g] = before[A][j] - before[B][j+1]`` (linear, since
``before[B][j+1] <= before[A][j]``), and it holds the boundary between
groups ``g`` and ``g + 1`` when it covers both:
``inside[j][g] = before[B+1][j] - before[B][j+1]`` with ``B`` the last layer
of ``g``. The reshard there depends only on the two configs' meshes
``(dp, tp)``: with ``mesh[j][g][mu] = sum of use[j][g][k]`` over the configs
of mesh ``mu``, a 0/1 (MILP: continuous) ``w[j][g][mu, nu]`` per same-size
mesh pair with row sums ``<= mesh[j][g][mu]``, column sums
``<= mesh[j][g+1][nu]`` and total ``inside[j][g]`` is 1 exactly on the pair the
slot uses, and the slot's forward and backward each pay
``sum r[g][mu, nu] w[j][g][mu, nu]`` (``r`` from
:func:`~partitioner.reshard.stage_reshard_ms`, the canonical placement the
solvers emit). With one group (every v1 problem) memory is the reach table
below; with several, a slot's memory couples its segments and is the linear
``sum_i (weight + stash_j act)[i, k(i)] <= capacity`` in exact integers (a
missing cost entry counts as ``capacity + 1``).

Placement
---------
Times depend on the placement only through which adjacent stages share a
node (DESIGN.md, "Times"), and only when some boundary carries bytes, the
two bandwidths differ and some layout is smaller than a node. Otherwise the placement is not modelled: any
allowed sizes summing to N can be packed (in-node sizes are powers of two
dividing ``gpus_per_node``, or ``gpus_per_node`` itself, so first-fit
decreasing fills the nodes exactly) and :func:`~partitioner.placement.pack_runs`
builds one after the solve. When it matters, a stage of fewer than
``gpus_per_node`` devices ("small") is given a node; a node holds small
stages summing exactly to ``gpus_per_node`` or none; stages of
``gpus_per_node`` devices or more take whole nodes and never share.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..placement import label_nodes, node_assignment_ids, pack_runs
from ..plan import Plan, PlanError, Stage, evaluate
from ..problem import Layout, Problem
from ..reshard import stage_reshard_ms
from .base import Candidate, SolveRequest, SolverError
from .feasibility import explain_infeasible, feasible_stage_counts

__all__ = [
    "BuildTimeout",
    "build_guard",
    "build_timeout_message",
    "build_timeout_candidate",
    "model_size_refusal",
    "model_cells",
    "infeasible_message",
    "decisions_from_values",
    "SlotData",
    "SlotDecisions",
    "IntegerTimes",
    "slot_data",
    "decisions_of_plan",
    "plan_of_decisions",
    "integer_times",
    "conservative_bound",
    "starting_plan",
    "int_option",
    "stage_ceiling_ms",
    "RESOLUTION",
    "UNIT_CAP",
]

# Target relative accuracy of the integer time scale of CP-SAT: the plan it
# proves optimal is within this fraction of the true optimum (see integer_times).
RESOLUTION = 1e-7


@dataclass(frozen=True)
class SlotData:
    """Everything the slot models need, precomputed from a problem.

    Attributes
    ----------
    slots : int
        J, the largest feasible stage count (number of slot positions).
    counts : tuple of int
        The feasible stage counts P (within the bounds, with allowed sizes summing to N).
    layouts : tuple of Layout
        The configs some layer has, ordered by (devices, tp, variant).
    sizes : tuple of int
        The distinct device counts of ``layouts``, ascending.
    size_index : tuple of int
        For each layout, the index of its size in ``sizes``.
    stash : tuple of int
        Per slot ``j``, ``min(m, j + 1)``.
    time_prefix : ndarray, shape (layouts, L + 1)
        Prefix sums of ``fwd_ms + bwd_ms`` per layout (0 where a layer lacks the layout).
    reach : ndarray, shape (layouts, stash values, L)
        ``reach[l, s - 1, a]``: one past the last layer a stage that starts at
        ``a`` may hold in layout ``l`` with stash ``s`` (``a`` when even layer
        ``a`` alone does not fit or lacks the layout). One group only (empty otherwise).
    send_mb : ndarray, shape (L,)
        ``out_bytes / 1e6`` per layer (so that ms = MB / (devices x GB/s)).
    transfers : bool
        Some stage boundary can carry bytes.
    placement : bool
        Links change times: transfers exist, the bandwidths differ, and small stages exist.
    groups : tuple of (int, int)
        The module runs (first, last) whose segments get their own config (one in v1).
    meshes : tuple of (int, int)
        The distinct ``(dp, tp)`` of ``layouts``; ``mesh_index`` maps a layout to its mesh.
    reshard_ms : tuple of dict
        Per group boundary ``g`` (between groups g and g + 1): ``{(mu, nu): r}``
        for every ordered pair of distinct same-size meshes with ``r > 0`` ms.
    weight, act : list of list of int
        Per layout, per layer: the cost entry's bytes (0 where missing; ``present`` says which).
    """

    problem: Problem
    objective: str
    slots: int
    counts: tuple[int, ...]
    layouts: tuple[Layout, ...]
    sizes: tuple[int, ...]
    size_index: tuple[int, ...]
    stash: tuple[int, ...]
    time_prefix: np.ndarray
    reach: np.ndarray
    send_mb: np.ndarray
    transfers: bool
    placement: bool
    groups: tuple[tuple[int, int], ...] = ()
    meshes: tuple[tuple[int, int], ...] = ()
    mesh_index: tuple[int, ...] = ()
    reshard_ms: tuple[dict, ...] = ()
    present: tuple[tuple[bool, ...], ...] = ()
    weight: tuple[tuple[int, ...], ...] = ()
    act: tuple[tuple[int, ...], ...] = ()

    @property
    def num_layers(self) -> int:
        return self.problem.num_layers

    @property
    def microbatches(self) -> int:
        return self.problem.microbatches

    @property
    def gpus_per_node(self) -> int:
        return self.problem.cluster.gpus_per_node

    @property
    def multi(self) -> bool:
        """Several groups: per-segment configs, reshards and linear memory (format v2)."""
        return len(self.groups) > 1

    @property
    def bandwidths(self) -> tuple[float, ...]:
        """GB/s per link kind: (inter, intra) when placement is modelled, else (inter,)."""
        c = self.problem.cluster
        return (c.inter_node_GBps, c.intra_node_GBps) if self.placement else (c.inter_node_GBps,)

    def small(self, layout_index: int) -> bool:
        """A stage in this layout shares its node (fewer devices than a node)."""
        return self.layouts[layout_index].devices < self.gpus_per_node

    def group_configs(self, g: int) -> list[int]:
        """The layouts some layer of group ``g`` has (a segment of ``g`` may only use these)."""
        a, b = self.groups[g]
        return [k for k in range(len(self.layouts)) if any(self.present[k][a : b + 1])]

    def mesh_pairs(self, g: int) -> list[tuple[int, int]]:
        """The ordered same-size mesh pairs a slot can have across group boundary ``g``."""
        first = {self.mesh_index[k] for k in self.group_configs(g)}
        second = {self.mesh_index[k] for k in self.group_configs(g + 1)}
        size = {mu: self.meshes[mu][0] * self.meshes[mu][1] for mu in first | second}
        return [(mu, nu) for mu in sorted(first) for nu in sorted(second) if size[mu] == size[nu]]

    def memory(self, k: int, i: int, slot: int) -> int:
        """Bytes layer ``i`` holds in layout ``k`` on slot ``slot`` (its stash); capacity + 1 if missing."""
        if not self.present[k][i]:
            return self.problem.cluster.gpu_memory_bytes + 1
        return self.weight[k][i] + self.stash[slot] * self.act[k][i]

    def reach_of(self, layout_index: int, slot: int) -> np.ndarray:
        return self.reach[layout_index, self.stash[slot] - 1]

    def memory_rules(self):
        """The memory and cost-entry rules both models state (one group), as ``(j, k, a, r)``:
        if slot j uses layout k and starts at or before layer a, it ends by layer r.

        Only the rules that bind are yielded: none where the layout reaches the
        last layer, and none implied by the rule for ``a + 1``.
        """
        L = self.num_layers
        for j in range(self.slots):
            for k in range(len(self.layouts)):
                reach = self.reach_of(k, j)
                for a in range(L - j):
                    r = int(reach[a])
                    if r >= L or (a + 1 < L - j and reach[a + 1] == r):
                        continue
                    yield j, k, a, r

    def lower_bound(self) -> float:
        """A lower bound on the objective (ms) from the layer costs alone.

        Every stage time is at least each of its layers' fastest time, and a
        stage of ``d`` devices takes at least its layers' least device-ms
        divided by ``d``; with the devices summing to N the slowest stage takes
        at least (total least device-ms) / N. The iteration objective is at
        least m times the bottleneck and at least the sum of fastest layer
        times plus (m - 1) bottlenecks. (Reshards and sends only add.)
        """
        return _analytic_bound(self.problem, self.objective, nudge=False)

    def upper_stage_ms(self) -> float:
        """An upper bound on any stage time (ms): all layers in the slowest layout (several
        groups: every layer in its slowest config), every reshard at its largest, plus two sends."""
        if self.multi:
            compute = math.fsum(max(c.fwd_ms + c.bwd_ms for c in layer.costs.values()) for layer in self.problem.layers)
        else:
            compute = float(self.time_prefix[:, -1].max())
        compute *= 1 + (self.num_layers + 2) * 2.0**-52  # float sums may sit that far below the exact ones
        sends = 2.0 * float(self.send_mb.max()) / (self.sizes[0] * min(self.bandwidths)) if self.transfers else 0.0
        reshards = 2.0 * sum(max(r.values(), default=0.0) for r in self.reshard_ms)
        return compute + sends + reshards


def slot_data(problem: Problem, objective: str, check=None) -> SlotData:
    """Precompute the slot model's tables for ``problem`` (default cluster graph only).

    ``check()`` (see :func:`build_guard`) is called as the tables grow.
    """
    check = check or (lambda: None)
    if problem.cluster.topology is not None:
        raise ValueError("the slot model needs the default cluster graph")
    counts = tuple(feasible_stage_counts(problem))
    layouts = problem.layouts()
    sizes = tuple(sorted({lay.devices for lay in layouts}))
    L, m = problem.num_layers, problem.microbatches
    J = max(counts) if counts else 1
    n = len(layouts)
    groups = problem.segments(0, L - 1)
    time = np.zeros((n, L))
    weight = [[0] * L for _ in range(n)]
    act = [[0] * L for _ in range(n)]
    present = [[False] * L for _ in range(n)]
    index = {lay: k for k, lay in enumerate(layouts)}
    for i, layer in enumerate(problem.layers):
        if i % 1024 == 0:
            check()
        for lay, c in layer.costs.items():
            k = index[lay]
            present[k][i] = True
            time[k, i] = c.fwd_ms + c.bwd_ms
            weight[k][i] = c.weight_bytes
            act[k][i] = c.act_bytes
    prefix = np.hstack([np.zeros((n, 1)), np.cumsum(time, axis=1)])
    capacity = problem.cluster.gpu_memory_bytes
    if len(groups) == 1:
        n_stash = min(m, J)
        reach = np.zeros((n, n_stash, L), dtype=np.int64)
        for k in range(n):
            for s in range(1, n_stash + 1):
                check()
                reach[k, s - 1] = _reach(weight[k], act[k], present[k], s, capacity)
    else:
        reach = np.zeros((n, 0, L), dtype=np.int64)
    send = np.array([layer.out_bytes for layer in problem.layers], dtype=float) / 1e6
    transfers = bool(L > 1 and send[:-1].max() > 0)
    c = problem.cluster
    placement = transfers and c.intra_node_GBps != c.inter_node_GBps and sizes[0] < c.gpus_per_node
    meshes = tuple(sorted({lay.mesh for lay in layouts}, key=lambda mu: (mu[0] * mu[1], mu[1])))
    reshards = []
    for _, last in groups[:-1]:
        out = problem.layers[last].out_bytes
        table = {}
        for mu in meshes:
            for nu in meshes:
                if mu != nu and mu[0] * mu[1] == nu[0] * nu[1]:
                    r = stage_reshard_ms(out, Layout(*mu), Layout(*nu), mu[0] * mu[1], c)
                    if r > 0:
                        table[meshes.index(mu), meshes.index(nu)] = r
        reshards.append(table)
    return SlotData(
        problem=problem,
        objective=objective,
        slots=J,
        counts=counts,
        layouts=layouts,
        sizes=sizes,
        size_index=tuple(sizes.index(lay.devices) for lay in layouts),
        stash=tuple(min(m, j + 1) for j in range(J)),
        time_prefix=prefix,
        reach=reach,
        send_mb=send,
        transfers=transfers,
        placement=placement,
        groups=tuple(groups),
        meshes=meshes,
        mesh_index=tuple(meshes.index(lay.mesh) for lay in layouts),
        reshard_ms=tuple(reshards),
        present=tuple(map(tuple, present)),
        weight=tuple(map(tuple, weight)),
        act=tuple(map(tuple, act)),
    )


def _reach(weight, act, present, stash: int, capacity: int) -> np.ndarray:
    """Per start ``a``: the largest ``b`` with layers ``a..b-1`` present and fitting (exact ints)."""
    L = len(weight)
    out = np.zeros(L, dtype=np.int64)
    b, used = 0, 0  # window a..b-1 and its memory; two pointers, b never moves back
    for a in range(L):
        if b < a:
            b, used = a, 0
        while b < L and present[b] and used + weight[b] + stash * act[b] <= capacity:
            used += weight[b] + stash * act[b]
            b += 1
        out[a] = b
        if b > a:
            used -= weight[a] + stash * act[a]
    return out


# --------------------------------------------------------------------------- decisions <-> plans


def int_option(request: SolveRequest, method: str, name: str, default: int, minimum: int = 1) -> int:
    """An integer option, or :class:`~partitioner.solvers.SolverError` naming it."""
    value = request.option(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SolverError(f"{method}: option {name} must be an integer >= {minimum}, got {value!r}")
    return value


def starting_plan(problem: Problem, request: SolveRequest, notes: dict, check=None) -> tuple[Plan | None, str | None]:
    """The plan to start from, and where it came from.

    The caller's ``warm_start`` when it is valid (an invalid one is noted in
    ``notes["warm_start"]`` and skipped), else the greedy plan unless the
    ``hint`` option is false, else None. ``check()`` is called before the
    greedy run (it may raise :class:`BuildTimeout`).
    """
    if request.warm_start is not None:
        try:
            evaluate(problem, request.warm_start)
        except PlanError as err:
            notes["warm_start"] = f"ignored: {err}"
        else:
            return request.warm_start.with_device_ids(), "warm_start"
    if request.option("hint", True):
        if check is not None:
            check()
        from .greedy import solve_greedy  # local: greedy is a sibling method module

        try:
            greedy = solve_greedy(problem, request)
        except Exception as err:  # noqa: BLE001 - a baseline bug must not take the exact solver down
            notes["hint"] = f"greedy failed: {type(err).__name__}: {err}"
            return None, None
        if greedy.plan is not None:
            try:
                evaluate(problem, greedy.plan)
            except PlanError as err:  # a baseline bug must not take the exact solver down
                notes["hint"] = f"greedy plan ignored: {err}"
            else:
                return greedy.plan, "greedy"
    return None, None



@dataclass(frozen=True)
class SlotDecisions:
    """A plan in the model's terms.

    ``starts[j]`` is ``c_j`` (first layer of slot j, 0 for inactive slots),
    ``configs[j][g]`` the layout index slot j uses for its segment of group
    ``g`` (-1 where it does not cover ``g``), ``layout[j]`` the layout of its
    first segment (-1 inactive; all of a slot's layouts have one size),
    ``node[j]`` the node label of a small slot (-1 otherwise), labelled in
    order of first use by slot index, and ``link[j]`` whether slots
    ``j + 1`` and ``j`` share a node.
    """

    stages: int
    starts: tuple[int, ...]
    layout: tuple[int, ...]
    node: tuple[int, ...]
    link: tuple[bool, ...]
    configs: tuple[tuple[int, ...], ...] = ()

    def ends(self, data: "SlotData") -> list[int]:
        """One past the last layer of each slot (0 for inactive slots)."""
        return [(data.num_layers if j == 0 else self.starts[j - 1]) if j < self.stages else 0 for j in range(len(self.starts))]


def decisions_of_plan(data: SlotData, plan: Plan) -> SlotDecisions | None:
    """The model's decisions for a valid ``plan`` (None if the plan does not fit the slots)."""
    P, J = plan.num_stages, data.slots
    if P > J:
        return None
    G = data.gpus_per_node
    n_groups = len(data.groups)
    group_of = _group_of(data)
    starts, layout, node = [0] * J, [-1] * J, [-1] * J
    configs = [[-1] * n_groups for _ in range(J)]
    ids = plan.device_ids()
    labels: dict[int, int] = {}
    for j in range(P):  # slot order: first use by slot index
        p = P - 1 - j
        stage = plan.stages[p]
        starts[j] = stage.first_layer
        try:
            for (a, _), config in stage.segment_configs(data.problem):
                configs[j][group_of[a]] = data.layouts.index(config)
        except (ValueError, PlanError):
            return None
        layout[j] = next(k for k in configs[j] if k >= 0)
        if stage.devices < G:
            n = ids[p][0] // G
            node[j] = labels.setdefault(n, len(labels))
    link = tuple(node[j] >= 0 and node[j] == node[j + 1] for j in range(J - 1))
    return SlotDecisions(P, tuple(starts), tuple(layout), tuple(node), link, tuple(map(tuple, configs)))


def _group_of(data: SlotData) -> list[int]:
    out = [0] * data.num_layers
    for g, (a, b) in enumerate(data.groups):
        out[a : b + 1] = [g] * (b - a + 1)
    return out


def decisions_from_values(data: SlotData, var, on) -> SlotDecisions:
    """Read a solution of either model (CP-SAT or MILP) back into slot decisions.

    ``var`` has the shared decision variables ``before``, ``use`` (per slot,
    group and layout) and ``node``; ``on(v)`` says whether the 0/1 variable
    (or constant) ``v`` is one in the solution.
    """
    J, L = data.slots, data.num_layers
    P = sum(int(on(var.before[0][j])) for j in range(J))
    starts = tuple(sum(int(on(var.before[i][j + 1])) for i in range(L)) if j < P else 0 for j in range(J))
    configs = tuple(
        tuple(next((k for k, u in enumerate(row) if on(u)), -1) if j < P else -1 for row in var.use[j]) for j in range(J)
    )
    layout = tuple(next((k for k in configs[j] if k >= 0), -1) for j in range(J))
    node = [-1] * J
    for j, row in enumerate(var.node):
        for k, v in enumerate(row):
            if on(v):
                node[j] = k
    link = tuple(node[j] >= 0 and node[j] == node[j + 1] for j in range(J - 1))
    return SlotDecisions(P, starts, layout, tuple(node), link, configs)


def infeasible_message(problem: Problem) -> str:
    """:func:`~.feasibility.explain_infeasible`, or a plain statement if explaining fails."""
    try:
        return explain_infeasible(problem)
    except Exception as err:  # noqa: BLE001 - the proof stands; only the explanation is missing
        return f"no valid plan exists (proven by exact search; explaining why failed: {type(err).__name__}: {err})"


class BuildTimeout(Exception):
    """The time limit ran out while a model was being built."""


def build_guard(deadline: float | None):
    """A check to call inside long model-building loops: raises :class:`BuildTimeout` past ``deadline``.

    Building the slot model of a large problem takes minutes (256 layers on
    256 GPUs: about 20 s in CP-SAT, minutes in PuLP); a time limit covers it.
    """

    def check() -> None:
        if deadline is not None and time.perf_counter() > deadline:
            raise BuildTimeout

    return check


def build_timeout_message(method: str, problem: Problem) -> str:
    return (
        f"{method}: the time limit ran out while building the model ({problem.num_layers} layers, "
        f"{len(problem.layouts())} configs); raise --time-limit or use dp"
    )


def build_timeout_candidate(method: str, problem: Problem, request: SolveRequest, plan, source, extra) -> Candidate:
    """The answer when the limit ran out before the search: the starting plan if there is one
    (``feasible``, with the analytic bound), else an error."""
    message = build_timeout_message(method, problem)
    if plan is None:
        return Candidate("error", message=message, extra=extra)
    bound = _analytic_bound(problem, request.objective)
    return Candidate("feasible", plan, bound, f"{message}; returning the {source} plan", extra)


def _analytic_bound(problem: Problem, objective: str, nudge: bool = True) -> float:
    """:meth:`SlotData.lower_bound` without building the tables (nudged down unless ``nudge`` is false)."""
    fastest, work = [], 0.0
    for layer in problem.layers:
        fastest.append(min(c.fwd_ms + c.bwd_ms for c in layer.costs.values()))
        work += min(lay.devices * (c.fwd_ms + c.bwd_ms) for lay, c in layer.costs.items())
    bottleneck = max(max(fastest), work / problem.num_devices)
    m = problem.microbatches
    value = bottleneck if objective == "bottleneck" else max(m * bottleneck, sum(fastest) + (m - 1) * bottleneck)
    return max(0.0, value * (1 - 1e-12)) if nudge else value


# Seconds per (layer, slot, config) cell to build each model: the rate on an
# idle core of the reference machine, halved, so that a refusal is never
# premature (under load the builds are 2-5x slower, and build_guard stops them).
BUILD_SECONDS_PER_CELL = {"cpsat": 1e-5, "milp": 4e-5}


def model_cells(problem: Problem) -> tuple[int, int]:
    """``(slots, cells)``: an upper bound on the slot count from the stage bounds alone, and the
    (layer, slot, config) cells of the order encoding times the configs (cheap to compute)."""
    L = problem.num_layers
    J = max(1, min(problem.stages.max, L, problem.num_devices))
    configs = len({lay for layer in problem.layers for lay in layer.costs})
    return J, (J * L - J * (J - 1) // 2) * configs


def model_size_refusal(method: str, problem: Problem, request: SolveRequest, start: float) -> str | None:
    """A message refusing a problem whose model cannot be built within the time limit, else None.

    The estimate is the cell count (:func:`model_cells`) times an optimistic
    build rate (:data:`BUILD_SECONDS_PER_CELL`): the model has at least
    that many terms. A build that still runs over is stopped by :func:`build_guard`.
    """
    if request.time_limit is None:
        return None
    slots, cells = model_cells(problem)
    estimate = cells * BUILD_SECONDS_PER_CELL[method]
    left = request.time_limit - (time.perf_counter() - start)
    if estimate <= left:
        return None
    return (
        f"{method}: the time limit would run out while building the model ({problem.num_layers} layers x up to "
        f"{slots} stage slots x {cells // max(1, slots * problem.num_layers - slots * (slots - 1) // 2)} configs: "
        f"at least {estimate:.3g} s to build, {max(left, 0.0):.3g} s left); raise --time-limit or use dp"
    )


def plan_of_decisions(data: SlotData, decisions: SlotDecisions) -> Plan:
    """The plan (with device ids) the model's decisions describe."""
    P, L = decisions.stages, data.num_layers
    cluster = data.problem.cluster
    ends = decisions.ends(data)
    stages = []
    for p in range(P):
        j = P - 1 - p
        first, last = decisions.starts[j], ends[j] - 1
        configs = [data.layouts[k] for k in decisions.configs[j] if k >= 0]
        stages.append((first, last, configs))
    sizes = [configs[0].devices for _, _, configs in stages]
    if data.placement:
        assignment = _assignment_from_nodes(data, decisions, sizes)
    else:
        assignment = pack_runs(cluster, sizes, [False] * (P - 1))
        if assignment is None:  # pragma: no cover - sizes dividing G always pack (module docstring)
            raise RuntimeError(f"cannot place stage sizes {sizes}")
    ids = node_assignment_ids(cluster, sizes, assignment)
    return Plan(
        tuple(Stage.from_configs(a, b, configs[0].devices, configs, ids[p]) for p, (a, b, configs) in enumerate(stages))
    )


def _assignment_from_nodes(data: SlotData, decisions: SlotDecisions, sizes: list[int]) -> list:
    """Node assignment: small stages on their labelled nodes, every other stage on nodes of its own."""
    P, G = decisions.stages, data.gpus_per_node
    bins = [decisions.node[P - 1 - p] if sizes[p] < G else ("own", p) for p in range(P)]
    return label_nodes(sizes, bins, G)


# --------------------------------------------------------------------------- integer times (CP-SAT)

# Largest objective, in units, the integer model is built for: far inside
# CP-SAT's 64-bit range, and every time is then carried by a double to within
# a small fraction of a unit (see integer_times).
UNIT_CAP = 2.0**50
_EPS = 2.0**-52


@dataclass(frozen=True)
class IntegerTimes:
    """Times in integer units of ``1 / scale`` ms, for CP-SAT.

    Attributes
    ----------
    scale : float
        Units per millisecond.
    time_prefix : list of list of int
        Per layout, ``scale`` x the exact prefix sums of ``fwd_ms + bwd_ms``,
        rounded to the nearest unit (the sums are formed in exact rational
        arithmetic, so no cancellation: a 1e18 ms layer does not wipe out the
        ones after it). A segment's compute is a difference of two of them,
        off by at most 1 unit.
    tau : list of list of int
        Per layout and layer: the difference of consecutive ``time_prefix``
        entries, capped at ``top + 1`` (a layer that alone exceeds the
        ceiling can never be in a plan the model keeps).
    send : ndarray of int, shape (L + 1, sizes + 1, link kinds)
        ``send[c, s, h]``: the transfer into a slot starting at layer ``c``
        (so after layer ``c - 1``) when the smaller of the two stages has
        ``sizes[s - 1]`` devices and the link is kind ``h`` (see
        :attr:`SlotData.bandwidths`); 0 when ``c == 0`` or ``s == 0`` (no
        boundary), capped at ``top + 1``.
    reshard : tuple of dict
        Per group boundary, ``{(mu, nu): units}`` of the forward plus the
        backward reshard ``2 r`` (:attr:`SlotData.reshard_ms`), capped at ``top + 1``.
    top : int
        The largest stage time (units) the model allows: a plan with a
        slower stage is not modelled. Without a ceiling it is the largest
        possible stage time; with one (the hint's, see :func:`stage_ceiling_ms`)
        only plans that can beat the hint are kept.
    stage_error : float
        Most units by which a stage time of the model can differ from
        ``scale`` x its true time: 1 per segment (two rounded prefixes), and
        ``1/2 + delta`` per send and reshard term (rounding, plus ``delta``
        for the double precision of the term), so ``2 + 2 delta`` for a
        one-segment stage.
    error : float
        The same for the objective: ``stage_error`` for ``bottleneck``,
        ``(J + m - 1) stage_error`` for ``iteration``.
    exact : bool
        The scale meets the requested resolution (False when the objective's
        range forced a coarser unit; the bound stays valid, but it may not
        prove optimality to the resolution).
    """

    scale: float
    time_prefix: list[list[int]]
    tau: list[list[int]]
    send: np.ndarray
    reshard: tuple[dict, ...]
    top: int
    stage_error: float
    error: float
    exact: bool


def stage_ceiling_ms(objective: str, value: float, microbatches: int) -> float:
    """The slowest stage a plan can have and still not be worse than a plan of objective ``value``.

    ``bottleneck`` is the slowest stage; ``iteration`` = sum + (m - 1) max >= m max.
    """
    return value if objective == "bottleneck" else value / microbatches


def integer_times(data: SlotData, resolution: float = RESOLUTION, ceiling_ms: float | None = None, check=None) -> IntegerTimes:
    """Scale every time to integers -- the one place CP-SAT's resolution is chosen.

    CP-SAT needs integer coefficients. Each quantity is rounded to the
    nearest unit, so the model's objective of any plan is within ``error``
    units of the truth, and a plan the solver proves optimal (with an
    absolute gap limit of ``error`` units) is within ``3 * error`` units of
    the true optimum. The unit is chosen so that this is at most
    ``resolution`` times the analytic lower bound of the objective
    (:meth:`SlotData.lower_bound`), hence at most ``resolution`` relative to
    the true optimum -- unless the objective's upper bound would exceed
    :data:`UNIT_CAP` units, where the scale is capped and ``exact`` is
    False (the bound reported through :func:`conservative_bound` stays valid
    either way; ``cpsat`` then does not claim optimality unless the bound
    proves it).

    ``ceiling_ms`` (optional): no stage of the plans of interest is slower
    (:func:`stage_ceiling_ms` of a known plan). Times above it are capped, so
    that sentinel costs (``fwd_ms: 1e12``) neither blow up the range nor
    cost resolution.

    Consequence: two plans whose true objectives differ by less than about
    ``resolution`` (relative) can look equal, or swapped, to the solver, so
    ``cpsat`` may return a plan up to that fraction worse than the best one;
    with the default 1e-7 it agrees with the exact methods to 1e-6.
    """
    check = check or (lambda: None)
    J, m, L = data.slots, data.microbatches, data.num_layers
    groups = max(1, len(data.groups))
    # a first pass with delta = 1/1024, then delta from the actual magnitudes
    stage_error = groups + (groups + 1) * (0.5 + 2.0**-10)
    count = 1 if data.objective == "bottleneck" else J + m - 1
    lower = data.lower_bound()
    upper_stage = data.upper_stage_ms()
    if ceiling_ms is not None and math.isfinite(ceiling_ms):
        upper_stage = min(upper_stage, ceiling_ms)
    upper = count * upper_stage
    if upper <= 0:  # every time is zero (or the ceiling is): any unit is exact
        scale, exact = 1.0, True
    else:
        cap = UNIT_CAP / upper
        wanted = 3 * count * stage_error / (resolution * lower) if lower > 0 else math.inf
        scale, exact = (wanted, True) if wanted <= cap else (cap, False)
    top_units = scale * upper_stage + stage_error + 1
    delta = max(2.0**-10, 4 * _EPS * top_units)
    stage_error = groups + (groups + 1) * (0.5 + delta)
    top = int(math.ceil(top_units + 2 * delta + 1))
    prefix = _exact_prefixes(data, scale, check)
    tau = [[min(b - a, top + 1) for a, b in zip(row, row[1:])] for row in prefix]
    bws = data.bandwidths
    S = len(data.sizes)
    send = np.zeros((L + 1, S + 1, len(bws)), dtype=np.int64)
    if data.transfers:
        for c in range(1, L):
            if c % 4096 == 0:
                check()
            mb = data.send_mb[c - 1]
            if mb == 0:
                continue
            for s, d in enumerate(data.sizes, start=1):
                for h, bw in enumerate(bws):
                    send[c, s, h] = _units(scale, mb / (d * bw), top)
    reshard = tuple({pair: _units(scale, 2 * r, top) for pair, r in table.items()} for table in data.reshard_ms)
    return IntegerTimes(scale, prefix, tau, send, reshard, top, stage_error, count * stage_error, exact)


def _units(scale: float, ms: float, top: int) -> int:
    """``round(scale * ms)``, capped at ``top + 1``."""
    value = scale * ms
    return top + 1 if not value < top + 1 else int(round(value))


def _exact_prefixes(data: SlotData, scale: float, check) -> list[list[int]]:
    """Per layout, ``round(scale * sum of (fwd + bwd) over layers < i)`` for i = 0..L, exactly.

    Every double is a rational with a power-of-two denominator; the sums are
    formed in integers over a common denominator, then scaled and rounded
    once (half up).
    """
    problem = data.problem
    index = {lay: k for k, lay in enumerate(data.layouts)}
    n, L = len(data.layouts), data.num_layers
    parts: list[list[tuple[int, int]]] = [[(0, 1)] * L for _ in range(n)]
    shift = 0
    for i, layer in enumerate(problem.layers):
        if i % 1024 == 0:
            check()
        for lay, c in layer.costs.items():
            fn, fd = c.fwd_ms.as_integer_ratio() if isinstance(c.fwd_ms, float) else (int(c.fwd_ms), 1)
            bn, bd = c.bwd_ms.as_integer_ratio() if isinstance(c.bwd_ms, float) else (int(c.bwd_ms), 1)
            parts[index[lay]][i] = (fn * bd + bn * fd, fd * bd)
            shift = max(shift, (fd * bd).bit_length() - 1)
    den = 1 << shift
    sn, sd = float(scale).as_integer_ratio()
    out = []
    for k in range(n):
        check()
        total = 0
        row = [0]
        for num, d in parts[k]:
            total += num * (den // d)
            row.append((2 * total * sn + den * sd) // (2 * den * sd))
        out.append(row)
    return out


def conservative_bound(units: float, times: IntegerTimes, analytic: float, layers: int = 0) -> float:
    """A proven lower bound (ms) from a bound on the integer model's objective.

    Any plan's true objective is at least (model objective - error) / scale,
    so the true optimum is at least ``(units - error) / scale``; the result
    is nudged down (relative ``(layers + 16) 2**-52``: the float sums of
    :func:`~partitioner.plan.evaluate` may sit that far below the exact
    ones) and never below the analytic bound (itself nudged down).
    """
    best = max((units - times.error) / times.scale, analytic)
    best *= 1 - (layers + 16) * _EPS
    for _ in range(4):
        best = math.nextafter(best, -math.inf)
    return max(best, 0.0)
