"""The DP's general recursion: compact tables and how one recursion fills them.

Contract
--------
:class:`Tables` holds the values ``V[a, level, z, c, D]`` of :mod:`.dp`'s
recursion (see its *The recursion* section) for the combinations that can
occur only: per level and stage size ``i``, an array
``(L + 1, slots, N + 1 - d_i)`` whose slots are the pairs (placement state
``z`` of size i, incoming category ``c`` that a size-i stage can receive) and
whose last axis is ``D - d_i`` (a suffix whose first stage has d_i devices
has at least d_i). Every other combination is infinite. :func:`fill` fills
them for one objective mode and threshold, level by level; a level reads the
previous level only and, for the "K or more" bucket level, itself at later
first layers.

How a level fills (no options: the stage time is ``t = w + x`` with
``w = compute(a..b) + x_out`` and ``x`` the incoming transfer):

* the levels below the bucket level take every first layer ``a`` at once
  (in chunks that bound the temporaries); the bucket level's own source
  runs one ``a`` at a time, downwards;
* the incoming transfer is no axis of the work: a stage is valid for the
  incoming categories with ``w + x <= limit``, a prefix of them in order of
  ``x``. ``minsum`` groups the (stage, successor) candidates by that prefix's
  length and takes ``min(w + H)`` per group, then a running minimum over the
  lengths and ``+ x`` per category; ``minmax`` takes
  ``min max(w + x, H)`` per category over the candidates valid for it.

With options (zb-h1's and GPipe's iteration estimates, :mod:`.dp_options`)
a stage's value is not ``w + x``; those recursions take one ``a`` at a time
with the incoming values as an axis, as the spec values them.

The values are the same sums and maxima as before, formed as
``(w + H) + x`` instead of ``(w + x) + H`` in ``minsum`` (a rounding
difference far below the 1e-12 relative ties of the walk back); every
comparison with the threshold is the recursion's own ``w + x <= limit``.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .errors import OutOfTime as _OutOfTime

__all__ = ["Layout", "Tables", "fill", "table_bytes"]

INF = math.inf
_TIE = 1e-12  # relative slack when comparing a stage time with a threshold (as in dp)
_CHUNK = 1 << 22  # elements of one temporary array of the vectorised kernels (32 MiB of float64)
_LARGEST = float(np.finfo(np.float64).max)
_TEMPORARIES = 6  # such arrays alive at once, at most


class Layout:
    """Where each (state, category, devices) lives: per size index i, the states of that size and the
    incoming categories a size-i stage can receive (slot = state position x categories + category position)."""

    def __init__(self, auto, sizes: tuple[int, ...], N: int):
        self.auto, self.sizes, self.N = auto, sizes, N
        Z, C = len(auto.states), len(auto.categories)
        self.groups = [i for i, d in enumerate(sizes) if d <= N]
        self.states: dict[int, np.ndarray] = {}
        self.cats: dict[int, np.ndarray] = {}
        self.zloc = np.full(Z, -1)
        self.cloc = np.full((len(sizes), C), -1)
        for i in self.groups:
            zs = np.flatnonzero(auto.size_of == i)
            cs = np.concatenate([np.arange(lo, hi) for lo, hi in auto.incoming[i]])
            self.states[i], self.cats[i] = zs, cs
            self.zloc[zs] = np.arange(len(zs))
            self.cloc[i, cs] = np.arange(len(cs))
        self.trans_sorted: dict = {}
        self.pairs = {i: self._pairs(i) for i in self.groups}
        # one flat buffer per level: size group after size group, then one infinite sentinel
        self.base, total = {}, 0
        for i in self.groups:
            self.base[i] = total
            total += self._slots(i) * (N + 1 - sizes[i])
        self.stride = {i: self._slots(i) * (N + 1 - sizes[i]) for i in self.groups}  # per first layer
        self.flat_size = total  # per first layer
        self._share()

    def _share(self) -> None:
        """Pairs of different stage sizes with the same transitions (e.g. "the next stage has j < i devices"
        for every larger size i) are reduced once: ``keys`` lists each distinct set's (source states,
        outgoing categories) and the widest suffix-device range asked of it; ``pair_key[i]`` maps size
        i's pairs to them; ``hrow[i]`` (pairs, D1_i) says where each H entry sits in a row of all keys."""
        index: dict = {}
        self.keys: list[tuple[np.ndarray, np.ndarray]] = []
        width: list[int] = []
        self.pair_key = {}
        for i in self.groups:
            zp, co, starts = self.trans_sorted[i]
            ends = np.r_[starts[1:], len(zp)]
            ids = []
            for lo, hi in zip(starts, ends):
                k = (tuple(zp[lo:hi]), tuple(co[lo:hi]))
                if k not in index:
                    index[k] = len(self.keys)
                    self.keys.append((zp[lo:hi], co[lo:hi]))
                    width.append(0)
                u = index[k]
                width[u] = max(width[u], self.N + 1 - self.sizes[i])
                ids.append(u)
            self.pair_key[i] = np.array(ids, dtype=np.int64)
        self.key_width = np.array(width, dtype=np.int64)
        self.key_offset = np.r_[0, np.cumsum(self.key_width)[:-1]].astype(np.int64)
        self.row_length = int(self.key_width.sum())
        self.hrow = {}
        for i in self.groups:
            D1 = self.N + 1 - self.sizes[i]
            self.hrow[i] = self.key_offset[self.pair_key[i]][:, None] + np.arange(D1)[None, :]

    def _slots(self, i: int) -> int:
        return len(self.states[i]) * len(self.cats[i])

    def shape(self, L: int, i: int) -> tuple[int, int, int, int]:
        return (L + 1, len(self.states[i]), len(self.cats[i]), self.N + 1 - self.sizes[i])

    def _pairs(self, i: int):
        """Size-i transitions grouped by (new state, outgoing category): the pairs a stage chooses among.

        Returns (pair_zn, pair_co, starts, zn_starts, sources) with ``sources`` a list of
        (transition positions, source size index, source slots) per source size.
        """
        auto = self.auto
        zp, zn, co = auto.trans[i]
        keep = np.isin(auto.size_of[zp], self.groups)
        zp, zn, co = zp[keep], zn[keep], co[keep]
        order = np.lexsort((co, zn))
        zp, zn, co = zp[order], zn[order], co[order]
        keys = zn * len(auto.categories) + co
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, int)
        self.trans_sorted[i] = (zp, co, starts)
        pair_zn, pair_co = zn[starts], co[starts]
        zn_starts = np.flatnonzero(np.r_[True, pair_zn[1:] != pair_zn[:-1]]) if len(pair_zn) else np.zeros(0, int)
        sources = []
        src_size = auto.size_of[zp]
        for ip in self.groups:
            t = np.flatnonzero(src_size == ip)
            if t.size:
                slots = self.zloc[zp[t]] * len(self.cats[ip]) + self.cloc[ip, co[t]]
                sources.append((t, ip, slots, len(zp)))
        return pair_zn, pair_co, starts, zn_starts, sources


