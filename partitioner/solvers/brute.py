"""``brute``: exhaustive search, the test oracle.

Enumerates every stage count P in the bounds, every way to cut the layers
into P contiguous stages, every sequence of P allowed sizes summing to N,
and every placement of the stages on nodes. Placements are enumerated as
assignments of the in-node stages to nodes (nodes are interchangeable, so
assignments are canonical "first use" labelings) and grouped by the link
pattern they produce, since on the default cluster graph a plan's times
depend on the placement only through which adjacent stages share a node.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.brute``.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from functools import lru_cache
from math import comb

from ..cluster.levels import consecutive_fits, consecutive_ids
from ..cluster.placement import label_nodes, node_assignment_ids, size_sequences
from ..cluster.reshard import stage_reshard_ms
from ..cluster.topology import bandwidth, transfer_ms
from ..plan import Plan, Stage, objective_value
from ..plan.evaluation import tied_bytes
from ..plan.schedules import stash
from ..problem import Cluster, Layout, Problem
from .base import Candidate, SolveRequest, register
from .dp.method import explain_infeasible
from .errors import OutOfTime
from .feasibility import feasible_stage_counts
from .interleaved.brute import solve_brute_interleaved
from .options import BruteOptions, Capabilities
from .tables import CostTables

__all__ = [
    "solve_brute",
    "DEFAULT_MAX_COMBINATIONS",
    "EnumerationWork",
    "enumeration_work",
    "COMBINATIONS_PER_SECOND",
    "ENTRIES_PER_SECOND",
    "placement_patterns",
    "levels_patterns",
    "count_size_sequences",
    "enumeration_size",
    "StageConfigs",
    "segment_candidates",
    "best_stage_configs",
    "pareto_stage_configs",
]

DEFAULT_MAX_COMBINATIONS = BruteOptions.max_combinations
# Upper bounds of brute's enumeration speed: cut x size combinations of the main loop, and cost entries read by
# the config tuples of its stages, per CPU second. Measured (benchmarks/limits.py; REPORT.md, "time limits at
# scale") about 2e4 combinations and 4.5e5 entries per CPU second on the 2-core reference machine, Python 3.11;
# set 10 and 4 times higher, so that an estimate from them stays a lower bound of the time on a faster machine.
COMBINATIONS_PER_SECOND = 2.0e5
ENTRIES_PER_SECOND = 2.0e6
# The search checks its deadline every this many config tuples of a stage (and every cut x size combination).
CHECK_EVERY = 4096


@dataclass(frozen=True)
class StageConfigs:
    """A stage's chosen configs (one per segment) and its time without transfers.

    ``compute_ms`` is Σ (fwd_ms + bwd_ms) over the stage's layers plus twice
    ``reshard_ms`` (Σ r, paid in the forward and in the backward).
    """

    configs: tuple[Layout, ...]
    compute_ms: float
    reshard_ms: float
    memory_bytes: int
    wgrad_ms: float = 0.0  # W: the weight-gradient part of compute_ms (zb-h1)
    fwd_ms: float = 0.0  # F: Σ fwd_ms + reshard_ms, the forward part of compute_ms (gpipe)


def segment_candidates(problem: Problem, first: int, last: int, size: int) -> list[Layout]:
    """The configs a segment ``first..last`` may take on a ``size``-device stage (rule 5), in config order."""
    G = problem.cluster.gpus_per_node
    return [
        lay
        for lay in problem.layouts()
        if lay.devices == size and lay.tp <= G and all(lay in problem.layers[i].costs for i in range(first, last + 1))
    ]


def best_stage_configs(problem: Problem, first: int, last: int, size: int, stash: int, check=None) -> StageConfigs | None:
    """The fastest per-segment config tuple of stage ``first..last`` on ``size`` devices that fits.

    Every tuple of ``itertools.product`` over the segments' candidates is
    costed from the raw cost entries (no tables) and checked against the GPU
    memory with ``stash`` microbatches of activations; None when none fits. ``check()``, if given, is called
    every :data:`CHECK_EVERY` tuples (it may raise to stop the search at a deadline).
    """
    best: StageConfigs | None = None
    for option in _fitting_stage_configs(problem, first, last, size, stash, check):
        if best is None or option.compute_ms < best.compute_ms:
            best = option
    return best


def pareto_stage_configs(
    problem: Problem, first: int, last: int, size: int, stash: int, schedule: str = "zb-h1", check=None
) -> list[StageConfigs]:
    """The fitting tuples no other beats in both parts the ``schedule``'s estimate weighs (config order).

    ZB-H1's iteration estimate is non-decreasing in every stage's u = t - W
    and W, GPipe's in every stage's F and B (:mod:`partitioner.plan.schedules`),
    not in t alone, so the fastest tuple may lose to one with a smaller W
    (a smaller F or B); some optimum uses only these tuples. Empty when none fits.
    """
    options = list(_fitting_stage_configs(problem, first, last, size, stash, check))
    key = [estimate_parts(o, schedule) for o in options]
    return [
        o
        for i, o in enumerate(options)
        if not any(
            key[j][0] <= key[i][0] and key[j][1] <= key[i][1] and (key[j] != key[i] or j < i) for j in range(len(options))
        )
    ]


def estimate_parts(option: StageConfigs, schedule: str) -> tuple[float, float]:
    """The two per-stage quantities ``schedule``'s iteration estimate weighs apart: (u, W) or (F, B)."""
    if schedule == "gpipe":
        return (option.fwd_ms, option.compute_ms - option.fwd_ms)
    return (option.compute_ms - option.wgrad_ms, option.wgrad_ms)


