"""The DP's stage tables as the recursions read them: compute matrices and Pareto options per (size, stash).

:class:`StageTables` is a mix-in of :class:`partitioner.solvers.dp.solver.DPModel`
(it uses the model's ``costs`` -- a :class:`.stage.StageCosts` --, ``L``,
``sizes``, ``parts`` and ``spec``). It keeps, across the recursions of a solve,
each stash's compute matrices of every size as one C-contiguous ``[size, a, b]``
stack (:meth:`StageTables.compute_stack`, what the compiled kernels of
:mod:`.compiled.kernels` read) and, under the two-part estimates, each stash's
Pareto options of every size packed into two flat arrays
(:meth:`StageTables.option_pack`; a stash whose options equal the previous stash's
shares its pack); :meth:`StageTables.stage_options` are views into a pack.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.stagecache``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .options import Spec
    from .stage import StageCosts

__all__ = ["StageTables", "MATRIX_CACHE_BYTES"]

MATRIX_CACHE_BYTES = 2**28  # stage compute matrices kept across recursions: at least this much (256 MiB)
PACK_CACHE_BYTES = 2**30  # stage options kept across recursions (1 GiB)


class StageTables:
    """Compute matrices and packed stage options of a :class:`~partitioner.solvers.dp.solver.DPModel` (a mix-in)."""

    # set by the model (annotations only: no class attribute)
    L: int
    sizes: tuple[int, ...]
    costs: StageCosts
    parts: str | None
    spec: Spec | None
    _matrices: dict[tuple[int, int], np.ndarray]
    _stacks: dict[int, np.ndarray]
    _packed: dict
    # the bytes of stage matrices kept across recursions (the model sets what its budget leaves)
    stage_cache_bytes: int = MATRIX_CACHE_BYTES

    def best_compute(self, a: int, i: int, stash: int) -> np.ndarray:
        """Over b = a..L-1: the fastest compute of layers a..b on size index i that fits with ``stash``."""
        return self.compute_matrix(i, stash)[a, a:]

    def compute_matrix(self, i: int, stash: int) -> np.ndarray:
        """best[a, b]: the fastest fitting compute of layers a..b on size index i (inf if none);
        see :mod:`.stage` for the rule with segments and reshards."""
        stack = self._stacks.get(stash)
        if stack is not None:
            return stack[i]
        key = (i, stash)
        found = self._matrices.get(key)
        if found is None:
            found = self.costs.matrix(i, stash)
            if self._held_matrices() < self.stage_cache_bytes:
                self._matrices[key] = found
        return found

    def _held_matrices(self) -> int:
        return 8 * self.L * self.L * (len(self._matrices) + len(self.sizes) * len(self._stacks))

    def compute_stack(self, stash: int, groups: list | None = None) -> np.ndarray:
        """``[g, a, b]``: :meth:`compute_matrix` of every size index (or of ``groups``) at ``stash``, one
        C-contiguous array for the compiled kernels (kept while the matrices held stay under 256 MiB)."""
        stack = self._stacks.get(stash)
        if stack is None:
            stack = np.empty((len(self.sizes), self.L, self.L))
            for i in range(len(self.sizes)):
                found = self._matrices.get((i, stash))
                if found is None:
                    self.costs.matrix(i, stash, out=stack[i])
                else:
                    stack[i] = found
            held = {key for key in self._matrices if key[1] == stash}
            if self._held_matrices() - 8 * self.L * self.L * len(held) + stack.nbytes <= self.stage_cache_bytes:
                for key in held:
                    del self._matrices[key]
                self._stacks[stash] = stack
        if groups is None or list(groups) == list(range(len(self.sizes))):
            return stack
        return np.ascontiguousarray(stack[np.asarray(groups, dtype=np.int64)])

    def option_pack(self, stash: int):
        """The Pareto options (:meth:`.StageCosts.options`, parts ``self.parts``) of every size index at
        ``stash``, packed for the compiled kernels: each size's offset into and width of two flat
        arrays, and those arrays (the spec's key is formed in the kernel, so one pack serves every
        zb-h1 k). A stash whose options equal the previous stash's shares its pack; packs are kept
        while they hold under 1 GiB or ``stage_cache_bytes``, whichever is more."""
        parts = self.parts
        assert parts is not None, "dp: stage options asked for without the estimate's parts"
        key = (stash, parts)
        found = self._packed.get(key)
        if found is None:
            tabs = [self.costs.options(i, stash, parts) for i in range(len(self.sizes))]
            before = self._packed.get((stash - 1, self.parts))
            if before is not None and all(
                    np.array_equal(t[0], u[0]) and np.array_equal(t[1], u[1])
                    for t, u in zip(tabs, (self._views(before, i) for i in range(len(tabs))))):
                found = before
            else:
                width = np.array([t[0].shape[-1] for t in tabs], dtype=np.int64)
                sizes = np.array([t[0].size for t in tabs], dtype=np.int64)
                offset = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64) if tabs else np.zeros(0, np.int64)
                first = np.concatenate([t[0].ravel() for t in tabs]) if tabs else np.zeros(0)
                second = np.concatenate([t[1].ravel() for t in tabs]) if tabs else np.zeros(0)
                found = (offset, width, np.ascontiguousarray(first, dtype=float), np.ascontiguousarray(second, dtype=float))
            held = sum(x[2].nbytes + x[3].nbytes for x in {id(v): v for v in self._packed.values()}.values())
            if found is before or held + found[2].nbytes + found[3].nbytes <= max(PACK_CACHE_BYTES,
                                                                                   self.stage_cache_bytes):
                self._packed[key] = found
        return found

    def _views(self, pack, i: int) -> tuple[np.ndarray, np.ndarray]:
        offset, width, first, second = pack
        n = self.L * self.L * int(width[i])
        shape = (self.L, self.L, int(width[i]))
        return first[offset[i] : offset[i] + n].reshape(shape), second[offset[i] : offset[i] + n].reshape(shape)

    def packed_options(self, groups: list, stash: int):
        """:meth:`option_pack` restricted to ``groups`` (the size groups of a layout; every size index
        in practice, so the pack itself)."""
        pack = self.option_pack(stash)
        if list(groups) == list(range(len(self.sizes))):
            return pack
        tabs = [self._views(pack, i) for i in groups]
        width = np.array([t[0].shape[-1] for t in tabs], dtype=np.int64)
        offset = np.r_[0, np.cumsum([t[0].size for t in tabs])[:-1]].astype(np.int64) if tabs else np.zeros(0, np.int64)
        first = np.concatenate([t[0].ravel() for t in tabs]) if tabs else np.zeros(0)
        second = np.concatenate([t[1].ravel() for t in tabs]) if tabs else np.zeros(0)
        return offset, width, first, second

    def stage_options(self, i: int, stash: int) -> tuple[np.ndarray, np.ndarray]:
        """``[a, b, f]``: the Pareto-minimal pairs of parts ``self.parts`` of stage a..b on size index i
        (views into :meth:`option_pack`)."""
        return self._views(self.option_pack(stash), i)

    def option_rows(self, a: int, i: int, stash: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Over b = a..L-1 (and the options f of stage a..b): the spec's least key of the stage without
        transfers (a lower bound with them; inf if nothing fits) and its two option arrays."""
        assert self.spec is not None, "dp: option rows asked for without a spec"
        return self.spec.prepare(*(x[a, a:] for x in self.stage_options(i, stash)))

    def stage_configs(self, a: int, b: int, i: int, stash: int) -> tuple:
        """The per-segment configs of the fastest fitting stage a..b on size index i."""
        found = self.costs.configs(a, b, i, stash)
        if found is None:
            raise RuntimeError(f"dp: internal error: no configs fit stage {a}..{b} on {self.sizes[i]} devices")
        return found[0]
