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
from .base import SolveRequest, SolverError
from .feasibility import feasible_stage_counts

__all__ = [
    "BuildTimeout",
    "build_guard",
    "build_timeout_message",
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
    "RESOLUTION",
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
        The layouts some layer has, ordered by (devices, tp).
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
        ``a`` alone does not fit or lacks the layout).
    send_mb : ndarray, shape (L,)
        ``out_bytes / 1e6`` per layer (so that ms = MB / (devices x GB/s)).
    transfers : bool
        Some stage boundary can carry bytes.
    placement : bool
        Links change times: transfers exist, the bandwidths differ, and small stages exist.
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
    def bandwidths(self) -> tuple[float, ...]:
        """GB/s per link kind: (inter, intra) when placement is modelled, else (inter,)."""
        c = self.problem.cluster
        return (c.inter_node_GBps, c.intra_node_GBps) if self.placement else (c.inter_node_GBps,)

    def small(self, layout_index: int) -> bool:
        """A stage in this layout shares its node (fewer devices than a node)."""
        return self.layouts[layout_index].devices < self.gpus_per_node

    def reach_of(self, layout_index: int, slot: int) -> np.ndarray:
        return self.reach[layout_index, self.stash[slot] - 1]

    def memory_rules(self):
        """The memory and cost-entry rules both models state, as ``(j, k, a, r)``:
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
        times plus (m - 1) bottlenecks.
        """
        fastest, work = [], 0.0
        for layer in self.problem.layers:
            fastest.append(min(c.fwd_ms + c.bwd_ms for c in layer.costs.values()))
            work += min(lay.devices * (c.fwd_ms + c.bwd_ms) for lay, c in layer.costs.items())
        bottleneck = max(max(fastest), work / self.problem.num_devices)
        if self.objective == "bottleneck":
            return bottleneck
        m = self.microbatches
        return max(m * bottleneck, sum(fastest) + (m - 1) * bottleneck)

    def upper_stage_ms(self) -> float:
        """An upper bound on any stage time (ms): all layers in the slowest layout plus two sends."""
        compute = float(self.time_prefix[:, -1].max())
        sends = 2.0 * float(self.send_mb.max()) / (self.sizes[0] * min(self.bandwidths)) if self.transfers else 0.0
        return compute + sends


def slot_data(problem: Problem, objective: str) -> SlotData:
    """Precompute the slot model's tables for ``problem`` (default cluster graph only)."""
    if problem.cluster.topology is not None:
        raise ValueError("the slot model needs the default cluster graph")
    counts = tuple(feasible_stage_counts(problem))
    layouts = problem.layouts()
    sizes = tuple(sorted({lay.devices for lay in layouts}))
    L, m = problem.num_layers, problem.microbatches
    J = max(counts) if counts else 1
    n = len(layouts)
    time = np.zeros((n, L))
    weight = np.zeros((n, L), dtype=object)
    act = np.zeros((n, L), dtype=object)
    missing = np.zeros((n, L), dtype=bool)
    for k, lay in enumerate(layouts):
        for i, layer in enumerate(problem.layers):
            c = layer.cost(lay)
            if c is None:
                missing[k, i] = True
            else:
                time[k, i] = c.fwd_ms + c.bwd_ms
                weight[k, i] = c.weight_bytes
                act[k, i] = c.act_bytes
    prefix = np.hstack([np.zeros((n, 1)), np.cumsum(time, axis=1)])
    n_stash = min(m, J)
    reach = np.zeros((n, n_stash, L), dtype=np.int64)
    capacity = problem.cluster.gpu_memory_bytes
    for k in range(n):
        for s in range(1, n_stash + 1):
            reach[k, s - 1] = _reach(weight[k], act[k], missing[k], s, capacity)
    send = np.array([layer.out_bytes for layer in problem.layers], dtype=float) / 1e6
    transfers = bool(L > 1 and send[:-1].max() > 0)
    c = problem.cluster
    placement = transfers and c.intra_node_GBps != c.inter_node_GBps and sizes[0] < c.gpus_per_node
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
    )


def _reach(weight: np.ndarray, act: np.ndarray, missing: np.ndarray, stash: int, capacity: int) -> np.ndarray:
    """Per start ``a``: the largest ``b`` with layers ``a..b-1`` present and fitting (exact ints)."""
    L = len(weight)
    out = np.zeros(L, dtype=np.int64)
    b, used = 0, 0  # window a..b-1 and its memory; two pointers, b never moves back
    for a in range(L):
        if b < a:
            b, used = a, 0
        while b < L and not missing[b] and used + weight[b] + stash * act[b] <= capacity:
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


