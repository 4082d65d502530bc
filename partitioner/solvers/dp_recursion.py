"""The DP's general recursion: how one recursion fills the tables of :mod:`.dp_tables`.

Contract
--------
:func:`fill` sets ``V[a, level, z, c, D]`` (:class:`.dp_tables.Tables`) for
levels 1..top of one recursion of :mod:`.dp` -- ``minsum`` (least sum of
stage times, every stage at most the threshold) or ``minmax`` (least largest
stage time) -- exactly as the recursion there defines them; a level reads the
previous level only and, for the "K or more" bucket level, itself at later
first layers. A deadline is checked between chunks and first layers.

How a level fills. A stage a..b of size i in front of a suffix whose first
stage pairs with it as (new state, outgoing category) costs ``t = w + x``
with ``w = compute(a..b) + x_out`` and ``x`` its incoming transfer, one per
incoming category c (``H`` holds the suffix's values per pair):

* below the bucket level every first layer ``a`` is taken at once (chunked
  so a temporary stays under ``CHUNK`` elements); the bucket level reads
  itself, so its own source runs one ``a`` at a time, downwards;
* the incoming transfer is no axis of the work. A candidate (a, b, pair)
  fits the categories with ``w + x <= limit``: a prefix of them in order of
  x, of length q. ``minsum``: the least ``w + H`` per (a, new state, q), a
  running minimum over q from the top, then ``+ x`` per category.
  ``minmax``: ``max(w + x, H)`` is H wherever ``H >= w + x`` for the largest
  x the candidate fits, and ``w + x`` wherever ``H <= w + x`` for the least;
  both are grouped like ``minsum``'s, and only the remaining elements are
  taken category by category;
* candidates whose successor (b + 1, pair) is infinite everywhere, or that
  fit no category, are skipped;
* under a finite threshold, a suffix from a is computed only up to
  ``N - prefix[a]`` devices (:func:`prefix_devices`: the fewest devices the
  layers before a need under the threshold), the only ones an answer reads.

The comparisons with the threshold are the recursion's own ``w + x <=
limit``, so every finite entry is the definition's; a ``minsum`` value is
formed as ``(w + H) + x`` rather than ``(w + x) + H``, a rounding
difference far below the 1e-12 relative ties of the walk back
(``tests/test_dp_fill.py`` checks every entry against the definition).

With options (zb-h1's and GPipe's iteration estimates, :mod:`.dp_options`)
a stage's value is not ``w + x``: the spec values each candidate (a, b, pair)
per distinct incoming transfer (an axis), and the least over b, then over a
new state's pairs, is taken with ``min`` only, so every entry is the one a
loop over a, b and the options gives, bit for bit. Below the bucket level
many first layers go at once: each a's candidate b (stage under the
threshold without transfers, a successor with a finite entry) padded to the
longest list of its chunk with copies of its first one, chunks of first
layers with similar counts under ``CHUNK`` elements; the bucket level takes
one a at a time. Device columns no suffix of the chunk holds are skipped.
(``tests/test_dp_options_fill.py`` checks every entry for equality with the
definition.)
"""
from __future__ import annotations

import math
import time

import numpy as np

from .dp_tables import CHUNK, Tables
from .errors import OutOfTime as _OutOfTime

__all__ = ["fill"]

INF = math.inf
_TIE = 1e-12  # relative slack when comparing a stage time with a threshold (as in dp)
_LARGEST = float(np.finfo(np.float64).max)
_BAND_STEP = 8  # first layers per chunk when the device band is used
_SLOT_LOOP = 1 << 15  # elements per slot from which the options kernel loops over the slots


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
        R = tables.shared_rows(level - 1, np.arange(L + 1)) if level >= 2 else None
        for i in lay.groups:
            if level == 1:
                run.last_stage(i)
            if level >= 2:
                run.level_source(level, i, R[:, lay.hrow[i]], 0, L - level)
        del R
        if model.bucket and level == K:
            _bucket_level(run, tables, level)
    return tables


