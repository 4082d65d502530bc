"""``cpsat``'s arc-flow formulation: one unit of flow through stage states, for comm-free 1F1B problems.

Contract: :func:`arcflow_reason` says whether a problem fits the
formulation ("" when it does): no stage boundary carries bytes, the default
cluster graph, and 1F1B's objective and stash. :class:`ArcGraph` is the
graph of stage states; :func:`~.arcflow_run.solve_arcflow` answers it
exactly as the slot model would.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.cpsat.arcflow``.
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
