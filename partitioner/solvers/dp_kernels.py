"""Compiled kernels of the DP's general recursion (numba): one level of :mod:`.dp_recursion` per call.

Contract
--------
The kernels write the tables of :mod:`.dp_tables` in place: a level's flat
buffer ``out`` holds, size group after size group, ``(L + 1, states_i,
cats_i, N + 1 - d_i)`` blocks (``g_base``, ``g_stride``), and ``R[pos,
column]`` the level below's least value per shared key and suffix devices
(:func:`shared_rows`, the runs that :meth:`.dp_tables.Tables.key_runs`
describes), with ``Rlo``/``Rhi`` the span of its finite columns per key.
For first layers ``a`` from ``a_hi`` down to ``a_lo`` and every size group
the kernels take the least over the stage's last layer ``b`` and the pairs
(new state, outgoing category) of its value joined to ``R[b + 1]``, exactly
as :mod:`.dp_recursion`'s contract defines it:

* :func:`plain_level` -- a stage valued by its compute ``c`` (the level's
  stash) and transfers: ``w = c + x_out``, fitting incoming category ``r``
  (sorted by ``x``) when ``w + x_r <= lim``; ``minsum`` stores ``(w + H) +
  x``, ``minmax`` ``max(w + x, H)``;
* :func:`options_level` -- a stage valued by a spec of :mod:`.dp_options`
  over its Pareto options (zb-h1: ``u``, ``g``; GPipe: ``F``, ``B``),
  joined by ``max`` or ``+``, in the spec's own arithmetic order.

With ``self_feed`` (the "K or more stages" bucket level) row ``a`` of
``R`` also takes the level's own row ``a`` once it is final, so lower first
layers see suffixes of this level too.

Every float is formed in the order the numpy definition forms it, and
float addition and ``max`` are monotone, so taking a least before adding a
common term (``minsum``'s ``+ x``, ``minmax``'s ``w + x_r``) gives the same
bits as adding first: the tables equal the definition's entry by entry
(``tests/test_dp_fill.py``, ``tests/test_dp_options_fill.py``).

How the categories stay off the inner loop. A candidate (a, b, pair) fits a
prefix of the incoming categories in order of ``x``, of length ``q``.
``minsum``: its ``w + H`` goes to row ``q - 1`` of an accumulator; a running
minimum from the top then serves every rank below, and ``x`` is added at
the end. ``minmax``: per suffix-devices column, ``max(w + x_r, H)`` is
``H`` for the ranks ``r < r*`` and ``w + x_r`` from ``r*`` on (``r*`` the
first rank with ``w + x_r > H``); ``H`` goes to row ``r* - 1`` of the
running-minimum accumulator, and ``w`` (when ``r* = 0``) to row ``q - 1``
of the one that adds ``x`` at the end; in between (``0 < r* < q``) each
``w + x_r`` goes to its own row -- a value that also serves the ranks below
it there is no less than the candidate's own value at those ranks, so
it changes no minimum. Accumulator rows are set to infinity only over the
columns they are written to.

The kernels are compiled on first use and cached on disk (numba's
``cache=True``, in the package's ``__pycache__`` or ``NUMBA_CACHE_DIR``).

References
----------
.. [1] S. K. Lam, A. Pitrou and S. Seibert, "Numba: a LLVM-based Python
   JIT compiler", LLVM-HPC 2015.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["shared_rows", "plain_level", "options_level", "prefix_devices", "ZB", "GPIPE_B", "GPIPE_F"]

INF = np.inf
ZB, GPIPE_B, GPIPE_F = 0, 1, 2  # the specs of options_level


@njit(cache=True, nogil=True)
def _shared_row(flat, run_base, run_stride, run_d, key_starts, pos, R, Rlo, Rhi, key_offset, key_width, combine):
    """Row ``pos`` of R from a level's flat buffer (:meth:`.dp_tables.Tables.key_runs`); ``combine``:
    the least with what R holds."""
    for k in range(key_offset.size):
        off, W = key_offset[k], key_width[k]
        if not combine:
            for c in range(W):
                R[pos, off + c] = INF
        for t in range(key_starts[k], key_starts[k + 1]):
            d = run_d[t]
            src = run_base[t] + pos * run_stride[t] - d
            for c in range(d, W):
                v = flat[src + c]
                if v < R[pos, off + c]:
                    R[pos, off + c] = v
        lo, hi = W, 0
        for c in range(W):
            if R[pos, off + c] < INF:
                lo = c
                break
        for c in range(W - 1, lo - 1, -1):
            if R[pos, off + c] < INF:
                hi = c + 1
                break
        if hi == 0:
            lo = 0
        Rlo[pos, k] = lo
        Rhi[pos, k] = hi


@njit(cache=True, nogil=True)
def shared_rows(flat, run_base, run_stride, run_d, key_starts, pos_lo, pos_hi, R, Rlo, Rhi, key_offset, key_width):
    """R[pos, column] for pos in [pos_lo, pos_hi): per shared key and suffix devices the least over
    the key's runs of ``flat`` (:meth:`.dp_tables.Tables.key_runs`), and the finite span
    ``[Rlo, Rhi)`` of each key's columns."""
    for pos in range(pos_lo, pos_hi):
        _shared_row(flat, run_base, run_stride, run_d, key_starts, pos, R, Rlo, Rhi, key_offset, key_width, False)