def _bucket_level(run: "_Run", tables: Tables, level: int) -> None:
    """The "K or more" level's own source: it reads itself at later first layers, so one a at a time,
    downwards, with H's rows of every size in one buffer (row a + 1 filled once V[a + 1] is final)."""
    lay, L = tables.layout, tables.L
    sizes = [i for i in lay.groups if lay.hrow[i].size]
    if not sizes:
        return
    where = np.concatenate([lay.hrow[i].ravel() for i in sizes])
    cuts = np.r_[0, np.cumsum([lay.hrow[i].size for i in sizes])]
    pairs = np.r_[0, np.cumsum([lay.hrow[i].shape[0] for i in sizes])]
    widths = np.concatenate([np.full(lay.hrow[i].shape[0], lay.hrow[i].shape[1]) for i in sizes])
    row_starts = np.r_[0, np.cumsum(widths)[:-1]].astype(np.int64)
    H_all = np.full((L + 1, where.size), INF)
    alive_all = np.zeros((L + 1, widths.size), bool)
    H = {i: H_all[:, cuts[k] : cuts[k + 1]].reshape((L + 1,) + lay.hrow[i].shape) for k, i in enumerate(sizes)}
    alive = {i: alive_all[:, pairs[k] : pairs[k + 1]] for k, i in enumerate(sizes)}
    for a in range(L - level, -1, -1):
        run.check_time()
        H_all[a + 1] = tables.shared_rows(level, np.array([a + 1]))[0][where]
        alive_all[a + 1] = np.logical_or.reduceat(np.isfinite(H_all[a + 1]), row_starts)
        for i in sizes:
            run.level_source(level, i, H[i], a, a, alive[i])


