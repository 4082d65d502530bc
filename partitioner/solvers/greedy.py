"""``greedy``: seed lesson 16's layer rebalancing, generalised to meshes and layouts.

Lesson 16 gives the heavy first (vision) and last (action) stages fewer
layers so every stage takes about as long. The rule here, for each stage
count P the problem allows:

1. **Work per layer** ``w_i``: the least device-milliseconds of layer i over
   its layouts (``min_l devices(l) * (fwd + bwd)``), an estimate of its cost
   independent of the mesh it ends up on.
2. **Cuts**: contiguous balancing of the work into P stages -- the smallest
   threshold T such that filling stages left to right, each up to T, needs
   at most P stages (bisection over T), then the last stages are split until
   there are exactly P.
3. **Sizes**: every stage starts with 1 device; devices are then added one
   allowed step at a time (1 -> 2 -> 4 -> ... -> G -> 2G -> ...) to the stage
   whose estimated time ``work / devices`` is largest, as long as the step fits
   in the devices left; the sizes must end up summing to N, otherwise this P
   is skipped.
4. **Configs**: each stage takes its fastest configs of that size that fit in
   memory with its stash (1F1B and ZB-H1: ``min(m, P - p)``; GPipe: ``m``) -- one layout per stage in
   format v1, one config per segment with the reshards between them in v2
   (:meth:`~partitioner.solvers.tables.CostTables.best_stage`).
5. **Placement**: first fit in stage order (adjacent small stages share nodes).

Every P that yields a valid plan is evaluated and the best is returned, with
status ``feasible`` (never ``optimal``: nothing is proven); under a time
limit, the best of the stage counts tried before it ran out. When no P works,
the result is ``infeasible`` with the reason the greedy plan failed --
which does not prove the problem infeasible.
"""
from __future__ import annotations

import bisect
import heapq
import time
from typing import Callable

import numpy as np

from ..plan import Plan, Stage, objective_value
from ..placement import contiguous_node_assignment, node_assignment_ids, pack_runs
from ..problem import Problem
from ..schedules import stash
from .base import Candidate, SolveRequest, register
from .feasibility import feasible_stage_counts, quick_infeasibility
from .tables import CostTables

__all__ = ["solve_greedy", "balance_cuts", "layer_work", "grow_sizes"]


@register("greedy")
def solve_greedy(problem: Problem, request: SolveRequest) -> Candidate:
    if problem.cluster.topology is not None:
        return Candidate("error", message="greedy: custom cluster topologies are not supported by the solvers yet")
    reason = quick_infeasibility(problem)
    if reason:
        return Candidate("infeasible", message=reason)
    deadline = request.deadline(time.perf_counter())
    tables = CostTables(problem)
    work = layer_work(problem)
    best = None
    failures: list[str] = []
    counts = feasible_stage_counts(problem)
    for tried, P in enumerate(counts):
        if deadline is not None and time.perf_counter() > deadline:
            if best is None:
                return Candidate("error", message="greedy: time limit reached before any plan was found", timed_out=True)
            return Candidate(
                "feasible",
                best[1],
                message=f"greedy: time limit reached after {tried} of {len(counts)} stage counts; the best plan of those",
                timed_out=True,
            )
        cuts = balance_cuts(work, P)
        stage_work = [float(work[a : b + 1].sum()) for a, b in cuts]
        sizes = grow_sizes(stage_work, problem.cluster.allowed_sizes(), problem.num_devices)
        if sizes is None:
            failures.append(f"P={P}: no allowed sizes sum to {problem.num_devices}")
            continue
        plan, why, compute = _build(problem, tables, cuts, sizes)
        if plan is None:
            failures.append(f"P={P}: {why}")
            continue
        value = _value(problem, tables, plan, compute, request.objective)
        if best is None or value < best[0]:
            best = (value, plan)
    if best is None:
        detail = failures[0] if len(failures) == 1 else f"{failures[0]} (and {len(failures) - 1} more stage counts)"
        return Candidate("infeasible", message=f"greedy found no plan that fits: {detail}")
    return Candidate("feasible", best[1])


def layer_work(problem: Problem) -> np.ndarray:
    """``min over layouts of devices * (fwd + bwd)`` per layer (device-ms)."""
    return np.array(
        [min(lay.devices * (c.fwd_ms + c.bwd_ms) for lay, c in layer.costs.items()) for layer in problem.layers]
    )


