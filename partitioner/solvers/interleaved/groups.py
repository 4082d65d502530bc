"""A device group's best choice for given chunks: its mesh and every chunk's option.

For a fixed cut, a group's mesh and its chunks' configs change only its
own compute and its own memory (:mod:`.brute` says why the per-group best
is optimal for the whole plan). The group's problem is a multiple-choice
knapsack with one row per held state s of its op order
(:func:`.space.held_states`): pick one Pareto option o_j per local chunk j
(:class:`.tables.ChunkTables`) to minimise sum_j compute(o_j) subject to

    sum_j weight(o_j) + n_sj * act(o_j) <= capacity     for every state s.

:func:`best_group` answers it per mesh, the first mesh on ties.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.interleaved.groups``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from time import perf_counter
from typing import Sequence

import numpy as np

from .tables import ChunkChoice, ChunkTables

__all__ = ["GroupChoice", "best_group", "group_rows"]


@dataclass(frozen=True)
class GroupChoice:
    """A group's choice: its compute (ms), its mesh, one option per local chunk, and whether it is proven best."""

    compute_ms: float
    mesh: tuple[int, ...]
    choices: tuple[ChunkChoice, ...]
    proven: bool = True


def group_rows(states: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """The memory rows of a group: its held states (one count per local chunk), as tuples."""
    return tuple(tuple(s) for s in states)


def _arrays(options: Sequence[tuple[ChunkChoice, ...]], rows: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, np.ndarray]:
    """(C, M): compute per chunk and option (v x O, padded with inf) and bytes per chunk, option and row
    (v x O x R as floats, padded with inf)."""
    v, O, R = len(options), max(len(o) for o in options), len(rows)
    C = np.full((v, O), np.inf)
    M = np.full((v, O, R), np.inf)
    n = np.asarray(rows, dtype=float).T  # v x R: held count of local chunk j in row r
    for j, opts in enumerate(options):
        k = len(opts)
        C[j, :k] = [o.compute_ms for o in opts]
        w = np.fromiter((o.weight_bytes for o in opts), float, k)
        a = np.fromiter((o.act_bytes for o in opts), float, k)
        M[j, :k, :] = w[:, None] + a[:, None] * n[j][None, :]
    return C, M


def _heuristic(C: np.ndarray, M: np.ndarray, capacity: int) -> np.ndarray | None:
    """A choice (option index per chunk) that seems to fit, found greedily, or None.

    From the fastest option of every chunk, while some row is over the
    capacity, take the swap that removes the most excess bytes per
    millisecond added; then, while one fits, the swap that saves the most
    compute per byte the fullest row grows. Bytes are floats here: the
    caller checks the choice in integers.
    """
    v = C.shape[0]
    idx = np.arange(v)
    pick = np.zeros(v, dtype=int)  # options come by compute: 0 is the fastest
    used = M[idx, pick].sum(axis=0)
    steps = 4 * C.size + 4
    for _ in range(steps):
        over = float(np.max(used - capacity))
        if over <= 0:
            break
        after = used[None, None, :] - M[idx, pick][:, None, :] + M  # v x O x R
        gain = over - np.max(after - capacity, axis=2)  # excess removed
        extra = C - C[idx, pick][:, None]
        with np.errstate(invalid="ignore"):
            score = np.where(gain > 0, gain / np.maximum(extra, 1e-12), -np.inf)
        j, o = np.unravel_index(int(np.argmax(score)), score.shape)
        if not score[j, o] > -np.inf:
            return None
        pick[j] = o
        used = after[j, o]
    if float(np.max(used - capacity)) > 0:
        return None
    for _ in range(steps):
        after = used[None, None, :] - M[idx, pick][:, None, :] + M
        ok = np.all(after <= capacity, axis=2)
        saved = C[idx, pick][:, None] - C
        grow = np.max(after - used[None, None, :], axis=2)
        with np.errstate(invalid="ignore"):
            score = np.where(ok & (saved > 0), saved / np.maximum(grow, 1.0), -np.inf)
        j, o = np.unravel_index(int(np.argmax(score)), score.shape)
        if not score[j, o] > -np.inf:
            break
        pick[j] = o
        used = after[j, o]
    return pick


def _row_multiplier(C: np.ndarray, M: np.ndarray, r: int, capacity: int) -> tuple[float, float]:
    """The multiplier mu >= 0 of memory row r that (nearly) maximises the Lagrangian bound, and that bound.

    D(mu) = sum_j min_o (compute_jo + mu * bytes_jor) - mu * capacity is a
    lower bound of the group's least compute for every mu >= 0 (a choice
    that fits has sum_j bytes_jor <= capacity); it is concave, and its
    slope at mu is the bytes of the minimising choices less the capacity,
    so the best mu is found by bisection on the slope's sign. Only the
    value D(mu) matters for validity; mu need not be the exact maximiser.
    """
    Mr = np.where(np.isfinite(C), M[:, :, r], 0.0)
    idx = np.arange(C.shape[0])

    def dual(mu: float) -> tuple[float, float]:
        red = C + mu * Mr
        k = np.argmin(red, axis=1)
        return float(red[idx, k].sum() - mu * capacity), float(Mr[idx, k].sum())

    base, used = dual(0.0)
    if used <= capacity:
        return 0.0, base
    hi = 1e-12
    for _ in range(200):  # grow until the minimising choices fit (they do once mu is past every trade-off)
        if dual(hi)[1] <= capacity:
            break
        hi *= 4.0
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if dual(mid)[1] > capacity:
            lo = mid
        else:
            hi = mid
    value, mu = max((dual(mu)[0], mu) for mu in (lo, hi))
    return mu, value


class _Stop(Exception):
    """The deadline stopped a branch and bound."""


def _mesh_best(options: Sequence[tuple[ChunkChoice, ...]], rows: tuple[tuple[int, ...], ...], capacity: int,
               ceiling: float, exact: bool, deadline: float | None = None) -> tuple[float, tuple[ChunkChoice, ...] | None, bool]:
    """(compute, choice, proven) of one mesh below ``ceiling`` (module docstring); the choice is None when
    none was found below the ceiling (proven: there is none). Past ``deadline`` the branch and bound
    stops with its best so far, not proven."""
    v, R = len(options), len(rows)
    cost = [[o.compute_ms for o in opts] for opts in options]
    mem = [[[o.weight_bytes + n[j] * o.act_bytes for n in rows] for o in opts] for j, opts in enumerate(options)]
    tail_bytes = [[0] * R for _ in range(v + 1)]
    for j in range(v - 1, -1, -1):
        tail_bytes[j] = [tail_bytes[j + 1][r] + min(m[r] for m in mem[j]) for r in range(R)]
    if any(b > capacity for b in tail_bytes[0]):
        return math.inf, None, True  # not even each row's least bytes fit
    fastest = sum(c[0] for c in cost)
    if fastest >= ceiling:
        return ceiling, None, True
    best: list = [ceiling, None]
    C, M = _arrays(options, rows)
    start = _heuristic(C, M, capacity)
    if start is not None:
        pick = [int(o) for o in start]
        t0 = sum(cost[j][o] for j, o in enumerate(pick))
        if t0 < ceiling and all(sum(mem[j][o][r] for j, o in enumerate(pick)) <= capacity for r in range(R)):
            best = [t0, tuple(options[j][o] for j, o in enumerate(pick))]
    if best[1] is not None and best[0] <= fastest:
        return best[0], best[1], True  # the fastest options fit
    if not exact:
        return best[0], best[1], False
    mu, row, root = 0.0, 0, fastest  # the row whose Lagrangian bound is the strongest at the root
    for r in range(R):
        m_r, bound_r = _row_multiplier(C, M, r, capacity)
        if bound_r > root:
            mu, row, root = m_r, r, bound_r
    margin = 1e-12 * max(1.0, abs(root))  # the Lagrangian sums are floats: cut only what is clearly no better
    if root >= best[0] + margin:
        return best[0], best[1], True
    reduced = [[cost[j][o] + mu * mem[j][o][row] for o in range(len(cost[j]))] for j in range(v)]
    order = [sorted(range(len(cost[j])), key=lambda o: (reduced[j][o], cost[j][o], o)) for j in range(v)]
    tail_time = [0.0] * (v + 1)
    tail_reduced = [0.0] * (v + 1)
    for j in range(v - 1, -1, -1):
        tail_time[j] = tail_time[j + 1] + min(cost[j])
        tail_reduced[j] = tail_reduced[j + 1] + min(reduced[j])
    picked: list[int] = []
    used = [0] * R
    nodes = [0]

    def walk(j: int, time: float) -> None:
        nodes[0] += 1
        if deadline is not None and nodes[0] % 256 == 0 and perf_counter() > deadline:
            raise _Stop
        if j == v:
            if time < best[0]:
                best[0], best[1] = time, tuple(options[i][o] for i, o in enumerate(picked))
            return
        for o in order[j]:
            t = time + cost[j][o]
            if t + tail_time[j + 1] >= best[0]:
                continue
            add = mem[j][o]
            if t + tail_reduced[j + 1] - mu * (capacity - used[row] - add[row]) >= best[0] + margin:
                continue
            if any(used[r] + add[r] + tail_bytes[j + 1][r] > capacity for r in range(R)):
                continue
            for r in range(R):
                used[r] += add[r]
            picked.append(o)
            walk(j + 1, t)
            picked.pop()
            for r in range(R):
                used[r] -= add[r]

    try:
        walk(0, 0.0)
    except _Stop:
        return best[0], best[1], False
    return best[0], best[1], True


def best_group(tables: ChunkTables, ranges: Sequence[tuple[int, int]], rows: tuple[tuple[int, ...], ...],
               capacity: int, ceiling: float = math.inf, exact: bool = True,
               deadline: float | None = None) -> GroupChoice | None:
    """The group's least-compute choice over its meshes (the first mesh on ties), or None when none is found.

    Parameters
    ----------
    tables : ChunkTables
        The chunk options of the group size.
    ranges : sequence of (first, last)
        The group's chunks, local order.
    rows : tuple of tuple of int
        Its held states (:func:`group_rows`).
    capacity : int
        Bytes per GPU.
    ceiling : float
        Only choices with compute below it are looked for.
    exact : bool
        Branch and bound (``proven`` True: the best, and None means none
        fits below the ceiling); False takes the greedy choice per mesh
        (``proven`` False unless the fastest options fit).
    deadline : float, optional
        ``time.perf_counter()`` value past which an exact search stops with
        its best so far (``proven`` False).
    """
    found: GroupChoice | None = None
    limit = ceiling
    proven = True
    for mesh in tables.meshes:
        options = [tables.options(a, b, mesh) for a, b in ranges]
        if any(not o for o in options):
            continue
        value, choice, sure = _mesh_best(options, rows, capacity, limit, exact, deadline)
        proven = proven and sure
        if choice is not None and (found is None or value < found.compute_ms):
            found = GroupChoice(value, mesh, choice)
            limit = value
    if found is not None and not proven:
        found = GroupChoice(found.compute_ms, found.mesh, found.choices, False)
    return found
