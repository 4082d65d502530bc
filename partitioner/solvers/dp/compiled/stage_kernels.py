"""Loops of :meth:`.dp.stage.StageCosts.matrix` and ``options`` (numba-compilable Python, run as they are or

compiled by :mod:`.engine`): one (size, stash).

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.compiled.stage_kernels``.
"""
from __future__ import annotations

import numpy as np

from .marks import kernel

__all__ = ["single_segment", "spanning_one", "spanning", "options_single", "options_spanning_one", "options_spanning"]

INF = np.inf


@kernel()
def _least(cur: float, v: float) -> float:
    """``np.minimum(cur, v)`` for non-NaN floats (``v`` on ties)."""
    return cur if cur < v else v


@kernel()
def single_segment(best, time, js, ends, runs):
    """Stages inside one run: ``best[a, b]`` = least over configs of the forward sum (see the module docstring)."""
    for k in range(runs.shape[0]):
        st, en = runs[k, 0], runs[k, 1]
        for a in range(st, en + 1):
            for q in range(js.shape[0]):
                j = js[q]
                e = min(ends[q, a], en)
                if e < a:
                    continue
                acc = time[j, a] if a == st else 0.0 + time[j, a]
                best[a, a] = _least(best[a, a], acc)
                for b in range(a + 1, e + 1):
                    acc = acc + time[j, b]
                    best[a, b] = _least(best[a, b], acc)


@kernel()
def spanning_one(best, row, end, run_end):
    """One config: ``best[a, b]`` for b past a's run and within ``end[a]`` is ``np.cumsum(row[a:b + 1])[-1]``."""
    L = row.shape[0]
    for a in range(L):
        e = min(end[a], L - 1)
        first_end = run_end[a]
        if e <= first_end:
            continue
        acc = row[a]
        for b in range(a + 1, e + 1):
            acc = acc + row[b]
            if b > first_end:
                best[a, b] = _least(best[a, b], acc)


@kernel()
def _memory(wp, ap, j, x, y, stash):
    return (wp[j, y + 1] - wp[j, x]) + stash * (ap[j, y + 1] - ap[j, x])


@kernel()
def _prune(t, m, n, out_t, out_m):
    """Sort points ``(t[:n], m[:n])`` by memory (stable insertion sort, in place: frontiers are short),
    keep each strictly faster than all before it; writes the kept points to ``out_t, out_m`` and returns
    how many."""
    for x in range(1, n):
        pt, pm = t[x], m[x]
        y = x - 1
        while y >= 0 and m[y] > pm:
            t[y + 1], m[y + 1] = t[y], m[y]
            y -= 1
        t[y + 1], m[y + 1] = pt, pm
    kept = 0
    run = INF
    for p in range(n):
        if t[p] < run:
            out_t[kept] = t[p]
            out_m[kept] = m[p]
            kept += 1
            run = t[p]
    return kept


