"""Kernels of the DP's general recursion (numba-compilable Python): one level of :mod:`.dp.recursion` per call.

Contract: the kernels write the tables of :mod:`.dp.tables` in place, one
level per call: :func:`plain_level` (a stage valued by its compute and
transfers), :func:`options_level` (a stage valued by a spec of
:mod:`.dp.options`) and :func:`last_level` (level 1 when only last stages
have it); :func:`prefix_devices` gives the fewest devices a prefix's stages need.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.compiled.kernels``.
"""
from __future__ import annotations

import numpy as np

from .marks import kernel

__all__ = ["last_level", "plain_level", "options_level", "prefix_devices", "ZB", "GPIPE_B", "GPIPE_F"]

INF = np.inf
ZB, GPIPE_B, GPIPE_F = 0, 1, 2  # the specs of options_level
# how far a longer stage's compute may fall below a shorter one's by rounding alone: stage times are sums of
# non-negative floats in one order or another (a few ulps apart, ~1e-13 relative for a thousand layers)
RISING_SLACK = 1e-9


# --------------------------------------------------------------------------- shared rows


@kernel()
def _shared_row(flat, runs, src_row, R, pos, Rlo, Rhi, combine):
    """Row ``pos`` of R from the values of one first layer, which start at ``src_row`` of ``flat``;
    ``combine``: the least with what R holds."""
    run_base, run_stride, run_d, key_starts, key_offset, key_width = runs
    for k in range(key_offset.size):
        off, W = key_offset[k], key_width[k]
        row = R[pos, off : off + W]
        if not combine:
            row[:] = INF
        for t in range(key_starts[k], key_starts[k + 1]):
            d = run_d[t]
            src = run_base[t] + src_row - d
            seg = flat[src + d : src + W]
            part = row[d:]
            for c in range(W - d):
                v = seg[c]
                old = part[c]
                part[c] = v if v < old else old
        lo, hi = W, 0
        for c in range(W):
            if row[c] < INF:
                lo = c
                break
        for c in range(W - 1, lo - 1, -1):
            if row[c] < INF:
                hi = c + 1
                break
        if hi == 0:
            lo = 0
        Rlo[pos, k] = lo
        Rhi[pos, k] = hi


@kernel()
def _finish_row(out, a_stride, a, runs, Rout, Rout_lo, Rout_hi, first, self_feed, Rin, Rin_lo, Rin_hi):
    """Row ``a`` of a level is final in ``out`` (at ``a * a_stride``): its shared-key row into ``Rout``,
    into the level's own input ``Rin`` too when it reads itself, and the whole row into ``first`` at a = 0."""
    src = a * a_stride
    _shared_row(out, runs, src, Rout, a, Rout_lo, Rout_hi, False)
    if self_feed:
        _shared_row(out, runs, src, Rin, a, Rin_lo, Rin_hi, True)
    if a == 0:
        n = first.size
        first[:] = out[src : src + n]


@kernel()
def _prefill(out, a_stride, a, n, init_off, init_val):
    """Row ``a`` of ``out`` (``n`` entries) infinite but for the last stages' values ``init_val[a]`` at
    ``init_off`` (the level a recursion of one or more stages starts from)."""
    src = a * a_stride
    out[src : src + n] = INF
    for k in range(init_off.size):
        v = init_val[a, k]
        if v < out[src + init_off[k]]:
            out[src + init_off[k]] = v


@kernel()
def last_level(out, a_stride, a_lo, a_hi, init_off, init_val, runs, Rout, Rout_lo, Rout_hi, first):
    """Level 1 when only last stages have it (no bucket): per first layer a in [a_lo, a_hi] its row (the
    last stages' values, infinite elsewhere) and that row's shared keys."""
    n = first.size
    for a in range(a_hi, a_lo - 1, -1):
        _prefill(out, a_stride, a, n, init_off, init_val)
        _finish_row(out, a_stride, a, runs, Rout, Rout_lo, Rout_hi, first, False, Rout, Rout_lo, Rout_hi)


# --------------------------------------------------------------------------- helpers


@kernel()
def _widths(grp, N):
    """(the widest device axis, the most accumulator rows) over the size groups."""
    g_size, g_sstart, g_cstart = grp[0], grp[8], grp[10]
    width_max, cells_max = 1, 1
    for g in range(g_size.size):
        width_max = max(width_max, N + 1 - g_size[g])
        cells_max = max(cells_max, (g_sstart[g + 1] - g_sstart[g]) * (g_cstart[g + 1] - g_cstart[g]))
    return width_max, cells_max


