"""The DP's stage choice: the fastest way a stage of layers a..b on d devices with stash s can run
(or, for the two-part estimates, its Pareto options; see "Options").

Contract
--------
For a stage of layers ``a..b`` on ``d`` devices holding ``s`` microbatches of
activations (1F1B: ``s = min(m, P - p)``), :meth:`StageCosts.matrix` gives

    best(a, b) = min over one config c_k per segment k of the stage
                 (dp * tp = d, tp <= gpus_per_node, the cost key present on every layer of the segment)
                 of   sum_k T(S_k, c_k) + 2 * sum_k r(S_k, c_k, c_{k+1})
    subject to        sum_k W(S_k, c_k) + s * sum_k A(S_k, c_k) <= gpu_memory_bytes

where ``T`` is the segment's sum of ``fwd_ms + bwd_ms``, ``W``/``A`` its
weight and activation bytes, and ``r`` the intra-stage reshard time of
:func:`partitioner.reshard.stage_reshard_ms` for the out_bytes of the
segment's last layer on the canonical placement the solvers emit (0 when the
two configs have the same ``(dp, tp)``), paid once in the forward and once
in the backward (DESIGN.md, "Times v2"). ``inf`` when nothing fits.
:meth:`StageCosts.configs` returns configs that reach it.

Why this is all the DP needs: the transfers ``x_p`` depend only on cuts,
sizes and placement, and both objectives are non-decreasing in every stage
time, so for fixed cuts, sizes and placement the best configs of a stage are
the ones that minimise its own time under its own memory limit.

The rule
--------
The segments of a stage are the global module runs ``R_1 .. R_M`` cut to
``a..b`` (version 1: one run, the whole model). A stage inside one run has a
single segment: ``best`` is the fastest config that fits, a prefix of
forward sums per config (the v1 rule, variants included).

A stage from run ``k0`` (first layer ``a``) to run ``k`` (last layer ``b``)
is built left to right. After each complete segment the search keeps, per
``(dp, tp)`` of the last segment (the only thing the rest depends on, through
the next reshard), the Pareto frontier of (time so far, memory so far):

1. the first segment ``a..end(R_k0)``: one point per config that fits;
2. entering run ``k`` with mesh ``mu'``: every point of every mesh ``mu`` plus
   ``2 r(mu, mu')``; dominated points (no less time and no less memory) are
   dropped;
3. a last segment ``start(R_k)..b`` in config ``c'``: ``best(a, b)`` is the
   least ``time + T(start..b, c')`` over the points with
   ``memory <= cap - M(start..b, c')``;
4. the complete run ``k`` in config ``c'``: the points plus the run's time
   and memory, kept where they fit, form the frontier of mesh ``c'.mesh``.

Exact: time and memory are sums over segments, the memory limit is
monotone, and what follows a prefix depends only on the mesh of its last
segment; so a point with no less time and no less memory than another point
of the same mesh can never lead to a strictly better stage. Float sums are
formed in the same order for every combination (left part, then the
reshard, then the next segment), and float addition is monotone, so the
minimum over the kept points equals the minimum over all combinations
computed the same way.

Vectorisation: for fixed ``d``, ``s``, first run ``k0`` and last run ``k``
every step is one numpy operation over all first layers ``a`` in ``R_k0``
(frontiers padded to a common width with ``(inf, cap + 1)``) and, in step 3,
all last layers ``b`` in ``R_k``.

Complexity per (d, s): ``O(J_d * sum_k |R_k|^2)`` for single-segment stages
and ``O(sum_{k0 < k} |R_k0| * F * (J_d * |R_k| + mu_d^2))`` for spanning
ones, with ``J_d`` configs and ``mu_d`` meshes of size d and ``F`` the
largest frontier (at most ``J_d`` after the first segment). Measured on the
benchmark's 64-layer, 4-module, 3-variant problem (12 configs per 8-GPU
size): F stays in the tens and all 7 sizes of one stash take about 0.1 s.
Many short runs make F and the run pairs grow: the same problem relabelled
into 10, 18 and 33 runs takes about 0.6, 1.9 and 7 s per stash. Memory
``O(L^2)`` for the answer plus ``O(|R_k0| * F * |R_k|)`` temporaries;
nothing of size ``configs x L^2`` is ever built.

Options
-------
The two-part estimates (zb-h1's and GPipe's iteration, :mod:`.dp_options`)
are non-decreasing in two parts of a stage rather than in its time, so
:meth:`StageCosts.options` keeps, per stage a..b, every config tuple that no
other fitting tuple beats in both parts: ``parts="uw"`` ``u = T + 2 sum r - W``
and ``W`` (the weight-gradient part of the backward, no reshards),
``parts="fb"`` the forward ``F + sum r`` and the backward ``B + sum r``.
Single-segment stages list every config of the size (dominated ones pruned);
spanning stages run steps 1-4 with frontiers of (part 1, part 2, memory)
per mesh -- a prefix no better in any of the three than another of the same
mesh cannot lead to a better stage -- and keep the (part 1, part 2) Pareto
points over all last configs. :meth:`StageCosts.option_configs` finds the
configs of a point for the walk back by the same frontiers, as lists.

Numbers: stage times are forward sums over the stage's own layers, never
differences of prefix sums, so a huge time elsewhere in the model cannot
cancel a stage's digits; memory is exact int64 (values are checked against
the capacity before they are added, so sums stay within ``2 * cap``).
"""
from __future__ import annotations

