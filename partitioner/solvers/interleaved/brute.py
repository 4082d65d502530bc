"""``brute`` under ``training.schedule: interleaved``: the exhaustive search of the exact methods' space.

The space is :mod:`.space`'s (equal groups on canonical ids,
one mesh per group, P·v contiguous chunks, per-segment variants). For every
group count P and every cut of the layers into K = P·v chunks the search
takes, group by group, the fastest choice that fits in memory, enumerated
explicitly: every mesh of the group size, and every product of its v
chunks' config tuples (:func:`.space.chunk_options`) whose
weights plus the peak of sum_c held_c x act_c over the op order
(:func:`.space.held_states`) fit.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.interleaved.brute``.
"""
from __future__ import annotations

import itertools
import time
from math import comb

from ...plan import objective_value
from ...problem import Problem
from ..base import Candidate, SolveRequest
from ..errors import OutOfTime
from .space import (
    chunk_options,
    group_counts,
    group_meshes,
    held_states,
    interleaved_plan,
    no_group_count_message,
    send_ms,
)

__all__ = ["solve_brute_interleaved", "interleaved_enumeration_size"]


def interleaved_enumeration_size(problem: Problem) -> int:
    """Cuts the search visits: sum over the group counts P of C(L - 1, P·v - 1)."""
    v, L = problem.training.virtual_stages, problem.num_layers
    return sum(comb(L - 1, P * v - 1) for P in group_counts(problem))


def _best_group(problem: Problem, groups: int, g: int, bounds, cache: dict, deadline: float | None = None):
    """Group g's fastest fitting choice for the chunk bounds: (compute per chunk, configs per chunk) or None.
    Raises :class:`~partitioner.solvers.errors.OutOfTime` past ``deadline`` (checked every 4096 choices)."""
    P, v, m = groups, problem.training.virtual_stages, problem.microbatches
    d = problem.num_devices // P
    capacity = problem.cluster.gpu_memory_bytes
    states = held_states(P, m, v, g)
    chunks = range(g, P * v, P)
    best = None
    for mesh in group_meshes(problem, d):
        per_chunk = []
        for c in chunks:
            key = (bounds[c], bounds[c + 1] - 1, mesh)
            if key not in cache:
                cache[key] = chunk_options(problem, key[0], key[1], mesh)
            per_chunk.append(cache[key])
        for n, combo in enumerate(itertools.product(*per_chunk)):
            if deadline is not None and n % 4096 == 0 and time.perf_counter() > deadline:
                raise OutOfTime
            total = sum(o.compute_ms for o in combo)
            if best is not None and total >= best[0]:
                continue
            peak = max(sum(n * o.act_bytes for n, o in zip(state, combo)) for state in states)
            if sum(o.weight_bytes for o in combo) + peak <= capacity:
                best = (total, combo)
    return best


def _cut_short(best_plan) -> Candidate:
    if best_plan is None:
        return Candidate("error", message="brute: time limit reached before any valid plan was found", timed_out=True)
    return Candidate("feasible", best_plan, message="brute: time limit reached; the search is incomplete",
                     timed_out=True)


def solve_brute_interleaved(problem: Problem, request: SolveRequest, deadline: float | None, limit: int) -> Candidate:
    """Exhaustive search of the interleaved space (module docstring); the plan or the reason there is none."""
    work = interleaved_enumeration_size(problem)
    if work > limit:
        return Candidate(
            "error",
            message=(
                f"brute: {work:,} cuts of the layers into chunks exceed the limit of {limit:,} "
                "(option max_combinations); use cpsat or milp for a problem this size"
            ),
        )
    counts = group_counts(problem)
    if not counts:
        return Candidate("infeasible", message=no_group_count_message(problem))
    v, m, L = problem.training.virtual_stages, problem.microbatches, problem.num_layers
    cache: dict = {}
    best_value, best_plan = float("inf"), None
    for P in counts:
        K = P * v
        for cuts in itertools.combinations(range(1, L), K - 1):
            if deadline is not None and time.perf_counter() > deadline:
                return _cut_short(best_plan)
            bounds = (0,) + cuts + (L,)
            try:
                choices = [_best_group(problem, P, g, bounds, cache, deadline) for g in range(P)]
            except OutOfTime:
                return _cut_short(best_plan)
            if not all(choices):
                continue
            sends = [send_ms(problem, bounds[c + 1] - 1, P, c % P) for c in range(K - 1)]
            options = [choices[c % P][1][c // P] for c in range(K)]
            times = [
                options[c].compute_ms + (sends[c] if c < K - 1 else 0.0) + (sends[c - 1] if c > 0 else 0.0)
                for c in range(K)
            ]
            value = objective_value(request.objective, times, m, "interleaved", virtual_stages=v)
            if value < best_value:
                best_value = value
                best_plan = interleaved_plan(problem, P, bounds, [o.configs for o in options])
    if best_plan is None:
        return Candidate(
            "infeasible",
            message=(
                "no interleaved plan of the searched space (equal device groups, one mesh per group) fits in "
                f"memory for any of the group counts {', '.join(map(str, counts))}"
            ),
        )
    return Candidate("optimal", best_plan, bound=None)