@kernel(inline=True)
def _open_row(acc, used, row, width):
    """The offset of ``row`` in the flat ``acc``, the row set to infinity when first used."""
    base = row * width
    if not used[row]:
        used[row] = True
        acc[base : base + width] = INF
    return base


@kernel(inline=True)
def _take(acc, used, row, width, c, v):
    """acc[row, c] = min(acc[row, c], v), the row set to infinity when first used."""
    base = _open_row(acc, used, row, width)
    if v < acc[base + c]:
        acc[base + c] = v


@kernel(inline=True)
def _min_into(acc, base, R, pos, col, n, v0, mode):
    """acc[base + c] = min(acc[base + c], join(v0, R[pos, col + c])) for c < n; join: + (0) or max (1)."""
    Rrow = R[pos, col : col + n]
    arow = acc[base : base + n]
    if mode == 0:
        for c in range(n):
            v = v0 + Rrow[c]
            old = arow[c]
            arow[c] = v if v < old else old
    else:
        for c in range(n):
            h = Rrow[c]
            v = h if h > v0 else v0
            old = arow[c]
            arow[c] = v if v < old else old


@kernel(inline=True)
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
            acc[b0 : b0 + width] = acc[b1 : b1 + width]
            continue
        for c in range(width):
            if acc[b1 + c] < acc[b0 + c]:
                acc[b0 + c] = acc[b1 + c]


# --------------------------------------------------------------------------- plain stages


@kernel()
def _plain_cell(out, a_stride, R, Rlo, Rhi, a, g, bmax, N, lim, minmax, direct, overwrite, grp, xs, xs_sorted, rank,
                CB, X, banded, prefix, rising, accw, acch, usedw, usedh):
    """The (a, g) block of a plain level (see the module docstring); ``rising``: ``CB[g, a, b]`` does not fall
    as b grows (but for roundings, :data:`RISING_SLACK`), so the first stage well above ``lim`` ends the b loop."""
    g_size, g_base, g_stride, g_pstart, p_off, p_key, p_zn, p_co, g_sstart, s_zn, g_cstart = grp
    d = g_size[g]
    D1 = N + 1 - d
    cols = D1
    if banded:
        cols = max(min(D1, N - d - prefix[a] + 1), 0)
    c0 = g_cstart[g]
    Ci = g_cstart[g + 1] - c0
    s0 = g_sstart[g]
    ns = g_sstart[g + 1] - s0
    usedw[: ns * Ci] = False
    usedh[: ns * Ci] = False
    if Ci > 0 and cols > 0:
        x0 = xs_sorted[a, c0]
        xtop = xs_sorted[a, c0 + Ci - 1]
        stop = lim * (1.0 + RISING_SLACK) if lim > 0 else 0.0
        for b in range(a, bmax + 1):
            cb = CB[g, a, b]
            if not (cb < INF) or not (cb + x0 <= lim):
                if rising and not (cb < INF and cb <= stop):
                    break  # every longer stage is slower still (or fits nowhere)
                continue
            for p in range(g_pstart[g], g_pstart[g + 1]):
                key = p_key[p]
                lo = Rlo[b + 1, key]
                hi = min(Rhi[b + 1, key], cols)
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
                    base = _open_row(accw, usedw, rowq, cols)
                    _min_into(accw, base + lo, R, b + 1, Hb + lo, hi - lo, w, 0)
                    continue
                if q <= direct:  # max(w + x_r, H) rank by rank, each at its own row
                    for r in range(q):
                        base = _open_row(acch, usedh, zn * Ci + r, cols)
                        _min_into(acch, base + lo, R, b + 1, Hb + lo, hi - lo, w + xs_sorted[a, c0 + r], 1)
                    continue
                whi_v = w + xs_sorted[a, c0 + q - 1]
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
    blk = g_base[g] + a * a_stride
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
                    out[tgt : tgt + D1] = INF
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
                out[tgt + cols : tgt + D1] = INF


