"""``cpsat``'s arc-flow formulation: one unit of flow through stage states, for comm-free 1F1B problems.

Contract
--------
:func:`arcflow_reason` says whether a problem fits the formulation ("" when
it does); :func:`~.arcflow_run.solve_arcflow` then answers it exactly like the slot model
would (:mod:`.cpsat`): the plan re-evaluated by :func:`~partitioner.plan.evaluate`,
a bound proven by CP-SAT on this model and converted to ms by
:func:`~.slot.times.conservative_bound`, "optimal" only when that bound is within
the resolution of the plan's exact value. It fits when no stage boundary
carries bytes (comm-free: a stage's time is its own compute plus its own
reshards), the default cluster graph is used, and the schedule's objective
and stash are 1F1B's (``1f1b``; ``zb-h1`` with the bottleneck objective).
Format v1 and v2 alike: a v2 stage runs one config per module segment.

States and arcs
---------------
The pipeline is built from its end. A state ``(c, u, k)`` says: layers
``c .. L-1`` are covered by stages using ``u`` devices, and ``k`` of those
stages exist, capped at ``K - 1`` where ``K`` is the largest stash that still
changes some stage's best time (at most ``m``: a stage with ``k`` stages after
it stashes ``min(m, k + 1)`` microbatches under 1F1B). The flow leaves
``(L, 0, 0)`` and ends in some ``(0, N, k)``. An arc from ``(c, u, k)`` is a
stage of layers ``a .. c-1`` on ``d`` devices (an allowed size) with stash
``min(K, k + 1)``, to ``(a, u + d, min(k + 1, K - 1))``; every path is a plan
and every plan one path, so the stage order is fixed by construction (no
slot symmetry).

An arc's units are the least units (see "Model") of a *config tuple* of
``d`` devices for its layers that fits in memory with its stash: one config
per module segment of the stage (v1, and a stage inside one module run: one
layout), memory summed over the segments (``sum W + stash * sum A``). This is
exact for both objectives, thresholds included: they are non-decreasing in
every stage time, and a comm-free stage's configs change only its own time
and memory, so for any path, and any threshold ``Z`` on its slowest stage,
taking each stage's least-units tuple is as good as any other choice.

Tables: one layout (:func:`stage_tables`), per layout a prefix difference
of the reach-limited ranges; several segments (:func:`segment_tables`),
:class:`~.dp.stage.StageCosts`' vectorised per-(size, stash) rule run over
the model's integer layer units and reshard units (:class:`UnitCosts`), so
the least over all fitting tuples (an exact Pareto pass over the segments)
comes out in units, as (L, L) tables; an arc's tuple is found only for the
arcs of the answer (:meth:`ArcGraph.stage_configs`). Comm-free means every
``out_bytes`` before the last layer is 0, so every reshard (proportional to
the ``out_bytes`` of a segment's last layer) is 0 here; the tables count
reshard units all the same.

Pruning (each removes only plans strictly worse than the starting plan,
which stays in the model, or no plan at all): arcs slower than the starting
plan's stage ceiling (:func:`~.slot.times.stage_ceiling_ms`, as integer
``top``), arcs that do not fit or lack cost entries, states from which no
sink is reachable within those arcs (:func:`_completable`, before any arc
is made: layers ``0 .. a-1`` must be coverable with exactly the devices
left and the stashes that follow), and states the source does not reach.

Model
-----
``x_a`` in {0, 1} per arc; flow conservation at every state, one unit out
of the source and into the sinks; the stage count ``sum x_a`` in the
feasible counts; ``T >= t_a`` when ``x_a``, and per layer ``i`` the cut
``T >= sum_{a covers i} t_a x_a`` (exactly one arc covers each layer in
every path, so the cut is valid, and in the LP relaxation it makes ``T`` at
least the flow-weighted average stage time at every layer, where the
implications alone give only ``t_a x_a``). ``bottleneck`` minimises ``T``;
``iteration`` minimises ``sum t_a x_a + (m - 1) T``.

Times are the slot model's integer units (:func:`~.slot.times.integer_times`)
and a tuple's units are the slot model's for it: per segment ``s .. t`` in
config ``l`` the exact-prefix units ``prefix[l][t + 1] - prefix[l][s]`` (off
by at most 1 unit from ``scale`` x its compute), plus per segment boundary
the units of ``2 r`` (off by at most ``1/2 + delta``). A stage has at most
as many segments as the problem has groups and one reshard fewer, so its
units are within ``stage_error`` of ``scale`` x its true time, and the bound
conversion of the slot model holds: every plan ``Q`` (cuts, sizes, configs)
is a path whose arcs have no more units than ``Q``'s own tuples, so the
model's value of that path is at most ``scale * value(Q) + error``; a proven
bound ``B`` on the model is thus at most ``scale * OPT + error``, and
``OPT >= (B - error) / scale`` (:func:`~.slot.times.conservative_bound`).
The plan returned is its path with the least-units tuples, re-evaluated
exactly.

Not (yet) modelled, so the slot model answers
--------------------------------------------
* Transfers: a stage's time would depend on its neighbours' sizes and on
  whether they share a node, so a state would need the previous stage's
  size and node use.
* Graphs past :data:`MAX_ARCS` arcs (128 layers on 64 GPUs: 517,000 arcs
  in format v1).

Size: the 64-layer, 4 x 8 GPU benchmark (all 22 layouts, m = 8, memory
binding at every stash: ``K = 8``) has 2,319 live states and 48,583 arcs
under the greedy plan's ceiling; 72 layers on 64 GPUs 5,013 and 128,754.
Its v2 twin (66 configs, 4 modules, 3 variants) has 752 states and 6,741
arcs; the 56 (size, stash) tables of :func:`segment_tables` take about
0.3 s there.

References
----------
.. [1] J. M. Valerio de Carvalho, "Exact solution of bin-packing problems
   using column generation and branch-and-bound", Annals of Operations
   Research 86, 1999 (the arc-flow formulation).
.. [2] L. Perron and F. Didier, "CP-SAT", Google OR-Tools v9, 2024.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...problem import Problem
from ..dp.stage import StageCosts
from ..slot.data import SlotData
from ..slot.times import IntegerTimes

__all__ = [
    "ArcGraph",
    "GraphTooLarge",
    "MAX_ARCS",
    "arcflow_reason",
    "stage_tables",
    "segment_tables",
    "build_graph",
    "path_of_plan",
]

# Most arcs the graph may have before it is abandoned (the slot model then answers): past
# this, each CP-SAT solve takes longer than the slot model's search. Arcs are counted as they
# are made, and only arcs into states that reach a sink are made.
MAX_ARCS = 400_000

_NONE = np.iinfo(np.int64).max // 4  # "no fitting config" in the unit tables


class GraphTooLarge(Exception):
    """The arc-flow graph would have more than :data:`MAX_ARCS` arcs."""


@dataclass(frozen=True)
class ArcGraph:
    """The pruned state graph.

    ``arcs`` rows: ``(src, dst, first, last, devices, stash, units)``;
    ``configs[i]``: one group (module run), the layout index of arc ``i``'s
    least-units config, as ``(k,)``; several groups: empty, and ``costs`` finds an
    arc's configs when asked (:meth:`stage_configs`).
    """

    states: list
    arcs: np.ndarray
    configs: list
    source: int
    sinks: list
    stash_levels: int
    costs: "UnitCosts | None" = None

    def stage_configs(self, i: int) -> tuple[int, ...]:
        """Per group (module run) of the problem, the layout index arc ``i``'s stage uses there
        (-1 where it does not reach): a fitting config tuple whose units are the arc's."""
        if self.costs is None:
            return self.configs[i]
        first, last, devices, stash, units = (int(v) for v in self.arcs[i, 2:7])
        return self.costs.tuple_of(first, last, devices, stash, units)


