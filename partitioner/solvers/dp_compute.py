"""The DP when no boundary carries bytes: stage time = compute, state (layer, stages, devices).

Without transfers a stage's time is ``C_l(a, b) = T_l[b + 1] - T_l[a]`` for its
layout ``l`` (prefix sums ``T_l``), and the layers ``b`` it may end at form a
range ``[a, e_l(a)]``: memory (with the stage's stash) and a time threshold
both only get harder as the stage grows. So one recursion step is a
*range query*, vectorised over the first layer ``a`` and the devices ``D``:

* threshold feasibility -- "is some suffix reachable from a b in the range":
  a range OR, by prefix counts;
* least sum of stage times under a threshold -- ``min_b (T_l[b+1] + V[b+1, D - d]) - T_l[a]``:
  a range minimum, by a sparse table [1]_ (only over the columns where the
  level below holds a suffix: few on the lowest levels).

The "K or more stages" level also feeds itself (row ``a`` needs rows above
it), so it is swept ``a`` downwards, every layout at once. The range ends
never decrease with ``a``, so each layout's window is a queue (rows enter
at the bottom, leave at the top), kept as a block of running minima plus
the minimum of the rows that entered since (the two-stack queue [2]_):
``O(J L N)`` for the level, no ``log L``.

The bottleneck optimum is the smallest candidate stage time (one of the
``C_l(a, b)``) that is feasible, found by binary search over the sorted
candidates; the iteration objective is the best of the Pareto points of (sum
of stage times, largest stage time), found by
:func:`.dp_walks.threshold_search` with thresholds snapped to candidates.

Complexity per recursion: ``O(K * n_layouts * L * N * log w)`` for the least
sum (w: the longest stage range), ``O(K * n_layouts * L * N)`` for
feasibility (K stage levels, L layers, N devices); memory ``O(K * L * N)``
plus scratch ``O(n_layouts * w * N + L * N * log w)``, reused across recursions.

References
----------
.. [1] M. A. Bender and M. Farach-Colton, "The LCA Problem Revisited",
   LATIN 2000 (sparse tables for range-minimum queries).
.. [2] C. Okasaki, "Purely Functional Data Structures", Cambridge
   University Press, 1998, section 5.2 (a queue as two lists); here each
   part also carries its running minima.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .dp_walks import threshold_search
from .errors import OutOfTime

__all__ = ["ComputeOnlyDP"]

INF = math.inf


class ComputeOnlyDP:
    """Exact recursions for a :class:`~partitioner.solvers.dp.DPModel` whose transfers are all zero."""

    def __init__(self, model, deadline: float | None):
        self.model = model
        self.deadline = deadline
        L = model.L
        self.L, self.N, self.K = L, model.N, model.K
        self.prefix = model.time_prefix  # stage time = prefix difference, here and in the walk back
        self.devices = np.array([lay.devices for lay in model.layouts])
        self.calls = 0
        self._buffers: dict[str, np.ndarray] = {}
        self._room: dict[tuple[int, int], np.ndarray] = {}  # per (layout, level): memory and later stages
        self._cut: tuple[float, dict] = (INF, {})  # (threshold, per layout: the last b under it)
        J = len(model.layouts)
        model.check_budget(
            8.0 * (2 * (self.K + 1) * (L + 1) * (self.N + 1) + L * max(L, 2).bit_length() * (self.N + 1) + J * L * L + 2 * J * L * (self.N + 1)),
            "the range-query tables",
        )

    def buffer(self, name: str, shape: tuple) -> np.ndarray:
        """Scratch space reused across recursions (fresh pages are slow to fault in): contents undefined."""
        size = math.prod(shape)
        found = self._buffers.get(name)
        if found is None or found.size < size:
            found = self._buffers[name] = np.empty(size)
        return found[:size].reshape(shape)

    # ------------------------------------------------------------------ ranges
    def mem_end(self, j: int, stash: int) -> np.ndarray:
        """Per first layer a: the last layer b a stage in layout j can end at and fit (a - 1 if none)."""
        return self.model.costs.fit_end(j, stash)

    def ends(self, j: int, level: int, limit: float) -> np.ndarray:
        """Per a: the last layer of the stage's range (memory, threshold, room for later stages)."""
        end = self._room.get((j, level))
        if end is None:
            end = self._room[j, level] = np.minimum(self.mem_end(j, self.model.stash_of_level[level]), self.L - level)
        if math.isfinite(limit):
            if self._cut[0] != limit:
                self._cut = (limit, {})
            hi = self._cut[1].get(j)
            if hi is None:
                T = self.prefix[j]
                # largest b with T[b+1] - T[a] <= limit: the same comparison the walk back makes
                hi = self._cut[1][j] = np.searchsorted(T, T[:-1] + limit * (1 + 1e-12), side="right") - 2
            end = np.minimum(end, hi)
        return end

    def time_of(self, j: int, a: int, b: int) -> float:
        return float(self.prefix[j, b + 1] - self.prefix[j, a])

    def _check_time(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise OutOfTime

    # ------------------------------------------------------------------ recursions
    def feasible_table(self, limit: float) -> list[np.ndarray]:
        """R[level][a, D]: a suffix from a with ``level`` stages and D devices, every stage <= limit."""
        L, N, K = self.L, self.N, self.K
        R = [np.zeros((L + 1, N + 1), bool) for _ in range(K + 1)]
        R[0][L, 0] = True
        for level in range(1, K + 1):
            self._check_time()
            self._fill(R, level, limit, boolean=True)
        return R

    def minsum_table(self, limit: float) -> list[np.ndarray]:
        """V[level][a, D]: least sum of stage times of such a suffix (inf if none)."""
        L, N, K = self.L, self.N, self.K
        V = [np.full((L + 1, N + 1), INF) for _ in range(K + 1)]
        V[0][L, 0] = 0.0
        for level in range(1, K + 1):
            self._check_time()
            self._fill(V, level, limit, boolean=False)
        return V

    def _fill(self, V, level: int, limit: float, boolean: bool) -> None:
        m = self.model
        src = V[level - 1]
        ends = {j: self.ends(j, level, limit) for j in range(len(m.layouts))}
        if boolean:
            # all layouts of one size reach any b up to the furthest end: one range per size
            counts = np.concatenate([np.zeros((1, self.N + 1), np.int64), np.cumsum(src[1:], axis=0, dtype=np.int64)])
            for d, js in self._by_size().items():
                end = np.max([ends[j] for j in js], axis=0)
                a_idx = np.flatnonzero(end >= np.arange(self.L))
                if a_idx.size:
                    # positions b + 1 in [a + 1, e + 1] of src
                    hit = (counts[end[a_idx] + 1] - counts[a_idx]) > 0
                    V[level][a_idx, d:] |= hit[:, : self.N + 1 - d]
        elif m.bucket and level == self.K:
            # the sweep takes both sources, the level below and the level itself, in one pass
            J = len(m.layouts)
            _SlidingSweep(self, np.array([ends[j] for j in range(J)])).run(V[level], src)
            return
        else:
            # columns D' where src holds a suffix: few on the low levels (one stage: the sizes)
            cols = np.flatnonzero(np.isfinite(src).any(axis=0))
            for j in range(len(m.layouts)):
                a_idx = np.flatnonzero(ends[j] >= np.arange(self.L))
                if a_idx.size:
                    self._min_from(V[level], src, j, a_idx, ends[j][a_idx], cols)
        if m.bucket and level == self.K:
            self._bucket_self(V[level], ends)

    def _by_size(self) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        for j, d in enumerate(self.devices):
            groups.setdefault(int(d), []).append(j)
        return groups

    def _min_from(self, out, src, j, a_idx, e_idx, cols) -> None:
        """out[a, D] = min over b in [a, e(a)] of C_j(a, b) + src[b + 1, D - d] (only the columns D - d
        in ``cols`` can be finite)."""
        d = int(self.devices[j])
        width = self.N + 1 - d
        T = self.prefix[j]
        cols = cols[: int(np.searchsorted(cols, width))]
        if not cols.size:
            return
        few = 2 * cols.size < width  # few columns: gather them
        table = _SparseTable(self.buffer, self.L, cols.size if few else width, int((e_idx - a_idx).max()) + 1)
        # row b: T[b + 1] + src[b + 1]
        np.add(T[1:, None], src[1:, cols] if few else src[1:, :width], out=table.rows)
        cand = table.build().query(a_idx, e_idx)
        np.subtract(cand, T[a_idx, None], out=cand)
        if few:
            rows = np.ix_(a_idx, cols + d)
            out[rows] = np.minimum(out[rows], cand)
        elif a_idx[-1] - a_idx[0] + 1 == a_idx.size:  # a run of rows: in place
            view = out[a_idx[0] : a_idx[-1] + 1, d:]
            np.minimum(view, cand, out=view)
        else:
            out[a_idx, d:] = np.minimum(out[a_idx, d:], cand)

    def _bucket_self(self, cur, ends) -> None:
        """The "K or more stages" level also extends itself (feasibility): walk a downwards, all sizes at once."""
        L, N = self.L, self.N
        groups = self._by_size()
        sizes = np.array(list(groups), np.int64)
        E = np.array([np.max([ends[j] for j in js], axis=0) for js in groups.values()])  # (sizes, L)
        shift = N + np.arange(N + 1)[None, :] - sizes[:, None]  # column D of size d reads hit[D - d]
        suffix = np.zeros((L + 2, N + 1), np.int64)  # suffix[p]: count of cur[q] for q >= p
        padded = np.zeros((len(sizes), 2 * N + 1), bool)
        for a in range(L - 1, -1, -1):
            suffix[a + 1] = suffix[a + 2] + cur[a + 1]
            e = E[:, a]
            s = np.flatnonzero(e >= a)
            if s.size:
                padded[: s.size, N:] = (suffix[a + 1][None, :] - suffix[e[s] + 2]) > 0
                cur[a] |= padded[np.arange(s.size)[:, None], shift[s]].any(axis=0)

    # ------------------------------------------------------------------ answers
    def final(self, table, boolean: bool):
        """(value or feasibility, level) at a = 0, D = N over the allowed stage counts."""
        m = self.model
        best, arg = (False if boolean else INF), None
        for level in range(1, self.K + 1):
            if not ((m.P_lo <= level <= m.P_hi) or (m.bucket and level == self.K)):
                continue
            v = table[level][0, self.N]
            if boolean and v:
                return True, level
            if not boolean and v < best:
                best, arg = float(v), level
        return best, arg

    def walk(self, V, level: int, limit: float):
        """Stages ``(a, b, size, layout)`` and their times, following the least-sum table."""
        m = self.model
        a, D = 0, self.N
        target = V[level][0, D]
        stages, times = [], []
        while a < self.L:
            found = next((ch for ch in self._choices(V, level, limit, a, D) if _close(ch[-1], target)), None)
            if found is None:
                raise RuntimeError("dp: reconstruction lost the optimum")
            b, j, src, _ = found
            d = int(self.devices[j])
            stages.append((a, b, d, m.sizes.index(d)))
            times.append(self.time_of(j, a, b))
            target = V[src][b + 1, D - d]
            a, D, level = b + 1, D - d, src
        return stages, times

    def _choices(self, V, level, limit, a, D):
        """Every way a suffix (a, level, D) can start: (b, layout, source level, value)."""
        m = self.model
        sources = [level - 1] + ([level] if m.bucket and level == self.K else [])
        for j in range(len(m.layouts)):
            d = int(self.devices[j])
            if d > D:
                continue
            T = self.prefix[j]
            for b in range(a, self.ends(j, level, limit)[a] + 1):
                for src in sources:
                    if src == 0 and (b != self.L - 1 or D != d):
                        continue
                    rest = V[src][b + 1, D - d]
                    if math.isfinite(rest):
                        yield b, j, src, (T[b + 1] + rest) - T[a]

    def candidates(self) -> np.ndarray:
        """Every possible stage time, sorted: C_l(a, b) over layouts and ranges that fit with stash 1."""
        vals = []
        cols = np.arange(self.L)
        for j in range(len(self.model.layouts)):
            T = self.prefix[j]
            diff = T[None, 1:] - T[:-1, None]
            end = self.mem_end(j, 1)
            ok = (cols[None, :] >= cols[:, None]) & (cols[None, :] <= end[:, None])
            vals.append(diff[ok])
        return np.unique(np.concatenate(vals)) if vals else np.array([])

    # ------------------------------------------------------------------ objectives
    def minsum(self, limit: float):
        self.calls += 1
        V = self.minsum_table(limit)
        total, level = self.final(V, boolean=False)
        if level is None:
            return INF, None, None
        stages, times = self.walk(V, level, limit)
        return total, max(times), stages

    def lower_bound(self) -> float:
        """A bottleneck no plan beats: the slowest single layer, and the total work over N."""
        slowest, work, _ = self.model.layer_floor()
        return max(slowest, work)

    def lowest_bottleneck(self, cand: np.ndarray, known_feasible: float | None = None, rel: float = 0.0) -> float | None:
        """The smallest candidate stage time at which a valid plan exists (binary search); with ``rel`` > 0,
        a candidate no larger and within that relative distance of it (a lower bound on every plan's max)."""
        lo = int(np.searchsorted(cand, self.lower_bound() * (1 - 1e-12)))
        if known_feasible is None:
            hi = len(cand) - 1
            if hi < lo:
                return None
            self.calls += 1
            if not self.final(self.feasible_table(float(cand[hi])), True)[0]:
                return None
        else:
            hi = int(np.searchsorted(cand, known_feasible * (1 - 1e-12)))
            hi = min(hi, len(cand) - 1)
        lo = min(lo, hi)
        # invariant: cand[hi] is feasible, every candidate below cand[lo] is not
        while lo < hi and cand[hi] > cand[lo] * (1 + rel):
            mid = (lo + hi) // 2
            self.calls += 1
            if self.final(self.feasible_table(float(cand[mid])), True)[0]:
                hi = mid
            else:
                lo = mid + 1
        return float(cand[lo])

    def bottleneck(self):
        cand = self.candidates()
        best = self.lowest_bottleneck(cand)
        if best is None:
            return None
        total, worst, stages = self.minsum(best)  # among bottleneck-optimal plans, the least total time
        return worst, stages

    def iteration(self):
        """Least ``sum t + (m - 1) max t`` over the (sum, max) Pareto points of ``minsum``.

        ``minsum(T)`` is a non-increasing step function whose steps are the
        Pareto points; :func:`.dp_walks.threshold_search` finds the best of
        them with thresholds snapped to the candidate stage times, bounded
        below by the lowest bottleneck.
        """
        m = self.model.m
        free_sum, free_max, free = self.minsum(INF)
        if free is None:
            return None
        self.model.note(free, [], "none", free_sum + (m - 1) * free_max)
        if m == 1:
            return free_sum, free
        cand = self.candidates()
        # a lower bound within 3 % of the lowest bottleneck is as good for the search, and cheaper: on the
        # comm-free benchmark problems the same optima with 11 % less CPU than within 0.1 %
        low = self.lowest_bottleneck(cand, known_feasible=free_max, rel=3e-2)
        self.model.proven_bound = free_sum + (m - 1) * low  # every plan: sum >= free_sum, max >= low
        noted = free_sum + (m - 1) * free_max

        def probe(limit: float):
            nonlocal noted
            f, M, plan = self.minsum(limit)
            if plan is not None and f + (m - 1) * M < noted:
                noted = f + (m - 1) * M
                self.model.note(plan, [], "none", noted)
            return f, M, plan

        def below(x: float, strict: bool) -> float:
            """The largest candidate stage time at most x (below x when strict), or -inf."""
            i = int(np.searchsorted(cand, x * (1 - 2e-12) if strict else x, side="right")) - 1
            return float(cand[i]) if i >= 0 else -INF

        best, _ = threshold_search(probe, m - 1, (free_sum, free_max, free), low, below)
        return best

def _close(x: float, y: float) -> bool:
    return x == y or (math.isfinite(x) and math.isfinite(y) and abs(x - y) <= 1e-12 * max(1.0, abs(x), abs(y)))


class _SparseTable:
    """Range minima over the rows of an (n, W) array [1]_, its levels in a reused buffer (``buffer(name, shape)``).

    Fill :attr:`rows`, then :meth:`build` the levels up to spans of ``longest``
    rows and :meth:`query` inclusive row ranges.
    """

    def __init__(self, buffer, n: int, width: int, longest: int):
        self.n = n
        levels = max(min(n, longest), 1).bit_length()  # spans 1, 2, 4, .. up to longest
        self.tab = buffer("sparse", (levels, n, width))
        self.rows = self.tab[0]

    def build(self) -> "_SparseTable":
        n, tab = self.n, self.tab
        for k in range(1, tab.shape[0]):
            s = 1 << (k - 1)
            np.minimum(tab[k - 1, : n - 2 * s + 1], tab[k - 1, s : n - s + 1], out=tab[k, : n - 2 * s + 1])
        return self

    def query(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """min over rows starts[i]..ends[i] (inclusive, at most ``longest`` rows) for every i."""
        k = np.log2(ends - starts + 1).astype(np.int64)  # exact for the small integers here
        return np.minimum(self.tab[k, starts], self.tab[k, ends - (1 << k) + 1])


class _SlidingSweep:
    """The self-extending level's least sums: rows ``a`` downwards, every layout at once.

    Row ``a`` takes, per layout j of size d, the least ``T_j[b + 1] +
    cur[b + 1, D - d] - T_j[a]`` over the window ``b`` in ``[a, e_j(a)]``,
    whose rows are final (b + 1 > a). The window ends never decrease with
    ``a`` (memory, the threshold and the room for later stages only get
    harder as a stage grows), so as ``a`` falls rows enter the window at the
    bottom and leave it at the top: a queue, kept as two parts per layout
    (the two-stack queue): a *block* ``[s_j, e_j(s_j)]`` holding the minima
    from ``s_j`` up to each of its rows, built when the window's top falls
    below ``s_j``, and the minimum ``R_j`` of the rows ``a .. s_j - 1`` that
    entered since. The window minimum is ``min(R_j, block[e_j(a) - s_j])``;
    every row enters one block, so a sweep costs ``O(J L N)`` element
    operations (a segment tree: ``O(J L N log L)``).
    """

    def __init__(self, dp: ComputeOnlyDP, ends: np.ndarray):
        if ends.shape[1] > 1 and not np.all(np.diff(ends, axis=1) >= 0):
            raise RuntimeError("dp: internal error: stage ranges whose ends decrease")
        self.dp, self.E = dp, ends
        N = dp.N
        # shifted rows: layout j reads column D - d_j of a row padded with N infinities in front
        self.idx = N + np.arange(N + 1)[None, :] - dp.devices[:, None]

    @staticmethod
    def rows(cur: np.ndarray, src: np.ndarray, first: int, n: int) -> np.ndarray:
        """Rows first .. first + n - 1 of the two sources: a suffix from the level below or the level itself."""
        return np.minimum(cur[first : first + n], src[first : first + n])

    def shifted(self, rows: np.ndarray, layouts: np.ndarray) -> np.ndarray:
        """rows (k, N + 1) -> (k, len(layouts), N + 1): per layout j, column D holds ``rows[:, D - d_j]``
        (inf if D < d_j)."""
        N = self.dp.N
        padded = np.empty((rows.shape[0], 2 * N + 1))
        padded[:, :N] = INF
        padded[:, N:] = rows
        return padded[:, self.idx[layouts]]

    def run(self, cur: np.ndarray, src: np.ndarray) -> None:
        """Fill ``cur`` (the level, inf where not yet reached) from ``src`` (the level below) and itself."""
        dp, E, T = self.dp, self.E, self.dp.prefix
        J, L = E.shape
        N = dp.N
        width = int(np.max(E - np.arange(L)[None, :], initial=-1)) + 1  # the longest window
        if width <= 0:
            return
        start = np.full(J, L)  # s_j; L: no block yet, the first window builds one
        R = np.full((J, N + 1), INF)
        block = dp.buffer("sweep", (J, width, N + 1))
        everyone = np.arange(J)
        pad = np.full(2 * N + 1, INF)  # a row of the two sources behind N infinities
        y = np.empty((J, N + 1))
        for a in range(L - 1, -1, -1):
            if a % 32 == 0:
                dp._check_time()
            e = E[:, a]
            live = e >= a
            if not live.any():
                continue
            # row a enters every R (a layout that is not live builds a block before R counts again)
            np.minimum(cur[a + 1], src[a + 1], out=pad[N:])
            np.take(pad, self.idx, out=y)
            y += T[:, a + 1, None]
            np.minimum(R, y, out=R)
            fresh = live & (e < start)
            if fresh.any():
                for g in _similar(np.flatnonzero(fresh), e - a + 1):
                    n = int(e[g].max()) - a + 1
                    Y = self.shifted(self.rows(cur, src, a + 1, n), g) + T[g, a + 1 : a + 1 + n].T[:, :, None]
                    for i in range(1, n):  # running minima (a row loop: accumulate along axis 0 is slower)
                        np.minimum(Y[i - 1], Y[i], out=Y[i])
                    block[g, :n] = Y.transpose(1, 0, 2)
                start[fresh] = a
                R[fresh] = INF
            j = everyone if live.all() else np.flatnonzero(live)
            q = block[j, e[j] - start[j]]
            np.minimum(q, R[j] if j is not everyone else R, out=q)
            q -= T[j, a, None]
            np.minimum(cur[a], q.min(axis=0), out=cur[a])

def _similar(items: np.ndarray, length: np.ndarray) -> list[np.ndarray]:
    """``items`` in groups of similar ``length[item]`` (each at most 1.5 x the group's shortest + 4),
    so that a group's blocks, built to its longest, waste little."""
    if len(items) == 1:
        return [items]
    order = items[np.argsort(length[items], kind="stable")]
    groups, first = [], 0
    for i in range(1, len(order) + 1):
        if i == len(order) or length[order[i]] > 1.5 * length[order[first]] + 4:
            groups.append(order[first:i])
            first = i
    return groups