def starting_plan(problem: Problem, request: SolveRequest, notes: dict) -> tuple[Plan | None, str | None]:
    """The plan to start from, and where it came from.

    The caller's ``warm_start`` when it is valid (an invalid one is noted in
    ``notes["warm_start"]`` and skipped), else the greedy plan unless the
    ``hint`` option is false, else None.
    """
    if request.warm_start is not None:
        try:
            evaluate(problem, request.warm_start)
        except PlanError as err:
            notes["warm_start"] = f"ignored: {err}"
        else:
            return request.warm_start.with_device_ids(), "warm_start"
    if request.option("hint", True):
        from .greedy import solve_greedy  # local: greedy is a sibling method module

        greedy = solve_greedy(problem, request)
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
    ``layout[j]`` the layout index of slot j (-1 inactive), ``node[j]`` the
    node label of a small slot (-1 otherwise), labelled in order of first
    use by slot index, and ``link[j]`` whether slots ``j + 1`` and ``j``
    share a node.
    """

    stages: int
    starts: tuple[int, ...]
    layout: tuple[int, ...]
    node: tuple[int, ...]
    link: tuple[bool, ...]


def decisions_of_plan(data: SlotData, plan: Plan) -> SlotDecisions | None:
    """The model's decisions for a valid ``plan`` (None if the plan does not fit the slots)."""
    P, J = plan.num_stages, data.slots
    if P > J:
        return None
    G = data.gpus_per_node
    starts, layout, node = [0] * J, [-1] * J, [-1] * J
    ids = plan.device_ids()
    labels: dict[int, int] = {}
    for j in range(P):  # slot order: first use by slot index
        p = P - 1 - j
        stage = plan.stages[p]
        starts[j] = stage.first_layer
        try:
            layout[j] = data.layouts.index(stage.layout)
        except ValueError:
            return None
        if stage.devices < G:
            n = ids[p][0] // G
            node[j] = labels.setdefault(n, len(labels))
    link = tuple(node[j] >= 0 and node[j] == node[j + 1] for j in range(J - 1))
    return SlotDecisions(P, tuple(starts), tuple(layout), tuple(node), link)


def decisions_from_values(data: SlotData, var, on) -> SlotDecisions:
    """Read a solution of either model (CP-SAT or MILP) back into slot decisions.

    ``var`` has the shared decision variables ``before``, ``use`` and
    ``node``; ``on(v)`` says whether the 0/1 variable (or constant) ``v`` is
    one in the solution.
    """
    J, L = data.slots, data.num_layers
    P = sum(int(on(var.before[0][j])) for j in range(J))
    starts = tuple(sum(int(on(var.before[i][j + 1])) for i in range(L)) if j < P else 0 for j in range(J))
    layout = tuple(next(k for k, u in enumerate(var.use[j]) if on(u)) if j < P else -1 for j in range(J))
    node = [-1] * J
    for j, row in enumerate(var.node):
        for k, v in enumerate(row):
            if on(v):
                node[j] = k
    link = tuple(node[j] >= 0 and node[j] == node[j + 1] for j in range(J - 1))
    return SlotDecisions(P, starts, layout, tuple(node), link)


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


def build_timeout_message(method: str, data: SlotData) -> str:
    return (
        f"{method}: the time limit ran out while building the model ({data.num_layers} layers, "
        f"{data.slots} stage slots, {len(data.layouts)} layouts); raise --time-limit or use dp"
    )


def plan_of_decisions(data: SlotData, decisions: SlotDecisions) -> Plan:
    """The plan (with device ids) the model's decisions describe."""
    P, L = decisions.stages, data.num_layers
    cluster = data.problem.cluster
    stages = []
    for p in range(P):
        j = P - 1 - p
        first = decisions.starts[j]
        last = (decisions.starts[j - 1] if j > 0 else L) - 1
        lay = data.layouts[decisions.layout[j]]
        stages.append((first, last, lay))
    sizes = [lay.devices for _, _, lay in stages]
    if data.placement:
        assignment = _assignment_from_nodes(data, decisions, sizes)
    else:
        assignment = pack_runs(cluster, sizes, [False] * (P - 1))
        if assignment is None:  # pragma: no cover - sizes dividing G always pack (module docstring)
            raise RuntimeError(f"cannot place stage sizes {sizes}")
    ids = node_assignment_ids(cluster, sizes, assignment)
    return Plan(tuple(Stage(a, b, lay.devices, lay.dp, lay.tp, ids[p]) for p, (a, b, lay) in enumerate(stages)))