def _fitting_stage_configs(problem: Problem, first: int, last: int, size: int, stash: int, check=None):
    """Every per-segment config tuple of the stage that fits in memory, costed, in config order."""
    segments = problem.segments(first, last)
    candidates = [segment_candidates(problem, a, b, size) for a, b in segments]
    capacity = problem.cluster.gpu_memory_bytes
    for n, combo in enumerate(itertools.product(*candidates)):
        if check is not None and n % CHECK_EVERY == 0:
            check()
        compute = wgrad = fwd = 0.0
        weight = act = 0
        for (a, b), lay in zip(segments, combo):
            for i in range(a, b + 1):
                c = problem.layers[i].costs[lay]
                compute += c.fwd_ms + c.bwd_ms
                fwd += c.fwd_ms
                wgrad += c.split()[1]
                weight += c.weight_bytes
                act += c.act_bytes
        memory = weight - tied_bytes(problem, first, last, list(zip(segments, combo))) + stash * act
        if memory > capacity:
            continue
        reshard = sum(
            stage_reshard_ms(problem.layers[b].out_bytes, lay, nxt, size, problem.cluster)
            for (_, b), lay, nxt in zip(segments, combo, combo[1:])
        )
        yield StageConfigs(tuple(combo), compute + 2 * reshard, reshard, memory, wgrad, fwd + reshard)


def count_size_sequences(allowed: tuple[int, ...], total: int, count: int) -> int:
    """How many sequences of ``count`` allowed sizes sum to ``total``, by dynamic programming.

    Equals ``len(size_sequences(allowed, total, count))`` without listing them.
    """
    if count < 0:
        return 0
    return _sequence_counts(allowed, total, count)[count]


def _sequence_counts(allowed: tuple[int, ...], total: int, max_count: int) -> list[int]:
    """``out[k]`` = number of sequences of k allowed sizes summing to ``total``, for k = 0..max_count.

    One pass of O(max_count * total * len(allowed)) integer additions.
    """
    ascending = sorted(allowed)
    out = []
    ways = [1] + [0] * total  # ways[t]: sequences of the current length k summing to t
    for k in range(max_count + 1):
        out.append(ways[total])
        if k == max_count:
            break
        nxt = [0] * (total + 1)
        for t, w in enumerate(ways):
            if w:
                for s in ascending:
                    if t + s > total:
                        break
                    nxt[t + s] += w
        ways = nxt
    return out


