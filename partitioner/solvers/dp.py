"""``dp``: an exact dynamic program over layers, stages (counted from the end) and devices.

The recursion
-------------
A *suffix* is the pipeline from some layer ``a`` to the last layer. Its state is

* ``a`` -- its first layer;
* ``k`` -- its number of stages. Counting stages from the end fixes the 1F1B
  stash of the suffix's first stage, ``min(m, k)``; beyond ``max(m, P_min)``
  all counts behave alike and share one level when the stage bound is not
  binding;
* ``D`` -- its devices (a numpy axis; the whole pipeline must use exactly N);
* ``z`` -- a *placement state* of its first stage (below);
* ``c`` -- the *incoming category*: the smaller of the sizes on both sides of
  the boundary before ``a`` and whether those two stages share a node. It
  fixes that boundary's transfer time ``x = out_bytes / (min size * bw)``,
  which stage p's time ``t_p = compute + x_out + x_in`` includes.

The value of a state is, for the ``bottleneck`` objective, the least possible
largest stage time of the suffix (a min-max recursion), and for a threshold
``T``, the least possible *sum* of stage times with every stage at most ``T``.
The ``iteration`` objective ``sum t + (m - 1) max t`` is the minimum over ``T``
of ``minsum(T) + (m - 1) T``; ``minsum`` is a non-increasing step function of
``T``, so a branch and bound over intervals of ``T`` (lower bound
``minsum(hi) + (m - 1) lo`` on ``[lo, hi]``) finds it after a few recursions,
like Alpa's enumeration of the largest stage latency [1]_ but with pruning.

Choosing a stage's layout is no part of the state: for a fixed cut, size and
neighbours, the fastest layout that fits (with its stash) is best, because
both objectives are non-decreasing in every stage time.

Placement
---------
On the default cluster graph a plan's times depend on its placement only
through which adjacent stages share a node ("links"). In-node sizes are
powers of two dividing the node size (a divisibility chain), so any sizes
summing to N pack into the nodes; links are what is constrained: a chain of
linked stages (a *run*) lives in one node, and all runs must pack exactly
into the nodes the multi-node stages leave. The placement state ``z`` is:

* ``none`` -- no transfer anywhere: ``z`` and ``c`` carry nothing;
* ``size`` -- links cannot change a time (one node, one GPU per node, or
  equal intra/inter bandwidth): ``z`` is the stage size;
* ``run`` -- NVLink faster than the network: ``z`` is (size, fill of the run
  the stage heads); runs may not overflow a node. This relaxes the packing of
  runs into nodes; the optimum found is checked by an exact packing search
  and, in the rare case that its runs do not pack, the problem is solved
  again with
* ``bins`` -- the exact placement automaton: (size, free space of the stage's
  node, free space of every other partly filled node). Also used when NVLink
  is *slower* than the network, where a link is a cost that the placement may
  force. Its state count grows quickly with the node count.

Complexity
----------
With L layers, N devices, S allowed sizes, K = max(m, P_min) stage levels
(at most P_max), Z placement states and C categories, one recursion costs
``O(K * L^2 * S * (pairs) * C' * N)`` numpy element operations, where
``pairs`` (<= Z * C) counts the distinct (placement, outgoing category)
combinations of one stage size and ``C'`` <= C the distinct incoming transfer
times at a layer. Without transfers Z = C = 1 and a recursion is
``O(K * L^2 * S * N)``; memory is ``O(K * L * Z * C * N)``. The bottleneck
objective needs one recursion, the iteration objective a few (branch and
bound over the threshold).

References
----------
.. [1] L. Zheng et al., "Alpa: Automating Inter- and Intra-Operator
   Parallelism for Distributed Deep Learning", OSDI 2022, section 5.2.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from ..placement import contiguous_node_assignment, node_assignment_ids, pack_runs
from ..plan import Plan, Stage
from ..problem import Problem
from .dp_compute import ComputeOnlyDP
from .errors import OutOfTime as _OutOfTime
from .errors import TooLarge as _TooLarge
from .tables import CostTables

__all__ = ["DPModel"]

INF = math.inf
_TIE = 1e-12  # relative slack when comparing a stage time with a threshold


@dataclass
class _Outcome:
    status: str  # optimal | infeasible
    plan: Plan | None = None
    bound: float | None = None
    stats: dict | None = None


# --------------------------------------------------------------------------- placement automata


@dataclass(frozen=True)
class Automaton:
    """Placement states of a suffix's first stage and how a new stage attaches.

    ``trans[i]`` holds arrays ``(zp, zn, co)``: putting a stage of size index
    ``i`` in front of a suffix whose first stage is in state ``zp`` gives the
    new state ``zn`` and the outgoing boundary category ``co``.
    """

    kind: str
    states: tuple
    size_of: np.ndarray  # size index of each state, -1 = any
    init: dict  # size index -> state of a last stage
    accept: np.ndarray  # states a whole pipeline may start in
    categories: tuple  # (min size index, link) ; link None = no transfer model
    trans: dict
    incoming: dict  # size index -> category ranges [(lo, hi)] a stage of that size can receive


def _automaton(kind: str, sizes: tuple[int, ...], G: int, nodes: int, link_fixed: bool | None) -> Automaton:
    n = len(sizes)
    if kind == "none":
        trans = {i: (np.array([0]), np.array([0]), np.array([0])) for i in range(n)}
        incoming = {i: [(0, 1)] for i in range(n)}
        return Automaton(kind, ("any",), np.array([-1]), {i: 0 for i in range(n)}, np.array([True]), ((0, None),), trans, incoming)
    if kind == "size":
        cats = tuple((j, link_fixed) for j in range(n))
        trans = {
            i: (np.arange(n), np.full(n, i), np.array([min(i, ip) for ip in range(n)])) for i in range(n)
        }
        incoming = {i: [(0, i + 1)] for i in range(n)}
        return Automaton(kind, tuple(range(n)), np.arange(n), {i: i for i in range(n)}, np.ones(n, bool), cats, trans, incoming)
    cats = tuple((j, False) for j in range(n)) + tuple((j, True) for j in range(n) if sizes[j] < G)
    # categories are ordered (j, unlinked) for all j, then (j, linked) for in-node j: both ranges are prefixes
    incoming = {i: [(0, i + 1)] + ([(n, n + i + 1)] if sizes[i] < G else []) for i in range(n)}
    cat_index = {c: k for k, c in enumerate(cats)}
    if kind == "run":

        def initial(i: int):
            return (i, sizes[i] if sizes[i] < G else G)

        def step(i: int, z):
            ip, u = z
            out = [((i, sizes[i] if sizes[i] < G else G), (min(i, ip), False))]
            if sizes[i] < G and sizes[ip] < G and u + sizes[i] <= G:
                out.append(((i, u + sizes[i]), (min(i, ip), True)))
            return out

        accept = lambda z: True  # noqa: E731  (relaxed: packing is checked after)
    else:  # bins: (size, free space of this stage's node or None, free space of other open nodes)

        def initial(i: int):
            return (i, G - sizes[i], ()) if sizes[i] <= G else (i, None, ())

        def step(i: int, z):
            ip, r, others = z
            d = sizes[i]
            carry = tuple(sorted(others + ((r,) if r else ())))
            out = []
            if d > G:
                out.append(((i, None, carry), (min(i, ip), False)))
                return out
            if r is not None and r >= d:
                out.append(((i, r - d, others), (min(i, ip), True)))
            for v in sorted(set(others)):
                if v >= d:
                    rest = list(others)
                    rest.remove(v)
                    new_others = tuple(sorted(rest + ([r] if r else [])))
                    out.append(((i, v - d, new_others), (min(i, ip), False)))
            out.append(((i, G - d, carry), (min(i, ip), False)))
            return out

        def accept(z) -> bool:
            return not z[1] and not z[2]

    # reachable states
    index: dict = {}
    order: list = []

    def add(z) -> int:
        if z not in index:
            if kind == "bins" and len(z[2]) + (1 if z[1] else 0) > nodes:
                return -1
            index[z] = len(order)
            order.append(z)
        return index[z]

    for i in range(n):
        add(initial(i))
    edges: dict[int, list] = {i: [] for i in range(n)}
    k = 0
    while k < len(order):
        z = order[k]
        for i in range(n):
            for zn, cat in step(i, z):
                t = add(zn)
                if t >= 0:
                    edges[i].append((k, t, cat_index[cat]))
        k += 1
    trans = {i: tuple(np.array(col, dtype=np.int64) for col in zip(*edges[i])) for i in range(n)}
    size_of = np.array([z[0] for z in order])
    return Automaton(
        kind,
        tuple(order),
        size_of,
        {i: index[initial(i)] for i in range(n)},
        np.array([accept(z) for z in order]),
        cats,
        trans,
        incoming,
    )


# --------------------------------------------------------------------------- the model


class DPModel:
    """Tables and recursions for one problem (see the module docstring)."""

    def __init__(self, problem: Problem, layouts: tuple | None = None, stage_counts: tuple[int, int] | None = None):
        """``layouts`` restricts the layouts stages may use (and so their sizes);
        ``stage_counts`` overrides the problem's stage bounds."""
        self.problem = problem
        cluster = problem.cluster
        self.L, self.N, self.G = problem.num_layers, cluster.num_devices, cluster.gpus_per_node
        self.m = problem.microbatches
        self.layouts = problem.layouts() if layouts is None else tuple(layouts)
        usable = {lay.devices for lay in self.layouts}
        self.sizes = tuple(d for d in cluster.allowed_sizes() if d in usable)
        self.stage_counts = stage_counts or (problem.stages.min, problem.stages.max)
        self._matrices: dict[tuple[int, int], np.ndarray] = {}
        self._layer_tables()
        self._levels()

    # ---------------------------------------------------------------- tables
    def _layer_tables(self) -> None:
        p, L = self.problem, self.L
        tables = CostTables(p, self.layouts)
        tp, wp, ap, mp = tables.time_prefix, tables.weight_prefix, tables.act_prefix, tables.missing_prefix
        self.time_prefix = tp
        # C[j, a, b]: compute of layers a..b in layout j; smax[j, a, b]: the largest stash that fits
        self.C = tp[:, None, 1:] - tp[:, :L, None]
        W = wp[:, None, 1:] - wp[:, :L, None]
        A = ap[:, None, 1:] - ap[:, :L, None]
        miss = (mp[:, None, 1:] - mp[:, :L, None]) > 0
        cap = p.cluster.gpu_memory_bytes
        big = np.int64(1 << 40)
        with np.errstate(divide="ignore"):
            smax = np.where(A > 0, (cap - W) // np.maximum(A, 1), np.where(W <= cap, big, -1))
        smax = np.where((W > cap) | miss, -1, smax)
        tri = np.triu(np.ones((L, L), bool))
        self.smax = np.where(tri[None], smax, -1)
        self.C = np.where(tri[None], self.C, INF)
        self.layouts_of_size = [[j for j, lay in enumerate(self.layouts) if lay.devices == d] for d in self.sizes]
        self.out_bytes = tables.out_bytes.copy()
        self.out_bytes[-1] = 0.0

    def _levels(self) -> None:
        """Stage-count levels: exact counts below ``K``; level ``K`` is "K or more" when unbounded.

        A stash of s fits a stage exactly when s <= smax for its layout and
        layers. Past the largest smax below m, every stash up to m fits the
        same stages, so stage counts from ``m_eff`` on behave alike.
        """
        P_lo, P_hi = self.stage_counts
        below = self.smax[(self.smax >= 1) & (self.smax < self.m)]
        m_eff = int(below.max()) + 1 if below.size else 1
        unbounded = P_hi >= min(self.L, self.N)
        if unbounded and max(m_eff, P_lo) < P_hi:
            self.K, self.bucket = max(m_eff, P_lo), True
        else:
            self.K, self.bucket = P_hi, False
        # a stash of min(m, k) fits the same stages as min(m_eff, k): use the smaller, equivalent one
        self.stash_of_level = [0] + [min(m_eff, k) for k in range(1, self.K + 1)]
        self.P_lo, self.P_hi = P_lo, P_hi

    def natural_placement(self) -> str:
        c = self.problem.cluster
        if not np.any(self.out_bytes > 0):
            return "none"
        if c.nodes == 1 or self.G == 1 or c.intra_node_GBps == c.inter_node_GBps:
            return "size"
        return "run" if c.intra_node_GBps > c.inter_node_GBps else "bins"

    def _automaton_for(self, mode: str) -> Automaton:
        c = self.problem.cluster
        link = None
        if mode == "size":
            link = c.nodes == 1  # one node: every pair of stages shares it
        return _automaton(mode, self.sizes, self.G, c.nodes, link)

    def _transfer_table(self, auto: Automaton) -> np.ndarray:
        """X[b, c]: transfer time of the boundary after layer b in category c (0 after the last)."""
        c = self.problem.cluster
        X = np.zeros((self.L, len(auto.categories)))
        for k, (j, link) in enumerate(auto.categories):
            if link is None:
                continue
            bw = c.intra_node_GBps if link else c.inter_node_GBps
            X[:, k] = self.out_bytes / (self.sizes[j] * bw * 1e6)
        return X

    def best_compute(self, a: int, i: int, stash: int) -> np.ndarray:
        """Over b = a..L-1: the fastest compute of layers a..b on size index i that fits with ``stash``."""
        return self.compute_matrix(i, stash)[a, a:]

    def compute_matrix(self, i: int, stash: int) -> np.ndarray:
        """best[a, b]: the fastest fitting compute of layers a..b on size index i (inf if none)."""
        key = (i, stash)
        found = self._matrices.get(key)
        if found is None:
            found = np.full((self.L, self.L), INF)
            for j in self.layouts_of_size[i]:
                found = np.where(self.smax[j] >= stash, np.minimum(found, self.C[j]), found)
            if len(self._matrices) * self.L * self.L * 8 < 2**28:  # keep at most 256 MiB of them
                self._matrices[key] = found
        return found

    def best_layout(self, a: int, b: int, i: int, stash: int):
        best = None
        for j in self.layouts_of_size[i]:
            if self.smax[j, a, b] >= stash and (best is None or self.C[j, a, b] < self.C[best, a, b]):
                best = j
        return self.layouts[best]

    # ---------------------------------------------------------------- recursion
    def recursion(self, auto: Automaton, X: np.ndarray, mode: str, limit: float, deadline: float | None) -> np.ndarray:
        """Fill ``V[a, level, z, c, D]``.

        ``mode`` "minmax": value = least largest stage time, stages above
        ``limit`` pruned; "minsum": value = least sum of stage times with every
        stage at most ``limit``.
        """
        L, N, K = self.L, self.N, self.K
        Z, C = len(auto.states), len(auto.categories)
        need = (L + 1) * (K + 1) * Z * C * (N + 1) * 8
        if need > self._budget:
            raise _TooLarge(
                f"the recursion tables would need {need / 2**30:.1f} GiB with {Z} placement states "
                f"(limit {self._budget / 2**30:.1f} GiB, option memory_budget_gb); use cpsat for this problem"
            )
        V = np.full((L + 1, K + 1, Z, C, N + 1), INF)
        xin = np.vstack([np.zeros((1, C)), X[:-1]])  # xin[a, c]: transfer into a stage starting at a
        groups = {}
        for i in range(len(self.sizes)):
            pairs = self._pairs(auto, i)
            groups[i] = pairs + (X[:, pairs[4]],)  # the outgoing transfer of every pair, per boundary
        self._incoming_cache: dict = {}
        lim = limit * (1 + _TIE) if math.isfinite(limit) else INF
        for level in range(1, K + 1):
            stash = self.stash_of_level[level]
            sources = [level - 1] + ([level] if self.bucket and level == K else [])
            H = {lvl: self._reduce_level(V, lvl, groups) for lvl in sources if lvl >= 1 and lvl != level}
            for a in range(L - level, -1, -1):
                if deadline is not None and time.perf_counter() > deadline:
                    raise _OutOfTime
                if self.bucket and level == K and level in sources:
                    H[level] = self._reduce_level(V, level, groups, from_position=a + 1, cache=H.get(level))
                for i, d in enumerate(self.sizes):
                    if d > N:
                        break
                    cb = self.best_compute(a, i, stash)
                    if level == 1:
                        self._last_stage(V, auto, a, i, d, cb[-1], xin[a], mode, lim)
                    for src in sources:
                        if src < 1:
                            continue
                        self._stage(V, auto, groups[i], H[src][i], a, level, i, d, cb, X, xin[a], mode, lim)
        return V

    def _pairs(self, auto: Automaton, i: int):
        """Group size-i transitions by (new state, outgoing category)."""
        zp, zn, co = auto.trans[i]
        keys = zn * len(auto.categories) + co
        order = np.lexsort((co, zn))
        zp, zn, co, keys = zp[order], zn[order], co[order], keys[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        pair_zn, pair_co = zn[starts], co[starts]
        zn_starts = np.flatnonzero(np.r_[True, pair_zn[1:] != pair_zn[:-1]])
        return zp, co, starts, pair_zn, pair_co, zn_starts

    def _reduce_level(self, V, level, groups, from_position=None, cache=None):
        """H[i][pos, pair, D] = min over transitions in the pair of V[pos, level, zp, co, D]."""
        out = cache if cache is not None else {}
        positions = slice(None) if from_position is None else slice(from_position, from_position + 1)
        for i, (zp, co, starts, *_) in groups.items():
            gathered = V[positions, level][:, zp, co, :]  # (pos, transitions, D)
            reduced = np.minimum.reduceat(gathered, starts, axis=1)
            if from_position is None:
                out[i] = reduced
            else:
                if i not in out:
                    out[i] = np.full((self.L + 1,) + reduced.shape[1:], INF)
                out[i][from_position] = reduced[0]
        return out

    def _last_stage(self, V, auto, a, i, d, compute, xin_a, mode, lim) -> None:
        if not math.isfinite(compute):
            return
        t = compute + xin_a
        t = np.where(t <= lim, t, INF)
        z = auto.init[i]
        V[a, 1, z, :, d] = np.minimum(V[a, 1, z, :, d], t)

    def _incoming(self, auto, a: int, i: int, xin_a: np.ndarray):
        """Distinct incoming transfer times of a size-i stage starting at a, and their categories."""
        key = (a, i)
        if key not in self._incoming_cache:
            xs = np.concatenate([xin_a[lo:hi] for lo, hi in auto.incoming[i]])
            self._incoming_cache[key] = np.unique(xs, return_inverse=True)
        return self._incoming_cache[key]

    def _stage(self, V, auto, group, Hi, a, level, i, d, cb, X, xin_a, mode, lim) -> None:
        zp, co, starts, pair_zn, pair_co, zn_starts, X_pairs = group
        bmax = self.L - level  # leave at least one layer per later stage
        if bmax < a:
            return
        cbs = cb[: bmax - a + 1]
        valid = np.flatnonzero(np.isfinite(cbs) & (cbs <= lim))
        if valid.size == 0:
            return
        bs = a + valid
        base = cbs[valid][:, None] + X_pairs[bs]  # (nb, pairs)
        Hs = Hi[bs + 1][:, :, : self.N + 1 - d]  # suffix devices D' -> D = D' + d
        zn_u = pair_zn[zn_starts]
        # only the incoming categories a stage of this size can have: min(previous size, d) <= d
        cats = auto.incoming[i]
        values, where = self._incoming(auto, a, i, xin_a)
        t = base[:, :, None] + values[None, None, :]  # (nb, pairs, values)
        if mode == "minmax":
            val = np.maximum(t[..., None], Hs[:, :, None, :])
        else:
            val = t[..., None] + Hs[:, :, None, :]
        if math.isfinite(lim):
            val = np.where((t <= lim)[..., None], val, INF)
        val = val.min(axis=0)  # (pairs, values, D')
        per_state = np.minimum.reduceat(val, zn_starts, axis=0)[:, where, :]  # (states, categories, D')
        offset = 0
        for lo, hi in cats:
            block = per_state[:, offset : offset + hi - lo]
            V[a, level, zn_u, lo:hi, d:] = np.minimum(V[a, level, zn_u, lo:hi, d:], block)
            offset += hi - lo

    # ---------------------------------------------------------------- answers
    def _final(self, V, auto) -> tuple[float, tuple | None]:
        best, arg = INF, None
        for level in range(1, self.K + 1):
            P_ok = (self.P_lo <= level <= self.P_hi) or (self.bucket and level == self.K)
            if not P_ok:
                continue
            vals = np.where(auto.accept, V[0, level, :, 0, self.N], INF)
            z = int(np.argmin(vals))
            if vals[z] < best:
                best, arg = float(vals[z]), (level, z)
        return best, arg

    def _final_states(self, V, auto, value: float) -> list[tuple[int, int]]:
        """Every (level, first-stage state) whose pipeline reaches ``value``."""
        out = []
        for level in range(1, self.K + 1):
            if (self.P_lo <= level <= self.P_hi) or (self.bucket and level == self.K):
                out += [(level, int(z)) for z in np.flatnonzero(auto.accept) if _same(float(V[0, level, z, 0, self.N]), value)]
        return out

    def reconstructions(self, V, auto, X, mode, lim, level, z):
        """Every optimal plan in the tables, as (stages, links, times), unlinked boundaries first.

        Depth first: plans that share their first stages come together. Used
        when the first plan's runs do not pack into the nodes: a plan with
        the same value and fewer links usually does.
        """
        lim = lim * (1 + _TIE) if math.isfinite(lim) else INF
        xin = np.vstack([np.zeros((1, len(auto.categories))), X[:-1]])

        def linked(choice) -> bool:
            return choice[4] is not None and bool(auto.categories[choice[4]][1])

        optimum = V[0, level, z, 0, self.N]

        def fits(value: float, target: float) -> bool:
            # min-max: any choice that keeps every stage within the optimum is optimal;
            # min-sum: the remaining sum must be exactly the table's
            if mode == "minmax":
                return value <= optimum * (1 + 1e-12)
            return _same(value, target)

        def walk(a, level, z, c, D, target):
            stash = self.stash_of_level[level]
            matches = [ch for ch in self._choices(V, auto, X, xin, mode, lim, a, level, z, c, D) if fits(ch[-1], target)]
            for b, i, src, zpp, coo, t, _ in sorted(matches, key=linked):
                stage = (a, b, self.sizes[i], self.best_layout(a, b, i, stash))
                if src is None:
                    yield [stage], [], [t]
                    continue
                d = self.sizes[i]
                for stages, links, times in walk(b + 1, src, zpp, coo, D - d, V[b + 1, src, zpp, coo, D - d]):
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
        """Every way the state (a, level, z, c, D) can start: (b, size, source level, z', c', t, value)."""
        stash = self.stash_of_level[level]
        sources = [s for s in [level - 1] + ([level] if self.bucket and level == self.K else []) if s >= 1]
        for i, d in enumerate(self.sizes):
            if d > D or (auto.size_of[z] >= 0 and auto.size_of[z] != i):
                continue
            cb = self.best_compute(a, i, stash)
            if level == 1 and auto.init[i] == z and D == d and math.isfinite(cb[-1]):
                t = cb[-1] + xin[a, c]
                if t <= lim:
                    yield self.L - 1, i, None, None, None, t, t
            zp, zn, co = auto.trans[i]
            sel = zn == z
            for b in range(a, self.L - level + 1):
                if not math.isfinite(cb[b - a]) or cb[b - a] > lim:
                    continue
                for src in sources:
                    for zpp, coo in zip(zp[sel], co[sel]):
                        t = cb[b - a] + X[b, coo] + xin[a, c]
                        if t <= lim:
                            rest = V[b + 1, src, zpp, coo, D - d]
                            yield b, i, src, int(zpp), int(coo), t, (max(t, rest) if mode == "minmax" else t + rest)

    def place(self, stages, links, kind: str) -> Plan | None:
        cluster = self.problem.cluster
        sizes = [s[2] for s in stages]
        if kind in ("none", "size"):
            assignment = contiguous_node_assignment(cluster, sizes) or pack_runs(cluster, sizes, [False] * (len(sizes) - 1))
        else:
            exact = cluster.intra_node_GBps < cluster.inter_node_GBps
            assignment = pack_runs(cluster, sizes, links, exact=exact)
        if assignment is None:
            return None
        ids = node_assignment_ids(cluster, sizes, assignment)
        return Plan(tuple(Stage(a, b, d, lay.dp, lay.tp, ids[p]) for p, (a, b, d, lay) in enumerate(stages)))

    # ---------------------------------------------------------------- objectives
    def optimize(self, objective: str, kind: str, deadline, budget) -> _Outcome:
        self._budget = budget
        if kind == "none":
            return self._compute_only(objective, deadline)
        auto = self._automaton_for(kind)
        X = self._transfer_table(auto)
        stats = {"placement": kind, "states": len(auto.states), "categories": len(auto.categories), "levels": self.K}
        if objective == "bottleneck":
            V = self.recursion(auto, X, "minmax", INF, deadline)
            value, arg = self._final(V, auto)
            if arg is None:
                return _Outcome("infeasible")
            stats["recursions"] = 1
            plan, _ = self.placed_optimum(V, auto, X, "minmax", INF, value, kind)
            return _Outcome("optimal", plan, value, stats)
        return self._iteration(auto, X, kind, deadline, stats)

    def _compute_only(self, objective: str, deadline) -> _Outcome:
        """No transfers anywhere: range-query recursions (:mod:`.dp_compute`)."""
        fast = ComputeOnlyDP(self, deadline)
        found = fast.bottleneck() if objective == "bottleneck" else fast.iteration()
        stats = {"placement": "none", "levels": self.K, "recursions": fast.calls}
        if found is None:
            return _Outcome("infeasible", stats=stats)
        value, stages = found
        return _Outcome("optimal", self.place(stages, [], "none"), value, stats)

    def _iteration(self, auto, X, kind, deadline, stats) -> _Outcome:
        m = self.m
        calls = 0

        def minsum(limit):
            nonlocal calls
            calls += 1
            V = self.recursion(auto, X, "minsum", limit, deadline)
            total, arg = self._final(V, auto)
            if arg is None:
                return INF, None, None
            stages, links, times = next(self.reconstructions(V, auto, X, "minsum", limit, *arg))
            return total, max(times), (stages, links, times, limit)

        free_sum, free_max, free = minsum(INF)
        if free is None:
            return _Outcome("infeasible")
        best = (free_sum + (m - 1) * free_max, free)
        if m > 1:
            # the free optimum's slowest stage bounds the lowest bottleneck: prune slower stages
            V = self.recursion(auto, X, "minmax", free_max, deadline)
            calls += 1
            lowest_max, _ = self._final(V, auto)
            f_lo, M_lo, plan_lo = minsum(lowest_max)
            if plan_lo is not None and f_lo + (m - 1) * M_lo < best[0]:
                best = (f_lo + (m - 1) * M_lo, plan_lo)
            # walk the (sum, max) Pareto points down from the free optimum (see dp_compute.iteration)
            f, M = free_sum, free_max
            while f + (m - 1) * lowest_max < best[0] * (1 - 1e-12):
                ceiling = min(M * (1 - 4e-12), (best[0] - f) / (m - 1))
                if ceiling < lowest_max * (1 - 1e-12):
                    break
                f, M, plan = minsum(ceiling)
                if plan is None:
                    break
                if f + (m - 1) * M < best[0]:
                    best = (f + (m - 1) * M, plan)
        stats["recursions"] = calls
        stages, links, _, limit = best[1]
        plan = self.place(stages, links, kind)
        if plan is None:
            # the runs do not pack: look among the other plans with the same least sum at that threshold
            V = self.recursion(auto, X, "minsum", limit, deadline)
            total, _ = self._final(V, auto)
            plans = itertools.chain.from_iterable(
                self.reconstructions(V, auto, X, "minsum", limit, level, z) for level, z in self._final_states(V, auto, total)
            )
            for stages, links, times in itertools.islice(plans, 5000):
                if _same(total + (m - 1) * max(times), best[0]):
                    plan = self.place(stages, links, kind)
                    if plan is not None:
                        break
        return _Outcome("optimal", plan, best[0], stats)


def _same(x: float, y: float) -> bool:
    if not (math.isfinite(x) and math.isfinite(y)):
        return False
    return x == y or abs(x - y) <= 1e-12 * max(1.0, abs(x), abs(y))
