"""A good cut fast: local search over the chunk bounds of one group count.

Moves shift a run of consecutive bounds b_c .. b_{c+r} (r < min(P, :data:`MAX_RUN`)) by the same
delta: chunk c - 1 gains (or loses) delta layers, chunk c + r loses (or
gains) them and the chunks between keep their sizes but slide, so load
moves between two groups that need not be neighbours. A move is kept when
it lowers the key (excess bytes, objective, group times from the largest
down): the objective first, and among equal objectives a smaller second
largest group, so that the search crosses the plateaus of ``max``. The
search stops at a cut no move improves, or at the deadline; with time
left, it perturbs the best cut at random (seeded) and searches again.

Nothing here claims optimality: :mod:`.exact` proves or bounds.
"""
from __future__ import annotations

import random
import time
from typing import Iterator

from .cuts import CutCost, GroupSpace

__all__ = ["improve", "cost_key", "DELTAS", "MAX_RUN"]

DELTAS = (1, -1, 2, -2, 4, -4)  # how far a move shifts its bounds (layers)
MAX_RUN = 4  # bounds a move shifts together, at most (each run's groups are re-priced: P of them for a run of P)


def cost_key(cost: CutCost) -> tuple:
    """What the search minimises: (excess bytes, objective, group times from the largest down)."""
    return cost.excess, cost.value, tuple(sorted(cost.times, reverse=True))


def _moves(space: GroupSpace, bounds: tuple[int, ...], start: int) -> Iterator[tuple[int, tuple[int, ...]]]:
    """Every valid shifted cut with the first bound it moves, the runs starting at bound ``start`` first."""
    K, P = space.K, space.groups
    order = [1 + (start + i) % (K - 1) for i in range(K - 1)] if K > 1 else []
    for c in order:
        for r in range(min(P, K - c)):
            for delta in DELTAS:
                lo, hi = bounds[c] + delta, bounds[c + r] + delta
                if bounds[c - 1] < lo and hi < bounds[c + r + 1]:
                    yield c, bounds[:c] + tuple(b + delta for b in bounds[c:c + r + 1]) + bounds[c + r + 1:]


def descend(space: GroupSpace, cost: CutCost, deadline: float | None) -> CutCost:
    """First-improvement descent from ``cost`` to a cut no move improves (or the deadline)."""
    best, best_key = cost, cost_key(cost)
    start = 0
    improved = True
    while improved:
        improved = False
        for i, (c, bounds) in enumerate(_moves(space, best.bounds, start)):
            if deadline is not None and time.perf_counter() > deadline:
                return best
            trial = space.price(bounds)
            k = cost_key(trial)
            if k < best_key:
                best, best_key, start = trial, k, c - 1
                improved = True
                break
    return best


def improve(space: GroupSpace, starts: list[tuple[int, ...]], deadline: float | None, seed: int = 0,
            rounds: int = 0) -> CutCost | None:
    """The best cut found from ``starts`` by :func:`descend`, then up to ``rounds`` perturbed restarts."""
    best: CutCost | None = None
    for bounds in dict.fromkeys(starts):
        found = descend(space, space.price(bounds), deadline)
        if best is None or cost_key(found) < cost_key(best):
            best = found
        if deadline is not None and time.perf_counter() > deadline:
            return best
    if best is None:
        return None
    rng = random.Random(seed)
    K = space.K
    for _ in range(rounds):
        if deadline is not None and time.perf_counter() > deadline:
            break
        kicked = list(best.bounds)
        for _ in range(rng.randint(1, 3)):
            c = rng.randint(1, K - 1) if K > 1 else 0
            if not c:
                break
            delta = rng.choice((-3, -2, -1, 1, 2, 3))
            new = kicked[c] + delta
            if kicked[c - 1] < new < kicked[c + 1]:
                kicked[c] = new
        found = descend(space, space.price(tuple(kicked)), deadline)
        if cost_key(found) < cost_key(best):
            best = found
    return best