def arcflow_reason(problem: Problem, objective: str, data: SlotData) -> str:
    """Why the arc-flow model does not fit ``problem`` ("" when it does)."""
    if data.transfers:
        return "stage boundaries carry bytes"
    if data.ties:
        return "tied weights (a stage's memory can grow when it loses a layer, so fitting ranges are not suffixes)"
    schedule = problem.training.schedule
    if not (schedule == "1f1b" or (schedule == "zb-h1" and objective == "bottleneck")):
        return f"schedule {schedule} with the {objective} objective"
    return ""


def stage_tables(data: SlotData, times: IntegerTimes):
    """Per stash ``s`` (1..S) and size: ``units[a, b]`` of the fastest fitting layout of layers a..b, and its index.

    Returns ``(units, layout)`` dicts keyed by ``(s, d)`` with (L, L) int64 arrays
    (``_NONE`` where no layout of ``d`` devices fits or ``b < a``).
    """
    L = data.num_layers
    prefix = np.array(times.time_prefix, dtype=np.int64)  # (layouts, L + 1)
    S = data.reach.shape[1]
    a_idx = np.arange(L)[:, None]
    b_idx = np.arange(L)[None, :]
    units, layout = {}, {}
    for s in range(1, S + 1):
        for d in data.sizes:
            best = np.full((L, L), _NONE, dtype=np.int64)
            arg = np.full((L, L), -1, dtype=np.int64)
            for k, lay in enumerate(data.layouts):
                if lay.devices != d:
                    continue
                t = prefix[k][None, 1:] - prefix[k][:L, None]
                ok = (b_idx >= a_idx) & (b_idx < data.reach[k, s - 1][:, None])
                t = np.where(ok, t, _NONE)
                better = t < best
                best = np.where(better, t, best)
                arg = np.where(better, k, arg)
            units[s, d], layout[s, d] = best, arg
    return units, layout