def _assignment_from_nodes(data: SlotData, decisions: SlotDecisions, sizes: list[int]) -> list:
    """Node assignment: small stages on their labelled nodes, every other stage on nodes of its own."""
    P, G = decisions.stages, data.gpus_per_node
    bins = [decisions.node[P - 1 - p] if sizes[p] < G else ("own", p) for p in range(P)]
    return label_nodes(sizes, bins, G)


# --------------------------------------------------------------------------- integer times (CP-SAT)


@dataclass(frozen=True)
class IntegerTimes:
    """Times in integer units of ``1 / scale`` ms, for CP-SAT.

    Attributes
    ----------
    scale : float
        Units per millisecond.
    time_prefix : list of list of int
        ``round(scale * time_prefix)`` per layout: a stage's compute is a
        difference of two rounded prefix sums, off by at most 1 unit.
    send : ndarray of int, shape (L + 1, sizes + 1, link kinds)
        ``send[c, s, h]``: the transfer into a slot starting at layer ``c``
        (so after layer ``c - 1``) when the smaller of the two stages has
        ``sizes[s - 1]`` devices and the link is kind ``h`` (see
        :attr:`SlotData.bandwidths`); 0 when ``c == 0`` or ``s == 0`` (no
        boundary). Each entry is off by at most 1/2 unit.
    error : int
        Most units by which the model's objective of any plan can differ
        from ``scale`` x its true objective: 2 per stage time (1 compute,
        1/2 per transfer), hence 2 for ``bottleneck`` and
        ``2 (J + m - 1)`` for ``iteration``.
    """

    scale: float
    time_prefix: list[list[int]]
    send: np.ndarray
    error: int


def integer_times(data: SlotData, resolution: float = RESOLUTION) -> IntegerTimes:
    """Scale every time to integers -- the one place CP-SAT's resolution is chosen.

    CP-SAT needs integer coefficients. Each quantity is rounded to the
    nearest unit, so the model's objective of any plan is within ``error``
    units of the truth, and a plan the solver proves optimal (with an
    absolute gap limit of ``error`` units) is within ``3 * error`` units of
    the true optimum. The unit is chosen so that this is at most
    ``resolution`` times the analytic lower bound of the objective
    (:meth:`SlotData.lower_bound`), hence at most ``resolution`` relative to
    the true optimum -- unless the objective's upper bound would exceed
    2**50 units, where the scale is capped (the bound reported through
    :func:`conservative_bound` stays valid either way).

    Consequence: two plans whose true objectives differ by less than about
    ``resolution`` (relative) can look equal, or swapped, to the solver, so
    ``cpsat`` may return a plan up to that fraction worse than the best one;
    with the default 1e-7 it agrees with the exact methods to 1e-6.
    """
    J, m = data.slots, data.microbatches
    error = 2 if data.objective == "bottleneck" else 2 * (J + m - 1)
    lower = data.lower_bound()
    stages = 1 if data.objective == "bottleneck" else J + m - 1
    upper = stages * data.upper_stage_ms()
    if upper <= 0:  # every time is zero: any unit is exact
        scale = 1.0
    else:
        cap = 2.0**50 / upper
        scale = min(3 * error / (resolution * lower), cap) if lower > 0 else cap
    prefix = [[int(round(scale * v)) for v in row] for row in data.time_prefix]
    L, S = data.num_layers, len(data.sizes)
    bws = data.bandwidths
    send = np.zeros((L + 1, S + 1, len(bws)), dtype=np.int64)
    if data.transfers:
        for c in range(1, L):
            mb = data.send_mb[c - 1]
            for s, d in enumerate(data.sizes, start=1):
                for h, bw in enumerate(bws):
                    send[c, s, h] = int(round(scale * mb / (d * bw)))
    return IntegerTimes(scale, prefix, send, error)


def conservative_bound(units: float, times: IntegerTimes, analytic: float) -> float:
    """A proven lower bound (ms) from a bound on the integer model's objective.

    Any plan's true objective is at least (model objective - error) / scale,
    so the true optimum is at least ``(units - error) / scale``; the result
    is nudged down a few ulps against float rounding and never below the
    analytic bound (itself nudged down).
    """
    best = max((units - times.error) / times.scale, analytic)
    for _ in range(4):
        best = math.nextafter(best, -math.inf)
    return max(best, 0.0)
