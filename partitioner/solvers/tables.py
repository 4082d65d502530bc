"""Stage cost tables shared by the solvers: prefix sums per layout, transfer times.

A stage of layers ``a..b`` in layout ``l`` costs ``sum(fwd + bwd)`` of its
layers and needs ``sum(weight) + stash * sum(act)`` bytes; both come from
prefix sums here. Memory is kept in exact integers so that every solver and
:func:`partitioner.plan.evaluate` agree on what fits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..problem import Layout, Problem
from ..topology import transfer_ms

__all__ = ["CostTables", "StageChoice"]


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
        self.time_prefix = np.hstack([zero, np.cumsum(time, axis=1)])
        self.weight_prefix = np.hstack([zero.astype(np.int64), np.cumsum(weight, axis=1)])
        self.act_prefix = np.hstack([zero.astype(np.int64), np.cumsum(act, axis=1)])
        self.missing_prefix = np.hstack([zero.astype(np.int64), np.cumsum(missing, axis=1)])
        self.layouts_of_size = {d: [j for j, lay in enumerate(self.layouts) if lay.devices == d] for d in self.sizes}
        self.out_bytes = np.array([layer.out_bytes for layer in problem.layers], dtype=np.float64)
        self._best: dict[tuple[int, int, int, int], StageChoice | None] = {}

    # ------------------------------------------------------------------ scalar queries
    def compute_ms(self, a: int, b: int, j: int) -> float:
        return float(self.time_prefix[j, b + 1] - self.time_prefix[j, a])

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
