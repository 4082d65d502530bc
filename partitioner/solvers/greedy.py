"""``greedy``: seed lesson 16's layer rebalancing, generalised to meshes and layouts.

Lesson 16 gives the heavy first (vision) and last (action) stages fewer
layers so every stage takes about as long. The rule here, for each stage
count P the problem allows:

1. **Work per layer** ``w_i``: the least device-milliseconds of layer i over its layouts (``min_l
devices(l) * (fwd + bwd)``), an estimate of its cost independent of the mesh it ends up on. 2.
**Cuts**: contiguous balancing of the work into P stages -- the smallest threshold T such that
filling stages left to right, each up to T, needs at most P stages (bisection over T), then the last
stages are split until there are exactly P. 3. **Sizes**: every stage starts with 1 device; devices
are then added one allowed step at a time (1 -> 2 -> 4 -> ...

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.greedy``.
"""
from __future__ import annotations

import bisect
import heapq
import math
import time
from typing import Callable

import numpy as np

from ..cluster.levels import boundary_bandwidth, consecutive_fits, consecutive_ids
from ..cluster.placement import contiguous_node_assignment, node_assignment_ids, pack_runs
from ..cluster.topology import transfer_ms
from ..plan import Plan, Stage, objective_value
from ..plan.schedules import stash
from ..problem import Cluster, Problem
from .base import Candidate, SolveRequest, register
from .feasibility import feasible_stage_counts, quick_infeasibility
from .options import Capabilities
from .tables import CostTables

__all__ = ["solve_greedy", "balance_cuts", "Balancer", "layer_work", "grow_sizes", "packing_chain", "run_seconds", "cost_entries"]

# CPU seconds greedy takes over all its stage counts: a constant plus a share per cost entry. Measured (CPU
# time, benchmarks/limits.py) 0.02 s on openvla-7b's 86 layers on 64 GPUs (1,892 entries), and 0.07-0.08, 0.30-0.38
# and 1.15-1.34 s on the 200-, 1,000- and 5,000-layer format-v3 synthetic problems of 4 x 8 GPUs (26,622 to
# 668,862 entries: 1.7-3.2 microseconds each); rounded up, so that the methods that fall back to it keep time
# enough for it. Its first stage count, which always runs, took 50-100 % of that.
RUN_SECONDS = 0.02
RUN_SECONDS_PER_ENTRY = 3.5e-6


def run_seconds(problem: Problem) -> float:
    """An estimate of the CPU seconds greedy takes over all its stage counts on ``problem`` (module constants)."""
    return RUN_SECONDS + RUN_SECONDS_PER_ENTRY * cost_entries(problem)


def cost_entries(problem: Problem) -> int:
    """The cost entries of all layers: what the tables of greedy and dp grow with."""
    return sum(len(layer.costs) for layer in problem.layers)


_BOTH = frozenset({"bottleneck", "iteration"})
# plans valid under 1F1B and ZB-H1 (same stash); GPipe's and the interleaved stash it does not model
CAPABILITIES = Capabilities(schedules={"1f1b": _BOTH, "zb-h1": _BOTH}, partial_racks=True, levels=True)


