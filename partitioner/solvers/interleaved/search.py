"""``dp`` under ``training.schedule: interleaved``: the space searched group count by group count.

The space is :mod:`.space`'s (equal groups on canonical ids, one mesh per
group, P·v contiguous chunks, configs per segment). A DP along the layer
order cannot hold it (a group's time and memory sum chunks g, g + P, ...
that lie far apart), so this path works on cuts (:mod:`.cuts`), in three
steps per group count P:

1. a good plan fast: local search over the cuts (:mod:`.local`) from
Megatron-LM's uniform cut, a cut into chunks of equal fastest compute and
the caller's warm start, each group taking a greedy choice of mesh and
options (:mod:`.groups`); the best cut found is then priced exactly (each
group's best mesh and options, by branch and bound).

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.interleaved.search``.
"""
from __future__ import annotations

import math
import time
from math import comb

from ...plan import PlanError, SolveResult, evaluate
from ...problem import Problem
from ..base import Candidate, SolveRequest, finish
from .bound import relaxed_bound
from .cuts import ROUNDS, CutCost, GroupSpace
from .exact import branch_and_bound
from .local import cost_key, improve
from .space import group_configs, group_counts, group_ids, no_group_count_message
from .tables import ChunkTables

__all__ = ["solve_interleaved_search", "round_balanced", "NODE_BUDGET", "PROOF_CUTS", "RESTARTS", "SEARCH_SHARE"]

NODE_BUDGET = 20_000  # prefixes the proof may visit per group count (it reports its bound past them)
# The proof runs on a group count only when its cuts, C(L - 1, P·v - 1), are at most this many: beyond,
# the relaxation's bound is the answer's (on Qwen3-VL-30B-A3B, 78 layers in 4 x 12 chunks, 2.1e21 cuts,
# the branch and bound searched 186 prefixes in 39 s at load 11 without moving the bound).
PROOF_CUTS = 10**6
RESTARTS = 2  # perturbed restarts of the local search per group count
SEARCH_SHARE = 0.5  # share of the time limit the bounds and local searches may use before the proof starts
_REL = 1e-9  # relative tolerance of "the bound reaches the value"


def _warm_bounds(problem: Problem, request: SolveRequest, P: int) -> tuple[int, ...] | None:
    """The caller's warm start as a cut of P groups, when it is a plan of the space."""
    plan = request.warm_start
    v = problem.training.virtual_stages
    if plan is None or len(plan.stages) != P * v:
        return None
    plan = plan.with_device_ids()
    ids = group_ids(problem, P)
    if any(tuple(s.device_ids or ()) != ids[c % P] for c, s in enumerate(plan.stages)):
        return None
    try:
        evaluate(problem, plan, request.objective)
    except PlanError:
        return None
    return tuple(s.first_layer for s in plan.stages) + (problem.num_layers,)


def _reference_times(space: GroupSpace) -> list[float]:
    """Per layer the fastest compute among its configs of the group size (what balanced cuts balance)."""
    assert space.tables is not None
    configs = set(space.tables.configs)
    return [min((e.fwd_ms + e.bwd_ms for lay, e in layer.costs.items() if lay in configs), default=0.0)
            for layer in space.problem.layers]


def _analytic_floor(space: GroupSpace, objective: str) -> float:
    """The objective's floor from every layer's fastest entry of the group size (no memory, no sends):
    the busiest group does at least the average and at least the slowest layer; inf when a layer has
    no config of the group size (no plan has this many groups)."""
    assert space.tables is not None
    configs = set(space.tables.configs)
    if any(not any(lay in configs for lay in layer.costs) for layer in space.problem.layers):
        return math.inf
    fastest = _reference_times(space)
    busiest = max(sum(fastest) / space.groups, max(fastest, default=0.0))
    value = busiest if objective == "bottleneck" else sum(fastest) / space.v + (space.m - 1 / space.v) * busiest
    return value * (1 - 1e-12)