@kernel()
def plain_level(out, a_stride, R, Rlo, Rhi, Rout, Rout_lo, Rout_hi, first, a_lo, a_hi, bmax, N, lim, minmax, direct,
                overwrite, grp, xs, xs_sorted, rank, CB, X, banded, prefix, rising, self_feed, runs, init_off, init_val):
    """One level of the plain recursion for first layers a_hi..a_lo (see the module docstring).

    ``CB[g, a, b]``: the compute of stage a..b on group g at the level's stash (inf if it does not
    fit); ``prefix`` the device band of :func:`prefix_devices` when ``banded``; ``rising``: see
    :func:`_plain_cell`; ``direct``: in
    ``minmax``, a candidate fitting at most that many categories is taken rank by rank. Row a is
    written at ``a * a_stride`` of ``out`` (0: one scratch row), its shared keys into ``Rout[a]``.
    """
    width, cells = _widths(grp, N)
    accw, acch = np.empty(cells * width), np.empty(cells * width if minmax else 1)
    usedw, usedh = np.zeros(cells, np.bool_), np.zeros(cells, np.bool_)
    for a in range(a_hi, a_lo - 1, -1):
        if not overwrite:
            _prefill(out, a_stride, a, first.size, init_off, init_val)
        for g in range(grp[0].size):
            _plain_cell(out, a_stride, R, Rlo, Rhi, a, g, bmax, N, lim, minmax, direct, overwrite, grp, xs, xs_sorted,
                        rank, CB, X, banded, prefix, rising, accw, acch, usedw, usedh)
        _finish_row(out, a_stride, a, runs, Rout, Rout_lo, Rout_hi, first, self_feed, R, Rlo, Rhi)


# --------------------------------------------------------------------------- stages with options


@kernel(inline=True)
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