@register("greedy", capabilities=CAPABILITIES)
def solve_greedy(problem: Problem, request: SolveRequest) -> Candidate:
    """The greedy plan (module docstring). Also called directly by the exact methods for a hint or a
    fallback, so it keeps its own quick infeasibility check (cheap)."""
    reason = quick_infeasibility(problem)
    if reason:
        return Candidate("infeasible", message=reason)
    deadline = request.deadline()
    tables = CostTables(problem)
    work = layer_work(problem)
    best = None
    failures: list[str] = []
    counts = feasible_stage_counts(problem)
    balancer = Balancer(work, counts)
    for tried, P in enumerate(counts):
        if deadline is not None and time.perf_counter() > deadline and tried > 0:  # the first count always runs
            if best is None:
                return Candidate("error", message="greedy: time limit reached before any plan was found", timed_out=True)
            return Candidate(
                "feasible",
                best[1],
                message=f"greedy: time limit reached after {tried} of {len(counts)} stage counts; the best plan of those",
                timed_out=True,
            )
        cuts = balancer.cuts(P)
        stage_work = [float(work[a : b + 1].sum()) for a, b in cuts]
        sizes = grow_sizes(stage_work, problem.cluster.allowed_sizes(), problem.num_devices)
        stages, why, ids = _build(problem, tables, cuts, sizes) if sizes is not None else (None, "", [])
        if stages is None and problem.cluster.levels is not None and sizes is not None:
            # levels: the grown sizes may break rule 4 in stage order; equal shares of a size that every
            # level's group and the node divide always sit consecutively (when P of them fill the cluster)
            even = _even_sizes(problem.cluster, P)
            if even is not None:
                sizes = even
                stages, why, ids = _build(problem, tables, cuts, sizes)
        if stages is None and problem.cluster.partial:
            # partial racks: the grown sizes may not pack into the nodes; sizes from a divisibility chain
            # that divides every node's used GPUs always do (first fit, largest first)
            chained = grow_sizes(stage_work, packing_chain(problem.cluster), problem.num_devices)
            if chained is not None:
                sizes = chained
                stages, why, ids = _build(problem, tables, cuts, sizes)
        if sizes is None:
            failures.append(f"P={P}: no allowed sizes sum to {problem.num_devices}")
            continue
        if stages is None:
            failures.append(f"P={P}: {why}")
            continue
        value = _value(problem, tables, stages, ids, request.objective)
        if best is None or value < best[0]:
            best = (value, _plan(stages, ids))
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
    return Balancer(work, (parts,)).cuts(parts)