def _spaces(problem: Problem, counts: list[int], objective: str) -> dict[int, GroupSpace]:
    """A :class:`.cuts.GroupSpace` per group count; counts of one group size share their chunk tables."""
    layouts = problem.layouts()
    tables: dict[int, ChunkTables] = {}
    out = {}
    for P in counts:
        d = problem.num_devices // P
        if d not in tables:
            tables[d] = ChunkTables(problem, tuple(group_configs(problem, d, layouts)))
        out[P] = GroupSpace(problem, P, objective, tables[d])
    return out


def _share(deadline: float | None, parts: int) -> float | None:
    """The end of the next of ``parts`` equal shares of what is left before ``deadline``."""
    if deadline is None:
        return None
    now = time.perf_counter()
    return now + max(0.0, deadline - now) / max(1, parts)


def solve_interleaved_search(problem: Problem, request: SolveRequest) -> Candidate:
    """Plan an interleaved problem (module docstring)."""
    start = time.perf_counter()
    deadline = request.deadline(start)
    counts = group_counts(problem)
    if not counts:
        return Candidate("infeasible", message=no_group_count_message(problem))
    objective = request.objective
    L, v = problem.num_layers, problem.training.virtual_stages
    provable = {P for P in counts if comb(L - 1, P * v - 1) <= PROOF_CUTS}
    search_end = None if deadline is None else start + (SEARCH_SHARE if provable else 1.0) * (deadline - start)
    spaces = _spaces(problem, counts, objective)
    seconds: dict[str, float] = {}
    notes: dict[str, str] = {}
    clock = time.perf_counter()
    # 1. every count's starts, priced with greedy group choices; the searches go best start first
    starts: dict[int, list[tuple[int, ...]]] = {}
    start_value: dict[int, float] = {}
    for P in counts:
        space = spaces[P]
        starts[P] = [b for b in (_warm_bounds(problem, request, P), space.uniform_bounds(),
                                 space.balanced_bounds(_reference_times(space))) if b is not None]
        start_value[P] = min((space.price(b).value for b in starts[P]), default=math.inf)
    order = sorted(counts, key=lambda P: (start_value[P], P))
    floors = {P: _analytic_floor(spaces[P], objective) for P in counts}
    best: CutCost | None = None
    for i, P in enumerate(order):
        if floors[P] == math.inf or (best is not None and floors[P] >= best.value * (1 - _REL)):
            continue
        space, share = spaces[P], _share(search_end, len(order) - i)
        found = improve(space, starts[P], share, seed=request.seed, rounds=RESTARTS)
        if found is None or not found.fits:
            continue
        exact = space.price(found.bounds, exact=True, deadline=share)
        if exact.fits and cost_key(exact) <= cost_key(found):
            found = exact
        if best is None or found.value < best.value:
            best = found
    seconds["local search"] = time.perf_counter() - clock
    clock = time.perf_counter()
    # 2. bounds: the relaxation per count not closed by its floor, in what is left of the search time
    bounds = dict(floors)
    todo = [P for P in order if floors[P] < math.inf and (best is None or floors[P] < best.value * (1 - _REL))]
    bound_end = search_end if search_end is None or time.perf_counter() < search_end else deadline
    for i, P in enumerate(todo):
        share = _share(bound_end, len(todo) - i)
        if share is not None and share <= time.perf_counter():
            notes[str(P)] = "relaxation not solved: time limit"
            continue
        tables = spaces[P].tables
        found_bound = relaxed_bound(problem, objective, P, None if share is None else share - time.perf_counter(),
                                    None if tables is None else tables.configs)
        if found_bound is not None:
            bounds[P] = max(bounds[P], found_bound)
    seconds["bounds"] = time.perf_counter() - clock
    clock = time.perf_counter()
    # 3. proof, on the counts the bounds leave open and whose cuts are few enough
    open_bounds: list[float] = []
    for P in order:
        if bounds[P] == math.inf:
            notes[str(P)] = "no plan fits (a layer has no config of the group size, or the relaxation is infeasible)"
            continue
        if best is not None and bounds[P] >= best.value * (1 - _REL):
            notes[str(P)] = "closed by its bound"
            continue
        if P not in provable:
            open_bounds.append(bounds[P])
            notes[str(P)] = f"not searched: more than {PROOF_CUTS:,} cuts; the relaxation's bound stands"
            continue
        if deadline is not None and deadline <= time.perf_counter():
            open_bounds.append(bounds[P])
            notes[str(P)] = "not searched: time limit"
            continue
        result = branch_and_bound(spaces[P], math.inf if best is None else best.value, deadline, NODE_BUDGET)
        if result.best is not None and (best is None or result.best.value < best.value):
            best = result.best
        if result.finished:
            notes[str(P)] = f"searched ({result.nodes} prefixes)"
        else:
            open_bounds.append(max(bounds[P], result.bound))
            notes[str(P)] = f"search cut short after {result.nodes} prefixes"
    seconds["proof"] = time.perf_counter() - clock
    extra = {"interleaved": {"space": "equal device groups, one mesh per group, canonical placement",
                             "seconds": {k: round(x, 3) for k, x in seconds.items()},
                             "bounds": {str(P): (None if bounds[P] == math.inf else bounds[P]) for P in counts},
                             "groups": notes}}
    if best is None:
        if not open_bounds:
            return Candidate("infeasible", extra=extra, message=(
                "no interleaved plan of the searched space (equal device groups, one mesh per group) fits for "
                f"any of the group counts {', '.join(map(str, counts))}"))
        return Candidate("error", extra=extra, timed_out=True,
                         message="dp: the time limit ended the interleaved search before any plan was found")
    plan = spaces[len(best.times)].plan(best)
    value = best.value
    bound = min([value] + open_bounds)
    if not open_bounds:
        return Candidate("optimal", plan, value, "", extra)
    why = "; ".join(f"{P} groups: {notes[str(P)]}" for P in order if str(P) in notes and not notes[str(P)].startswith(
        ("closed", "searched", "no plan")))
    return Candidate("feasible", plan, bound, (
        f"dp: interleaved search not proven optimal (gap {(value - bound) / value:.2%} to the proven bound; {why})"),
        extra)