def table_bytes(layout: Layout, L: int, levels: int) -> int:
    """Bytes of the tables of ``levels`` levels."""
    per_level = sum(math.prod(layout.shape(L, i)) for i in layout.groups)
    return 8 * per_level * levels


def cache_bytes(layout: Layout, L: int) -> int:
    """Bytes of one level's reduced tables H (per size: positions x pairs x devices) plus the kernels' temporaries."""
    H = sum((L + 1) * len(layout.pairs[i][0]) * (layout.N + 1 - layout.sizes[i]) for i in layout.groups)
    return 8 * (H + _TEMPORARIES * _CHUNK)


class Tables:
    """The values of one recursion: ``tab[level][i]`` of shape ``(L + 1, states_i, cats_i, N + 1 - d_i)``."""

    def __init__(self, layout: Layout, L: int):
        self.layout, self.L = layout, L
        self.tab: list[dict | None] = [None]
        self.flat: list[np.ndarray | None] = [None]
        self._index = None

    def reset(self, top: int) -> None:
        """Levels 1..top set to infinity (allocated the first time they are needed)."""
        lay, rows = self.layout, self.L + 1
        while len(self.tab) <= top:
            flat = np.empty(rows * lay.flat_size + 1)
            views = {}
            for i in lay.groups:
                lo = rows * lay.base[i]
                views[i] = flat[lo : lo + rows * lay.stride[i]].reshape(self.layout.shape(self.L, i))
            self.flat.append(flat)
            self.tab.append(views)
        for level in range(1, top + 1):
            self.flat[level].fill(INF)
        self.top = top

    def shared_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first, stride, starts): entry ``first + pos * stride`` of a level's flat buffer holds an input of
        a row of all shared keys at first layer pos (ordered key, D', transition; the sentinel, stride 0,
        where the source has fewer devices than D'), ``starts`` the segments to take the least of."""
        if self._index is None:
            lay, rows = self.layout, self.L + 1
            sentinel = rows * lay.flat_size
            first, stride = [], []
            for (zp, co), width in zip(lay.keys, lay.key_width):
                ip = lay.auto.size_of[zp]
                d = np.array(lay.sizes)[ip]
                slot = lay.zloc[zp] * np.array([len(lay.cats[j]) for j in ip]) + lay.cloc[ip, co]
                own = lay.N + 1 - d  # the source group's device axis
                base = rows * np.array([lay.base[j] for j in ip]) + slot * own
                Dp = np.arange(width)[:, None]  # (D', transition)
                ok = Dp >= d[None, :]
                first.append(np.where(ok, base[None, :] + Dp - d[None, :], sentinel).ravel())
                stride.append(np.where(ok, np.array([lay.stride[j] for j in ip])[None, :], 0).ravel())
            counts = np.concatenate([np.full(w, len(zp)) for (zp, _), w in zip(lay.keys, lay.key_width)]) if lay.keys else np.zeros(0, int)
            starts = np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64) if counts.size else np.zeros(0, np.int64)
            first = np.concatenate(first) if first else np.zeros(0, np.int64)
            stride = np.concatenate(stride) if stride else np.zeros(0, np.int64)
            # drop the sentinel entries, but one per segment that has nothing else (its least is infinite)
            segment = np.repeat(np.arange(counts.size), counts)
            real = first != sentinel
            has_real = np.zeros(counts.size, bool)
            has_real[segment[real]] = True
            keep = real | (~has_real[segment] & (np.arange(first.size) == starts[segment]))
            kept = np.bincount(segment[keep], minlength=counts.size)
            starts = np.r_[0, np.cumsum(kept)[:-1]].astype(np.int64)
            self._index = (first[keep], stride[keep], starts)
        return self._index

    def shared_rows(self, level: int, pos: np.ndarray) -> np.ndarray:
        """R[pos, key row]: per shared key and suffix devices D', the least value at ``level``."""
        first, stride, starts = self.shared_index()
        out = np.empty((pos.size, self.layout.row_length))
        if first.size == 0:
            return out
        flat = self.flat[level]
        step = max(1, _CHUNK // first.size)
        for k in range(0, pos.size, step):
            p = pos[k : k + step]
            out[k : k + step] = np.minimum.reduceat(flat[first[None, :] + p[:, None] * stride[None, :]], starts, axis=1)
        return out

    def value(self, a: int, level: int, z: int, c: int, D: int) -> float:
        lay = self.layout
        if level < 1 or level > self.top:
            return INF
        i = int(lay.auto.size_of[z])
        if i not in lay.states:
            return INF
        cl = lay.cloc[i, c]
        Di = D - lay.sizes[i]
        if cl < 0 or Di < 0:
            return INF
        return float(self.tab[level][i][a, lay.zloc[z], cl, Di])

    def first(self, level: int, D: int) -> np.ndarray:
        """Over every state z: the value of the whole pipeline (a = 0, category 0, D devices) at ``level``."""
        lay = self.layout
        out = np.full(len(lay.auto.states), INF)
        if level > self.top:
            return out
        for i in lay.groups:
            Di = D - lay.sizes[i]
            cl = lay.cloc[i, 0]
            if Di >= 0 and cl >= 0:
                out[lay.states[i]] = self.tab[level][i][0, :, cl, Di]
        return out


# --------------------------------------------------------------------------- the fill


def fill(model, tables: Tables, auto, X: np.ndarray, mode: str, limit: float, deadline: float | None, top: int) -> Tables:
    """Fill ``tables`` for levels 1..top (see the module docstring); ``model`` is the :class:`.dp.DPModel`."""
    L, K = model.L, model.K
    lay = tables.layout
    tables.reset(top)
    lim = limit * (1 + _TIE) if math.isfinite(limit) else INF
    xin = np.vstack([np.zeros((1, X.shape[1])), X[:-1]])  # xin[a, c]: transfer into a stage starting at a
    run = _Run(model, tables, auto, X, xin, mode, lim, deadline)
    for level in range(1, top + 1):
        run.check_time()
        bucket_self = model.bucket and level == K
        R = tables.shared_rows(level - 1, np.arange(L + 1)) if level >= 2 else None
        for i in lay.groups:
            if level == 1:
                run.last_stage(i)
            if level >= 2:
                run.level_source(level, i, R[:, lay.hrow[i]], 0, L - level)
        del R
        if bucket_self:
            # the level reads itself at later first layers: one a at a time, downwards, with H's rows of
            # every size kept in one buffer (row a + 1 filled once V[a + 1] is final)
            sizes = [i for i in lay.groups if lay.hrow[i].size]
            where = np.concatenate([lay.hrow[i].ravel() for i in sizes]) if sizes else np.zeros(0, np.int64)
            H_all = np.full((L + 1, where.size), INF)
            lengths = [lay.hrow[i].size for i in sizes]
            cuts = np.r_[0, np.cumsum(lengths)]
            widths = np.concatenate([np.full(lay.hrow[i].shape[0], lay.hrow[i].shape[1]) for i in sizes]) if sizes else np.zeros(0, int)
            row_starts = np.r_[0, np.cumsum(widths)[:-1]].astype(np.int64)
            A_all = np.zeros((L + 1, widths.size), bool)
            pcuts = np.r_[0, np.cumsum([lay.hrow[i].shape[0] for i in sizes])]
            H_self = {i: H_all[:, cuts[k] : cuts[k + 1]].reshape((L + 1,) + lay.hrow[i].shape) for k, i in enumerate(sizes)}
            alive = {i: A_all[:, pcuts[k] : pcuts[k + 1]] for k, i in enumerate(sizes)}
            for a in range(L - level, -1, -1):
                run.check_time()
                if where.size:
                    H_all[a + 1] = tables.shared_rows(level, np.array([a + 1]))[0][where]
                    A_all[a + 1] = np.logical_or.reduceat(np.isfinite(H_all[a + 1]), row_starts)
                for i in sizes:
                    run.level_source(level, i, H_self[i], a, a, alive[i])
    return tables


class _Run:
    """One recursion's constants and its kernels."""

    def __init__(self, model, tables, auto, X, xin, mode, lim, deadline):
        self.model, self.tables, self.auto = model, tables, auto
        self.lay = tables.layout
        self.X, self.xin, self.mode, self.lim, self.deadline = X, xin, mode, lim, deadline
        self.L, self.N = model.L, model.N
        self.spec = model.spec
        self._incoming_cache: dict = {}
        self._statics: dict = {}

    def check_time(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise _OutOfTime

    # ------------------------------------------------------------ last stages
    def last_stage(self, i: int) -> None:
        """Level 1: a stage a..L-1 alone (no outgoing transfer), for every a and incoming category."""
        model, lay, L = self.model, self.lay, self.L
        stash = model.stash_of_level[1]
        cats = lay.cats[i]
        zl = lay.zloc[self.auto.init[i]]
        V = self.tables.tab[1][i]
        if self.spec:
            for a in range(L):
                compute = tuple(x[-1] for x in model.option_rows(a, i, stash))
                xin_a = self.xin[a, cats]
                t = self.spec.value(compute[0], compute[1], compute[2], np.zeros_like(xin_a), xin_a, self.mode, self.lim)
                if self.mode == "minmax":
                    t = np.where(t <= self.lim, t, INF)
                V[a, zl, :, 0] = np.minimum(V[a, zl, :, 0], t)
            return
        cb = model.compute_matrix(i, stash)[:L, L - 1]  # (a,): compute of a..L-1
        t = cb[:, None] + self.xin[:L][:, cats]
        t = np.where(np.isfinite(cb)[:, None] & (t <= self.lim), t, INF)
        V[:L, zl, :, 0] = np.minimum(V[:L, zl, :, 0], t)

    # ------------------------------------------------------------ one source level
    def level_source(self, level: int, i: int, H: np.ndarray, a_lo: int, a_hi: int, alive: np.ndarray | None = None) -> None:
        """Stages of size i starting at a in [a_lo, a_hi], followed by a suffix valued by H[b + 1]
        (``alive[pos, pair]``: whether H[pos, pair] has a finite entry; computed when not given)."""
        bmax = self.L - level
        a_hi = min(a_hi, bmax)
        if a_hi < a_lo or H.shape[1] == 0:
            return
        if self.spec:
            for a in range(a_hi, a_lo - 1, -1):
                self.check_time()
                self._stage_options(level, i, H, a)
            return
        cbm = self.model.compute_matrix(i, self.model.stash_of_level[level])
        P, D1 = H.shape[1], H.shape[2]
        if alive is None:
            alive = np.isfinite(H).any(axis=2)
        Zn, Ci = len(self.lay.pairs[i][3]), len(self.lay.cats[i])
        per_a = (bmax + 1) * P * (D1 + Ci)
        fixed = Zn * (Ci + 1) * D1
        step = max(1, min(_CHUNK // max(per_a, 1), _CHUNK // max(fixed, 1)))
        a0 = a_lo
        while a0 <= a_hi:
            a1 = min(a_hi, a0 + step - 1)
            self.check_time()
            self._kernel(level, i, H, alive, cbm, a0, a1, bmax)
            a0 = a1 + 1

    def _static(self, i: int):
        """Per size index: what every kernel call of the recursion shares."""
        found = self._statics.get(i)
        if found is None:
            lay = self.lay
            pair_zn, pair_co, _, zn_starts, _ = lay.pairs[i]
            P = len(pair_zn)
            zn_u = pair_zn[zn_starts]
            Zn = len(zn_u)
            zl = lay.zloc[zn_u]
            whole = Zn == len(lay.states[i]) and bool(np.all(zl == np.arange(Zn)))
            # incoming transfers per a, sorted (ranks: the prefix of categories a stage is valid for)
            xs = self.xin[:, lay.cats[i]]  # (L, Ci)
            order = np.argsort(xs, axis=1, kind="stable")
            found = self._statics[i] = (
                np.ascontiguousarray(self.X[:, pair_co].T),  # (P, L): outgoing transfer of each pair
                np.repeat(np.arange(Zn), np.diff(np.r_[zn_starts, P])),  # new state of each pair
                Zn,
                slice(0, Zn) if whole else zl,
                xs,
                order,
                np.take_along_axis(xs, order, axis=1),
                np.argsort(order, axis=1),  # rank[a, c]
            )
        return found

    def _kernel(self, level, i, H, alive, cbm, a0, a1, bmax) -> None:
        lim = self.lim
        Xt, zn_of_pair, Zn, zl, xs_all, order_all, sorted_all, rank_all = self._static(i)
        D1 = H.shape[2]
        Ci = xs_all.shape[1]
        A = a1 - a0 + 1
        xs, order, xs_sorted, rank = xs_all[a0 : a1 + 1], order_all[a0 : a1 + 1], sorted_all[a0 : a1 + 1], rank_all[a0 : a1 + 1]
        # candidates (a, pair, b) with b in a0..bmax: w = compute + outgoing transfer
        W = cbm[a0 : a1 + 1, None, a0 : bmax + 1] + Xt[None, :, a0 : bmax + 1]  # (A, P, B)
        with np.errstate(invalid="ignore"):
            # (an infinite threshold still excludes infinite times)
            valid = (W + xs_sorted[:, 0, None, None] <= min(lim, _LARGEST)) & alive[a0 + 1 : bmax + 2].T[None, :, :]
        if A > 1:  # b >= a
            valid &= np.arange(a0, bmax + 1)[None, None, :] >= np.arange(a0, a1 + 1)[:, None, None]
        ai, pi, bi = np.nonzero(valid)  # ordered by (a, pair, b): (a, new state) groups are contiguous
        if ai.size == 0:
            return
        w = W[ai, pi, bi]
        q = np.full(ai.size, Ci)
        if math.isfinite(lim):
            part = np.flatnonzero(w + xs_sorted[ai, -1] > lim)
            if part.size:
                q[part] = _prefix_lengths(w[part], xs_sorted[ai[part]], lim)
        rows = H[bi + (a0 + 1), pi]  # (n, D1)
        groups = _Groups(ai * Zn + zn_of_pair[pi], q, Ci, A * Zn, np.repeat(rank, Zn, axis=0) if Zn > 1 else rank)
        xc = (np.repeat(xs, Zn, axis=0) if Zn > 1 else xs)[:, :, None]  # (cells, Ci, 1): each category's x
        if self.mode == "minsum":
            rows += w[:, None]
            out = groups.by_prefix(rows) + xc  # (A * Zn, Ci, D1), + x per category
        else:
            # max(w + x, H): H where H >= w + (largest valid x), w + x where H <= w + (least x); else per rank
            whi = w + xs_sorted[ai, np.maximum(q, 1) - 1]
            wlo = w + xs_sorted[ai, 0]
            hdom = rows >= whi[:, None]
            wdom = rows <= wlo[:, None]
            out = groups.by_prefix(np.where(hdom, rows, INF))
            out = np.minimum(out, groups.by_prefix(np.where(wdom, w[:, None], INF)) + xc)
            mo, md = np.nonzero(~(hdom | wdom))
            if mo.size:
                self._mixed(out, groups, mo, md, w, rows, q, xs_sorted[ai], ai, order, D1)
        out = out.reshape(A, Zn, Ci, D1)
        target = self.tables.tab[level][i]  # (L + 1, states_i, Ci, D1)
        if isinstance(zl, slice):
            view = target[a0 : a1 + 1, zl]
            np.minimum(view, out, out=view)
        else:
            target[a0 : a1 + 1, zl] = np.minimum(target[a0 : a1 + 1][:, zl], out)

    @staticmethod
    def _mixed(out, groups, mo, md, w, rows, q, xa, ai, order, D1) -> None:
        """The elements (candidate, D') where neither part of max(w + x, H) wins for every x: rank by rank."""
        target = groups.keys[mo] * D1 + md
        srt = np.argsort(target, kind="stable")
        mo, md, target = mo[srt], md[srt], target[srt]
        starts = np.flatnonzero(np.r_[True, target[1:] != target[:-1]])
        cell, col = np.divmod(target[starts], D1)
        h, wm, qm, xm = rows[mo, md], w[mo], q[mo], xa[mo]
        Zn = out.shape[0] // order.shape[0]
        for r in range(int(qm.max())):
            val = np.where(r < qm, np.maximum(wm + xm[:, r], h), INF)
            best = np.minimum.reduceat(val, starts)
            cat = order[cell // Zn, r]
            out[cell, cat, col] = np.minimum(out[cell, cat, col], best)

    # ------------------------------------------------------------ with options (one a at a time)
    def _incoming(self, a: int, i: int):
        """Distinct incoming transfer times of a size-i stage starting at a, and each category's."""
        key = (a, i)
        if key not in self._incoming_cache:
            xs = self.xin[a, self.lay.cats[i]]
            self._incoming_cache[key] = np.unique(xs, return_inverse=True)
        return self._incoming_cache[key]

    def _stage_options(self, level: int, i: int, H: np.ndarray, a: int) -> None:
        model, lay, lim, mode = self.model, self.lay, self.lim, self.mode
        pair_zn, pair_co, _, zn_starts, _ = lay.pairs[i]
        bmax = self.L - level
        cb = model.option_rows(a, i, model.stash_of_level[level])
        cbs = cb[0][: bmax - a + 1]
        valid = np.flatnonzero(np.isfinite(cbs) & (cbs <= lim))
        if valid.size == 0:
            return
        bs = a + valid
        Hs = H[bs + 1]  # (nb, pairs, D')
        values, where = self._incoming(a, i)
        xo, xi = self.X[bs][:, pair_co][:, :, None], values[None, None, :]
        t = self.spec.value(cbs[valid, None, None], cb[1][valid, None, None], cb[2][valid, None, None], xo, xi, mode, lim)
        if mode == "minmax":
            val = np.maximum(t[..., None], Hs[:, :, None, :])
            if math.isfinite(lim):
                val = np.where((t <= lim)[..., None], val, INF)
        else:
            val = t[..., None] + Hs[:, :, None, :]
        val = val.min(axis=0)  # (pairs, values, D')
        per_state = np.minimum.reduceat(val, zn_starts, axis=0)[:, where, :]  # (states, categories, D')
        target = self.tables.tab[level][i]
        zl = lay.zloc[pair_zn[zn_starts]]
        target[a, zl] = np.minimum(target[a, zl], per_state)


class _Groups:
    """Candidates grouped by cell (first layer, new state) and by how many incoming categories they fit."""

    def __init__(self, keys: np.ndarray, q: np.ndarray, Ci: int, cells: int, rank: np.ndarray):
        self.keys, self.Ci, self.cells, self.rank = keys, Ci, cells, rank
        self.order = None
        if np.any(q < Ci):
            full = keys * (Ci + 1) + q
            self.order = np.argsort(full, kind="stable")
            full = full[self.order]
        else:
            full = keys
        self.full = full
        self.starts = np.flatnonzero(np.r_[True, full[1:] != full[:-1]])

    def by_prefix(self, values: np.ndarray) -> np.ndarray:
        """out[cell, c, D'] = least value of the cell's candidates that fit category c (rank-wise prefix)."""
        D1 = values.shape[1]
        if self.order is None:  # every candidate fits every category
            R = np.full((self.cells, D1), INF)
            R[self.full[self.starts]] = np.minimum.reduceat(values, self.starts, axis=0)
            return np.broadcast_to(R[:, None, :], (self.cells, self.Ci, D1))
        values = values[self.order]
        R = np.full((self.cells * (self.Ci + 1), D1), INF)
        R[self.full[self.starts]] = np.minimum.reduceat(values, self.starts, axis=0)
        R = R.reshape(self.cells, self.Ci + 1, D1)
        # a candidate that fits the first q categories (by x) serves every rank below q
        R = np.minimum.accumulate(R[:, ::-1], axis=1)[:, ::-1]
        return np.take_along_axis(R, (self.rank + 1)[:, :, None], axis=1)


def _prefix_lengths(w: np.ndarray, xs_sorted: np.ndarray, lim: float) -> np.ndarray:
    """Per candidate: how many of its sorted incoming transfers x keep ``w + x <= lim`` (a prefix)."""
    lo = np.zeros(w.size, dtype=np.int64)
    hi = np.full(w.size, xs_sorted.shape[1], dtype=np.int64)
    rows = np.arange(w.size)
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) // 2
        midc = np.minimum(mid, xs_sorted.shape[1] - 1)
        sat = open_ & (w + xs_sorted[rows, midc] <= lim)
        lo = np.where(sat, mid + 1, lo)
        hi = np.where(open_ & ~sat, mid, hi)