class Balancer:
    """:func:`balance_cuts` of one work vector for the stage ``counts`` given, sharing work between them.

    The cuts are exactly those of :func:`_balance` with :func:`_fill_to` (the
    60-step bisection over the threshold, then the splits); what makes that
    cheaper:

    * ``fill(T)`` compares each stage's running sums (``np.cumsum`` from its
      first layer: the same floats for every T and every count) with T, so
      its result is a step function of T, constant between two consecutive
      running-sum values (the *candidates*) and right-continuous. The number
      of stages it makes is non-increasing in T: a larger threshold ends no
      stage earlier, as a running sum from a later first layer is no larger
      (float rounding is monotone). So the thresholds that fit ``parts``
      stages are exactly ``T >= T*``, T* a candidate (or every T).
    * Many counts (greedy asks for every P), up to :data:`MAX_CANDIDATE_LAYERS`
      layers: T* of every count at once by a binary search over the sorted
      candidates ``>= work.max()``, each round one vectorised fill per count
      (:meth:`_least_fitting`); the bisection is then replayed with the test
      ``mid >= T*`` (:meth:`_replay`), which equals ``len(fill(mid)) <= parts``
      for every midpoint: the bisection starts at ``lo = work.max()`` and its
      midpoints never fall below ``lo`` (one that did would get a real fill).
    * Otherwise, per count, the bisection itself where a fill at T also tells
      the interval of thresholds with the same result (:meth:`_interval_fill`):
      a midpoint above a known fitting interval fits, one below a known
      failing interval fails, and only the others are filled (about 15 of
      the 60).

    Either way every midpoint gets the answer a fill would give, so the final
    ``hi`` is the same float and its fill the same stage starts.
    """

    def __init__(self, work: np.ndarray, counts) -> None:
        n = len(work)
        self.counts = sorted({int(p) for p in counts})
        for parts in self.counts:
            if not 1 <= parts <= n:
                raise ValueError(f"cannot cut {n} layers into {parts} stages")
        if not np.all(work >= 0):
            raise ValueError("the work per layer must be >= 0")
        self.work, self.n = work, n
        self._lists: dict[int, list[float]] = {}  # start -> fill's running sums as a list (bisect)
        self._starts: dict[int, list[int]] = {}  # count -> fill's stage starts at the bisection's hi
        if len(self.counts) >= MANY_COUNTS and n <= MAX_CANDIDATE_LAYERS:
            self._starts = self._search()

    def cuts(self, parts: int) -> list[tuple[int, int]]:
        """The ``parts`` ranges of :func:`balance_cuts` (``parts`` one of the counts given)."""
        if parts not in self.counts:
            raise ValueError(f"{parts} stages were not asked of this Balancer")
        starts = self._starts.get(parts)
        if starts is None:
            hi = _bisect_threshold(self.work, self._skipping(parts))
            starts = self._interval_fill(hi, parts)[0]
        return _split(self.work, parts, list(starts))

    # ------------------------------------------------------------------ one count: skipping fills
    def _sums(self, s: int) -> list[float]:
        found = self._lists.get(s)
        if found is None:  # the list _fill_to makes for start s
            found = self._lists[s] = np.cumsum(self.work[s:]).tolist()
        return found

    def _interval_fill(self, threshold: float, parts: int) -> tuple[list[int], float, float]:
        """``fill(threshold)`` of :func:`_fill_to` and ``[low, up)``, thresholds at which it is the same:
        every stage's bisection lands at the same place there (running sums ``<= low`` and ``> up``)."""
        starts = [0]
        low, up = -math.inf, math.inf
        while len(starts) <= parts:
            s = starts[-1]
            acc = self._sums(s)
            pos = bisect.bisect_right(acc, threshold)
            if pos:
                low = max(low, acc[pos - 1])
            if pos < len(acc):
                up = min(up, acc[pos])
            over = max(pos, 1)
            if over >= len(acc):
                break
            starts.append(s + over)
        return starts, low, up

    def _skipping(self, parts: int) -> Callable[[float], bool]:
        """``len(fill(mid)) <= parts``, filling only when no earlier fill's interval decides it: after a
        fit at T every threshold ``>= low`` fits (monotone), after a failure every one ``< up`` fails."""
        fits_from, fails_below = math.inf, -math.inf

        def feasible(mid: float) -> bool:
            nonlocal fits_from, fails_below
            if mid >= fits_from:
                return True
            if mid < fails_below:
                return False
            starts, low, up = self._interval_fill(mid, parts)
            if len(starts) <= parts:
                fits_from = low
                return True
            fails_below = up
            return False

        return feasible

    # ------------------------------------------------------------------ many counts: candidate search
    def _search(self) -> dict[int, list[int]]:
        """Every count's fill at the bisection's final ``hi``, by T* (the class docstring)."""
        work, n = self.work, self.n
        rows = [np.cumsum(work[s:]) for s in range(n)]  # fill's running sums from each first layer
        low = float(work.max())
        # the distinct sums in order (np.unique's first call imports numpy.ma: 0.2 s of every process's first solve)
        merged = np.sort(np.concatenate(rows))
        candidates = merged[np.r_[True, merged[1:] != merged[:-1]]] if merged.size else merged
        candidates = candidates[candidates >= low]
        counts = np.array(self.counts, dtype=np.int64)
        least = _least_fitting(rows, candidates, counts)
        his = [_bisect_threshold(work, self._replay(float(t), low, p)) for p, t in zip(self.counts, least)]
        number, path = _chase(rows, np.array(his), self.counts[-1])
        return {p: path[: number[k], k].tolist() for k, p in enumerate(self.counts)}

    def _replay(self, least: float, low: float, parts: int) -> Callable[[float], bool]:
        """The bisection's test ``len(fill(mid)) <= parts``, known to be ``mid >= least`` for ``mid >= low``."""
        fallback = self._skipping(parts)

        def feasible(mid: float) -> bool:
            return mid >= least if mid >= low else fallback(mid)  # the fallback is not reached

        return feasible


MANY_COUNTS = 8  # Balancer: the candidate search from this many stage counts on
MAX_CANDIDATE_LAYERS = 2048  # ... and up to this many layers (L (L + 1) / 2 candidates)