import math

import numpy as np

from ..problem import Layout, Problem
from ..reshard import stage_reshard_ms

__all__ = ["StageCosts"]

INF = math.inf


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
        L = problem.num_layers
        J = len(self.layouts)
        self.L = L
        self.cap = int(problem.cluster.gpu_memory_bytes)
        self.big = self.cap + 1  # memory of "does not fit"
        time = np.zeros((J, L))
        fwd = np.zeros((J, L))
        bwd = np.zeros((J, L))
        wgrad = np.zeros((J, L))
        weight = np.zeros((J, L), dtype=np.int64)
        act = np.zeros((J, L), dtype=np.int64)
        has = np.zeros((J, L), dtype=bool)
        for j, lay in enumerate(self.layouts):
            for i, layer in enumerate(problem.layers):
                c = layer.cost(lay)
                if c is not None:
                    time[j, i] = c.fwd_ms + c.bwd_ms
                    fwd[j, i] = c.fwd_ms
                    bwd[j, i] = c.bwd_ms
                    wgrad[j, i] = c.split()[1]
                    weight[j, i] = c.weight_bytes
                    act[j, i] = c.act_bytes
                    has[j, i] = True
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
        self.of_size = [[j for j, lay in enumerate(self.layouts) if lay.devices == d] for d in self.sizes]
        self._fit: dict[tuple[int, int], np.ndarray] = {}
        self._sums: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._reshard: dict[tuple, float] = {}

    # ------------------------------------------------------------------ facts
    @property
    def single_segment(self) -> bool:
        """Every stage has one config: one run, or one config per size (a stage's time is then a
        prefix difference of one config, and the range-query recursions of :mod:`.dp_compute` apply)."""
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

    def reshard(self, layer: int, src: tuple[int, int], dst: tuple[int, int], devices: int) -> float:
        """r for the output of ``layer`` from mesh ``src`` to mesh ``dst`` on ``devices`` canonical GPUs."""
        if src == dst:
            return 0.0
        key = (layer, src, dst, devices)
        found = self._reshard.get(key)
        if found is None:
            found = stage_reshard_ms(
                float(self.out_bytes[layer]), Layout(*src), Layout(*dst), devices, self.problem.cluster
            )
            self._reshard[key] = found
        return found

    # ------------------------------------------------------------------ the table
    def matrix(self, i: int, stash: int) -> np.ndarray:
        """best[a, b] for size index i and ``stash`` (inf where no configs fit; a > b is inf)."""
        L = self.L
        best = np.full((L, L), INF)
        configs = self.of_size[i]
        for k, (st, en) in enumerate(self.runs):
            n = en - st + 1
            tri = np.triu(np.ones((n, n), bool))
            cols = np.arange(st, en + 1)
            for j in configs:
                end = self.fit_end(j, stash)[st : en + 1]
                ok = tri & (cols[None, :] <= end[:, None])
                if not ok.any():
                    continue
                T = np.cumsum(np.where(tri, self.time[j, st : en + 1][None, :], 0.0), axis=1)
                block = best[st : en + 1, st : en + 1]
                np.minimum(block, np.where(ok, T, INF), out=block)
        if len(self.runs) > 1 and len(configs) > 1:
            for k0 in range(len(self.runs) - 1):
                self._spanning(best, i, stash, k0)
        elif len(self.runs) > 1 and configs:
            self._spanning_one(best, configs[0], stash)
        return best

    def _spanning_one(self, best: np.ndarray, j: int, stash: int) -> None:
        """One config of this size: a spanning stage is a forward sum of that config (no reshards)."""
        for a, first_end, e in self._spanning_ranges(j, stash):
            sums = np.cumsum(self.time[j, a : e + 1])
            np.minimum(best[a, first_end + 1 : e + 1], sums[first_end + 1 - a :], out=best[a, first_end + 1 : e + 1])

    def _spanning_ranges(self, j: int, stash: int):
        """(a, end of a's run, last layer config j fits from a) for every a whose fit reaches a later run."""
        L = self.L
        end = self.fit_end(j, stash)
        for a in range(L):
            e = min(int(end[a]), L - 1)
            first_end = self.runs[self._run_of(a)][1]
            if e > first_end:
                yield a, first_end, e

    def _run_of(self, layer: int) -> int:
        for k, (st, en) in enumerate(self.runs):
            if st <= layer <= en:
                return k
        raise IndexError(layer)

    def _spanning(self, best: np.ndarray, i: int, stash: int, k0: int) -> None:
        """Stages whose first layer is in run k0 and last layer in a later run (steps 1-4)."""
        d = self.sizes[i]
        configs = self.of_size[i]
        st0, en0 = self.runs[k0]
        A = np.arange(st0, en0 + 1)
        cap, big = self.cap, self.big
        # step 1: the first segment a..en0
        frontier: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        points: dict[tuple[int, int], list] = {}
        for j in configs:
            ok = self.fit_end(j, stash)[A] >= en0
            if not ok.any():
                continue
            suffix, _ = self._run_sums(j, k0)
            t = np.where(ok, suffix, INF)
            mem = np.where(ok, self.memory(j, A, en0, stash), big)
            points.setdefault(self.layouts[j].mesh, []).append((t, mem))
        for mesh, pts in points.items():
            pruned = _prune(np.stack([p[0] for p in pts], 1), np.stack([p[1] for p in pts], 1), big)
            if pruned is not None:
                frontier[mesh] = pruned
        for k in range(k0 + 1, len(self.runs)):
            if not frontier:
                return
            st, en = self.runs[k]
            boundary = st - 1
            # step 2: enter run k in each mesh
            meshes = {self.layouts[j].mesh for j in configs}
            entered = {}
            for dst in meshes:
                ts, ms = [], []
                for src, (t, mem) in frontier.items():
                    ts.append(t + 2.0 * self.reshard(boundary, src, dst, d))
                    ms.append(mem)
                pruned = _prune(np.concatenate(ts, 1), np.concatenate(ms, 1), big)
                if pruned is not None:
                    entered[dst] = pruned
            nxt_points: dict[tuple[int, int], list] = {}
            for j in configs:
                mesh = self.layouts[j].mesh
                if mesh not in entered:
                    continue
                Gt, Gm = entered[mesh]
                e = min(int(self.fit_end(j, stash)[st]), en)
                if e < st:
                    continue
                _, prefix = self._run_sums(j, k)
                bs = np.arange(st, e + 1)
                Tl = prefix[: e - st + 1]
                room = cap - self.memory(j, st, bs, stash)  # >= 0: the segment fits alone
                # step 3: the stage ends in run k
                val = _least_fitting(Gt, Gm, room, big) + Tl[None, :]
                view = best[st0 : en0 + 1, st : e + 1]
                np.minimum(view, val, out=view)
                # step 4: the whole run k in config j
                if e == en:
                    ok = Gm <= room[-1]
                    nxt_points.setdefault(mesh, []).append(
                        (np.where(ok, Gt + Tl[-1], INF), np.where(ok, np.where(ok, Gm, 0) + (cap - room[-1]), big))
                    )
            frontier = {}
            for mesh, pts in nxt_points.items():
                pruned = _prune(np.concatenate([p[0] for p in pts], 1), np.concatenate([p[1] for p in pts], 1), big)
                if pruned is not None:
                    frontier[mesh] = pruned

    # ------------------------------------------------------------------ zb-h1: (u, W) options
    def options(self, i: int, stash: int, parts: str) -> tuple[np.ndarray, np.ndarray]:
        """``(P1, P2)`` of shape ``(L, L, F)``: every Pareto-minimal pair of parts of stage a..b on size index i.

        ``parts`` "uw": ``u = T + 2 sum r - W`` and ``W`` (the weight-gradient
        part, no reshards); "fb": the forward ``F + sum r`` and the backward
        ``B + sum r``; over the per-segment config tuples that fit with
        ``stash``, padded with ``(inf, inf)`` (module docstring, "Options").
        """
        L = self.L
        blocks: list = []  # (first row, first column, P1 block, P2 block)
        configs = self.of_size[i]
        one, two, _, _ = self._parts[parts]
        for k, (st, en) in enumerate(self.runs):
            n = en - st + 1
            tri = np.triu(np.ones((n, n), bool))
            cols = np.arange(st, en + 1)
            us, ws = [], []
            for j in configs:
                end = self.fit_end(j, stash)[st : en + 1]
                ok = tri & (cols[None, :] <= end[:, None])
                us.append(np.where(ok, np.cumsum(np.where(tri, one[j, st : en + 1][None, :], 0.0), axis=1), INF))
                ws.append(np.where(ok, np.cumsum(np.where(tri, two[j, st : en + 1][None, :], 0.0), axis=1), INF))
            if us:
                blocks.append((st, st, *_prune_pairs(np.stack(us, -1), np.stack(ws, -1))))
        if len(self.runs) > 1 and len(configs) == 1:
            self._spanning_one_options(blocks, configs[0], stash, parts)
        elif len(self.runs) > 1 and configs:
            for k0 in range(len(self.runs) - 1):
                self._spanning_options(blocks, i, stash, k0, parts)
        width = max([1] + [blk[2].shape[2] for blk in blocks])
        U = np.full((L, L, width), INF)
        W = np.full((L, L, width), INF)
        for r, c, bu, bw in blocks:
            U[r : r + bu.shape[0], c : c + bu.shape[1], : bu.shape[2]] = bu
            W[r : r + bw.shape[0], c : c + bw.shape[1], : bw.shape[2]] = bw
        return U, W

    def _spanning_one_options(self, blocks: list, j: int, stash: int, parts: str) -> None:
        """One config of this size: a spanning stage's parts are forward sums of that config (no reshards)."""
        one, two, _, _ = self._parts[parts]
        for a, first_end, e in self._spanning_ranges(j, stash):
            u = np.cumsum(one[j, a : e + 1])[first_end + 1 - a :]
            w = np.cumsum(two[j, a : e + 1])[first_end + 1 - a :]
            blocks.append((a, first_end + 1, u[None, :, None], w[None, :, None]))

    def _spanning_options(self, blocks: list, i: int, stash: int, k0: int, parts: str) -> None:
        """Stages from run k0 into a later run: steps 1-4 with (part 1, part 2, memory) frontiers (module docstring)."""
        one, two, r1, r2 = self._parts[parts]
        d = self.sizes[i]
        configs = self.of_size[i]
        st0, en0 = self.runs[k0]
        A = np.arange(st0, en0 + 1)
        cap, big = self.cap, self.big
        points: dict[tuple[int, int], list] = {}
        for j in configs:  # step 1
            ok = self.fit_end(j, stash)[A] >= en0
            if not ok.any():
                continue
            u = np.cumsum(one[j, st0 : en0 + 1][::-1])[::-1]
            w = np.cumsum(two[j, st0 : en0 + 1][::-1])[::-1]
            mem = np.where(ok, self.memory(j, A, en0, stash), big)
            points.setdefault(self.layouts[j].mesh, []).append((np.where(ok, u, INF)[:, None], np.where(ok, w, INF)[:, None], mem[:, None]))
        frontier = _merge3(points, big)
        for k in range(k0 + 1, len(self.runs)):
            if not frontier:
                return
            st, en = self.runs[k]
            n = en - st + 1
            entered = _merge3(
                {
                    dst: [
                        (fu + r1 * self.reshard(st - 1, src, dst, d), fw + r2 * self.reshard(st - 1, src, dst, d), fm)
                        for src, (fu, fw, fm) in frontier.items()
                    ]
                    for dst in {self.layouts[j].mesh for j in configs}
                },
                big,
            )  # step 2
            ends_u, ends_w = [], []
            nxt: dict[tuple[int, int], list] = {}
            for j in configs:
                mesh = self.layouts[j].mesh
                if mesh not in entered:
                    continue
                Gu, Gw, Gm = entered[mesh]
                e = min(int(self.fit_end(j, stash)[st]), en)
                if e < st:
                    continue
                bs = np.arange(st, e + 1)
                Tu = np.cumsum(one[j, st : e + 1])
                Tw = np.cumsum(two[j, st : e + 1])
                room = cap - self.memory(j, st, bs, stash)
                ok = Gm[:, :, None] <= room[None, None, :]  # step 3: (a, point, b)
                pad = ((0, 0), (0, 0), (0, n - len(bs)))
                ends_u.append(np.pad(np.where(ok, Gu[:, :, None] + Tu[None, None, :], INF), pad, constant_values=INF))
                ends_w.append(np.pad(np.where(ok, Gw[:, :, None] + Tw[None, None, :], INF), pad, constant_values=INF))
                if e == en:  # step 4
                    ok = Gm <= room[-1]
                    nxt.setdefault(mesh, []).append(
                        (np.where(ok, Gu + Tu[-1], INF), np.where(ok, Gw + Tw[-1], INF), np.where(ok, np.where(ok, Gm, 0) + (cap - room[-1]), big))
                    )
            if ends_u:
                bu = np.concatenate(ends_u, 1).transpose(0, 2, 1)  # (a, b, points)
                bw = np.concatenate(ends_w, 1).transpose(0, 2, 1)
                blocks.append((st0, st, *_prune_pairs(bu, bw)))
            frontier = _merge3(nxt, big)

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
        one, two, r1, r2 = self._parts[parts]
        configs = self.of_size[i]
        d = self.sizes[i]
        k0, k1 = self._run_of(a), self._run_of(b)
        frontier: dict = {None: [(0.0, 0.0, 0, ())]}
        for k in range(k0, k1 + 1):
            st, en = self.runs[k]
            first, last = max(st, a), min(en, b)
            nxt: dict = {}
            for j in configs:
                if self.fit_end(j, stash)[first] < last:
                    continue
                mesh = self.layouts[j].mesh
                seg_u = float(np.cumsum(one[j, first : last + 1])[-1])
                seg_w = float(np.cumsum(two[j, first : last + 1])[-1])
                seg_m = int(self.memory(j, first, last, stash))
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
    def configs(self, a: int, b: int, i: int, stash: int) -> tuple[tuple[Layout, ...], float] | None:
        """Configs (one per segment of a..b) reaching ``matrix(i, stash)[a, b]``, and that time; None if none fit.

        The same rule as :meth:`matrix` for one stage, with the configs carried along.
        """
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
        frontier: dict[tuple[int, int], list] = {}
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
            nxt: dict[tuple[int, int], list] = {}
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