def balance_cuts(work: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous ``(first, last)`` ranges, exactly ``parts`` of them, balancing ``work`` (each >= 0)."""
    n = len(work)
    if not 1 <= parts <= n:
        raise ValueError(f"cannot cut {n} layers into {parts} stages")
    if not np.all(work >= 0):
        raise ValueError("the work per layer must be >= 0")
    return _balance(work, parts, _fill_to(work, parts))


def _fill_to(work: np.ndarray, parts: int) -> Callable[[float], list[int]]:
    """``fill(threshold)``: the stage starts when stages are filled left to right, each up to the threshold
    (stopping past ``parts`` stages: too many means the threshold is too low)."""
    running: dict[int, list[float]] = {}  # start -> its stage's running sums, acc += w in order

    def sums(s: int) -> list[float]:
        # np.cumsum adds sequentially: the same floats a Python loop makes; the work is >= 0, so each
        # list is non-decreasing and its first entry past a threshold is found by bisection
        if s not in running:
            running[s] = np.cumsum(work[s:]).tolist()
        return running[s]

    def fill(threshold: float) -> list[int]:
        starts = [0]
        while len(starts) <= parts:
            s = starts[-1]
            acc = sums(s)
            over = max(bisect.bisect_right(acc, threshold), 1)  # a layer after the first that overflows
            if over >= len(acc):
                return starts
            starts.append(s + over)
        return starts  # too many: the threshold is too low

    return fill


def _balance(work: np.ndarray, parts: int, fill: Callable[[float], list[int]]) -> list[tuple[int, int]]:
    """The least threshold whose ``fill`` needs at most ``parts`` stages (bisection), then splits up to ``parts``."""
    n = len(work)
    # numpy sums pairwise, fill() sequentially: widen the top so that it surely fits in one stage
    lo, hi = float(work.max()), float(work.sum()) * (1 + 1e-9) + 1e-12
    for _ in range(60):
        mid = (lo + hi) / 2
        if len(fill(mid)) <= parts:
            hi = mid
        else:
            lo = mid
    starts = fill(hi)
    # too few stages: split the stage with the most work (and more than one layer) near its middle
    prefix = np.concatenate([[0.0], np.cumsum(work)])
    bounds = starts + [n]
    ranges = [(-(prefix[b] - prefix[a]), a, b) for a, b in zip(bounds, bounds[1:]) if b - a > 1]
    heapq.heapify(ranges)
    while len(starts) < parts:
        _, a, b = heapq.heappop(ranges)
        middle = (prefix[a] + prefix[b]) / 2
        cut = min(max(int(np.searchsorted(prefix, middle, side="left")), a + 1), b - 1)
        starts.append(cut)
        for lo, hi in ((a, cut), (cut, b)):
            if hi - lo > 1:
                heapq.heappush(ranges, (-(prefix[hi] - prefix[lo]), lo, hi))
    starts.sort()
    bounds = starts + [n]
    return [(bounds[k], bounds[k + 1] - 1) for k in range(parts)]


def grow_sizes(stage_work: list[float], allowed: tuple[int, ...], total: int) -> list[int] | None:
    """Start every stage at 1 device; give the next allowed step to the slowest stage that fits."""
    sizes = [1] * len(stage_work)
    left = total - len(sizes)
    if left < 0:
        return None
    following = {a: b for a, b in zip(allowed, allowed[1:])}
    heap = [(-w, p) for p, w in enumerate(stage_work)]  # slowest first: -work / size
    heapq.heapify(heap)
    while left > 0:
        skipped = []
        while heap:
            key, p = heapq.heappop(heap)
            nxt = following.get(sizes[p])
            if nxt is not None and nxt - sizes[p] <= left:
                left -= nxt - sizes[p]
                sizes[p] = nxt
                heapq.heappush(heap, (-stage_work[p] / nxt, p))
                break
            skipped.append((key, p))
        else:
            return None
        for item in skipped:
            heapq.heappush(heap, item)
    return sizes


def _value(problem: Problem, tables: CostTables, plan: Plan, compute: list[float], objective: str) -> float:
    """The objective from the stages' ``compute`` (with reshards) and the tables' transfers.

    The chosen plan is re-evaluated exactly by ``solve``.
    """
    stages = plan.stages
    cluster = problem.cluster
    times = []
    for p, s in enumerate(stages):
        t = compute[p]
        for q in (p - 1, p):
            if 0 <= q < len(stages) - 1:
                a, b = stages[q], stages[q + 1]
                na = {cluster.node_of(d) for d in a.device_ids}
                same = len(na) == 1 and na == {cluster.node_of(d) for d in b.device_ids}
                t += tables.transfer(a.last_layer, a.devices, b.devices, same)
        times.append(t)
    return objective_value(objective, times, problem.microbatches)


def _build(problem: Problem, tables: CostTables, cuts, sizes) -> tuple[Plan | None, str, list[float]]:
    """The plan for ``cuts`` and ``sizes`` with each stage's fastest fitting configs, and their compute times."""
    P, m = len(cuts), problem.microbatches
    stashes = stash(problem.training.schedule, P, m)  # 1F1B's and ZB-H1's min(m, P - p), GPipe's m
    stages = []
    for p, ((a, b), d) in enumerate(zip(cuts, sizes)):
        choice = tables.best_stage(a, b, d, stashes[p])
        if choice is None:
            return None, f"stage {p} (layers {a}..{b}) fits in no {d}-device layout", []
        stages.append((a, b, d, choice))
    assignment = contiguous_node_assignment(problem.cluster, sizes) or pack_runs(
        problem.cluster, sizes, [False] * (P - 1)
    )
    if assignment is None:
        return None, "the sizes cannot be placed on the nodes", []
    # node_assignment_ids gives the canonical placement (ids grouped by node, ranks in id order)
    # that best_stage's reshard times assume
    ids = node_assignment_ids(problem.cluster, sizes, assignment)
    plan = Plan(tuple(Stage.from_configs(a, b, d, ch.configs, ids[p]) for p, (a, b, d, ch) in enumerate(stages)))
    return plan, "", [ch.compute_ms for _, _, _, ch in stages]
