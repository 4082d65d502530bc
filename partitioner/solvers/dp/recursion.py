"""The DP's general recursion: how one recursion fills the tables of :mod:`.tables`.

Contract: :func:`fill` computes the values of levels 1..top of one
recursion of :mod:`.solver` -- ``minsum`` or ``minmax`` -- one first
layer's row at a time, and keeps what :class:`.tables.Tables` holds of it;
a deadline is checked between chunks of first layers, which are shared
among :func:`threads` threads.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.recursion``.
"""
from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import OutOfTime as _OutOfTime
from .compiled import engine

__all__ = ["fill", "prefix_devices", "threads"]

INF = math.inf
_TIE = 1e-12  # relative slack when comparing a stage time with a threshold (as in dp)
FIRSTS_PER_CALL = 16  # first layers per kernel call: the deadline is checked between calls
DIRECT_RANKS = 4  # minmax: a candidate fitting at most this many incoming categories is taken rank by rank
# a level is shared among threads when its work (:func:`fill_work`, at about COMPILED_SECONDS_PER_UNIT a unit on
# the compiled path, an upper estimate: the kernels skip infinite spans) would take at least THREAD_MIN_SECONDS
COMPILED_SECONDS_PER_UNIT = 1e-9
THREAD_MIN_SECONDS = 0.01




def _threads() -> int:
    """``PARTITIONER_DP_THREADS`` (a positive integer), else one per core."""
    try:
        wanted = int(os.environ.get("PARTITIONER_DP_THREADS", "0"))
    except ValueError:
        wanted = 0
    return wanted if wanted > 0 else (os.cpu_count() or 1)


THREADS = _threads()  # threads that share a level's first layers


def threads() -> int:
    """The threads a level's first layers are shared among by default (``THREADS``)."""
    return THREADS
_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(threads: int) -> ThreadPoolExecutor | None:
    """``threads`` threads that share a level's first layers (the kernels release the GIL), or None
    for one.

    Every entry is written by one call in a fixed order, so the tables do not depend on the number
    of threads; unlike numba's own parallel loops (measured 4x slower here under load, threads
    spinning at every level), waiting threads sleep."""
    if threads <= 1:
        return None
    found = _POOLS.get(threads)
    if found is None:
        found = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="dp-level")
    return found