@dataclass(frozen=True)
class EnumerationWork:
    """What the search visits, counted before it starts (:func:`enumeration_work`).

    Attributes
    ----------
    combinations : int
        Cut x size combinations of the main loop (each visits its P stages and at least one placement).
    stages : int
        Distinct stages (first layer, last layer, size, stash) the main loop asks for.
    tuples : int
        Per-segment config tuples of those stages (the product of the segments' config counts, summed).
    entries : int
        The cost entries those tuples read (each tuple reads one per layer of its stage).
    """

    combinations: int
    stages: int = 0
    tuples: int = 0
    entries: int = 0

    def seconds(self) -> float:
        """A lower bound of the time the enumeration takes, at the rate bounds (module constants)."""
        return self.combinations / COMBINATIONS_PER_SECOND + self.entries / ENTRIES_PER_SECOND

    def describe(self) -> str:
        return (
            f"{self.combinations:,} cut x size combinations and {self.tuples:,} config tuples of "
            f"{self.stages:,} distinct stages ({self.entries:,} cost entries read)"
        )


def enumeration_work(problem: Problem, counts) -> EnumerationWork:
    """What :func:`solve_brute` would enumerate for the stage counts ``counts``, in closed form.

    Stage p of P holds layers a..b with a = 0 for p = 0, b = L - 1 for p = P - 1, and room for the
    other stages on both sides (a >= p, b <= L - P + p); its size is an allowed size s such that P - 1
    allowed sizes sum to N - s; its stash is the schedule's (:func:`partitioner.plan.schedules.stash`).
    Each distinct (a, b, s, stash) is costed once, over the product of its segments' configs.
    """
    counts = list(counts)
    combinations = enumeration_size(problem, counts)
    if not counts:
        return EnumerationWork(0)
    L, N, m = problem.num_layers, problem.num_devices, problem.microbatches
    allowed = tuple(sorted(problem.cluster.allowed_sizes()))
    rest = {s: _sequence_counts(allowed, N - s, max(counts)) for s in allowed if s <= N}
    keys: dict[tuple[int, int, int], set[int]] = {}
    for P in counts:
        stashes = stash(problem.training.schedule, P, m)
        sizes = [s for s, seqs in rest.items() if seqs[P - 1]]
        for p in range(P):
            for a in (0,) if p == 0 else range(p, L - P + p + 1):
                for b in (L - 1,) if p == P - 1 else range(a, L - P + p + 1):
                    for s in sizes:
                        keys.setdefault((a, b, s), set()).add(stashes[p])
    tuples = entries = 0
    candidates: dict[tuple[int, int, int], int] = {}
    for (a, b, s), levels in keys.items():
        count = 1
        for first, last in problem.segments(a, b):
            if (first, last, s) not in candidates:
                candidates[first, last, s] = len(segment_candidates(problem, first, last, s))
            count *= candidates[first, last, s]
        tuples += count * len(levels)
        entries += count * len(levels) * (b - a + 1)
    return EnumerationWork(combinations, sum(len(v) for v in keys.values()), tuples, entries)


def enumeration_size(problem: Problem, counts) -> int:
    """Cut x size combinations the search visits for the stage counts ``counts``:
    Σ_P C(L-1, P-1) · #(size sequences of length P summing to N), in closed form."""
    counts = list(counts)
    if not counts:
        return 0
    allowed = tuple(sorted(problem.cluster.allowed_sizes()))
    seqs = _sequence_counts(allowed, problem.num_devices, max(counts))
    L = problem.num_layers
    return sum(comb(L - 1, P - 1) * seqs[P] for P in counts)


_BOTH = frozenset({"bottleneck", "iteration"})
CAPABILITIES = Capabilities(
    schedules={"1f1b": _BOTH, "zb-h1": _BOTH, "gpipe": _BOTH, "interleaved": _BOTH}, exact=True, partial_racks=True,
    levels=True,
)


