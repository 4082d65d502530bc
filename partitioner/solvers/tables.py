"""Stage cost tables shared by the solvers: prefix sums per layout, transfer times.

A stage of layers ``a..b`` in layout ``l`` costs ``sum(fwd + bwd)`` of its
layers and needs ``sum(weight) + stash * sum(act)`` bytes; both come from
prefix sums here. Memory is kept in exact integers so that every solver and
:func:`partitioner.plan.evaluate` agree on what fits.

Times are kept as *double-double* prefix sums: ``time_prefix`` (the plain
float running sums) plus ``time_prefix_lo``, the exact rounding error of each
running sum (Knuth's TwoSum [1]_), accumulated. A range sum is then the
difference of two double-doubles, taken with TwoSum again
(:func:`range_sum`), so it is accurate to about one rounding of the *range's*
own sum, not of the prefix: a single huge layer no longer wipes out the
small layers after it (the cancellation a plain prefix difference suffers;
issue 15). The input ranges of :mod:`partitioner.limits` keep every prefix
below 2e14 ms, so the accumulated ``lo`` terms are themselves exact to far
below the objective's relative tolerance.

References
----------
.. [1] D. E. Knuth, *The Art of Computer Programming*, vol. 2, 3rd ed.,
   section 4.2.2 (the exact sum ``a + b = s + e`` of two doubles).
.. [2] T. Ogita, S. M. Rump and S. Oishi, "Accurate sum and dot product",
   SIAM J. Sci. Comput. 26(6), 2005 (cascaded compensated summation).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..problem import Layout, Problem
from ..topology import transfer_ms

__all__ = ["CostTables", "StageChoice", "two_sum", "compensated_prefix", "range_sum"]


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
class StageChoice:
    layout: Layout
    compute_ms: float


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
        L = problem.num_layers
        n = len(self.layouts)
        time = np.zeros((n, L))
        weight = np.zeros((n, L), dtype=np.int64)
        act = np.zeros((n, L), dtype=np.int64)
        missing = np.zeros((n, L), dtype=np.int64)
        for j, lay in enumerate(self.layouts):
            for i, layer in enumerate(problem.layers):
                c = layer.cost(lay)
                if c is None:
                    missing[j, i] = 1
                else:
                    time[j, i] = c.fwd_ms + c.bwd_ms
                    weight[j, i] = c.weight_bytes
                    act[j, i] = c.act_bytes
        zero = np.zeros((n, 1))
        # time_prefix[j, k]: float sum of layers 0..k-1 in layout j; time_prefix_lo: its rounding errors
        self.time_prefix, self.time_prefix_lo = compensated_prefix(time)
        self.weight_prefix = np.hstack([zero.astype(np.int64), np.cumsum(weight, axis=1)])
        self.act_prefix = np.hstack([zero.astype(np.int64), np.cumsum(act, axis=1)])
        self.missing_prefix = np.hstack([zero.astype(np.int64), np.cumsum(missing, axis=1)])
        self.layouts_of_size = {d: [j for j, lay in enumerate(self.layouts) if lay.devices == d] for d in self.sizes}
        self.out_bytes = np.array([layer.out_bytes for layer in problem.layers], dtype=np.float64)
        self._best: dict[tuple[int, int, int, int], StageChoice | None] = {}

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

    def fits(self, a: int, b: int, j: int, stash: int) -> bool:
        if self.missing_prefix[j, b + 1] != self.missing_prefix[j, a]:
            return False
        w = int(self.weight_prefix[j, b + 1] - self.weight_prefix[j, a])
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

    def transfer(self, last_layer: int, size_a: int, size_b: int, same_node: bool) -> float:
        """x_p for a boundary after ``last_layer`` between stages of the given sizes (default graph)."""
        c = self.problem.cluster
        bw = c.intra_node_GBps if same_node else c.inter_node_GBps
        return transfer_ms(self.problem.layers[last_layer].out_bytes, min(size_a, size_b) * bw)
