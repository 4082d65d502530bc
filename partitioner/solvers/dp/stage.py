"""The DP's stage choice: the fastest way a stage of layers a..b on d devices with stash s can run

(or, for the two-part estimates, its Pareto options; see "Options").

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.stage``.
"""
from __future__ import annotations

import math
from time import perf_counter as _clock

import numpy as np

from ...cluster.reshard import stage_reshard_ms
from ...problem import Layout, Problem
from ..tables import layer_arrays, tied_row
from .compiled import engine

__all__ = ["StageCosts"]

INF = math.inf
FRONTIER_POINTS = 64  # the kernels' frontier buffers start with this many points per mesh (grown as needed)
OPTION_PAIRS = 8  # options() gathers up to this many Pareto pairs per stage, then retries with 4x as many


class StageCosts:
    """Per-layer cost arrays of ``layouts`` and the stage choice over them (see the module docstring).

    Parameters
    ----------
    problem : Problem
    layouts : tuple of Layout
        The configs stages may use (all of the problem's by default in the DP).
    sizes : tuple of int
        The stage sizes; ``size index i`` refers to ``sizes[i]``.
    """

    def __init__(self, problem: Problem, layouts: tuple[Layout, ...], sizes: tuple[int, ...]):
        self.problem = problem
        self.layouts = tuple(layouts)
        self.sizes = tuple(sizes)
        self.deadline: float | None = None  # the solve's (perf_counter), for the choice of kernels (.engine)
        L = problem.num_layers
        J = len(self.layouts)
        self.L = L
        self.cap = int(problem.cluster.gpu_memory_bytes)
        self.big = self.cap + 1  # memory of "does not fit"
        arrays = layer_arrays(problem, self.layouts)  # every entry's own numbers (0 where a layer has none)
        time, fwd, bwd = arrays.time, arrays.fwd, arrays.bwd
        weight, act, has = arrays.weight, arrays.act, arrays.has
        wgrad = np.zeros((J, L))
        for i, (rows, costs) in enumerate(zip(arrays.rows, arrays.entries)):
            wgrad[rows, i] = [c.split()[1] for c in costs]
        self.time = time
        # the parts of a layer's time the two-part estimates weigh apart (module docstring, "Options")
        self._parts = {"uw": (time - wgrad, wgrad, 2.0, 0.0), "fb": (fwd, bwd, 1.0, 1.0)}
        zero = np.zeros((J, 1), dtype=np.int64)
        self.weight_prefix = np.hstack([zero, np.cumsum(weight, axis=1)])
        self.act_prefix = np.hstack([zero, np.cumsum(act, axis=1)])
        # next_missing[j, a]: the first layer >= a without key j (L if none)
        nxt = np.full((J, L + 1), L, dtype=np.int64)
        for i in range(L - 1, -1, -1):
            nxt[:, i] = np.where(has[:, i], nxt[:, i + 1], i)
        self.next_missing = nxt
        self.out_bytes = np.array([layer.out_bytes for layer in problem.layers], dtype=np.float64)
        self.runs = problem.segments(0, L - 1) if L else ()
        by_devices: dict[int, list[int]] = {}
        for j, lay in enumerate(self.layouts):
            by_devices.setdefault(lay.devices, []).append(j)
        self.of_size = [by_devices.get(d, []) for d in self.sizes]  # configs per size, in layout order
        self._fit: dict[tuple[int, int], np.ndarray] = {}
        self._sums: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._reshard: dict[tuple, float] = {}
        self._meshes: dict[int, tuple[np.ndarray, int, np.ndarray]] = {}
        self._option_width: dict[tuple[int, str], int] = {}  # (size index, parts) -> the pairs it last needed
        self._option_scratch: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # width -> (U, W, C)
        # format v3 tied weights (module docstring, "Tied weights"): (j, k, k's tied bytes per config row)
        self.ties = tuple((j, k, tied_row(problem, k, self.layouts)) for j, k in problem.ties)
        # the stages a..b that hold both layers of some tie (a <= j, k <= b), in order; none without ties
        self.tied_stages = tuple(sorted({(a, b) for j, k, _ in self.ties for a in range(j + 1) for b in range(k, L)}))

    # ------------------------------------------------------------------ facts
    @property
    def single_segment(self) -> bool:
        """Every stage has one config: one run, or one config per size (which stage tables two stashes
        share then follows from which configs fit, :meth:`.DPModel._levels`)."""
        return len(self.runs) <= 1 or all(len(js) <= 1 for js in self.of_size)

    def fit_end(self, j: int, stash: int) -> np.ndarray:
        """Per first layer a: the last layer b such that layers a..b all have config j and
        ``W + stash * A <= cap`` (a - 1 if none). Non-increasing in ``stash``."""
        key = (j, stash)
        found = self._fit.get(key)
        if found is None:
            L = self.L
            wp, ap = self.weight_prefix[j], self.act_prefix[j]
            if float(wp[-1]) + float(stash) * float(ap[-1]) + float(self.cap) < 2.0**62:
                q = wp + np.int64(stash) * ap
                end = np.searchsorted(q, q[:L] + np.int64(self.cap), side="right") - 2
            else:  # exact integers beyond int64
                q = [int(w) + stash * int(x) for w, x in zip(wp, ap)]
                arr = np.array(q, dtype=object)
                end = np.array([int(np.searchsorted(arr, q[a] + self.cap, side="right")) - 2 for a in range(L)])
            found = np.minimum(end, self.next_missing[j, :L] - 1).astype(np.int64)
            self._fit[key] = found
        return found

    def fit_ends(self, configs: list[int], stash: int) -> np.ndarray:
        """``[q, a]``: :meth:`fit_end` of ``configs[q]`` at ``stash``, one C-contiguous int64 array.

        The configs not met yet at this stash are found in one sorted search over their rows laid
        end to end (row q shifted by q times a bound above every row's largest query; the same
        integers, so the same ends as :meth:`fit_end`), and kept for :meth:`fit_end`."""
        missing = [j for j in dict.fromkeys(configs) if (j, stash) not in self._fit]
        if len(missing) > 1:
            L = self.L
            js = np.array(missing, dtype=np.int64)
            wp, ap = self.weight_prefix[js], self.act_prefix[js]
            top = int(np.max(wp[:, -1])) + stash * int(np.max(ap[:, -1])) + self.cap + 1  # above every query
            if top * len(missing) < 2**62:  # every shifted query is an exact int64
                q = wp + np.int64(stash) * ap
                shift = np.int64(top) * np.arange(len(missing), dtype=np.int64)[:, None]
                flat = (q + shift).ravel()
                where = np.searchsorted(flat, (q[:, :L] + np.int64(self.cap) + shift).ravel(), side="right")
                end = where.reshape(len(missing), L) - (L + 1) * np.arange(len(missing), dtype=np.int64)[:, None] - 2
                found = np.minimum(end, self.next_missing[js, :L] - 1).astype(np.int64)
                for n, j in enumerate(missing):
                    self._fit[(j, stash)] = found[n]
        if not configs:
            return np.zeros((0, self.L), dtype=np.int64)
        return np.ascontiguousarray(np.stack([self.fit_end(j, stash) for j in configs]), dtype=np.int64)

    def memory(self, j: int, a: int | np.ndarray, b: int | np.ndarray, stash: int):
        """``W + stash * A`` of layers a..b in config j (exact where it fits; check with :meth:`fit_end` first)."""
        w = self.weight_prefix[j, np.asarray(b) + 1] - self.weight_prefix[j, a]
        x = self.act_prefix[j, np.asarray(b) + 1] - self.act_prefix[j, a]
        return w + np.int64(stash) * x

    def _run_sums(self, j: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(suffix, prefix) forward sums of config j's layer times inside run k:
        suffix[a - start] = time of a..end, prefix[b - start] = time of start..b."""
        key = (j, k)
        found = self._sums.get(key)
        if found is None:
            st, en = self.runs[k]
            t = self.time[j, st : en + 1]
            found = (np.cumsum(t[::-1])[::-1], np.cumsum(t))
            self._sums[key] = found
        return found

    def reshard(self, layer: int, src: tuple[int, ...], dst: tuple[int, ...], devices: int) -> float:
        """r for the output of ``layer`` from mesh ``src`` to mesh ``dst`` on ``devices`` canonical GPUs."""
        if src == dst:
            return 0.0
        key = (layer, src, dst, devices)
        found = self._reshard.get(key)
        if found is None:
            found = stage_reshard_ms(
                float(self.out_bytes[layer]), Layout.of_mesh(src), Layout.of_mesh(dst), devices, self.problem.cluster
            )
            self._reshard[key] = found
        return found

    # ------------------------------------------------------------------ the table
    def matrix(self, i: int, stash: int, out: np.ndarray | None = None) -> np.ndarray:
        """best[a, b] for size index i and ``stash`` (inf where no configs fit; a > b is inf), written
        into ``out`` (an ``(L, L)`` C-contiguous float array) when given.

        The rule of the module docstring, run by the compiled loops of
        :mod:`.compiled.stage_kernels` (the same floats as the numpy rule, see there).
        """
        L = self.L
        if out is None:
            best = np.full((L, L), INF)
        else:
            best = out
            best.fill(INF)
        configs = self.of_size[i]
        if not configs or not L:
            return best
        kern = engine.pick(engine.stage_work(L, len(configs)), self.deadline)
        start = _clock()
        time = np.ascontiguousarray(self.time, dtype=np.float64)
        js = np.array(configs, dtype=np.int64)
        ends = self.fit_ends(configs, stash)
        runs = np.array(self.runs, dtype=np.int64).reshape(-1, 2)
        kernels = kern.stages
        kernels.single_segment(best, time, js, ends, runs)
        if len(self.runs) > 1 and len(configs) > 1:
            mesh, meshes, r = self._mesh_tables(i)
            r2 = 2.0 * r
            for k0 in range(len(self.runs) - 1):
                kernels.spanning(
                    best, time, js, mesh, meshes, ends, self.weight_prefix, self.act_prefix,
                    np.int64(stash), np.int64(self.cap), runs, r2, k0, FRONTIER_POINTS,
                )
        elif len(self.runs) > 1:
            kernels.spanning_one(best, np.ascontiguousarray(time[configs[0]]), ends[0], self._run_ends())
        engine.account(kern, _clock() - start)
        for a, b in self.tied_stages:  # tied weights: these stages need less memory than the kernels assumed
            best[a, b] = min((t for _, t, _ in self._tuples(a, b, i, stash, "t")), default=INF)
        return best

    def _mesh_tables(self, i: int) -> tuple[np.ndarray, int, np.ndarray]:
        """For size index i: each config's mesh index, the number of meshes, and ``r[k, src, dst]``, the
        reshard entering run k (k >= 1) from mesh src to mesh dst (:meth:`reshard`; the rule scales it:
        ``2.0 * r`` in :meth:`matrix`, the parts' factors in :meth:`options`)."""
        found = self._meshes.get(i)
        if found is None:
            d = self.sizes[i]
            order: list[tuple[int, ...]] = []
            for j in self.of_size[i]:
                if self.layouts[j].mesh not in order:
                    order.append(self.layouts[j].mesh)
            mesh = np.array([order.index(self.layouts[j].mesh) for j in self.of_size[i]], dtype=np.int64)
            r = np.zeros((len(self.runs), len(order), len(order)))
            for k in range(1, len(self.runs)):
                for s, src in enumerate(order):
                    for t, dst in enumerate(order):
                        r[k, s, t] = self.reshard(self.runs[k][0] - 1, src, dst, d)
            found = self._meshes[i] = (mesh, len(order), r)
        return found

    def _run_ends(self) -> np.ndarray:
        """Per layer, the last layer of its run."""
        return np.array([en for st, en in self.runs for _ in range(st, en + 1)], dtype=np.int64)

    def _run_of(self, layer: int) -> int:
        for k, (st, en) in enumerate(self.runs):
            if st <= layer <= en:
                return k
        raise IndexError(layer)

    # ------------------------------------------------------------------ zb-h1: (u, W) options
    def options(self, i: int, stash: int, parts: str) -> tuple[np.ndarray, np.ndarray]:
        """``(P1, P2)`` of shape ``(L, L, F)``: every Pareto-minimal pair of parts of stage a..b on size index i.

        ``parts`` "uw": ``u = T + 2 sum r - W`` and ``W`` (the weight-gradient
        part, no reshards); "fb": the forward ``F + sum r`` and the backward
        ``B + sum r``; over the per-segment config tuples that fit with
        ``stash``, padded with ``(inf, inf)`` (module docstring, "Options").

        Per stage the distinct Pareto-minimal pairs in order of part 1, ``F``
        the most any stage has (at least 1): what numpy's lexsort-and-prune of
        every candidate gave, now gathered one pair at a time by the compiled
        loops of :mod:`.compiled.stage_kernels` (the same floats).
        """
        width = self._option_width.get((i, parts), OPTION_PAIRS)  # what this size needed at the last stash
        while True:
            found = self._options_within(i, stash, parts, width)
            if found is not None:
                self._option_width[(i, parts)] = width
                return found
            width *= 4

    def _options_within(self, i: int, stash: int, parts: str, width: int):
        """:meth:`options` if no stage has more than ``width`` Pareto pairs, else None."""
        L = self.L
        U, W, C = self._option_buffers(width)
        configs = self.of_size[i]
        one, two, r1, r2 = self._parts[parts]
        ok = True
        if configs and L:
            kern = engine.pick(engine.stage_work(L, len(configs)), self.deadline)
            kernels, start = kern.stages, _clock()
            js = np.array(configs, dtype=np.int64)
            ends = self.fit_ends(configs, stash)
            runs = np.array(self.runs, dtype=np.int64).reshape(-1, 2)
            ok = kernels.options_single(U, W, C, one, two, js, ends, runs)
            if len(self.runs) > 1 and len(configs) == 1:
                ok &= kernels.options_spanning_one(U, W, C, one[configs[0]], two[configs[0]], ends[0], self._run_ends())
            elif len(self.runs) > 1:
                mesh, meshes, r = self._mesh_tables(i)
                q1, q2 = r1 * r, r2 * r
                for k0 in range(len(self.runs) - 1):
                    ok &= kernels.options_spanning(
                        U, W, C, one, two, js, mesh, meshes, ends, self.weight_prefix, self.act_prefix,
                        np.int64(stash), np.int64(self.cap), runs, q1, q2, k0, FRONTIER_POINTS,
                    )
            engine.account(kern, _clock() - start)
        for a, b in self.tied_stages:  # tied weights: recomputed with the smaller memory (as matrix does)
            pairs = sorted({(pu, pw) for _, pu, pw in self._tuples(a, b, i, stash, parts)})
            kept = [p for n, p in enumerate(pairs) if not any(q[1] <= p[1] for q in pairs[:n])]
            if len(kept) > width:
                return None
            U[a, b, :], W[a, b, :] = INF, INF
            for f, (pu, pw) in enumerate(kept):
                U[a, b, f], W[a, b, f] = pu, pw
            C[a, b] = len(kept)
        if not ok:
            return None
        used = max(1, int(C.max(initial=0)))
        return U[:, :, :used].copy(), W[:, :, :used].copy()  # copies: the buffers serve the next call

    def _option_buffers(self, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(U, W, C) of shape ``(L, L, width)``, ``(L, L, width)``, ``(L, L)``: inf, inf, 0. One set per width
        is kept and refilled (allocating them afresh for every size and stash cost more than the kernels:
        page faults on hundreds of MB per solve)."""
        found = self._option_scratch.get(width)
        if found is None:
            L = self.L
            found = self._option_scratch[width] = (np.empty((L, L, width)), np.empty((L, L, width)),
                                                   np.empty((L, L), dtype=np.int64))
        found[0].fill(INF)
        found[1].fill(INF)
        found[2].fill(0)
        return found

    def option_configs(self, a: int, b: int, i: int, stash: int, parts: str, u: float, w: float) -> tuple[Layout, ...] | None:
        """Configs (one per segment of a..b) whose parts are no worse than ``(u, w)`` (up to rounding); None if none."""
        tol = 1e-9 * max(1.0, abs(u), abs(w))
        for cfgs, cu, cw in self._tuples(a, b, i, stash, parts):
            if cu <= u + tol and cw <= w + tol:
                return cfgs
        return None

    def _tuples(self, a: int, b: int, i: int, stash: int, parts: str):
        """Every fitting config tuple of stage a..b on size index i that is Pareto-minimal in (part 1, part 2,
        memory) after each segment, as (configs, part 1, part 2): the list form of :meth:`options`, for the walk back."""
        # "t": the stage time alone (matrix and the walk back on tied stages), from self.time as it is now
        one, two, r1, r2 = (self.time, self._zero_time(), 2.0, 0.0) if parts == "t" else self._parts[parts]
        configs = self.of_size[i]
        d = self.sizes[i]
        k0, k1 = self._run_of(a), self._run_of(b)
        tied = self.holds_tie(a, b)
        frontier: dict = {None: [(0.0, 0.0, 0, ())]}
        for k in range(k0, k1 + 1):
            st, en = self.runs[k]
            first, last = max(st, a), min(en, b)
            nxt: dict = {}
            for j in configs:
                if tied:
                    if self.next_missing[j, first] <= last:
                        continue
                    seg_m = int(self.memory(j, first, last, stash)) - self._tied(a, b, first, last, j)
                    if seg_m > self.cap:
                        continue
                elif self.fit_end(j, stash)[first] < last:
                    continue
                else:
                    seg_m = int(self.memory(j, first, last, stash))
                mesh = self.layouts[j].mesh
                seg_u = float(np.cumsum(one[j, first : last + 1])[-1])
                seg_w = float(np.cumsum(two[j, first : last + 1])[-1])
                for src, pts in frontier.items():
                    r = 0.0 if src is None else self.reshard(first - 1, src, mesh, d)
                    for pu, pw, pm, cfgs in pts:
                        if pm <= self.cap - seg_m:
                            point = ((pu + r1 * r) + seg_u, (pw + r2 * r) + seg_w, pm + seg_m, cfgs + (self.layouts[j],))
                            nxt.setdefault(mesh, []).append(point)
            frontier = {mesh: _prune_list3(pts) for mesh, pts in nxt.items()}
        for pts in frontier.values():
            for pu, pw, _, cfgs in pts:
                yield cfgs, pu, pw

    # ------------------------------------------------------------------ the walk back
    def holds_tie(self, a: int, b: int) -> bool:
        """Does stage a..b hold both layers of some tie (format v3)?"""
        return any(a <= j and k <= b for j, k, _ in self.ties)

    def _zero_time(self) -> np.ndarray:
        """Zeros shaped like :attr:`time` (the second part of the "t" parts), made once."""
        found = getattr(self, "_zeros", None)
        if found is None or found.shape != self.time.shape:
            found = self._zeros = np.zeros_like(self.time)
        return found

    def _tied(self, a: int, b: int, s: int, t: int, j: int) -> int:
        """Tied bytes segment ``s..t`` of stage ``a..b`` does not count in config row ``j`` (format v3)."""
        return sum(int(row[j]) for tj, k, row in self.ties if a <= tj and s <= k <= t and k <= b)

    def configs(self, a: int, b: int, i: int, stash: int) -> tuple[tuple[Layout, ...], float] | None:
        """Configs (one per segment of a..b) reaching ``matrix(i, stash)[a, b]``, and that time; None if none fit.

        The same rule as :meth:`matrix` for one stage, with the configs carried along.
        """
        if self.holds_tie(a, b):
            found = min(((t, cfgs) for cfgs, t, _ in self._tuples(a, b, i, stash, "t")), key=lambda p: p[0], default=None)
            return None if found is None else (found[1], found[0])
        configs = self.of_size[i]
        k0, k1 = self._run_of(a), self._run_of(b)
        d = self.sizes[i]
        if k0 == k1 or len(configs) == 1:
            best = None
            for j in configs:
                if self.fit_end(j, stash)[a] >= b:
                    t = float(np.cumsum(self.time[j, a : b + 1])[-1]) if k0 == k1 else self._one_config_time(j, a, b)
                    if best is None or t < best[1]:
                        best = (j, t)
            if best is None:
                return None
            return (self.layouts[best[0]],) * (k1 - k0 + 1), best[1]
        cap = self.cap
        # points: mesh -> list of (time, memory, configs)
        frontier: dict[tuple[int, ...], list] = {}
        en0 = self.runs[k0][1]
        for j in configs:
            if self.fit_end(j, stash)[a] >= en0:
                t = float(self._run_sums(j, k0)[0][a - self.runs[k0][0]])
                mem = int(self.memory(j, a, en0, stash))
                frontier.setdefault(self.layouts[j].mesh, []).append((t, mem, (self.layouts[j],)))
        frontier = {mesh: _prune_list(pts) for mesh, pts in frontier.items()}
        for k in range(k0 + 1, k1 + 1):
            st, en = self.runs[k]
            last = b if k == k1 else en
            nxt: dict[tuple[int, ...], list] = {}
            for j in configs:
                if self.fit_end(j, stash)[st] < last:
                    continue
                mesh = self.layouts[j].mesh
                seg_t = float(self._run_sums(j, k)[1][last - st])
                seg_m = int(self.memory(j, st, last, stash))
                for src, pts in frontier.items():
                    r2 = 2.0 * self.reshard(st - 1, src, mesh, d)
                    for t, mem, cfgs in pts:
                        if mem <= cap - seg_m:
                            nxt.setdefault(mesh, []).append(((t + r2) + seg_t, mem + seg_m, cfgs + (self.layouts[j],)))
            frontier = {mesh: _prune_list(pts) for mesh, pts in nxt.items()}
        found = min((p for pts in frontier.values() for p in pts), key=lambda p: p[0], default=None)
        return None if found is None else (found[2], found[0])

    def _one_config_time(self, j: int, a: int, b: int) -> float:
        return float(np.cumsum(self.time[j, a : b + 1])[-1])


def _prune_list(points: list) -> list:
    """The Pareto frontier of (time, memory, payload) points: no kept point is dominated."""
    out, best = [], INF
    for p in sorted(points, key=lambda p: (p[1], p[0])):
        if p[0] < best:
            out.append(p)
            best = p[0]
    return out


def _prune_list3(points: list) -> list:
    """The (u, w, memory, payload) points no other point dominates; of equal ones the first; in their order.

    A sweep in the order of (u, w, memory) and position: every point that dominates another, or equals it and
    comes first, is met before it, and a point is dropped exactly when some kept point met before has no more
    w and memory (a dropped point's dominator is kept or has a kept dominator met before it). The pairwise
    test it replaces took most of the time of a zb-h1 solve on 1,024 GPUs (the plans walked back).
    """
    kept: list[tuple] = []  # (w, memory, position) of the points kept so far, in sweep order
    for n in sorted(range(len(points)), key=lambda n: (points[n][:3], n)):
        _, w, mem = points[n][:3]
        if not any(kw <= w and km <= mem for kw, km, _ in kept):
            kept.append((w, mem, n))
    return [points[n] for n in sorted(n for _, _, n in kept)]
