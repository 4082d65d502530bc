"""Stage cost tables shared by the solvers: prefix sums per layout, transfer times.

A stage of layers ``a..b`` in layout ``l`` costs ``sum(fwd + bwd)`` of its
layers and needs ``sum(weight) + stash * sum(act)`` bytes; both come from
prefix sums here. Memory is kept in exact integers so that every solver and
:func:`partitioner.plan.evaluate` agree on what fits.

Format v2 (:meth:`CostTables.best_stage`): a stage has one config per segment;
its time is Σ (fwd + bwd) + 2 Σ r with r the reshard between adjacent segments
whose (dp, tp) differ, at the canonical placement
(:func:`partitioner.cluster.reshard.stage_reshard_ms`), and its memory sums every
segment's own entries, less the tied bytes of format v3 (a layer whose
``tied_to`` is in the stage too counts ``weight_bytes - tied_weight_bytes``).

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.tables``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cluster.reshard import stage_reshard_ms
from ..cluster.topology import transfer_ms
from ..problem import Layout, Problem

__all__ = [
    "CostTables", "StageChoice", "LayerArrays", "layer_arrays", "two_sum", "compensated_prefix", "range_sum", "tied_row",
]


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``a + b = s + e`` exactly (elementwise; Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def compensated_prefix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Double-double prefix sums along the last axis, with a leading zero column.

    Returns ``(hi, lo)``: ``hi[..., k]`` is the float running sum of the first
    ``k`` values (``np.cumsum``: sequential, one rounding per step) and
    ``lo[..., k]`` the sum of those roundings, so ``hi + lo`` is the running
    sum to about ``eps**2`` of its size.
    """
    values = np.asarray(values, dtype=np.float64)
    zero = np.zeros(values.shape[:-1] + (1,))
    hi = np.concatenate([zero, np.cumsum(values, axis=-1)], axis=-1)
    _, err = two_sum(hi[..., :-1], values)  # hi[k+1] = fl(hi[k] + v[k]) exactly as cumsum computed it
    lo = np.concatenate([zero, np.cumsum(err, axis=-1)], axis=-1)
    return hi, lo


def range_sum(hi: np.ndarray, lo: np.ndarray, start, stop):
    """``sum(values[start:stop])`` from :func:`compensated_prefix` tables, without cancellation.

    ``start`` and ``stop`` index the last axis (scalars or broadcastable
    arrays); the result is within a couple of roundings of the exact sum of
    the range, however large the values before ``start`` are.
    """
    d, e = two_sum(hi[..., stop], -hi[..., start])
    return d + (e + (lo[..., stop] - lo[..., start]))


@dataclass(frozen=True)
class LayerArrays:
    """Per-config, per-layer cost entries as ``(configs, layers)`` arrays (0 where a layer has no entry)."""

    fwd: np.ndarray
    bwd: np.ndarray
    time: np.ndarray  # fwd_ms + bwd_ms, added per entry as Python floats
    weight: np.ndarray  # int64
    act: np.ndarray  # int64
    has: np.ndarray  # bool: the layer has an entry for the config
    entries: tuple  # per layer: its LayerCost per config row that has one, in row order (for other fields)
    rows: tuple  # per layer: those rows (int64 array)


def layer_arrays(problem: Problem, layouts: tuple[Layout, ...]) -> LayerArrays:
    """The cost entries of every layer for ``layouts`` (row j is ``layouts[j]``; keys not in it are skipped).

    One numpy assignment per layer and field: the values are the entries' own
    numbers, as an element-by-element loop would store them. Layers whose
    cost keys are the very same objects in the same order (the parser shares
    them) reuse the row map of the layer before.
    """
    index: dict[Layout, list[int]] = {}  # config -> its rows (a config listed twice fills both)
    for j, lay in enumerate(layouts):
        index.setdefault(lay, []).append(j)
    J, L = len(layouts), problem.num_layers
    fwd, bwd, time = np.zeros((J, L)), np.zeros((J, L)), np.zeros((J, L))
    weight, act = np.zeros((J, L), dtype=np.int64), np.zeros((J, L), dtype=np.int64)
    has = np.zeros((J, L), dtype=bool)
    keys: tuple | None = None
    take: list[int] | None = None
    rows = np.zeros(0, dtype=np.int64)  # set with keys on the first layer
    entries, all_rows = [], []
    for i, layer in enumerate(problem.layers):
        now = tuple(layer.costs)
        if now != keys:
            keys = now
            found = [(n, j) for n, lay in enumerate(keys) for j in index.get(lay, ())]
            take = None if [n for n, _ in found] == list(range(len(keys))) else [n for n, _ in found]
            rows = np.array([j for _, j in found], dtype=np.int64)
        values = tuple(layer.costs.values())
        costs = values if take is None else tuple(values[n] for n in take)
        fwd[rows, i] = [c.fwd_ms for c in costs]
        bwd[rows, i] = [c.bwd_ms for c in costs]
        time[rows, i] = [c.fwd_ms + c.bwd_ms for c in costs]
        weight[rows, i] = [c.weight_bytes for c in costs]
        act[rows, i] = [c.act_bytes for c in costs]
        has[rows, i] = True
        entries.append(costs)
        all_rows.append(rows)
    return LayerArrays(fwd, bwd, time, weight, act, has, tuple(entries), tuple(all_rows))