def _prune(t: np.ndarray, mem: np.ndarray, big: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Row-wise Pareto frontiers of (time, memory) points, padded with (inf, big); None if all rows are empty.

    A point is kept when it is strictly faster than every point before it in
    order of memory, so every non-dominated point is kept (a dominated one
    with exactly equal memory may stay too, which changes no minimum).
    """
    if t.shape[1] == 1:
        return (t, mem) if np.isfinite(t).any() else None
    rows = np.arange(t.shape[0])[:, None]
    order = np.argsort(mem, axis=1, kind="stable")
    t = t[rows, order]
    mem = mem[rows, order]
    running = np.minimum.accumulate(t, axis=1)
    keep = np.empty(t.shape, bool)
    keep[:, 0] = np.isfinite(t[:, 0])
    keep[:, 1:] = t[:, 1:] < running[:, :-1]
    width = int(keep.sum(axis=1).max())
    if width == 0:
        return None
    idx = np.argsort(~keep, axis=1, kind="stable")[:, :width]
    return np.where(keep, t, INF)[rows, idx], np.where(keep, mem, big)[rows, idx]


def _least_fitting(t: np.ndarray, mem: np.ndarray, room: np.ndarray, big: int) -> np.ndarray:
    """``[a, b]``: the least ``t[a, f]`` over points f with ``mem[a, f] <= room[b]`` (inf if none).

    ``t, mem`` are frontiers from :func:`_prune`: per row, kept points in
    order of memory with strictly falling time, then ``(inf, big)`` pads; so
    the least fitting time is the time of the last point that fits, found by
    one binary search over all rows (row r's memories shifted by
    ``r * (big + 1)``) instead of an (a, point, b) comparison. The value is
    an element of ``t``, bit-identical to the minimum over the fitting points.
    """
    rows, F = t.shape
    if F == 1:
        return np.where(mem <= room[None, :], t, INF)
    if rows * (big + 1.0) >= 2.0**62:  # the shifted keys would not fit int64
        return np.where(mem[:, :, None] <= room[None, None, :], t[:, :, None], INF).min(axis=1)
    shift = np.arange(rows, dtype=np.int64)[:, None] * np.int64(big + 1)
    pos = np.searchsorted((mem + shift).ravel(), shift + room[None, :], side="right")
    fits = pos > np.arange(rows)[:, None] * F  # at least one point of row a fits
    return np.where(fits, t.ravel()[np.maximum(pos - 1, 0)], INF)


def _prune_list(points: list) -> list:
    """The Pareto frontier of (time, memory, payload) points: no kept point is dominated."""
    out, best = [], INF
    for p in sorted(points, key=lambda p: (p[1], p[0])):
        if p[0] < best:
            out.append(p)
            best = p[0]
    return out


def _prune_pairs(u: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Along the last axis, the Pareto-minimal (u, w) points, compacted and padded with (inf, inf).

    Points are ordered by (u, w); a point is kept when its w is below every
    earlier point's, so every non-dominated point stays (and only those).
    """
    order = np.lexsort((w, u), axis=-1)
    u = np.take_along_axis(u, order, -1)
    w = np.take_along_axis(w, order, -1)
    running = np.minimum.accumulate(w, axis=-1)
    keep = np.isfinite(u).copy()
    keep[..., 1:] &= w[..., 1:] < running[..., :-1]
    width = max(int(keep.sum(axis=-1).max(initial=0)), 1)
    idx = np.argsort(~keep, axis=-1, kind="stable")[..., :width]
    return np.take_along_axis(np.where(keep, u, INF), idx, -1), np.take_along_axis(np.where(keep, w, INF), idx, -1)


def _merge3(points: dict, big: int) -> dict:
    """Per mesh, the row-wise Pareto frontier of the (u, w, memory) point blocks listed for it."""
    out = {}
    for mesh, pts in points.items():
        pruned = _prune3(*(np.concatenate([p[q] for p in pts], 1) for q in range(3)), big)
        if pruned is not None:
            out[mesh] = pruned
    return out


def _prune3(u: np.ndarray, w: np.ndarray, mem: np.ndarray, big: int):
    """Row-wise: the points no other point of the row dominates in (u, w, memory), padded with (inf, inf, big);
    None if every row is empty. Of exactly equal points the first stays."""
    F = u.shape[1]
    le = (u[:, :, None] <= u[:, None, :]) & (w[:, :, None] <= w[:, None, :]) & (mem[:, :, None] <= mem[:, None, :])
    eq = (u[:, :, None] == u[:, None, :]) & (w[:, :, None] == w[:, None, :]) & (mem[:, :, None] == mem[:, None, :])
    earlier = np.arange(F)[:, None] < np.arange(F)[None, :]
    keep = np.isfinite(u) & ~(le & (~eq | earlier[None])).any(axis=1)
    width = int(keep.sum(axis=1).max(initial=0))
    if width == 0:
        return None
    rows = np.arange(u.shape[0])[:, None]
    idx = np.argsort(~keep, axis=1, kind="stable")[:, :width]
    return np.where(keep, u, INF)[rows, idx], np.where(keep, w, INF)[rows, idx], np.where(keep, mem, big)[rows, idx]


def _prune_list3(points: list) -> list:
    """The (u, w, memory, payload) points no other point dominates; of equal ones the first."""
    out = []
    for n, p in enumerate(points):
        if not any(q[:3] != p[:3] and all(x <= y for x, y in zip(q[:3], p[:3])) or (q[:3] == p[:3] and m < n) for m, q in enumerate(points)):
            out.append(p)
    return out