class UnitCosts(StageCosts):
    """:class:`~.dp.stage.StageCosts` in the slot model's integer units instead of ms.

    A layer's time is its ``tau`` (:class:`~.slot.times.IntegerTimes`: per
    layout, the difference of two exactly rounded prefix sums, so the layer
    times of a segment add up to the segment's exact-prefix units) and a
    reshard is half of ``reshard``'s units of ``2 r`` (the stage rule adds it
    twice). Every such number is an integer or a half below ``2**52`` and a
    stage that is not pruned stays under ``top``, so the float sums of
    :class:`~.dp.stage.StageCosts` are exact and :meth:`matrix` is, per
    stage, the least units over the fitting config tuples (one config per
    segment, memory summed over the segments with the stash).
    """

    def __init__(self, data: SlotData, times: IntegerTimes):
        super().__init__(data.problem, data.layouts, data.sizes)
        self.time = np.asarray(times.tau, dtype=np.float64).reshape(len(data.layouts), data.num_layers)
        self._mesh = {mu: n for n, mu in enumerate(data.meshes)}
        self._boundary = {last: g for g, (_, last) in enumerate(data.groups[:-1])}
        self._units = times.reshard
        self._group_of = np.searchsorted([a for a, _ in data.groups], np.arange(data.num_layers), side="right") - 1
        self._index = {lay: k for k, lay in enumerate(data.layouts)}
        self._groups = len(data.groups)

    def reshard(self, layer: int, src: tuple[int, ...], dst: tuple[int, ...], devices: int) -> float:
        """Half the units of ``2 r`` across the group boundary after ``layer`` (0 for one mesh)."""
        if src == dst:
            return 0.0
        table = self._units[self._boundary[layer]]
        return table.get((self._mesh[src], self._mesh[dst]), 0) / 2.0

    def tuple_of(self, first: int, last: int, devices: int, stash: int, units: int) -> tuple[int, ...]:
        """Per group, the layout index of a fitting config tuple of ``units`` units for the stage
        (-1 outside it); raises ``RuntimeError`` when :meth:`configs` disagrees with the table."""
        found = self.configs(first, last, self.sizes.index(devices), stash)
        if found is None or found[1] != units:
            raise RuntimeError(f"arc-flow: no config tuple of {units} units for layers {first}..{last} on {devices}")
        out = [-1] * self._groups
        g0 = int(self._group_of[first])
        for n, lay in enumerate(found[0]):
            out[g0 + n] = self._index[lay]
        return tuple(out)