@dataclass(frozen=True)
class StageChoice:
    """A stage's config choice: ``layout`` (the first segment's), ``compute_ms`` with its reshards.

    ``configs`` holds one config per segment (``(layout,)`` for a one-segment
    stage) and ``reshard_ms`` is Σ r, counted twice in ``compute_ms``.
    """

    layout: Layout
    compute_ms: float
    configs: tuple[Layout, ...] = ()
    reshard_ms: float = 0.0


class CostTables:
    """Prefix sums of every layer's costs, one row per layout of the problem (or of ``layouts``).

    Attributes
    ----------
    layouts : tuple of Layout
    sizes : tuple of int
        The cluster's allowed stage sizes.
    """

    def __init__(self, problem: Problem, layouts: tuple[Layout, ...] | None = None):
        self.problem = problem
        self.layouts = problem.layouts() if layouts is None else tuple(layouts)
        self.sizes = problem.cluster.allowed_sizes()
        n = len(self.layouts)
        arrays = layer_arrays(problem, self.layouts)
        time, weight, act, missing = arrays.time, arrays.weight, arrays.act, (~arrays.has).astype(np.int64)
        zero = np.zeros((n, 1))
        # time_prefix[j, k]: float sum of layers 0..k-1 in layout j; time_prefix_lo: its rounding errors
        self.time_prefix, self.time_prefix_lo = compensated_prefix(time)
        self.weight_prefix = np.hstack([zero.astype(np.int64), np.cumsum(weight, axis=1)])
        self.act_prefix = np.hstack([zero.astype(np.int64), np.cumsum(act, axis=1)])
        self.missing_prefix = np.hstack([zero.astype(np.int64), np.cumsum(missing, axis=1)])
        by_devices: dict[int, list[int]] = {}
        for j, lay in enumerate(self.layouts):  # one pass: sizes x layouts is quadratic in the GPUs
            by_devices.setdefault(lay.devices, []).append(j)
        self.layouts_of_size = {d: by_devices.get(d, []) for d in self.sizes}
        self.out_bytes = np.array([layer.out_bytes for layer in problem.layers], dtype=np.float64)
        # format v3 tied weights: (j, k, bytes of k's entry per layout row) for every layer k tied to j
        self.ties = tuple((j, k, tied_row(problem, k, self.layouts)) for j, k in problem.ties)
        self._best: dict[tuple[int, int, int, int], StageChoice | None] = {}
        self._best_stage: dict[tuple[int, int, int, int], StageChoice | None] = {}

    # ------------------------------------------------------------------ scalar queries
    def compute_ms(self, a: int, b: int, j: int) -> float:
        """Σ (fwd + bwd) of layers ``a..b`` in layout ``j``, without prefix cancellation."""
        return float(range_sum(self.time_prefix[j], self.time_prefix_lo[j], a, b + 1))

    def compute_matrix(self) -> np.ndarray:
        """``C[j, a, b]``: :meth:`compute_ms` of every layout and every range ``a <= b``
        (entries with ``a > b`` are meaningless), computed at once."""
        L = self.problem.num_layers
        hi, lo = self.time_prefix, self.time_prefix_lo
        d, e = two_sum(hi[:, None, 1:], -hi[:, :L, None])
        return d + (e + (lo[:, None, 1:] - lo[:, :L, None]))

    def tied(self, a: int, b: int, s: int, t: int, j: int) -> int:
        """Tied bytes not counted twice by segment ``s..t`` in layout ``j`` of stage ``a..b``: the
        ``tied_weight_bytes`` of every layer k in ``s..t`` whose ``tied_to`` is in the stage (format v3)."""
        return sum(int(row[j]) for tj, k, row in self.ties if a <= tj and s <= k <= t and k <= b)

    def fits(self, a: int, b: int, j: int, stash: int) -> bool:
        if self.missing_prefix[j, b + 1] != self.missing_prefix[j, a]:
            return False
        w = int(self.weight_prefix[j, b + 1] - self.weight_prefix[j, a]) - (self.tied(a, b, a, b, j) if self.ties else 0)
        x = int(self.act_prefix[j, b + 1] - self.act_prefix[j, a])
        return w + stash * x <= self.problem.cluster.gpu_memory_bytes

    def best(self, a: int, b: int, size: int, stash: int) -> StageChoice | None:
        """The fastest layout of ``size`` devices for layers ``a..b`` that fits with ``stash``.

        Choosing it is optimal for any fixed cut/size/placement: a stage's
        layout changes only its own compute time and memory, and both
        objectives are non-decreasing in every stage time.
        """
        key = (a, b, size, stash)
        if key not in self._best:
            choice = None
            for j in self.layouts_of_size.get(size, ()):
                if self.fits(a, b, j, stash):
                    t = self.compute_ms(a, b, j)
                    if choice is None or t < choice.compute_ms:
                        choice = StageChoice(self.layouts[j], t)
            self._best[key] = choice
        return self._best[key]

    def best_stage(self, a: int, b: int, size: int, stash: int) -> StageChoice | None:
        """The fastest per-segment configs of ``size`` devices for layers ``a..b`` that fit with ``stash``.

        One segment (always in format v1): :meth:`best`. Several: exact over
        the product of the segments' configs -- a pass over the segments keeps,
        for each config of the segment reached, the Pareto frontier of
        (time so far incl. reshards, bytes so far), pruned to what fits; the
        minimum time at the end is the product's minimum, as every dropped
        partial choice is dominated by a kept one with the same last config
        (time and bytes only add up from there).
        """
        key = (a, b, size, stash)
        if key in self._best_stage:
            return self._best_stage[key]
        segments = self.problem.segments(a, b)
        if len(segments) == 1:
            choice = self.best(a, b, size, stash)
            found = None if choice is None else StageChoice(choice.layout, choice.compute_ms, (choice.layout,), 0.0)
            self._best_stage[key] = found
            return found
        capacity = self.problem.cluster.gpu_memory_bytes
        cluster = self.problem.cluster
        # frontier: config index of the last segment -> [(time, bytes, reshard, configs)]
        frontier: dict[int, list[tuple[float, int, float, tuple[int, ...]]]] = {-1: [(0.0, 0, 0.0, ())]}
        prev_last = -1  # the last layer of the segment before (read from the second segment on)
        for s, t in segments:
            nxt: dict[int, list] = {}
            for j in self.layouts_of_size.get(size, ()):
                if self.missing_prefix[j, t + 1] != self.missing_prefix[j, s]:
                    continue
                time = self.compute_ms(s, t, j)
                need = int(self.weight_prefix[j, t + 1] - self.weight_prefix[j, s]) + stash * int(
                    self.act_prefix[j, t + 1] - self.act_prefix[j, s]
                ) - (self.tied(a, b, s, t, j) if self.ties else 0)
                lay = self.layouts[j]
                reached = []
                for i, entries in frontier.items():
                    r = 0.0 if i < 0 else stage_reshard_ms(self.out_bytes[prev_last], self.layouts[i], lay, size, cluster)
                    for t0, m0, r0, path in entries:
                        if m0 + need <= capacity:
                            reached.append((t0 + time + 2 * r, m0 + need, r0 + r, path + (j,)))
                if reached:
                    nxt[j] = _pareto(reached)
            if not nxt:
                self._best_stage[key] = None
                return None
            frontier, prev_last = nxt, t
        t_best, _, r_best, path = min((e for entries in frontier.values() for e in entries), key=lambda e: (e[0], e[3]))
        configs = tuple(self.layouts[j] for j in path)
        self._best_stage[key] = StageChoice(configs[0], t_best, configs, r_best)
        return self._best_stage[key]

    def transfer(self, last_layer: int, size_a: int, size_b: int, same_node: bool) -> float:
        """x_p for a boundary after ``last_layer`` between stages of the given sizes (default graph)."""
        c = self.problem.cluster
        bw = c.intra_node_GBps if same_node else c.inter_node_GBps
        return transfer_ms(self.problem.layers[last_layer].out_bytes, min(size_a, size_b) * bw)


def tied_row(problem: Problem, k: int, layouts: tuple[Layout, ...]) -> np.ndarray:
    """``tied_weight_bytes`` of layer k's entry in each of ``layouts`` (0 where it has none), int64."""
    costs = problem.layers[k].costs
    return np.array([costs[lay].tied_weight_bytes if lay in costs else 0 for lay in layouts], dtype=np.int64)


def _pareto(entries: list) -> list:
    """The entries not dominated in (time, bytes): sorted by time, each kept one needs fewer bytes."""
    out: list = []
    for e in sorted(entries, key=lambda e: (e[0], e[1], e[3])):
        if not out or e[1] < out[-1][1]:
            out.append(e)
    return out