@register("brute", options=BruteOptions, capabilities=CAPABILITIES)
def solve_brute(problem: Problem, request: SolveRequest) -> Candidate:
    settings = request.options
    assert isinstance(settings, BruteOptions)
    deadline = request.deadline()
    limit = settings.max_combinations
    if problem.training.schedule == "interleaved":  # equal groups, one mesh each: its own space
        return solve_brute_interleaved(problem, request, deadline, limit)
    counts = feasible_stage_counts(problem)
    # every feasible P has at least one size sequence: the cuts alone bound the work from below
    lower = max((comb(problem.num_layers - 1, P - 1) for P in counts), default=0)
    if lower > limit:
        return _too_many(lower, limit, at_least=True)
    work = enumeration_work(problem, counts)
    if work.combinations > limit:
        return _too_many(work.combinations, limit)
    refusal = _too_long(work, request, settings)
    if refusal is not None:
        return refusal
    schedule = problem.training.schedule
    allowed = problem.cluster.allowed_sizes()
    N, L = problem.num_devices, problem.num_layers
    tables = CostTables(problem)  # transfer times only
    m = problem.microbatches
    stage_cache: dict[tuple[int, int, int, int], list[StageConfigs]] = {}
    # zb-h1's estimate weighs t - W and W apart, gpipe's F and B: keep every Pareto tuple, not only the fastest
    pareto = schedule in ("zb-h1", "gpipe") and request.objective == "iteration"

    def check() -> None:
        if deadline is not None and time.perf_counter() > deadline:
            raise OutOfTime

    def choose(a: int, b: int, size: int, stash: int) -> list[StageConfigs]:
        key = (a, b, size, stash)
        if key not in stage_cache:
            if pareto:
                stage_cache[key] = pareto_stage_configs(problem, a, b, size, stash, schedule, check)
            else:
                best = best_stage_configs(problem, a, b, size, stash, check)
                stage_cache[key] = [best] if best else []
        return stage_cache[key]

    levels = problem.cluster.levels is not None

    def transfer(last_layer: int, size_a: int, size_b: int, link) -> float:
        if levels:  # link: the max-flow GB/s of the boundary on the levels graph
            return transfer_ms(problem.layers[last_layer].out_bytes, link)
        return tables.transfer(last_layer, size_a, size_b, link)

    best_value, best_plan = float("inf"), None
    timed_out = False
    for P in counts:
        for sizes in size_sequences(allowed, N, P):
            patterns = levels_patterns(problem.cluster, sizes) if levels else placement_patterns(problem.cluster, sizes)
            for cuts in itertools.combinations(range(1, L), P - 1):
                if deadline is not None and time.perf_counter() > deadline:
                    timed_out = True
                    break
                bounds = (0,) + cuts + (L,)
                stashes = stash(schedule, P, m)
                try:
                    options = [choose(bounds[p], bounds[p + 1] - 1, sizes[p], stashes[p]) for p in range(P)]
                except OutOfTime:
                    timed_out = True
                    break
                if not all(options):
                    continue
                for choices, (links, assignment) in itertools.product(itertools.product(*options), patterns.items()):
                    times, fwd = [], []
                    for p in range(P):
                        t = choices[p].compute_ms
                        f = choices[p].fwd_ms
                        if p < P - 1:  # the send to p + 1 is in F_p
                            x = transfer(bounds[p + 1] - 1, sizes[p], sizes[p + 1], links[p])
                            t += x
                            f += x
                        if p > 0:  # the gradient's send back to p - 1 is in B_p
                            t += transfer(bounds[p] - 1, sizes[p - 1], sizes[p], links[p - 1])
                        times.append(t)
                        fwd.append(f)
                    value = objective_value(
                        request.objective, times, m, schedule, wgrad=[c.wgrad_ms for c in choices], fwd=fwd
                    )
                    if value < best_value:
                        best_value = value
                        # in-node stages get consecutive ids in one node, larger ones whole
                        # nodes in order: the canonical placement the reshard times assume
                        ids = assignment if levels else node_assignment_ids(problem.cluster, sizes, assignment)
                        best_plan = Plan(
                            tuple(
                                Stage.from_configs(bounds[p], bounds[p + 1] - 1, sizes[p], choices[p].configs, ids[p])
                                for p in range(P)
                            )
                        )
            if timed_out:
                break
        if timed_out:
            break
    if timed_out:
        if best_plan is None:
            return Candidate("error", message="brute: time limit reached before any valid plan was found", timed_out=True)
        return Candidate("feasible", best_plan, message="brute: time limit reached; the search is incomplete",
                         timed_out=True)
    if best_plan is None:
        return Candidate("infeasible", message=explain_infeasible(problem))
    return Candidate("optimal", best_plan, bound=None)