class _Run:
    """One recursion's constants and its kernels."""

    def __init__(self, model, tables, auto, X, xin, mode, lim, deadline):
        self.model, self.tables, self.auto = model, tables, auto
        self.lay = tables.layout
        self.X, self.xin, self.mode, self.lim, self.deadline = X, xin, mode, lim, deadline
        self.L, self.N = model.L, model.N
        self.spec = model.spec
        self._statics: dict = {}
        self.banded = math.isfinite(lim) and not self.spec
        self.prefix = prefix_devices(model, lim) if self.banded else np.zeros(self.L + 1, dtype=np.int64)

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
        if self.spec:  # every a at once: stage a..L-1 per incoming category
            low, U, G = (x[:L, L - 1] for x in model.option_tables(i, stash))
            xin = self.xin[:L, cats]
            t = self.spec.value(low[:, None], U[:, None], G[:, None], np.zeros_like(xin), xin, self.mode, self.lim)
            if self.mode == "minmax":
                t = np.where(t <= self.lim, t, INF)
            V[:L, zl, :, 0] = np.minimum(V[:L, zl, :, 0], t)
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
            self._options_source(level, i, H, a_lo, a_hi, alive)
            return
        cbm = self.model.compute_matrix(i, self.model.stash_of_level[level])
        P, D1 = H.shape[1], H.shape[2]
        if alive is None:
            alive = np.isfinite(H).any(axis=2)
        Zn, Ci = len(self.lay.pairs[i][3]), len(self.lay.cats[i])
        per_a = (bmax + 1) * P * (D1 + Ci)
        fixed = Zn * (Ci + 1) * D1
        step = max(1, min(CHUNK // max(per_a, 1), CHUNK // max(fixed, 1)))
        if self.banded:  # the device band narrows with a: chunks of a few first layers
            step = min(step, _BAND_STEP)
        a0 = a_lo
        while a0 <= a_hi:
            a1 = min(a_hi, a0 + step - 1)
            self.check_time()
            # a suffix from a0 on has at most N - prefix[a0] devices: D' = D - d up to that minus d
            cols = min(D1, self.N - self.lay.sizes[i] - self.prefix[a0] + 1)
            if cols > 0:
                self._kernel(level, i, H, alive, cbm, a0, a1, bmax, int(cols))
            a0 = a1 + 1

    def _static(self, i: int):
        """Per size index: what every kernel call of the recursion shares."""
        found = self._statics.get(i)
        if found is None:
            lay = self.lay
            pair_zn, pair_co, _, zn_starts = lay.pairs[i]
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

    def _kernel(self, level, i, H, alive, cbm, a0, a1, bmax, D1) -> None:
        lim = self.lim
        Xt, zn_of_pair, Zn, zl, xs_all, order_all, sorted_all, rank_all = self._static(i)
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
        rows = H[bi + (a0 + 1), pi, :D1]  # (n, D1): the suffix devices a suffix from a0 on can have
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
            view = target[a0 : a1 + 1, zl, :, :D1]
            np.minimum(view, out, out=view)
        else:
            target[a0 : a1 + 1, zl, :, :D1] = np.minimum(target[a0 : a1 + 1][:, zl, :, :D1], out)

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

    # ------------------------------------------------------------ with options
    def _incoming_values(self, i: int):
        """Per first layer a: the distinct incoming transfers of a size-i stage starting there, padded
        to one width with copies of the largest (a copy changes no minimum), and each category's index."""
        key = ("in", i)
        found = self._statics.get(key)
        if found is None:
            xs = self.xin[:, self.lay.cats[i]]  # (L + 1, Ci)
            order = np.argsort(xs, axis=1, kind="stable")
            srt = np.take_along_axis(xs, order, axis=1)
            first = np.ones(srt.shape, bool)
            first[:, 1:] = srt[:, 1:] != srt[:, :-1]
            slot = np.cumsum(first, axis=1) - 1  # position of each sorted value among the distinct ones
            values = np.repeat(srt[:, -1:], srt.shape[1], axis=1)
            rows = np.repeat(np.arange(srt.shape[0]), srt.shape[1])
            values[rows, slot.ravel()] = srt.ravel()
            width = int(slot[:, -1].max()) + 1 if srt.size else 0
            where = np.empty_like(slot)
            np.put_along_axis(where, order, slot, axis=1)  # where[a, c]: category c's distinct value
            found = self._statics[key] = (np.ascontiguousarray(values[:, :width]), where)
        return found

    def _options_source(self, level: int, i: int, H: np.ndarray, a_lo: int, a_hi: int, alive: np.ndarray | None) -> None:
        """Stages of size i starting at a in [a_lo, a_hi] valued by the spec, many first layers at once:
        each a's candidate last layers b padded to its chunk's longest list with copies of its first
        candidate (a copy changes no minimum), chunks of first layers with similar counts so that a
        temporary stays near ``CHUNK`` elements."""
        model, lim = self.model, self.lim
        bmax = self.L - level
        low, U, G = model.option_tables(i, model.stash_of_level[level])
        if alive is None:
            alive = np.isfinite(H).any(axis=2)
        succ = alive[a_lo + 1 : bmax + 2].any(axis=1)  # (b,): the suffix from b + 1 has a finite entry
        block = low[a_lo : a_hi + 1, a_lo : bmax + 1]  # the least key of stage a..b without transfers
        valid = np.isfinite(block) & (block <= lim) & succ[None, :]
        if a_hi == a_lo:  # one first layer (the bucket level): no chunks
            bi = np.flatnonzero(valid[0]) + a_lo
            if bi.size:
                self._options_kernel(level, i, H, np.array([a_lo]), bi[None, :], low, U, G)
            return
        valid &= np.arange(a_lo, bmax + 1)[None, :] >= np.arange(a_lo, a_hi + 1)[:, None]  # b >= a
        ai, bi = np.nonzero(valid)  # ordered by (a, b), relative to a_lo
        if ai.size == 0:
            return
        bi += a_lo
        values, _ = self._incoming_values(i)
        per = H.shape[1] * values.shape[1] * max(H.shape[2], U.shape[-1], 1)  # elements per candidate
        counts = np.bincount(ai, minlength=valid.shape[0])
        starts = np.r_[0, np.cumsum(counts)[:-1]]
        rows = np.flatnonzero(counts)
        rows = rows[np.argsort(-counts[rows], kind="stable")]  # most candidates first
        k = 0
        while k < rows.size:
            longest = int(counts[rows[k]])
            e = k + 1
            cap = max(CHUNK // (per * longest), 1)
            while e < rows.size and e - k < cap and counts[rows[e]] * 2 >= longest:
                e += 1
            self.check_time()
            chunk = rows[k:e]
            pos = np.arange(longest)[None, :]
            idx = starts[chunk][:, None] + np.where(pos < counts[chunk][:, None], pos, 0)
            self._options_kernel(level, i, H, chunk + a_lo, bi[idx], low, U, G)
            k = e

    def _options_kernel(self, level, i, H, firsts, bi, low, U, G) -> None:
        """Stages firsts[r]..bi[r, slot], each followed by the suffix from bi + 1, valued by the spec per
        pair and distinct incoming transfer; the least over the slots, then over a new state's pairs."""
        lim, mode = self.lim, self.mode
        pair_co, zn_starts, zl = self._options_static(i)
        values, where = self._incoming_values(i)
        ai = firsts[:, None]
        xo = self.X[bi][..., pair_co][..., None]  # (A, slots, pairs, 1)
        xi = values[firsts][:, None, None, :]  # (A, 1, 1, values)
        t = self.spec.value(low[ai, bi][..., None, None], U[ai, bi][:, :, None, None], G[ai, bi][:, :, None, None], xo, xi, mode, lim)
        Hs = H[bi + 1]  # (A, slots, pairs, D')
        # only the devices D' where some suffix has a finite value (elsewhere every value is inf)
        cols = np.flatnonzero(np.isfinite(Hs).any(axis=(0, 1, 2)))
        if cols.size == 0:
            return
        D = slice(int(cols[0]), int(cols[-1]) + 1)
        Hs = Hs[:, :, :, None, D]  # (A, slots, pairs, 1, D'')
        if mode == "minmax" and math.isfinite(lim):  # a stage above the threshold: inf, and so is max(inf, H)
            t = np.where(t <= lim, t, INF)
        join = np.maximum if mode == "minmax" else np.add
        t = t[..., None]
        if t[:, 0].size * Hs.shape[-1] < _SLOT_LOOP:
            val = join(t, Hs).min(axis=1)  # (A, pairs, values, D'')
        else:  # large: slot by slot into one buffer (no array over all the slots)
            val = join(t[:, 0], Hs[:, 0])
            tmp = np.empty_like(val)
            for k in range(1, t.shape[1]):
                np.minimum(val, join(t[:, k], Hs[:, k], out=tmp), out=val)
        val = np.minimum.reduceat(val, zn_starts, axis=1)  # (A, states, values, D'')
        target = self.tables.tab[level][i]
        if firsts.size == 1:
            a = int(firsts[0])
            target[a, zl, :, D] = np.minimum(target[a, zl, :, D], val[0][:, where[a]])
            return
        per_state = np.take_along_axis(val, where[firsts][:, None, :, None], axis=2)  # (.., categories, ..)
        idx = (firsts[:, None], zl[None, :], slice(None), D)
        target[idx] = np.minimum(target[idx], per_state)

    def _options_static(self, i: int):
        """Per size index: each pair's outgoing category, where each new state's pairs start, its row."""
        key = ("pairs", i)
        found = self._statics.get(key)
        if found is None:
            pair_zn, pair_co, _, zn_starts = self.lay.pairs[i]
            found = self._statics[key] = (pair_co, zn_starts, self.lay.zloc[pair_zn[zn_starts]])
        return found


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


def prefix_devices(model, lim: float) -> np.ndarray:
    """prefix[a]: the fewest devices with which stages whose compute is at most ``lim`` cover layers
    0..a-1 (at the most permissive stash; transfers only add), a huge number when none can.

    Every plan with every stage time at most ``lim`` gives its suffix from a at most
    ``N - prefix[a]`` devices, so the recursion computes a chunk of first layers only up to the
    band of its first one. Entries within a's band stay exact (a stage a..b under ``lim`` has
    ``prefix[b + 1] <= prefix[a] + d``, so it reads b + 1's band only); larger device counts may be
    left infinite or too large, and nothing reads them: the answer is at (0, N) and the walk back
    follows stages under ``lim`` from there.
    """
    L, N = model.L, model.N
    mats = [(d, model.compute_matrix(i, 1)) for i, d in enumerate(model.sizes) if d <= N]
    big = 2 * N + 1
    out = np.full(L + 1, big, dtype=np.int64)
    out[0] = 0
    for b in range(L):
        best = big
        for d, cb in mats:
            ok = cb[: b + 1, b] <= lim
            if ok.any():
                best = min(best, int(out[: b + 1][ok].min()) + d)
        out[b + 1] = min(best, big)
    return out


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
