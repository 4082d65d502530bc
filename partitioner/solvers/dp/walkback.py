"""The DP's walk back: which optimal plans the tables of one recursion hold.

:class:`WalkBack` is a mix-in of :class:`partitioner.solvers.dp.solver.DPModel` (it
uses the model's ``K``, ``L``, ``N``, ``sizes``, ``bucket``, ``stash_of_level``,
``spec``, ``_level_ok`` and its stage tables). From a filled
:class:`.tables.Tables`, :meth:`WalkBack._final` reads the best whole pipeline over
the allowed stage counts, and :meth:`WalkBack.reconstructions` follows, depth
first, every way a state can start (:meth:`WalkBack._choices`, vectorised over the
last layer and the (new state, outgoing category) pairs) whose stage plus the
rest's value is the state's value -- within 1e-12 relative for a least sum, whose
sums the recursion forms in another order (:mod:`.recursion`) -- unlinked
boundaries first.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.walkback``.
"""
from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

from .walks import _same

if TYPE_CHECKING:
    from ...plan import Plan
    from .options import Spec

__all__ = ["WalkBack"]

INF = math.inf
_TIE = 1e-12  # relative slack when comparing a stage time with a threshold (as in dp)


class WalkBack:
    """The walk back of a :class:`~partitioner.solvers.dp.solver.DPModel` (a mix-in)."""

    # set by the model (annotations only: no class attribute)
    K: int
    L: int
    N: int
    sizes: tuple[int, ...]
    bucket: bool
    stash_of_level: list[int]
    spec: Spec | None

    if TYPE_CHECKING:  # the model's and the stage tables' methods, for the type checker only

        def _level_ok(self, level: int) -> bool: ...

        def place(self, stages, links, kind: str) -> Plan | None: ...

        def best_compute(self, a: int, i: int, stash: int) -> np.ndarray: ...

        def stage_options(self, i: int, stash: int) -> tuple[np.ndarray, np.ndarray]: ...

        def option_rows(self, a: int, i: int, stash: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def _final(self, V, auto) -> tuple[float, tuple | None]:
        best, arg = INF, None
        for level in range(1, self.K + 1):
            if not self._level_ok(level):
                continue
            vals = np.where(auto.accept, V.first(level, self.N), INF)
            z = int(np.argmin(vals))
            if vals[z] < best:
                best, arg = float(vals[z]), (level, z)
        return best, arg

    def _final_states(self, V, auto, value: float) -> list[tuple[int, int]]:
        """Every (level, first-stage state) whose pipeline reaches ``value``."""
        out = []
        for level in range(1, self.K + 1):
            if self._level_ok(level):
                firsts = V.first(level, self.N)
                out += [(level, int(z)) for z in np.flatnonzero(auto.accept) if _same(float(firsts[z]), value)]
        return out

    def reconstructions(self, V, auto, X, mode, lim, level, z):
        """Every optimal plan in the tables, as (stages, links, times), unlinked boundaries first.

        Depth first: plans that share their first stages come together. Used
        when the first plan's runs do not pack into the nodes: a plan with
        the same value and fewer links usually does.
        """
        lim = lim * (1 + _TIE) if math.isfinite(lim) else INF
        xin = np.vstack([np.zeros((1, len(auto.categories))), X[:-1]])
        keys = V.layout.keys

        def linked(choice) -> bool:
            return choice[4] is not None and bool(auto.categories[choice[4]][1])

        optimum = V.value(0, level, z, 0, self.N)

        def fits(value: float, target: float) -> bool:
            # min-max: any choice that keeps every stage within the optimum is optimal;
            # min-sum: the remaining sum must be exactly the table's
            if mode == "minmax":
                return value <= optimum * (1 + 1e-12)
            return _same(value, target)

        def walk(a, level, z, c, D, target):
            matches = [ch for ch in self._choices(V, auto, X, xin, mode, lim, a, level, z, c, D) if fits(ch[6], target)]
            for b, i, src, key, coo, t, _, opt, rest in sorted(matches, key=linked):
                stage = (a, b, self.sizes[i], i) + ((opt,) if opt is not None else ())
                if src is None:
                    yield [stage], [], [t]
                    continue
                d = self.sizes[i]
                for zpp in dict.fromkeys(int(x) for x in keys[key][0]):  # the key's source states, in order
                    for stages, links, times in walk(b + 1, src, zpp, coo, D - d, rest):
                        yield [stage] + stages, [bool(auto.categories[coo][1])] + links, [t] + times

        yield from walk(0, level, z, 0, self.N, optimum)

    def placed_optimum(self, V, auto, X, mode, lim, value, kind, tries: int = 5000):
        """The first optimal plan in the tables whose runs pack into the nodes, with its stage times."""
        plans = itertools.chain.from_iterable(
            self.reconstructions(V, auto, X, mode, lim, level, z) for level, z in self._final_states(V, auto, value)
        )
        for stages, links, times in itertools.islice(plans, tries):
            plan = self.place(stages, links, kind)
            if plan is not None:
                return plan, times
        return None, None

    def _choices(self, V, auto, X, xin, mode, lim, a, level, z, c, D):
        """Every way the state (a, level, z, c, D) can start: (b, size, source level, key, c', t, value, option,
        rest), in the order of b, then the source level, then the pairs; only those whose rest is finite.

        ``t`` is the stage's time (with options: its key), ``option`` None or
        the option's parts without transfers and the spec's extra (GPipe: F + xo),
        ``rest`` the least value of the pair's key (its source states, outgoing category c')
        over the suffix from b + 1 with the devices left. Vectorised over b and the pairs
        (:meth:`_stage_values`).
        """
        stash = self.stash_of_level[level]
        sources = [s for s in [level - 1] + ([level] if self.bucket and level == self.K else []) if s >= 1]
        xi = float(xin[a, c])
        for i, d in enumerate(self.sizes):
            if d > D or (auto.size_of[z] >= 0 and auto.size_of[z] != i):
                continue
            if level == 1 and auto.init[i] == z and D == d:
                t, cost, opt = self._stage_values(a, i, stash, mode, lim, np.array([self.L - 1]), np.zeros((1, 1)), xi)
                if math.isfinite(t[0, 0]):
                    yield (self.L - 1, i, None, None, None, float(t[0, 0]),
                           float(t[0, 0] if mode == "minmax" else cost[0, 0]), opt(0, 0), 0.0)
            lay = V.layout
            if i not in lay.pairs:
                continue
            pair_zn, pair_co, _, _ = lay.pairs[i]
            sel = np.flatnonzero(pair_zn == z)
            keys, coo = lay.pair_key[i][sel], pair_co[sel]
            bs = np.arange(a, self.L - level + 1)
            if not bs.size or not sel.size or not sources:
                continue
            t, cost, opt = self._stage_values(a, i, stash, mode, lim, bs, X[bs][:, coo], xi)
            rest = np.stack([self._rest(V, src, bs + 1, keys, D - d) for src in sources], axis=1)  # (b, src, pair)
            value = np.maximum(t[:, None, :], rest) if mode == "minmax" else cost[:, None, :] + rest
            for kb, ks, kt in zip(*np.nonzero(np.isfinite(t)[:, None, :] & np.isfinite(rest))):
                yield (int(bs[kb]), i, sources[ks], int(keys[kt]), int(coo[kt]), float(t[kb, kt]),
                       float(value[kb, ks, kt]), opt(kb, kt), float(rest[kb, ks, kt]))

    def _rest(self, V, level: int, pos: np.ndarray, keys: np.ndarray, D: int) -> np.ndarray:
        """``[b, pair]``: the least value of each pair's key (:meth:`.Tables.key_value`) at (pos[b], level, D)."""
        out = np.full((pos.size, keys.size), INF)
        for k, key in enumerate(keys):
            out[:, k] = V.key_value(level, pos, int(key), D)
        return out

    def _stage_values(self, a: int, i: int, stash: int, mode: str, lim: float, bs: np.ndarray, xo: np.ndarray, xi: float):
        """Stages a..bs[k] on size index i with outgoing transfers ``xo[k, t]`` and the incoming ``xi``, as the
        recursion values them: (t or key, cost) arrays ``[k, t]``, inf where the stage is over ``lim`` or
        does not fit, and ``option(k, t)`` -> None or the option's parts and the spec's extra."""
        if not self.spec:
            cb = self.best_compute(a, i, stash)[bs - a]
            t = cb[:, None] + xo + xi
            t = np.where(t <= lim, t, INF)
            return t, t, lambda k, j: None
        low, A, B = self.option_rows(a, i, stash)
        one, two = (x[a, a:] for x in self.stage_options(i, stash))
        f, cost, key, extra = self.spec.choices(A[bs - a], B[bs - a], xo, xi, mode, lim)
        ok = (key <= lim) & np.isfinite(cost)
        key = np.where(ok, key, INF)
        o1, o2 = one[(bs - a)[:, None], f], two[(bs - a)[:, None], f]

        def option(k: int, j: int):
            return float(o1[k, j]), float(o2[k, j]), float(extra[k, j])

        return key, np.where(ok, cost, INF), option