@njit(cache=True, nogil=True, inline="always")
def _take(acc, used, row, width, c, v):
    """acc[row, c] = min(acc[row, c], v), the row set to infinity when first used."""
    base = row * width
    if not used[row]:
        used[row] = True
        for j in range(width):
            acc[base + j] = INF
    if v < acc[base + c]:
        acc[base + c] = v


@njit(cache=True, nogil=True, inline="always")
def _suffix_min(acc, used, zn, Ci, width):
    """Rows r of new state zn take the least of rows r..Ci-1 (a candidate of row q serves ranks <= q)."""
    for r in range(Ci - 2, -1, -1):
        up = zn * Ci + r + 1
        if not used[up]:
            continue
        row = zn * Ci + r
        b0, b1 = row * width, up * width
        if not used[row]:
            used[row] = True
            for c in range(width):
                acc[b0 + c] = acc[b1 + c]
            continue
        for c in range(width):
            if acc[b1 + c] < acc[b0 + c]:
                acc[b0 + c] = acc[b1 + c]


@njit(cache=True, nogil=True)
def plain_level(out, R, Rlo, Rhi, a_lo, a_hi, bmax, L, N, lim, minmax, overwrite,
                g_size, g_base, g_stride,
                g_pstart, p_off, p_key, p_zn, p_co,
                g_sstart, s_zn, g_cstart, xs, xs_sorted, rank,
                CB, X, banded, prefix,
                self_feed, run_base, run_stride, run_d, key_starts, key_offset, key_width):
    """One level of the plain recursion for first layers a_hi..a_lo (see the module docstring).

    ``CB[g, a, b]``: the compute of stage a..b on group g at the level's stash (inf if it does not
    fit); ``xs[a, col]``, ``xs_sorted[a, col]``, ``rank[a, col]``: per group (columns from
    ``g_cstart``) its incoming transfers at first layer a, sorted, and each category's rank;
    ``s_zn`` and ``overwrite`` as in :func:`options_level`.
    """
    G = g_size.size
    width_max, cells_max = 1, 1
    for g in range(G):
        D1 = N + 1 - g_size[g]
        Ci = g_cstart[g + 1] - g_cstart[g]
        cells = (g_sstart[g + 1] - g_sstart[g]) * Ci
        if D1 > width_max:
            width_max = D1
        if cells > cells_max:
            cells_max = cells
    accw = np.empty(cells_max * width_max)
    acch = np.empty(cells_max * width_max if minmax else 1)
    usedw = np.zeros(cells_max, np.bool_)
    usedh = np.zeros(cells_max, np.bool_)
    for a in range(a_hi, a_lo - 1, -1):
        for g in range(G):
            d = g_size[g]
            D1 = N + 1 - d
            cols = D1
            if banded:
                cols = max(min(D1, N - d - prefix[a] + 1), 0)
            c0 = g_cstart[g]
            Ci = g_cstart[g + 1] - c0
            s0 = g_sstart[g]
            ns = g_sstart[g + 1] - s0
            for cell in range(ns * Ci):
                usedw[cell] = False
                usedh[cell] = False
            if Ci > 0 and cols > 0:
                x0 = xs_sorted[a, c0]
                xtop = xs_sorted[a, c0 + Ci - 1]
                for b in range(a, bmax + 1):
                    cb = CB[g, a, b]
                    if not (cb < INF) or not (cb + x0 <= lim):
                        continue
                    for p in range(g_pstart[g], g_pstart[g + 1]):
                        k = p_key[p]
                        lo = Rlo[b + 1, k]
                        hi = min(Rhi[b + 1, k], cols)
                        if lo >= hi:
                            continue
                        w = cb + X[b, p_co[p]]
                        if not (w + x0 <= lim):
                            continue
                        q = Ci
                        if not (w + xtop <= lim):
                            q = 1
                            while q < Ci and w + xs_sorted[a, c0 + q] <= lim:
                                q += 1
                        zn = p_zn[p]
                        Hb = p_off[p]
                        rowq = zn * Ci + q - 1
                        if not minmax:
                            base = rowq * cols
                            if not usedw[rowq]:
                                usedw[rowq] = True
                                accw[base : base + cols] = INF
                            Rrow = R[b + 1, Hb + lo : Hb + hi]
                            arow = accw[base + lo : base + hi]
                            for c in range(hi - lo):
                                v = w + Rrow[c]
                                old = arow[c]
                                arow[c] = v if v < old else old
                            continue
                        whi_v = w + xtop if q == Ci else w + xs_sorted[a, c0 + q - 1]
                        wlo_v = w + x0
                        for c in range(lo, hi):
                            h = R[b + 1, Hb + c]
                            if not (h < INF):
                                continue
                            if h >= whi_v:  # H at every rank the candidate fits
                                _take(acch, usedh, rowq, cols, c, h)
                            elif h <= wlo_v:  # w + x at every rank
                                _take(accw, usedw, rowq, cols, c, w)
                            else:  # H below r*, w + x_r from r* on
                                r = 1
                                while w + xs_sorted[a, c0 + r] <= h:
                                    r += 1
                                _take(acch, usedh, zn * Ci + r - 1, cols, c, h)
                                for rr in range(r, q):
                                    _take(acch, usedh, zn * Ci + rr, cols, c, w + xs_sorted[a, c0 + rr])
            blk = g_base[g] + a * g_stride[g]
            for zl in range(ns):
                zn = s_zn[s0 + zl]
                if zn >= 0:
                    _suffix_min(accw, usedw, zn, Ci, cols)
                    if minmax:
                        _suffix_min(acch, usedh, zn, Ci, cols)
                for cl in range(Ci):
                    tgt = blk + (zl * Ci + cl) * D1
                    row = zn * Ci + rank[a, c0 + cl] if zn >= 0 else -1
                    hw = row >= 0 and usedw[row]
                    hh = row >= 0 and minmax and usedh[row]
                    if not (hw or hh):
                        if overwrite:
                            for c in range(D1):
                                out[tgt + c] = INF
                        continue
                    x = xs[a, c0 + cl]
                    src = row * cols
                    for c in range(cols):
                        v = accw[src + c] + x if hw else INF
                        if hh and acch[src + c] < v:
                            v = acch[src + c]
                        if overwrite or v < out[tgt + c]:
                            out[tgt + c] = v
                    if overwrite:
                        for c in range(cols, D1):
                            out[tgt + c] = INF
        if self_feed:
            _shared_row(out, run_base, run_stride, run_d, key_starts, a, R, Rlo, Rhi, key_offset, key_width, True)