@kernel()
def spanning(best, time, js, mesh, meshes, ends, wp, ap, stash, cap, runs, r2, k0, size):
    """Stages from run ``k0`` into a later run (see the module docstring); ``mesh[q]`` the mesh index of
    config ``js[q]`` (``meshes`` of them), ``r2[k, src, dst]`` the doubled reshard entering run k;
    ``size`` the points per mesh the buffers start with (grown as needed)."""
    R, J = runs.shape[0], js.shape[0]
    st0, en0 = runs[k0, 0], runs[k0, 1]
    size = max(size, J)  # points per mesh the buffers hold (the first segment's at least)
    ft, fm = np.empty((meshes, size)), np.empty((meshes, size), dtype=np.int64)  # the frontier
    et, em = np.empty((meshes, size)), np.empty((meshes, size), dtype=np.int64)  # entering run k
    nt, nm = np.empty((meshes, J * size)), np.empty((meshes, J * size), dtype=np.int64)  # after run k
    pt, pm = np.empty(meshes * size), np.empty(meshes * size, dtype=np.int64)
    fn, en_n, nn = np.zeros(meshes, np.int64), np.zeros(meshes, np.int64), np.zeros(meshes, np.int64)
    suffix = np.empty(J)
    L = time.shape[1]
    last = np.empty((J, L))  # per config and b: forward sum from b's run start (runs after k0)
    room = np.empty((J, L), dtype=np.int64)  # ... and cap minus that segment's memory
    for k in range(k0 + 1, R):
        st, en = runs[k, 0], runs[k, 1]
        for q in range(J):
            j = js[q]
            for b in range(st, min(ends[q, st], en) + 1):
                last[q, b] = time[j, b] if b == st else last[q, b - 1] + time[j, b]
                room[q, b] = cap - _memory(wp, ap, j, st, b, stash)
    for a in range(en0, st0 - 1, -1):
        # step 1: the first segment a..en0, its time the backward running sum from en0
        nn[:] = 0
        for q in range(J):
            j = js[q]
            suffix[q] = time[j, en0] if a == en0 else suffix[q] + time[j, a]
            if ends[q, a] < en0:
                continue
            g = mesh[q]
            nt[g, nn[g]] = suffix[q]
            nm[g, nn[g]] = _memory(wp, ap, j, a, en0, stash)
            nn[g] += 1
        for g in range(meshes):
            fn[g] = _prune(nt[g], nm[g], nn[g], ft[g], fm[g])
        for k in range(k0 + 1, R):
            total = 0
            for g in range(meshes):
                total += fn[g]
            if total == 0:
                break
            if total > size:  # grow the other buffers
                size = 2 * total
                et, em = np.empty((meshes, size)), np.empty((meshes, size), dtype=np.int64)
                nt, nm = np.empty((meshes, J * size)), np.empty((meshes, J * size), dtype=np.int64)
                pt, pm = np.empty(meshes * size), np.empty(meshes * size, dtype=np.int64)
            st, en = runs[k, 0], runs[k, 1]
            # step 2: enter run k in each mesh
            for dst in range(meshes):
                n = 0
                for src in range(meshes):
                    add = r2[k, src, dst]
                    for p in range(fn[src]):
                        pt[n] = ft[src, p] + add
                        pm[n] = fm[src, p]
                        n += 1
                en_n[dst] = _prune(pt, pm, n, et[dst], em[dst])
            # steps 3 and 4 per config of run k
            nn[:] = 0
            for q in range(J):
                g = mesh[q]
                F = en_n[g]
                e = min(ends[q, st], en)
                if F == 0 or e < st:
                    continue
                top = F  # points et[g, :top] may fit; memory only grows with b
                for b in range(st, e + 1):
                    while top > 0 and em[g, top - 1] > room[q, b]:
                        top -= 1
                    v = et[g, top - 1] + last[q, b] if top > 0 else INF
                    best[a, b] = _least(best[a, b], v)
                if e == en:  # step 4: the whole run in config q
                    seg = room[q, en]
                    for p in range(F):
                        if em[g, p] <= seg:
                            nt[g, nn[g]] = et[g, p] + last[q, en]
                            nm[g, nn[g]] = em[g, p] + (cap - seg)
                            nn[g] += 1
            if nn.max() > ft.shape[1]:  # the frontier may hold every point
                ft, fm = np.empty((meshes, nn.max())), np.empty((meshes, nn.max()), dtype=np.int64)
            for g in range(meshes):
                fn[g] = _prune(nt[g], nm[g], nn[g], ft[g], fm[g])


# ----------------------------------------------------------------------------- options: Pareto pairs per stage


@kernel()
def _add_pair(U, W, a, b, n, u, w):
    """Add ``(u, w)`` to the list ``U[a, b, :n], W[a, b, :n]`` of Pareto-minimal pairs (increasing u,
    strictly falling w; a pair equal to a listed one, or dominated by one, is not added): the new
    length, -1 when it would outgrow the arrays."""
    pos = 0
    while pos < n and U[a, b, pos] <= u:
        pos += 1
    if pos > 0 and W[a, b, pos - 1] <= w:
        return n
    start = pos - 1 if pos > 0 and U[a, b, pos - 1] == u else pos  # same u, larger w: dominated
    end = pos
    while end < n and W[a, b, end] >= w:
        end += 1
    size = n - (end - start) + 1
    if size > U.shape[2]:
        return -1
    if end - start == 0:  # insert: move the tail right
        for x in range(n - 1, end - 1, -1):
            U[a, b, x + 1] = U[a, b, x]
            W[a, b, x + 1] = W[a, b, x]
    elif end - start > 1:  # several dominated: move the tail left, clear what is freed
        for x in range(end, n):
            U[a, b, start + 1 + x - end] = U[a, b, x]
            W[a, b, start + 1 + x - end] = W[a, b, x]
        for x in range(size, n):
            U[a, b, x] = INF
            W[a, b, x] = INF
    U[a, b, start] = u
    W[a, b, start] = w
    return size


