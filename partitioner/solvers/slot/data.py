"""The slot model shared by the ``cpsat`` and ``milp`` methods: its data, its plans.

Both exact solver methods optimise the same model of DESIGN.md's problem.
This module holds what they share: the precomputed tables, the conversion
between a plan and the model's decisions, and the one place where times are
scaled to integers (CP-SAT only; the MILP keeps floats).

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.slot.data``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...cluster.placement import label_nodes, node_assignment_ids, pack_runs
from ...cluster.reshard import stage_reshard_ms
from ...plan import Plan, PlanError, Stage, evaluate
from ...problem import Layout, Problem
from ..base import SolveRequest
from ..feasibility import feasible_stage_counts
from .run import analytic_bound, starting_plan
from .schedule import Part, objective_parts, slot_stash
from .times import (
    integer_times,  # re-exported: the integer scale of this model (CP-SAT)
    stage_ceiling_ms,
)

__all__ = [
    "SlotData",
    "SlotDecisions",
    "slot_data",
    "decisions_of_plan",
    "decisions_from_values",
    "plan_of_decisions",
    "integer_times",
    "SlotStart",
    "slot_start",
    "stage_terms",
    "reshard_sites",
]


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
        Per slot ``j``, the schedule's stash (1F1B, ZB-H1: ``min(m, j + 1)``; GPipe: ``m``).
    time_prefix : ndarray, shape (layouts, L + 1)
        Prefix sums of ``fwd_ms + bwd_ms`` per layout (0 where a layer lacks the layout).
    reach : ndarray, shape (layouts, stash levels, L)
        ``reach[l, n, a]``: one past the last layer a stage that starts at
        ``a`` may hold in layout ``l`` with stash ``stash_levels[n]`` (``a`` when
        even layer ``a`` alone does not fit or lacks the layout). One group only
        (empty otherwise).
    stash_levels : tuple of int
        The distinct values of ``stash``, ascending (the rows of ``reach``).
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
    ties : tuple of (int, int, tuple of int)
        Format v3 tied weights: ``(j, k, bytes)`` for every layer k tied to layer j, ``bytes[l]``
        the ``tied_weight_bytes`` of k's entry in layout l (0 where missing). A slot holding both
        counts k's weight less those bytes; the models then state memory per segment (as for
        several groups) rather than by the reach table.
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
    meshes: tuple[tuple[int, ...], ...] = ()
    mesh_index: tuple[int, ...] = ()
    reshard_ms: tuple[dict, ...] = ()
    present: tuple[tuple[bool, ...], ...] = ()
    weight: tuple[tuple[int, ...], ...] = ()
    act: tuple[tuple[int, ...], ...] = ()
    stash_levels: tuple[int, ...] = ()
    ties: tuple[tuple[int, int, tuple[int, ...]], ...] = ()

    @property
    def schedule(self) -> str:
        return self.problem.training.schedule

    @property
    def parts(self) -> tuple[Part, ...]:
        """The per-stage times the objective weighs (:func:`.schedule.objective_parts`)."""
        return objective_parts(self.schedule, self.objective)

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
        size = {mu: math.prod(self.meshes[mu]) for mu in first | second}
        return [(mu, nu) for mu in sorted(first) for nu in sorted(second) if size[mu] == size[nu]]

    @property
    def linear_memory(self) -> bool:
        """Memory is stated per segment, linearly (several groups, or tied weights), not by the reach table."""
        return self.multi or bool(self.ties)

    def tied_pairs(self, slot: int, first: int, end: int, k_layout) -> int:
        """Tied bytes slot ``slot`` saves when it holds layers ``first .. end - 1`` and
        ``k_layout(layer)`` is the layout of that layer's segment."""
        return sum(row[k_layout(k)] for tj, k, row in self.ties if first <= tj and k < end)

    def memory(self, k: int, i: int, slot: int) -> int:
        """Bytes layer ``i`` holds in layout ``k`` on slot ``slot`` (its stash); capacity + 1 if missing."""
        if not self.present[k][i]:
            return self.problem.cluster.gpu_memory_bytes + 1
        return self.weight[k][i] + self.stash[slot] * self.act[k][i]

    def reach_of(self, layout_index: int, slot: int) -> np.ndarray:
        return self.reach[layout_index, self.stash_levels.index(self.stash[slot])]

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
        times plus (m - 1) bottlenecks. (Reshards and sends only add.) ZB-H1's
        and GPipe's iteration estimates have their own bounds
        (:func:`~.bounds.analytic_bound`).
        """
        return analytic_bound(self.problem, self.objective, nudge=False)

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

    ``check()`` (see :func:`~.run.build_guard`) is called as the tables grow.
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
    stashes = slot_stash(problem.training.schedule, m, J)
    levels = tuple(sorted(set(stashes)))
    if len(groups) == 1:
        reach = np.zeros((n, len(levels), L), dtype=np.int64)
        for k in range(n):
            for row, s in enumerate(levels):
                check()
                reach[k, row] = _reach(weight[k], act[k], present[k], s, capacity)
    else:
        reach = np.zeros((n, 0, L), dtype=np.int64)
    send = np.array([layer.out_bytes for layer in problem.layers], dtype=float) / 1e6
    transfers = bool(L > 1 and send[:-1].max() > 0)
    cluster = problem.cluster
    placement = transfers and cluster.intra_node_GBps != cluster.inter_node_GBps and sizes[0] < cluster.gpus_per_node
    meshes = tuple(sorted({lay.mesh for lay in layouts}, key=lambda mu: (math.prod(mu), mu[1], mu[2:])))
    reshards = []
    for _, last in groups[:-1]:
        out = problem.layers[last].out_bytes
        table = {}
        for mu in meshes:
            for nu in meshes:
                if mu != nu and math.prod(mu) == math.prod(nu):
                    r = stage_reshard_ms(out, Layout.of_mesh(mu), Layout.of_mesh(nu), math.prod(mu), cluster)
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
        stash=stashes,
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
        stash_levels=levels,
        ties=tuple(
            (j, k, tuple(problem.layers[k].costs[lay].tied_weight_bytes if lay in problem.layers[k].costs else 0 for lay in layouts))
            for j, k in problem.ties
        ),
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

    def slot_of(self, data: "SlotData") -> list[int]:
        """The slot of every layer."""
        ends, out = self.ends(data), [0] * data.num_layers
        for j in range(self.stages):
            out[self.starts[j] : ends[j]] = [j] * (ends[j] - self.starts[j])
        return out

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


def plan_of_decisions(data: SlotData, decisions: SlotDecisions) -> Plan:
    """The plan (with device ids) the model's decisions describe."""
    P = decisions.stages
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
        packed = pack_runs(cluster, sizes, [False] * (P - 1))
        if packed is None:  # pragma: no cover - sizes dividing G always pack (module docstring)
            raise RuntimeError(f"cannot place stage sizes {sizes}")
        assignment = packed
    ids = node_assignment_ids(cluster, sizes, assignment)
    return Plan(
        tuple(Stage.from_configs(a, b, configs[0].devices, configs, ids[p]) for p, (a, b, configs) in enumerate(stages))
    )