def segment_tables(data: SlotData, times: IntegerTimes, check=None) -> tuple[dict, UnitCosts]:
    """Several groups: per stash ``s`` (1..S) and size ``d``, ``units[s, d][a, b]``, the least units
    of a fitting config tuple for layers a..b (``_NONE`` where none fits within ``top`` or ``b < a``),
    and the :class:`UnitCosts` that finds the tuples. ``check()`` is called between tables."""
    check = check or (lambda: None)
    costs = UnitCosts(data, times)
    top = times.top
    units = {}
    for s in range(1, len(data.stash_levels) + 1):
        for i, d in enumerate(data.sizes):
            check()
            best = costs.matrix(i, s)
            ok = best <= top
            units[s, d] = np.where(ok, np.where(ok, best, 0).astype(np.int64), _NONE)
    return units, costs


def stash_levels(units: dict, sizes, S: int, top: int) -> int:
    """The smallest ``K`` such that stashes ``K .. S`` give every arc the same (capped) time."""
    K = S
    while K > 1 and all(
        np.array_equal(np.minimum(units[K - 1, d], top + 1), np.minimum(units[S, d], top + 1)) for d in sizes
    ):
        K -= 1
    return K


def _fewest_parts(sizes, total: int) -> list:
    """``out[r]``: the fewest allowed sizes summing to ``r`` (a large number when none do)."""
    big = 1 << 30
    out = [0] + [big] * total
    for r in range(1, total + 1):
        out[r] = min((out[r - d] + 1 for d in sizes if d <= r), default=big)
    return out


def _completable(first: dict, sizes, N: int, K: int, L: int) -> np.ndarray:
    """``out[c, k, r]``: layers ``0 .. c-1`` can be covered by arcs with exactly ``r`` devices from a
    state with ``k`` stages after them (capped at ``K - 1``) -- the states that reach a sink.

    ``out[0, k, r]`` is ``r == 0``; for ``c >= 1`` some size ``d`` and first layer ``a`` in the
    arc's valid range ``first[s, d][c - 1] .. c - 1`` (``s = min(K, k + 1)``) leave a completable
    ``(a, min(k + 1, K - 1), r - d)``. One pass by increasing ``c``, with running counts over ``a``.
    """
    out = np.zeros((L + 1, K, N + 1), dtype=bool)
    out[0, :, 0] = True
    counts = np.zeros((L + 2, K, N + 1), dtype=np.int32)  # counts[c]: completable entries of rows < c
    counts[1] = out[0]
    for c in range(1, L + 1):
        for k in range(K):
            s, k2 = min(K, k + 1), min(k + 1, K - 1)
            for d in sizes:
                lo = int(first[s, d][c - 1])
                if lo > c - 1 or d > N:
                    continue
                hits = counts[c, k2, : N + 1 - d] - counts[lo, k2, : N + 1 - d]
                out[c, k, d:] |= hits > 0
        counts[c + 1] = counts[c] + out[c]
    return out