@kernel(inline=True)
def _spec_value(kind, s, k, f_cap, low, OA, OB, o0, F, xo, xi, minmax, lim):
    """A stage's value under the spec (see :mod:`.dp.options`): options ``OA[o0 + f]``, ``OB[o0 + f]``
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


@kernel(inline=True)
def _ranked_costs(kind, s, k, f_cap, lim, OA, OB, o0, F, xo, xs_sorted, a, c0, Ci, cstar):
    """``minsum``: per rank r of the incoming categories (sorted by x), the least rank-free part of the
    stage's cost over the options that are allowed at rank r -- zb-h1 ``U + xo`` with ``(s U + k W) +
    s (xo + x_r) <= lim``, GPipe ``(F + xo) + B`` with ``F + xo <= f_cap`` and its key (``B + x_r``
    or ``F + xo``) ``<= lim``; non-decreasing in r (the allowed options shrink as x grows), inf where
    none is allowed. Returns the number of ranks with an allowed option."""
    cstar[:Ci] = INF
    q = 0
    for f in range(F):
        one, two = OA[o0 + f], OB[o0 + f]
        if not (one < INF):
            continue
        if kind == ZB:
            cost = one + xo
            g = s * one + k * two
            r = 0
            while r < Ci and g + s * (xo + xs_sorted[a, c0 + r]) <= lim:
                r += 1
        else:
            fwd = one + xo
            if not (fwd <= f_cap):
                continue
            cost = fwd + two
            if kind == GPIPE_B:
                r = 0
                while r < Ci and two + xs_sorted[a, c0 + r] <= lim:
                    r += 1
            else:
                r = Ci if fwd <= lim else 0
        for j in range(r):
            if cost < cstar[j]:
                cstar[j] = cost
        if r > q:
            q = r
    return q


@kernel()
def _options_cell(out, a_stride, R, Rlo, Rhi, a, g, bmax, L, N, lim, minmax, overwrite, grp, xs, xs_sorted, rank,
                  g_F, g_ooff, OA, OB, kind, s, k, f_cap, X, acc, used, tcache, seen, qcache):
    """The (a, g) block of a level with options (see the module docstring)."""
    g_size, g_base, g_stride, g_pstart, p_off, p_key, p_zn, p_co, g_sstart, s_zn, g_cstart = grp
    D1 = N + 1 - g_size[g]
    c0 = g_cstart[g]
    Ci = g_cstart[g + 1] - c0
    s0 = g_sstart[g]
    ns = g_sstart[g + 1] - s0
    used[: ns * Ci] = False
    seen[:] = -1
    F = g_F[g]
    finite_lim = lim < INF
    for b in range(a, bmax + 1):
        o0 = g_ooff[g] + (a * L + b) * F
        low = _spec_low(kind, s, k, OA, OB, o0, F)
        if not (low < INF) or not (low <= lim):
            continue
        for p in range(g_pstart[g], g_pstart[g + 1]):
            key = p_key[p]
            lo = Rlo[b + 1, key]
            hi = min(Rhi[b + 1, key], D1)
            if lo >= hi:
                continue
            co = p_co[p]
            zn = p_zn[p]
            if not minmax:  # the rank-free parts, one deposit per run of equal parts (module docstring)
                if seen[co] != b:
                    seen[co] = b
                    qcache[co] = _ranked_costs(kind, s, k, f_cap, lim, OA, OB, o0, F, X[b, co], xs_sorted, a, c0, Ci,
                                               tcache[co * Ci : co * Ci + Ci])
                q = qcache[co]
                for r in range(q):
                    t = tcache[co * Ci + r]
                    if r + 1 < q and tcache[co * Ci + r + 1] == t:
                        continue  # the deposit at the run's last rank serves this one
                    base = _open_row(acc, used, zn * Ci + r, D1)
                    _min_into(acc, base + lo, R, b + 1, p_off[p] + lo, hi - lo, t, 0)
                continue
            if seen[co] != b:  # the stage's values per incoming category, once per outgoing category
                seen[co] = b
                xo = X[b, co]
                for cl in range(Ci):
                    t = _spec_value(kind, s, k, f_cap, low, OA, OB, o0, F, xo, xs[a, c0 + cl], True, lim)
                    if finite_lim and not (t <= lim):
                        t = INF
                    tcache[co * Ci + cl] = t
            for cl in range(Ci):
                t = tcache[co * Ci + cl]
                if not (t < INF):
                    continue
                base = _open_row(acc, used, zn * Ci + cl, D1)
                _min_into(acc, base + lo, R, b + 1, p_off[p] + lo, hi - lo, t, 1)
    blk = g_base[g] + a * a_stride
    for zl in range(ns):
        zn = s_zn[s0 + zl]
        if zn >= 0 and not minmax:
            _suffix_min(acc, used, zn, Ci, D1)
        for cl in range(Ci):
            tgt = blk + (zl * Ci + cl) * D1
            row = (zn * Ci + (cl if minmax else rank[a, c0 + cl])) if zn >= 0 else -1
            if row < 0 or not used[row]:
                if overwrite:
                    out[tgt : tgt + D1] = INF
                continue
            src = row * D1
            x = 0.0 if minmax else xs[a, c0 + cl]
            for c in range(D1):
                v = acc[src + c] + x if not minmax else acc[src + c]
                if overwrite or v < out[tgt + c]:
                    out[tgt + c] = v


@kernel()
def options_level(out, a_stride, R, Rlo, Rhi, Rout, Rout_lo, Rout_hi, first, a_lo, a_hi, bmax, L, N, lim, minmax,
                  overwrite, grp, xs, xs_sorted, rank, g_F, g_ooff, OA, OB, kind, s, k, f_cap, X, self_feed, runs,
                  init_off, init_val):
    """One level of the recursion with options for first layers a_hi..a_lo (see the module docstring).

    The options of stage a..b on group g are ``OA``/``OB`` from ``g_ooff[g] + (a * L + b) * g_F[g]``
    (``kind``, ``s``, ``k``, ``f_cap``: the spec, :func:`_spec_value`); rows as :func:`plain_level`'s.
    """
    G = grp[0].size
    width, cells = _widths(grp, N)
    g_cstart = grp[10]
    ci_max = 1
    for g in range(G):
        ci_max = max(ci_max, g_cstart[g + 1] - g_cstart[g])
    acc, used = np.empty(cells * width), np.zeros(cells, np.bool_)
    tcache, seen = np.empty(X.shape[1] * ci_max), np.empty(X.shape[1], np.int64)
    qcache = np.zeros(X.shape[1], np.int64)
    for a in range(a_hi, a_lo - 1, -1):
        if not overwrite:
            _prefill(out, a_stride, a, first.size, init_off, init_val)
        for g in range(G):
            _options_cell(out, a_stride, R, Rlo, Rhi, a, g, bmax, L, N, lim, minmax, overwrite, grp, xs, xs_sorted,
                          rank, g_F, g_ooff, OA, OB, kind, s, k, f_cap, X, acc, used, tcache, seen, qcache)
        _finish_row(out, a_stride, a, runs, Rout, Rout_lo, Rout_hi, first, self_feed, R, Rlo, Rhi)


# --------------------------------------------------------------------------- the device band


@kernel()
def prefix_devices(CB1, sizes, lim, N):
    """prefix[a]: the fewest devices stages of compute at most ``lim`` (``CB1[i, a, b]``, stash 1)
    need to cover layers 0..a-1; ``2 N + 1`` when none can (:func:`.dp.recursion.prefix_devices`).
    First layers in order: prefix[a] is final once every stage ending before a is in, and each stage
    a..b is read along its row."""
    S, L = CB1.shape[0], CB1.shape[1]
    big = 2 * N + 1
    out = np.full(L + 1, big, np.int64)
    out[0] = 0
    for a in range(L):
        if out[a] >= big:
            continue
        for i in range(S):
            d = sizes[i]
            if d > N:
                continue
            v = out[a] + d
            row = CB1[i, a]
            for b in range(a, L):
                if row[b] <= lim and v < out[b + 1]:
                    out[b + 1] = v
    for b in range(L + 1):
        out[b] = min(out[b], big)
    return out
