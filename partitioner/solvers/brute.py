"""``brute``: exhaustive search, the test oracle.

Enumerates every stage count P in the bounds, every way to cut the layers
into P contiguous stages, every sequence of P allowed sizes summing to N,
and every placement of the stages on nodes. Placements are enumerated as
assignments of the in-node stages to nodes (nodes are interchangeable, so
assignments are canonical "first use" labelings) and grouped by the link
pattern they produce, since on the default cluster graph a plan's times
depend on the placement only through which adjacent stages share a node.

Layouts: for a fixed cut, size sequence and placement, a stage's layout
changes only its own compute time and memory, and both objectives are
non-decreasing in every stage time, so the product over layouts is
searched stage by stage (the fastest layout that fits each stage) without
losing the optimum.

The search refuses problems whose enumeration exceeds ``max_combinations``
(option, default 2,000,000 cut x size combinations): roughly up to 12 layers
on 16 GPUs. The best plan is re-checked by :func:`~partitioner.plan.evaluate`.
"""
from __future__ import annotations

import itertools
import time
from functools import lru_cache
from math import comb

from ..plan import Plan, Stage, objective_value
from ..placement import label_nodes, node_assignment_ids, size_sequences
from ..problem import Cluster, Problem
from .base import Candidate, SolveRequest, register
from .feasibility import explain_infeasible, feasible_stage_counts
from .tables import CostTables

__all__ = ["solve_brute", "DEFAULT_MAX_COMBINATIONS", "placement_patterns"]

DEFAULT_MAX_COMBINATIONS = 2_000_000


@register("brute", options=("max_combinations",))
def solve_brute(problem: Problem, request: SolveRequest) -> Candidate:
    if problem.cluster.topology is not None:
        return Candidate("error", message="brute: custom cluster topologies are not supported by the solvers yet")
    start = time.perf_counter()
    deadline = request.deadline(start)
    counts = feasible_stage_counts(problem)
    allowed = problem.cluster.allowed_sizes()
    N, L = problem.num_devices, problem.num_layers
    work = sum(comb(L - 1, P - 1) * len(size_sequences(allowed, N, P)) for P in counts)
    limit = int(request.option("max_combinations", DEFAULT_MAX_COMBINATIONS))
    if work > limit:
        return Candidate(
            "error",
            message=(
                f"brute: {work:,} cut x size combinations exceed the limit of {limit:,} "
                f"(option max_combinations); use dp or cpsat for a problem this size"
            ),
        )
    tables = CostTables(problem)
    m = problem.microbatches
    best_value, best_plan = float("inf"), None
    timed_out = False
    for P in counts:
        for sizes in size_sequences(allowed, N, P):
            patterns = placement_patterns(problem.cluster, sizes)
            for cuts in itertools.combinations(range(1, L), P - 1):
                if deadline is not None and time.perf_counter() > deadline:
                    timed_out = True
                    break
                bounds = (0,) + cuts + (L,)
                choices = [tables.best(bounds[p], bounds[p + 1] - 1, sizes[p], min(m, P - p)) for p in range(P)]
                if any(c is None for c in choices):
                    continue
                for links, assignment in patterns.items():
                    times = []
                    for p in range(P):
                        t = choices[p].compute_ms
                        if p < P - 1:
                            t += tables.transfer(bounds[p + 1] - 1, sizes[p], sizes[p + 1], links[p])
                        if p > 0:
                            t += tables.transfer(bounds[p] - 1, sizes[p - 1], sizes[p], links[p - 1])
                        times.append(t)
                    value = objective_value(request.objective, times, m)
                    if value < best_value:
                        best_value = value
                        ids = node_assignment_ids(problem.cluster, sizes, assignment)
                        best_plan = Plan(
                            tuple(
                                Stage(bounds[p], bounds[p + 1] - 1, sizes[p], choices[p].layout.dp, choices[p].layout.tp, ids[p])
                                for p in range(P)
                            )
                        )
            if timed_out:
                break
        if timed_out:
            break
    if timed_out:
        if best_plan is None:
            return Candidate("error", message="brute: time limit reached before any valid plan was found")
        return Candidate("feasible", best_plan, message="brute: time limit reached; the search is incomplete")
    if best_plan is None:
        return Candidate("infeasible", message=explain_infeasible(problem))
    return Candidate("optimal", best_plan, bound=None)


def placement_patterns(cluster: Cluster, sizes: tuple[int, ...]) -> dict[tuple[bool, ...], list]:
    """Every link pattern some placement of ``sizes`` produces, with one node assignment each."""
    return dict(_patterns(cluster.nodes, cluster.gpus_per_node, tuple(sizes)))


@lru_cache(maxsize=4096)
def _patterns(nodes: int, G: int, sizes: tuple[int, ...]) -> tuple:
    whole = sum(s // G for s in sizes if s > G)
    bins = nodes - whole
    found: dict[tuple[bool, ...], list] = {}
    P = len(sizes)
    label = [None] * P
    fill: list[int] = []

    def rec(p: int) -> None:
        if p == P:
            if len(fill) == bins and all(f == G for f in fill):
                assignment = label_nodes(sizes, label, G)
                links = tuple(
                    sizes[q] <= G and sizes[q + 1] <= G and label[q] == label[q + 1] for q in range(P - 1)
                )
                found.setdefault(links, assignment)
            return
        s = sizes[p]
        if s > G:
            label[p] = None
            rec(p + 1)
            return
        for b in range(len(fill)):
            if fill[b] + s <= G:
                fill[b] += s
                label[p] = b
                rec(p + 1)
                fill[b] -= s
        if len(fill) < bins:
            fill.append(s)
            label[p] = len(fill) - 1
            rec(p + 1)
            fill.pop()

    rec(0)
    return tuple(found.items())