def _jumps(rows: list[np.ndarray], thresholds: np.ndarray) -> np.ndarray:
    """``[s, k]``: where the stage after one starting at s starts in ``fill(thresholds[k])`` (n: none);
    row n stays at n. The comparison of fill's ``max(bisect_right(sums, T), 1)`` (searchsorted, right)."""
    n = len(rows)
    nxt = np.full((n + 1, len(thresholds)), n, dtype=np.int64)
    for s, row in enumerate(rows):
        nxt[s] = np.minimum(s + np.maximum(np.searchsorted(row, thresholds, side="right"), 1), n)
    return nxt


def _chase(rows: list[np.ndarray], thresholds: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Per threshold, the number of stages fill makes (``cap + 1`` when more) and their starts,
    ``path[step, k]`` (n once finished), following :func:`_jumps` from layer 0."""
    n = len(rows)
    nxt = _jumps(rows, thresholds)
    cols = np.arange(len(thresholds))
    pos = np.zeros(len(thresholds), dtype=np.int64)
    steps = [pos]
    for _ in range(cap):
        pos = nxt[pos, cols]
        steps.append(pos)
        if (pos >= n).all():
            break
    path = np.array(steps)
    return (path < n).sum(axis=0), path


def _least_fitting(rows: list[np.ndarray], candidates: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per stage count, the least candidate whose fill makes at most that many stages: a parallel binary
    search (the largest candidate, the whole sum from layer 0, makes one stage)."""
    lo = np.full(len(counts), -1, dtype=np.int64)  # -1: below every candidate, taken as failing
    hi = np.full(len(counts), len(candidates) - 1, dtype=np.int64)  # fits
    cap = int(counts.max())
    while True:
        open_ = hi - lo > 1
        if not open_.any():
            return candidates[hi]
        mid = np.where(open_, (lo + hi) // 2, hi)
        fits = _chase(rows, candidates[mid], cap)[0] <= counts
        hi = np.where(open_ & fits, mid, hi)
        lo = np.where(open_ & ~fits, mid, lo)


def _bisect_threshold(work: np.ndarray, feasible: Callable[[float], bool]) -> float:
    """The bisection of :func:`_balance`: the threshold ``hi`` after 60 halvings (``feasible(hi)``)."""
    # numpy sums pairwise, fill() sequentially: widen the top so that it surely fits in one stage
    lo, hi = float(work.max()), float(work.sum()) * (1 + 1e-9) + 1e-12
    for _ in range(60):
        mid = (lo + hi) / 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi


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
    """The least threshold whose ``fill`` needs at most ``parts`` stages (bisection), then splits up to ``parts``:
    the plain rule, which :class:`Balancer` reproduces with fewer fills."""
    hi = _bisect_threshold(work, lambda mid: len(fill(mid)) <= parts)
    return _split(work, parts, fill(hi))


def _split(work: np.ndarray, parts: int, starts: list[int]) -> list[tuple[int, int]]:
    """Too few stages: split the stage with the most work (and more than one layer) near its middle
    until there are ``parts``; the ranges."""
    n = len(work)
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
    """Start every stage at the smallest allowed size (1 device unless ``cluster.stage_sizes`` says
    otherwise); give the next allowed step to the slowest stage that fits. None when no sizes are allowed
    (a partial rack whose :func:`packing_chain` is empty) or none sum to ``total``."""
    if not allowed:
        return None
    sizes = [allowed[0]] * len(stage_work)
    left = total - sum(sizes)
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


def packing_chain(cluster: Cluster) -> tuple[int, ...]:
    """Allowed sizes that always pack on a partial rack (DESIGN.md "Partial racks"): whole-node
    multiples, and in-node sizes forming a divisibility chain, each dividing the GPUs used on every node.

    Any sizes of this set that sum to the devices fill the nodes (divisible items into bins whose
    capacities the largest in-node item divides); :func:`grow_sizes` grows stages along it.
    """
    g, last = cluster.gpus_per_node, cluster.last_node_gpus
    common = math.gcd(g, last)
    allowed = cluster.allowed_sizes()
    chain: list[int] = []
    for size in sorted((s for s in allowed if s < g and common % s == 0), reverse=True):
        if not chain or chain[-1] % size == 0:
            chain.append(size)
    return tuple(sorted(chain) + [s for s in allowed if s >= g])  # g and k * g: allowed only on whole nodes


def _value(problem: Problem, tables: CostTables, stages: list, ids: list[tuple[int, ...]], objective: str) -> float:
    """The objective from the stages' compute (with reshards) and the tables' transfers, each
    stage's time summed in the order compute, transfer in, transfer out.

    The chosen plan is re-evaluated exactly by ``solve``.
    """
    cluster = problem.cluster
    nodes = [{cluster.node_of(d) for d in devices} for devices in ids]
    last = len(stages) - 1
    if cluster.levels is not None:  # consecutive stages: the levels' bandwidth at each boundary's offset
        transfers = [
            transfer_ms(problem.layers[stages[q][1]].out_bytes,
                        boundary_bandwidth(cluster, ids[q][0], stages[q][2], stages[q + 1][2]))
            for q in range(last)
        ]
    else:
        transfers = [
            tables.transfer(stages[q][1], stages[q][2], stages[q + 1][2], len(nodes[q]) == 1 and nodes[q] == nodes[q + 1])
            for q in range(last)
        ]
    times = []
    for p, (_, _, _, choice) in enumerate(stages):
        t = choice.compute_ms
        if p > 0:
            t += transfers[p - 1]
        if p < last:
            t += transfers[p]
        times.append(t)
    return objective_value(objective, times, problem.microbatches)


def _build(problem: Problem, tables: CostTables, cuts, sizes) -> tuple[list | None, str, list[tuple[int, ...]]]:
    """Each stage's ``(first, last, devices, StageChoice)`` for ``cuts`` and ``sizes`` with its fastest
    fitting configs, and the stages' device ids (None and why when something does not fit)."""
    P, m = len(cuts), problem.microbatches
    stashes = stash(problem.training.schedule, P, m)  # 1F1B's and ZB-H1's min(m, P - p), GPipe's m
    stages = []
    for p, ((a, b), d) in enumerate(zip(cuts, sizes)):
        choice = tables.best_stage(a, b, d, stashes[p])
        if choice is None:
            return None, f"stage {p} (layers {a}..{b}) fits in no {d}-device layout", []
        stages.append((a, b, d, choice))
    if problem.cluster.levels is not None:  # rule 4 on a levels cluster: consecutive devices in stage order
        offsets = [sum(sizes[:p]) for p in range(P)]
        if not all(consecutive_fits(problem.cluster, o, d) for o, d in zip(offsets, sizes)):
            return None, "the sizes cannot sit on consecutive devices (network levels, rule 4)", []
        return stages, "", consecutive_ids(sizes)
    assignment = contiguous_node_assignment(problem.cluster, sizes) or pack_runs(
        problem.cluster, sizes, [False] * (P - 1)
    )
    if assignment is None:
        return None, "the sizes cannot be placed on the nodes", []
    # node_assignment_ids gives the canonical placement (ids grouped by node, ranks in id order)
    # that best_stage's reshard times assume
    return stages, "", node_assignment_ids(problem.cluster, sizes, assignment)


def _even_sizes(cluster, P: int) -> list[int] | None:
    """``P`` equal allowed sizes filling the cluster, each at a consecutive offset allowed by rule 4 on a
    levels cluster, or None."""
    N = cluster.num_devices
    if N % P or not cluster.allows_size(N // P):
        return None
    d = N // P
    if not all(consecutive_fits(cluster, p * d, d) for p in range(P)):
        return None
    return [d] * P


def _plan(stages: list, ids: list[tuple[int, ...]]) -> Plan:
    """The plan of :func:`_build`'s stages (made only for the best stage count so far)."""
    return Plan(tuple(Stage.from_configs(a, b, d, ch.configs, ids[p]) for p, (a, b, d, ch) in enumerate(stages)))