def _split(pool, work, lo: int, hi: int) -> None:
    """``work(lo', hi')`` over [lo, hi) in one piece per thread of ``pool`` (or in one call)."""
    n = 1 if pool is None else pool._max_workers
    if n == 1 or hi - lo < 2 * n:
        work(lo, hi)
        return
    cuts = [lo + (hi - lo) * t // n for t in range(n + 1)]
    for future in [pool.submit(work, a, b) for a, b in zip(cuts, cuts[1:])]:
        future.result()


# --------------------------------------------------------------------------- the fill


def fill(model, tables, auto, X: np.ndarray, mode: str, limit: float, deadline: float | None, top: int):
    """Fill ``tables`` for levels 1..top (see the module docstring); ``model`` is the :class:`.solver.DPModel`."""
    K = model.K
    # the kernels write the keys of the first layers 0..L - level of every level they fill, whose later first
    # layers (no suffix of that many stages starts there) stay infinite from allocation
    tables.reset(top)
    lim = limit * (1 + _TIE) if math.isfinite(limit) else INF
    run = _Run(model, tables, auto, X, mode, lim, deadline, top)
    start, counted = time.perf_counter(), engine.python_seconds()
    try:
        for level in range(1, top + 1):
            run.check_time()
            bucket = bool(model.bucket and level == K)
            run.level(level, bucket)
    finally:  # the stage tables built on the way counted their own seconds
        engine.account(run.kern, time.perf_counter() - start - (engine.python_seconds() - counted))
    return tables


def fill_work(meta: "_Meta", levels: int, L: int, N: int) -> float:
    """The units of work of a fill of ``levels`` levels (:func:`.engine.recursion_work`): every size
    group's pairs times its device columns."""
    pairs = np.diff(meta.g_pstart)
    return engine.recursion_work(levels, L, float(np.sum(pairs * (N + 1 - meta.g_size))))


class _Meta:
    """What every kernel call of the recursions over one layout and transfer table shares (per group g,
    in the layout's size-group order: sizes, table offsets, pairs, new states, incoming categories)."""

    def __init__(self, tables, auto, X: np.ndarray):
        lay, L = tables.layout, tables.L
        rows = L + 1
        self.groups = list(lay.groups)
        i64 = np.int64
        self.g_size = np.array([lay.sizes[i] for i in self.groups], i64)
        self.g_base = np.array([lay.base[i] for i in self.groups], i64)  # in a row of values
        self.g_stride = np.full(len(self.groups), lay.flat_size, i64)  # the row length (unused by the kernels)
        p_off, p_key, p_zn, p_co, z_loc, s_zn, cats = [], [], [], [], [], [], []
        g_pstart, g_zstart, g_cstart, g_sstart = [0], [0], [0], [0]
        for i in self.groups:
            pair_zn, pair_co, _, zn_starts = lay.pairs[i]
            P = len(pair_zn)
            p_key.append(lay.pair_key[i])
            p_off.append(lay.key_offset[lay.pair_key[i]] if P else np.zeros(0, i64))
            p_zn.append(np.repeat(np.arange(len(zn_starts)), np.diff(np.r_[zn_starts, P])))
            p_co.append(pair_co)
            locs = lay.zloc[pair_zn[zn_starts]] if P else np.zeros(0, i64)
            z_loc.append(locs)
            own = np.full(len(lay.states[i]), -1, i64)  # local state -> its new-state index, or -1
            own[locs] = np.arange(len(locs))
            s_zn.append(own)
            cats.append(lay.cats[i])
            g_pstart.append(g_pstart[-1] + P)
            g_zstart.append(g_zstart[-1] + len(zn_starts))
            g_cstart.append(g_cstart[-1] + len(lay.cats[i]))
            g_sstart.append(g_sstart[-1] + len(lay.states[i]))

        def cat(parts):
            return np.ascontiguousarray(np.concatenate(parts).astype(i64)) if parts else np.zeros(0, i64)

        self.p_off, self.p_key, self.p_zn, self.p_co, self.z_loc, self.s_zn = (
            cat(x) for x in (p_off, p_key, p_zn, p_co, z_loc, s_zn))
        self.g_pstart, self.g_zstart, self.g_cstart, self.g_sstart = (
            np.array(x, i64) for x in (g_pstart, g_zstart, g_cstart, g_sstart))
        xin = np.vstack([np.zeros((1, X.shape[1])), X[:-1]]) if X.shape[0] else np.zeros((1, X.shape[1]))
        self.xin = xin  # xin[a, c]: transfer into a stage starting at a
        # per group: its incoming transfers at each first layer, sorted, and each category's rank
        xs = xin[:, np.concatenate(cats).astype(i64)] if cats else np.zeros((rows, 0))
        sorted_, rank = np.empty_like(xs), np.empty(xs.shape, i64)
        for g in range(len(self.groups)):
            sl = slice(g_cstart[g], g_cstart[g + 1])
            order = np.argsort(xs[:, sl], axis=1, kind="stable")
            sorted_[:, sl] = np.take_along_axis(xs[:, sl], order, axis=1)
            rank[:, sl] = np.argsort(order, axis=1)
        self.xs, self.xs_sorted, self.rank = (np.ascontiguousarray(x) for x in (xs, sorted_, rank))
        self.X = np.ascontiguousarray(X, dtype=float)
        self.key_width = np.ascontiguousarray(lay.key_width, dtype=i64)
        self.runs = tables.key_runs() + (np.ascontiguousarray(lay.key_offset, dtype=i64), self.key_width)
        self.row_length = lay.row_length
        self.grp = (self.g_size, self.g_base, self.g_stride, self.g_pstart, self.p_off, self.p_key, self.p_zn,
                    self.p_co, self.g_sstart, self.s_zn, self.g_cstart)


class _Run:
    """One recursion's constants and the calls of its kernels."""

    def __init__(self, model, tables, auto, X, mode, lim, deadline, top: int):
        self.model, self.tables, self.auto = model, tables, auto
        self.lay = tables.layout
        self.mode, self.lim, self.deadline = mode, lim, deadline
        self.L, self.N = model.L, model.N
        self.spec = model.spec
        meta = getattr(tables, "_meta", None)
        if meta is None or meta[0] is not X:
            meta = tables._meta = (X, _Meta(tables, auto, X))
        self.meta = meta[1]
        self.groups = self.meta.groups
        work = fill_work(self.meta, top, self.L, self.N)
        self.kern = engine.pick(work, deadline)
        # threads only for levels whose work outweighs handing chunks to them (a 64-layer solve of 0.05 s spent
        # a third of it submitting and waiting)
        self.shared = work / max(top, 1) * COMPILED_SECONDS_PER_UNIT >= THREAD_MIN_SECONDS
        self.banded = math.isfinite(lim) and not self.spec
        self.prefix = prefix_devices(model, lim, self.kern) if self.banded else np.zeros(self.L + 1, dtype=np.int64)
        # a stage's compute does not fall as it grows (non-negative times and reshards; a longer stage's
        # configs, cut short, fit too); not relied on with tied weights, whose stages holding a tie are
        # valued apart (StageCosts._tuples, another summation)
        self.rising = not model.costs.ties

    def check_time(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise _OutOfTime

    # ------------------------------------------------------------ last stages
    def last_stages(self) -> tuple[np.ndarray, np.ndarray]:
        """Level 1's own values: a stage a..L-1 alone (no outgoing transfer) per size group and incoming
        category, as (offsets in a row, values ``[a, offset]``; row L infinite)."""
        model, lay, L, meta = self.model, self.lay, self.L, self.meta
        stash = model.stash_of_level[1]
        offs, vals = [], []
        for g, i in enumerate(self.groups):
            xin = meta.xs[:L, meta.g_cstart[g] : meta.g_cstart[g + 1]]
            zl = int(lay.zloc[self.auto.init[i]])
            Ci = len(lay.cats[i])
            D1 = self.N + 1 - lay.sizes[i]
            offs.append(lay.base[i] + (zl * Ci + np.arange(Ci)) * D1)
            if self.spec:  # every a at once: stage a..L-1 per incoming category
                low, U, G = self.spec.prepare(*(x[:L, L - 1] for x in model.stage_options(i, stash)))
                t = self.spec.value(low[:, None], U[:, None], G[:, None], np.zeros_like(xin), xin, self.mode, self.lim)
                if self.mode == "minmax":
                    t = np.where(t <= self.lim, t, INF)
            else:
                cb = model.compute_matrix(i, stash)[:L, L - 1]  # (a,): compute of a..L-1
                t = cb[:, None] + xin
                t = np.where(np.isfinite(cb)[:, None] & (t <= self.lim), t, INF)
            vals.append(np.vstack([np.broadcast_to(t, (L, Ci)), np.full((1, Ci), INF)]))
        if not offs:
            return np.zeros(0, np.int64), np.full((L + 1, 0), INF)
        return (np.ascontiguousarray(np.concatenate(offs), dtype=np.int64),
                np.ascontiguousarray(np.hstack(vals), dtype=np.float64))

    # ------------------------------------------------------------ one level
    def _scratch(self):
        """This thread's row to write a level into (``a_stride`` 0), or every row of the level when the
        tables keep them: (buffer, a_stride)."""
        n = self.lay.flat_size
        if self.tables.keep_rows:
            return None, n
        rows = getattr(self, "_rows", None)
        if rows is None:
            rows = self._rows = {}
        me = threading.get_ident()
        found = rows.get(me)
        if found is None:
            found = rows[me] = np.full(n + 1, INF)
        return found, 0

    def _input(self, level: int, bucket: bool):
        """The keys a level reads: the level below's (first layers 1 .. L - level + 1); the bucket level
        also its own, combined as they become final, in a copy (infinite where nothing is read)."""
        tables, L = self.tables, self.L
        if not bucket:
            if level == 1:
                return self._empty()
            return tables.R[level - 1], tables.lo[level - 1], tables.hi[level - 1]
        R, lo, hi = getattr(self, "_bucket", None) or self._empty(fresh=True)
        self._bucket = (R, lo, hi)
        R[:], lo[:], hi[:] = INF, 0, 0
        if level >= 2:
            rows = slice(1, min(L - level + 2, tables.R[level - 1].shape[0]))
            R[rows], lo[rows], hi[rows] = tables.R[level - 1][rows], tables.lo[level - 1][rows], tables.hi[level - 1][rows]
        return R, lo, hi

    def _empty(self, fresh: bool = False):
        """Keys with nothing finite (level 1 reads no level below)."""
        found = None if fresh else getattr(self, "_none", None)
        if found is None:
            shape = (self.L + 1, len(self.meta.key_width))
            found = (np.full((self.L + 1, self.meta.row_length), INF), np.zeros(shape, np.int64),
                     np.zeros(shape, np.int64))
            if not fresh:
                self._none = found
        return found

    def level(self, level: int, bucket: bool) -> None:
        """Levels >= 2 read the level below; the bucket level also reads itself (``self_feed``); level 1
        (unless it is the bucket level) holds the last stages only."""
        kern, meta, tables, L = self.kern.levels, self.meta, self.tables, self.L
        bmax = L - level
        if bmax < 0:
            return
        R, Rlo, Rhi = self._input(level, bucket)
        Rout, out_lo, out_hi, first = tables.R[level], tables.lo[level], tables.hi[level], tables.first_rows[level]
        # the Python path holds the GIL: one thread, and one first layer per call (the deadline between)
        pool = _pool(getattr(self.model, "threads", None) or THREADS) if self.kern.compiled and self.shared else None
        firsts = FIRSTS_PER_CALL if self.kern.compiled else 1
        init_off, init_val = self.last_stages() if level == 1 else (np.zeros(0, np.int64), np.full((L + 1, 0), INF))
        if level == 1 and not bucket:

            def chunk(a_hi: int) -> None:
                self.check_time()
                out, a_stride = self._scratch()
                out = tables.rows[1] if out is None else out
                kern.last_level(out, a_stride, max(a_hi - firsts + 1, 0), a_hi, init_off, init_val, meta.runs, Rout,
                                out_lo, out_hi, first)

        else:
            stash = self.model.stash_of_level[level]
            minmax = self.mode == "minmax"
            if self.spec:
                ooff, F, OA, OB = self.model.packed_options(self.groups, stash)
                kind, s, k, f_cap = _spec_params(kern, self.spec)
            else:
                CB = self.model.compute_stack(stash, self.groups)

            def chunk(a_hi: int) -> None:
                self.check_time()
                a_lo = max(a_hi - firsts + 1, 0)
                out, a_stride = self._scratch()
                out = tables.rows[level] if out is None else out
                if self.spec:
                    kern.options_level(out, a_stride, R, Rlo, Rhi, Rout, out_lo, out_hi, first, a_lo, a_hi, bmax, L,
                                       self.N, self.lim, minmax, level >= 2, meta.grp, meta.xs, meta.xs_sorted,
                                       meta.rank, F, ooff, OA, OB, kind, s, k, f_cap, meta.X, bucket, meta.runs,
                                       init_off, init_val)
                else:
                    kern.plain_level(out, a_stride, R, Rlo, Rhi, Rout, out_lo, out_hi, first, a_lo, a_hi, bmax, self.N,
                                     self.lim, minmax, DIRECT_RANKS, level >= 2, meta.grp, meta.xs, meta.xs_sorted,
                                     meta.rank, CB, meta.X, self.banded, self.prefix, self.rising, bucket, meta.runs,
                                     init_off, init_val)

        chunks = list(range(bmax, -1, -firsts))
        if bucket or pool is None or len(chunks) < 2:
            for a_hi in chunks:
                chunk(a_hi)
            return
        for future in [pool.submit(chunk, a_hi) for a_hi in chunks]:
            future.result()


def _spec_params(kern, spec) -> tuple[int, float, float, float]:
    """(kind, s, k, f_cap) of :func:`.compiled.kernels.options_level` for a spec of :mod:`.options`."""
    if spec.parts == "uw":
        return kern.ZB, float(spec.s), float(spec.k), INF
    return (kern.GPIPE_B if spec.part == "B" else kern.GPIPE_F), 0.0, 0.0, float(spec.f_cap)


def prefix_devices(model, lim: float, kernels: "engine.Kernels | None" = None) -> np.ndarray:
    """prefix[a]: the fewest devices with which stages whose compute is at most ``lim`` cover layers
    0..a-1 (at the most permissive stash; transfers only add), a huge number when none can.

    Every plan with every stage time at most ``lim`` gives its suffix from a at most
    ``N - prefix[a]`` devices, so the recursion computes a first layer's suffixes only up to
    its band. Entries within a's band stay exact (a stage a..b under ``lim`` has
    ``prefix[b + 1] <= prefix[a] + d``, so it reads b + 1's band only); larger device counts are
    left infinite, and nothing reads them: the answer is at (0, N) and the walk back
    follows stages under ``lim`` from there.
    """
    sizes = np.array(model.sizes, dtype=np.int64)
    kernels = kernels or engine.pick(engine.stage_work(model.L, len(sizes)), None)
    return kernels.levels.prefix_devices(model.compute_stack(1), sizes, float(lim), int(model.N))