@kernel()
def _insert(U, W, C, a, b, u, w):
    """:func:`_add_pair` to stage (a, b)'s list in ``U, W`` (lengths ``C``); False when it is full."""
    n = _add_pair(U, W, a, b, C[a, b], u, w)
    if n < 0:
        return False
    C[a, b] = n
    return True


@kernel()
def options_single(U, W, C, one, two, js, ends, runs):
    """Stages inside one run: every config's forward sums of both parts, summed as :func:`single_segment` sums
    the time; False when a list outgrew ``U.shape[2]``."""
    ok = True
    for k in range(runs.shape[0]):
        st, en = runs[k, 0], runs[k, 1]
        for a in range(st, en + 1):
            for q in range(js.shape[0]):
                j = js[q]
                e = min(ends[q, a], en)
                u = one[j, a] if a == st else 0.0 + one[j, a]
                w = two[j, a] if a == st else 0.0 + two[j, a]
                for b in range(a, e + 1):
                    if b > a:
                        u = u + one[j, b]
                        w = w + two[j, b]
                    ok &= _insert(U, W, C, a, b, u, w)
    return ok


@kernel()
def options_spanning_one(U, W, C, one, two, end, run_end):
    """One config: a spanning stage's parts are ``np.cumsum`` of each part from a (see :func:`spanning_one`)."""
    L = one.shape[0]
    ok = True
    for a in range(L):
        e = min(end[a], L - 1)
        if e <= run_end[a]:
            continue
        u, w = one[a], two[a]
        for b in range(a + 1, e + 1):
            u = u + one[b]
            w = w + two[b]
            if b > run_end[a]:
                ok &= _insert(U, W, C, a, b, u, w)
    return ok


@kernel()
def _prune3(u, w, m, n, ou, ow, om):
    """The points ``[:n]`` no other point dominates in (u, w, memory), of equal ones the first, in order;
    written to ``ou, ow, om``; returns how many."""
    kept = 0
    for p in range(n):
        dominated = False
        for q in range(n):
            if q != p and u[q] <= u[p] and w[q] <= w[p] and m[q] <= m[p]:
                if u[q] != u[p] or w[q] != w[p] or m[q] != m[p] or q < p:
                    dominated = True
                    break
        if not dominated:
            ou[kept] = u[p]
            ow[kept] = w[p]
            om[kept] = m[p]
            kept += 1
    return kept


@kernel()
def _sort_by_memory(u, w, m, n):
    """Stable insertion sort of the points ``[:n]`` by memory (frontiers are short)."""
    for x in range(1, n):
        pu, pw, pm = u[x], w[x], m[x]
        y = x - 1
        while y >= 0 and m[y] > pm:
            u[y + 1], w[y + 1], m[y + 1] = u[y], w[y], m[y]
            y -= 1
        u[y + 1], w[y + 1], m[y + 1] = pu, pw, pm