def build_graph(data: SlotData, times: IntegerTimes, check=None, max_arcs: int | None = None) -> ArcGraph:
    """The states reachable from the source that reach a sink, and the arcs between them (module docstring).

    Raises :class:`GraphTooLarge` past ``max_arcs`` arcs (default :data:`MAX_ARCS`; the arcs
    into states that reach a sink, counted as they are made).
    """
    check = check or (lambda: None)
    max_arcs = MAX_ARCS if max_arcs is None else max_arcs
    L, N = data.num_layers, data.problem.num_devices
    sizes = tuple(d for d in data.sizes if d <= N)
    S = len(data.stash_levels)  # 1F1B's stashes 1..S (stash_levels is their sorted set)
    costs = None
    if data.multi:
        units, costs = segment_tables(data, times, check)
        layout = {key: np.full((L, L), -1, dtype=np.int64) for key in units}
    else:
        units, layout = stage_tables(data, times)
    top = times.top
    K = stash_levels(units, sizes, S, top)
    fewest = _fewest_parts(sizes, N)
    Pmax = max(data.counts)
    # first[s, d][b]: the smallest a whose stage a..b fits and is within the ceiling (a valid
    # range is a suffix a..b: a shorter stage is no slower and needs no more memory; with several
    # segments, dropping layer a shortens the first segment or drops it and its reshard)
    first = {key: np.arange(1, L + 1) - (table <= top).sum(axis=0) for key, table in units.items()}
    completable = _completable(first, sizes, N, K, L)
    index = np.full((L + 1, N + 1, K), -1, dtype=np.int64)  # state id of (c, u, k)
    index[L, 0, 0] = 0
    states = [(L, 0, 0)]
    buckets: list[list[int]] = [[] for _ in range(L + 1)]  # state ids by c: arcs only go to smaller c
    buckets[L].append(0)
    blocks: list = []
    count = 0
    for c in range(L, 0, -1):
        check()
        for sid in buckets[c]:
            _, u, k = states[sid]
            s = min(K, k + 1)
            k2 = min(k + 1, K - 1)
            for d in sizes:
                v = u + d
                if v > N:
                    break
                rest = N - v
                if fewest[rest] > Pmax:
                    continue
                a = np.arange(int(first[s, d][c - 1]), c)
                a = a[completable[a, k2, rest]]  # only states that reach a sink (a = 0 when rest = 0)
                if not len(a):
                    continue
                dst = index[a, v, k2]
                for i in np.flatnonzero(dst < 0).tolist():
                    dst[i] = index[a[i], v, k2] = len(states)
                    states.append((int(a[i]), v, k2))
                    buckets[int(a[i])].append(int(dst[i]))
                n = len(a)
                count += n
                if count > max_arcs:
                    raise GraphTooLarge(f"more than {max_arcs:,} arcs")
                blocks.append(
                    np.column_stack(
                        [
                            np.full(n, sid),
                            dst,
                            a,
                            np.full(n, c - 1),
                            np.full(n, d),
                            np.full(n, s),
                            units[s, d][a, c - 1],
                            layout[s, d][a, c - 1],
                        ]
                    )
                )
    arr = np.concatenate(blocks).astype(np.int64) if blocks else np.zeros((0, 8), dtype=np.int64)
    # keep the states that reach a sink (0, N, *): by increasing source c, every target (smaller c) is settled
    where = np.array(states, dtype=np.int64)
    alive = (where[:, 0] == 0) & (where[:, 1] == N)
    order = np.argsort(arr[:, 3], kind="stable")
    arr = arr[order]
    bounds = np.searchsorted(arr[:, 3], np.arange(L + 1))
    for c in range(1, L + 1):
        part = arr[bounds[c - 1] : bounds[c]]  # arcs out of states at c (last layer c - 1)
        np.logical_or.at(alive, part[:, 0], alive[part[:, 1]])
    keep = alive[arr[:, 0]] & alive[arr[:, 1]]
    arr = arr[keep]
    sinks = np.flatnonzero(alive & (where[:, 0] == 0)).tolist()
    configs = [] if costs is not None else [(int(k),) for k in arr[:, 7]]
    return ArcGraph(states, arr[:, :7], configs, 0, sinks, K, costs)


def path_of_plan(graph: ArcGraph, plan) -> list[int] | None:
    """The arcs of ``plan``'s stages, from the last stage to the first (None if one was pruned)."""
    by_key = {}
    for i, (src, _, first, last, d, _, _) in enumerate(graph.arcs.tolist()):
        by_key[src, first, last, d] = i
    path, sid = [], graph.source
    for stage in reversed(plan.stages):
        arc = by_key.get((sid, stage.first_layer, stage.last_layer, stage.devices))
        if arc is None:
            return None
        path.append(arc)
        sid = int(graph.arcs[arc, 1])
    return path