@njit(cache=True, nogil=True, inline="always")
def _spec_low(kind, s, k, OA, OB, o0, F):
    """The spec's least key of a stage without transfers (inf: no option): zb-h1 ``min g``, ``g = s U +
    k W`` over the options with a finite U; GPipe ``min B`` (key B) or ``min F`` (key F)."""
    best = INF
    for f in range(F):
        if kind == ZB:
            if not (OA[o0 + f] < INF):
                continue
            v = s * OA[o0 + f] + k * OB[o0 + f]
        elif kind == GPIPE_B:
            v = OB[o0 + f]
        else:
            v = OA[o0 + f]
        if v < best:
            best = v
    return best


@njit(cache=True, nogil=True, inline="always")
def _spec_value(kind, s, k, f_cap, low, OA, OB, o0, F, xo, xi, minmax, lim):
    """A stage's value under the spec (see :mod:`.dp_options`): options ``OA[o0 + f]``, ``OB[o0 + f]``
    (zb-h1: U and W; GPipe: F and B), formed as the spec forms them."""
    if kind == ZB:
        x = xo + xi
        if minmax:
            return low + s * x
        best = INF
        for f in range(F):
            u = OA[o0 + f]
            if not (u < INF):
                continue
            if (s * u + k * OB[o0 + f]) + s * x <= lim:
                v = x + u
                if v < best:
                    best = v
        return best
    best = INF
    for f in range(F):
        fwd = OA[o0 + f] + xo
        bwd = OB[o0 + f] + xi
        if not (fwd <= f_cap):
            continue
        key = bwd if kind == GPIPE_B else fwd
        if minmax:
            if key < best:
                best = key
        elif key <= lim:
            v = fwd + bwd
            if v < best:
                best = v
    return best