def _too_many(combinations: int, limit: int, at_least: bool = False) -> Candidate:
    return Candidate(
        "error",
        message=(
            f"brute: {'at least ' if at_least else ''}{combinations:,} cut x size combinations exceed the "
            f"limit of {limit:,} (option max_combinations); use dp or cpsat for a problem this size"
        ),
    )


def _too_long(work: EnumerationWork, request: SolveRequest, settings: BruteOptions) -> Candidate | None:
    """The refusal of an enumeration longer than the time left (the limit's: ``timed_out``) or, without a
    limit, than ``max_seconds`` (``error``); None when it fits."""
    seconds = work.seconds()
    left = request.left() if request.limited else settings.max_seconds
    if seconds <= left:
        return None
    bound = "the time limit leaves" if request.limited else "option max_seconds allows"
    return Candidate(
        "error",
        message=(
            f"brute: too large to enumerate: {work.describe()} take at least {seconds:.3g} s at its rate bound "
            f"({COMBINATIONS_PER_SECOND:.3g} combinations, {ENTRIES_PER_SECOND:.3g} entries per second), more than "
            f"the {max(left, 0.0):.3g} s {bound}; use dp or cpsat for a problem this size"
        ),
        timed_out=request.limited,
    )


def levels_patterns(cluster: Cluster, sizes: tuple[int, ...]) -> dict[tuple[float, ...], list]:
    """On a cluster with network levels, the one placement of ``sizes`` (consecutive devices in pipeline
    order; none when a stage would break rule 4): its boundaries' max-flow GB/s on the levels graph, with
    the stages' device ids."""
    offset = 0
    for s in sizes:
        if not consecutive_fits(cluster, offset, s):
            return {}
        offset += s
    ids = consecutive_ids(sizes)
    return {tuple(bandwidth(cluster, ids[p], ids[p + 1]) for p in range(len(sizes) - 1)): ids}


def placement_patterns(cluster: Cluster, sizes: tuple[int, ...]) -> dict[tuple[bool, ...], list]:
    """Every link pattern some placement of ``sizes`` produces, with one node assignment each."""
    return dict(_patterns(cluster.nodes, cluster.gpus_per_node, tuple(sizes), cluster.last_node_gpus))


@lru_cache(maxsize=4096)
def _patterns(nodes: int, G: int, sizes: tuple[int, ...], last: int | None = None) -> tuple:
    """Every link pattern of ``sizes`` on ``nodes`` nodes whose last uses ``last`` GPUs (None: all G)."""
    whole = sum(s // G for s in sizes if s > G)
    bins = nodes - whole
    # the GPUs used per open node, sorted: every node full, or one (the partly used last) at ``last``
    target = sorted([G] * bins if last in (None, G) or bins == 0 else [G] * (bins - 1) + [last])
    found: dict[tuple[bool, ...], list] = {}
    P = len(sizes)
    label: list[int | None] = [None] * P
    fill: list[int] = []

    def rec(p: int) -> None:
        if p == P:
            if len(fill) == bins and sorted(fill) == target:
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