@kernel()
def options_spanning(U, W, C, one, two, js, mesh, meshes, ends, wp, ap, stash, cap, runs, q1, q2, k0, size):
    """Stages from run ``k0`` into a later run with (part 1, part 2, memory) frontiers per mesh (steps 1-4 of
    :mod:`.dp.stage`, "Options"); ``q1, q2[k, src, dst]`` the parts' reshard terms entering run k;
    ``size`` as in :func:`spanning`."""
    R, J, L = runs.shape[0], js.shape[0], one.shape[1]
    st0, en0 = runs[k0, 0], runs[k0, 1]
    lu, lw = np.empty((J, L)), np.empty((J, L))  # per config and b: both parts' forward sums from b's run start
    room = np.empty((J, L), dtype=np.int64)  # ... and cap minus that segment's memory
    for k in range(k0 + 1, R):
        st, en = runs[k, 0], runs[k, 1]
        for q in range(J):
            j = js[q]
            for b in range(st, min(ends[q, st], en) + 1):
                lu[q, b] = one[j, b] if b == st else lu[q, b - 1] + one[j, b]
                lw[q, b] = two[j, b] if b == st else lw[q, b - 1] + two[j, b]
                room[q, b] = cap - _memory(wp, ap, j, st, b, stash)
    size = max(size, J)  # points per mesh the buffers hold (the first segment's at least)
    fu, fw, fm = np.empty((meshes, size)), np.empty((meshes, size)), np.empty((meshes, size), dtype=np.int64)
    eu, ew, em = np.empty((meshes, size)), np.empty((meshes, size)), np.empty((meshes, size), dtype=np.int64)
    nu, nw = np.empty((meshes, J * size)), np.empty((meshes, J * size))
    nm = np.empty((meshes, J * size), dtype=np.int64)
    pu, pw, pm = np.empty(meshes * size), np.empty(meshes * size), np.empty(meshes * size, dtype=np.int64)
    ku, kw = np.empty((1, 1, meshes * size)), np.empty((1, 1, meshes * size))  # (u, w) Pareto pairs that fit
    fn, e_n, nn = np.zeros(meshes, np.int64), np.zeros(meshes, np.int64), np.zeros(meshes, np.int64)
    su, sw = np.empty(J), np.empty(J)
    ok = True
    for a in range(en0, st0 - 1, -1):
        nn[:] = 0
        for q in range(J):  # step 1: the first segment's backward running sums
            j = js[q]
            su[q] = one[j, en0] if a == en0 else su[q] + one[j, a]
            sw[q] = two[j, en0] if a == en0 else sw[q] + two[j, a]
            if ends[q, a] < en0:
                continue
            g = mesh[q]
            nu[g, nn[g]], nw[g, nn[g]] = su[q], sw[q]
            nm[g, nn[g]] = _memory(wp, ap, j, a, en0, stash)
            nn[g] += 1
        for g in range(meshes):
            fn[g] = _prune3(nu[g], nw[g], nm[g], nn[g], fu[g], fw[g], fm[g])
        for k in range(k0 + 1, R):
            total = 0
            for g in range(meshes):
                total += fn[g]
            if total == 0:
                break
            if total > size:  # grow the other buffers
                size = 2 * total
                eu, ew, em = np.empty((meshes, size)), np.empty((meshes, size)), np.empty((meshes, size), dtype=np.int64)
                nu, nw = np.empty((meshes, J * size)), np.empty((meshes, J * size))
                nm = np.empty((meshes, J * size), dtype=np.int64)
                pu, pw, pm = np.empty(meshes * size), np.empty(meshes * size), np.empty(meshes * size, dtype=np.int64)
                ku, kw = np.empty((1, 1, meshes * size)), np.empty((1, 1, meshes * size))
            st, en = runs[k, 0], runs[k, 1]
            for dst in range(meshes):  # step 2: enter run k in each mesh
                n = 0
                for src in range(meshes):
                    for p in range(fn[src]):
                        pu[n] = fu[src, p] + q1[k, src, dst]
                        pw[n] = fw[src, p] + q2[k, src, dst]
                        pm[n] = fm[src, p]
                        n += 1
                e_n[dst] = _prune3(pu, pw, pm, n, eu[dst], ew[dst], em[dst])
                _sort_by_memory(eu[dst], ew[dst], em[dst], e_n[dst])
            nn[:] = 0
            for q in range(J):  # steps 3 and 4
                g = mesh[q]
                F = e_n[g]
                e = min(ends[q, st], en)
                if F == 0 or e < st:
                    continue
                top = F  # the points are in order of memory, which only grows with b
                fitting = -1
                kept = 0
                for b in range(st, e + 1):
                    while top > 0 and em[g, top - 1] > room[q, b]:
                        top -= 1
                    if top != fitting:  # the Pareto pairs of the points that fit, (u, w) alone
                        fitting = top
                        kept = 0
                        for p in range(top):
                            kept = _add_pair(ku, kw, 0, 0, kept, eu[g, p], ew[g, p])
                    for p in range(kept):
                        ok &= _insert(U, W, C, a, b, ku[0, 0, p] + lu[q, b], kw[0, 0, p] + lw[q, b])
                if e == en:
                    for p in range(F):
                        if em[g, p] <= room[q, en]:
                            nu[g, nn[g]] = eu[g, p] + lu[q, en]
                            nw[g, nn[g]] = ew[g, p] + lw[q, en]
                            nm[g, nn[g]] = em[g, p] + (cap - room[q, en])
                            nn[g] += 1
            if nn.max() > fu.shape[1]:  # the frontier may hold every point
                fu, fw = np.empty((meshes, nn.max())), np.empty((meshes, nn.max()))
                fm = np.empty((meshes, nn.max()), dtype=np.int64)
            for g in range(meshes):
                fn[g] = _prune3(nu[g], nw[g], nm[g], nn[g], fu[g], fw[g], fm[g])
    return ok