@njit(cache=True, nogil=True)
def options_level(out, R, Rlo, Rhi, a_lo, a_hi, bmax, L, N, lim, minmax, overwrite,
                  g_size, g_base, g_stride,
                  g_pstart, p_off, p_key, p_zn, p_co,
                  g_sstart, s_zn, g_cstart, xs,
                  g_F, g_ooff, OA, OB, kind, s, k, f_cap, X,
                  self_feed, run_base, run_stride, run_d, key_starts, key_offset, key_width):
    """One level of the recursion with options for first layers a_hi..a_lo (see the module docstring).

    The options of stage a..b on group g are ``OA``/``OB`` from ``g_ooff[g] + (a * L + b) * g_F[g]``
    (``kind``, ``s``, ``k``, ``f_cap``: the spec, :func:`_spec_value`). ``s_zn``: per local
    state of a group (from ``g_sstart``), the index of its new-state accumulator rows, or -1.
    ``overwrite``: each (a, group) block is written whole (the buffer needs no reset), else the least
    with what it holds.
    """
    G = g_size.size
    width_max, cells_max = 1, 1
    for g in range(G):
        D1 = N + 1 - g_size[g]
        Ci = g_cstart[g + 1] - g_cstart[g]
        cells = (g_sstart[g + 1] - g_sstart[g]) * Ci
        if D1 > width_max:
            width_max = D1
        if cells > cells_max:
            cells_max = cells
    acc = np.empty(cells_max * width_max)
    used = np.zeros(cells_max, np.bool_)
    finite_lim = lim < INF
    ncat = X.shape[1]
    ci_max = 1
    for g in range(G):
        ci_max = max(ci_max, g_cstart[g + 1] - g_cstart[g])
    tcache = np.empty(ncat * ci_max)
    seen = np.zeros(ncat, np.int64)
    stamp = 0
    for a in range(a_hi, a_lo - 1, -1):
        for g in range(G):
            D1 = N + 1 - g_size[g]
            c0 = g_cstart[g]
            Ci = g_cstart[g + 1] - c0
            s0 = g_sstart[g]
            ns = g_sstart[g + 1] - s0
            for cell in range(ns * Ci):
                used[cell] = False
            F = g_F[g]
            for b in range(a, bmax + 1):
                o0 = g_ooff[g] + (a * L + b) * F
                low = _spec_low(kind, s, k, OA, OB, o0, F)
                if not (low < INF) or not (low <= lim):
                    continue
                stamp += 1
                for p in range(g_pstart[g], g_pstart[g + 1]):
                    key = p_key[p]
                    lo = Rlo[b + 1, key]
                    hi = min(Rhi[b + 1, key], D1)
                    if lo >= hi:
                        continue
                    co = p_co[p]
                    xo = X[b, co]
                    zn = p_zn[p]
                    Hb = p_off[p]
                    if seen[co] != stamp:
                        seen[co] = stamp
                        for cl in range(Ci):
                            tcache[co * Ci + cl] = _spec_value(kind, s, k, f_cap, low, OA, OB, o0, F, xo, xs[a, c0 + cl], minmax, lim)
                    for cl in range(Ci):
                        t = tcache[co * Ci + cl]
                        if minmax and finite_lim and not (t <= lim):
                            continue
                        if not (t < INF):
                            continue
                        row = zn * Ci + cl
                        base = row * D1
                        if not used[row]:
                            used[row] = True
                            for c in range(D1):
                                acc[base + c] = INF
                        Rrow = R[b + 1, Hb + lo : Hb + hi]
                        arow = acc[base + lo : base + hi]
                        if minmax:
                            for c in range(hi - lo):
                                h = Rrow[c]
                                v = h if h > t else t
                                old = arow[c]
                                arow[c] = v if v < old else old
                        else:
                            for c in range(hi - lo):
                                v = t + Rrow[c]
                                old = arow[c]
                                arow[c] = v if v < old else old
            blk = g_base[g] + a * g_stride[g]
            for zl in range(ns):
                zn = s_zn[s0 + zl]
                for cl in range(Ci):
                    tgt = blk + (zl * Ci + cl) * D1
                    row = zn * Ci + cl
                    if zn < 0 or not used[row]:
                        if overwrite:
                            for c in range(D1):
                                out[tgt + c] = INF
                        continue
                    src = row * D1
                    if overwrite:
                        for c in range(D1):
                            out[tgt + c] = acc[src + c]
                    else:
                        for c in range(D1):
                            if acc[src + c] < out[tgt + c]:
                                out[tgt + c] = acc[src + c]
        if self_feed:
            _shared_row(out, run_base, run_stride, run_d, key_starts, a, R, Rlo, Rhi, key_offset, key_width, True)


@njit(cache=True, nogil=True)
def prefix_devices(CB1, sizes, lim, N):
    """prefix[a]: the fewest devices stages of compute at most ``lim`` (``CB1[i, a, b]``, stash 1)
    need to cover layers 0..a-1; ``2 N + 1`` when none can (:func:`.dp_recursion.prefix_devices`)."""
    S, L = CB1.shape[0], CB1.shape[1]
    big = 2 * N + 1
    out = np.full(L + 1, big, np.int64)
    out[0] = 0
    for b in range(L):
        best = big
        for i in range(S):
            d = sizes[i]
            if d > N:
                continue
            for a in range(b + 1):
                if CB1[i, a, b] <= lim and out[a] + d < best:
                    best = out[a] + d
        out[b + 1] = min(best, big)
    return out