def round_balanced(problem: Problem, objective: str, method: str, time_limit: float | None,
                   seed: int = 0) -> list[SolveResult]:
    """Plans of the space whose rounds are balanced, for ``plan`` to replay beside the method's own.

    The ``iteration`` estimate assumes the P chunks of each round take
    equal times (:mod:`partitioner.plan.schedules`), and the cuts that
    minimise it often break that and simulate slower than Megatron-LM's
    uniform cut (:func:`.cuts.rounds_value` has the measurements). Per
    group count, the uniform and the balanced cut are priced by the
    lockstep value :func:`.cuts.rounds_value`, each group taking its best
    mesh and options; the group count with the best one is then improved
    by local search (:mod:`.local`) on that value. The best plan per group
    count comes back as a ``feasible`` result of ``method`` valued by
    ``objective`` (no optimality is claimed: the schedule choice simulates
    them).
    """
    start = time.perf_counter()
    deadline = None if time_limit is None else start + time_limit
    request = SolveRequest(objective, time_limit, seed)
    counts = group_counts(problem) if problem.cluster.topology is None else []
    spaces = _spaces(problem, counts, ROUNDS)
    found: dict[int, CutCost] = {}
    for P in counts:
        space = spaces[P]
        costs = [space.price(b, exact=True, deadline=_share(deadline, 4 * len(counts))) for b in
                 (space.uniform_bounds(), space.balanced_bounds(_reference_times(space))) if b is not None]
        fits = [c for c in costs if c.fits]
        if fits:
            found[P] = min(fits, key=cost_key)
    if found:
        P = min(found, key=lambda P: cost_key(found[P]))
        better = improve(spaces[P], [found[P].bounds], deadline, seed=seed, rounds=0)
        if better is not None and better.fits:
            exact = spaces[P].price(better.bounds, exact=True, deadline=deadline)
            better = exact if exact.fits and exact.value <= better.value else better
            if cost_key(better) < cost_key(found[P]):
                found[P] = better
    out = []
    for P, cost in sorted(found.items()):
        result = finish(problem, method, request, Candidate(
            "feasible", spaces[P].plan(cost), None,
            f"{method}: round-balanced interleaved cut ({P} groups, by the lockstep value; not the estimate's optimum)"),
            time.perf_counter() - start)
        if result.plan is not None:
            out.append(result)
    return out
