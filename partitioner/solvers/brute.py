"""``brute``: exhaustive search, the test oracle.

Enumerates every stage count P in the bounds, every way to cut the layers
into P contiguous stages, every sequence of P allowed sizes summing to N,
and every placement of the stages on nodes. Placements are enumerated as
assignments of the in-node stages to nodes (nodes are interchangeable, so
assignments are canonical "first use" labelings) and grouped by the link
pattern they produce, since on the default cluster graph a plan's times
depend on the placement only through which adjacent stages share a node.

Configs (format v2, ``DESIGN.md`` "Problem format v2"): for every stage the
search enumerates explicitly every tuple of per-segment configs
(``itertools.product`` over each segment's configs: dp * tp = the stage
size, tp <= gpus_per_node, the cost key present on every layer of the
segment). A tuple costs

    Σ (fwd_ms + bwd_ms) + 2 Σ r        memory Σ weight_bytes − tied + stash · Σ act_bytes

with r the reshard between adjacent segments whose (dp, tp) differ
(:func:`~partitioner.cluster.reshard.stage_reshard_ms`, paid in the forward and in
the backward). r is computed for the canonical placement -- the stage's
device ids grouped by node, ranks in id order -- which is exactly the form
of the ``device_ids`` this solver emits, so :func:`~partitioner.plan.evaluate`
sees the same r. A version-1 problem has one segment per stage, so this is
v1's "one layout per stage". ``tied`` (format v3) is the ``tied_weight_bytes``
of every layer whose ``tied_to`` layer is in the stage too
(:func:`~partitioner.plan.evaluation.tied_bytes`).

Why stage by stage: for a fixed cut, size sequence and placement, a stage's
config tuple changes only its own compute-plus-reshard time and its own
memory (the transfers x_p depend on out_bytes, sizes and links, not on
configs), the stages' choices do not interact, and both objectives are
non-decreasing in every stage time. So taking, for each stage, the fastest
tuple that fits is optimal over the full product of all stages' tuples;
ties go to the first tuple in config order (devices, tp, variant).

Schedules: the stash in the memory check is the problem's schedule's
(:func:`partitioner.plan.schedules.stash`; 1F1B and ZB-H1 min(m, P - p), GPipe
m). Under ``zb-h1`` the iteration estimate grows with each stage's t - W
and W separately, under ``gpipe`` with its F and B separately, so the
search keeps every stage tuple that is Pareto-minimal in those two parts
and tries their product instead of the fastest tuple alone. ``interleaved``
searches the space of equal device groups with one mesh each
(:mod:`.interleaved_brute`; the space is :mod:`.interleaved_model`'s).

The search refuses problems whose cut x size enumeration exceeds
``max_combinations`` (option, default 2,000,000): roughly up to 12 layers
on 16 GPUs. The count is computed in closed form (binomials times a count
of size sequences by dynamic programming), never by listing the sequences.
The best plan is re-checked by :func:`~partitioner.plan.evaluate`.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from functools import lru_cache
from math import comb

from ..cluster.placement import label_nodes, node_assignment_ids, size_sequences
from ..cluster.reshard import stage_reshard_ms
from ..plan import Plan, Stage, objective_value
from ..plan.evaluation import tied_bytes
from ..plan.schedules import stash
from ..problem import Cluster, Layout, Problem
from .base import Candidate, SolveRequest, register
from .dp.method import explain_infeasible
from .feasibility import feasible_stage_counts
from .interleaved.brute import solve_brute_interleaved
from .options import BruteOptions, Capabilities
from .tables import CostTables

__all__ = [
    "solve_brute",
    "DEFAULT_MAX_COMBINATIONS",
    "placement_patterns",
    "count_size_sequences",
    "enumeration_size",
    "StageConfigs",
    "segment_candidates",
    "best_stage_configs",
    "pareto_stage_configs",
]

DEFAULT_MAX_COMBINATIONS = BruteOptions.max_combinations


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


def best_stage_configs(problem: Problem, first: int, last: int, size: int, stash: int) -> StageConfigs | None:
    """The fastest per-segment config tuple of stage ``first..last`` on ``size`` devices that fits.

    Every tuple of ``itertools.product`` over the segments' candidates is
    costed from the raw cost entries (no tables) and checked against the GPU
    memory with ``stash`` microbatches of activations; None when none fits.
    """
    best: StageConfigs | None = None
    for option in _fitting_stage_configs(problem, first, last, size, stash):
        if best is None or option.compute_ms < best.compute_ms:
            best = option
    return best


def pareto_stage_configs(
    problem: Problem, first: int, last: int, size: int, stash: int, schedule: str = "zb-h1"
) -> list[StageConfigs]:
    """The fitting tuples no other beats in both parts the ``schedule``'s estimate weighs (config order).

    ZB-H1's iteration estimate is non-decreasing in every stage's u = t - W
    and W, GPipe's in every stage's F and B (:mod:`partitioner.plan.schedules`),
    not in t alone, so the fastest tuple may lose to one with a smaller W
    (a smaller F or B); some optimum uses only these tuples. Empty when none fits.
    """
    options = list(_fitting_stage_configs(problem, first, last, size, stash))
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


def _fitting_stage_configs(problem: Problem, first: int, last: int, size: int, stash: int):
    """Every per-segment config tuple of the stage that fits in memory, costed, in config order."""
    segments = problem.segments(first, last)
    candidates = [segment_candidates(problem, a, b, size) for a, b in segments]
    capacity = problem.cluster.gpu_memory_bytes
    for combo in itertools.product(*candidates):
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
    schedules={"1f1b": _BOTH, "zb-h1": _BOTH, "gpipe": _BOTH, "interleaved": _BOTH}, exact=True
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
    work = lower if lower > limit else enumeration_size(problem, counts)
    if work > limit:
        return Candidate(
            "error",
            message=(
                f"brute: {'at least ' if work == lower else ''}{work:,} cut x size combinations exceed the "
                f"limit of {limit:,} (option max_combinations); use dp or cpsat for a problem this size"
            ),
        )
    schedule = problem.training.schedule
    allowed = problem.cluster.allowed_sizes()
    N, L = problem.num_devices, problem.num_layers
    tables = CostTables(problem)  # transfer times only
    m = problem.microbatches
    stage_cache: dict[tuple[int, int, int, int], list[StageConfigs]] = {}
    # zb-h1's estimate weighs t - W and W apart, gpipe's F and B: keep every Pareto tuple, not only the fastest
    pareto = schedule in ("zb-h1", "gpipe") and request.objective == "iteration"

    def choose(a: int, b: int, size: int, stash: int) -> list[StageConfigs]:
        key = (a, b, size, stash)
        if key not in stage_cache:
            best = best_stage_configs(problem, a, b, size, stash)
            stage_cache[key] = pareto_stage_configs(problem, a, b, size, stash, schedule) if pareto else [best] if best else []
        return stage_cache[key]

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
                stashes = stash(schedule, P, m)
                options = [choose(bounds[p], bounds[p + 1] - 1, sizes[p], stashes[p]) for p in range(P)]
                if not all(options):
                    continue
                for choices, (links, assignment) in itertools.product(itertools.product(*options), patterns.items()):
                    times, fwd = [], []
                    for p in range(P):
                        t = choices[p].compute_ms
                        f = choices[p].fwd_ms
                        if p < P - 1:  # the send to p + 1 is in F_p
                            x = tables.transfer(bounds[p + 1] - 1, sizes[p], sizes[p + 1], links[p])
                            t += x
                            f += x
                        if p > 0:  # the gradient's send back to p - 1 is in B_p
                            t += tables.transfer(bounds[p] - 1, sizes[p - 1], sizes[p], links[p - 1])
                        times.append(t)
                        fwd.append(f)
                    value = objective_value(
                        request.objective, times, m, schedule, wgrad=[c.wgrad_ms for c in choices], fwd=fwd
                    )
                    if value < best_value:
                        best_value = value
                        # in-node stages get consecutive ids in one node, larger ones whole
                        # nodes in order: the canonical placement the reshard times assume
                        ids = node_assignment_ids(problem.cluster, sizes, assignment)
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
    label: list[int | None] = [None] * P
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