def _assignment_from_nodes(data: SlotData, decisions: SlotDecisions, sizes: list[int]) -> list:
    """Node assignment: small stages on their labelled nodes, every other stage on nodes of its own."""
    P, G = decisions.stages, data.gpus_per_node
    bins = [decisions.node[P - 1 - p] if sizes[p] < G else ("own", p) for p in range(P)]
    return label_nodes(sizes, bins, G)


# --------------------------------------------------------------------------- shared by both models


@dataclass
class SlotStart:
    """The tables, the starting plan (hint) in the model's terms, and its stage ceiling."""

    data: SlotData | None = None
    plan: Plan | None = None
    source: str | None = None
    decisions: SlotDecisions | None = None
    ceiling_ms: float | None = None


def slot_start(problem: Problem, request: SolveRequest, notes: dict, check, start: SlotStart) -> SlotStart:
    """Fill ``start`` (so that a :class:`~.run.BuildTimeout` raised midway leaves what is known):
    the tables, the starting plan (:func:`~.run.starting_plan`) when it fits the slots, and
    its stage ceiling (:func:`~.times.stage_ceiling_ms`)."""
    start.data = slot_data(problem, request.objective, check)
    plan, source = starting_plan(problem, request, notes, check)
    decisions = decisions_of_plan(start.data, plan) if plan is not None else None
    if plan is not None and decisions is not None:
        start.plan, start.source, start.decisions = plan, source, decisions
        value = evaluate(problem, plan, request.objective).value
        start.ceiling_ms = stage_ceiling_ms(request.objective, value, problem.microbatches, problem.training.schedule)
    return start


def stage_terms(j: int, compute: list, reshard: list, send: list) -> list:
    """The terms of slot j's time: its compute, its reshards (when modelled) and its two sends."""
    terms = [compute[j]]
    if not isinstance(reshard[j], int):
        terms.append(reshard[j])
    if send:
        if j > 0:
            terms.append(send[j - 1])
        if j < len(compute) - 1:
            terms.append(send[j])
    return terms


def reshard_sites(data: SlotData, before: list, use: list):
    """Every slot ``j`` and group boundary ``g`` (with some reshard > 0) that slot j can hold.

    Yields ``(j, g, plus, minus, pairs, margins)``: the boundary is inside slot j
    exactly when ``plus - minus`` is 1 (``before[B+1][j] - before[B][j+1]``, B the
    last layer of g); ``pairs`` are the same-size mesh pairs across it; each margin
    ``(pairs, uses)`` says the pairs sharing one mesh on one side weigh at most the
    ``use`` literals of that mesh on that side (a transport whose total is ``inside``).
    """
    nl = len(data.layouts)
    for j in range(data.slots):
        for g in range(len(data.groups) - 1):
            if not data.reshard_ms[g]:
                continue
            last = data.groups[g][1]
            plus, minus = before[last + 1][j], before[last][j + 1]
            if isinstance(plus, int) and plus == 0:
                continue
            pairs = data.mesh_pairs(g)
            margins = []
            for side, pos in ((g, 0), (g + 1, 1)):
                for mu in sorted({p[pos] for p in pairs}):
                    uses = [use[j][side][k] for k in range(nl) if data.mesh_index[k] == mu and not isinstance(use[j][side][k], int)]
                    margins.append(([p for p in pairs if p[pos] == mu], uses))
            yield j, g, plus, minus, pairs, margins
