"""The ``dp`` method: the registry's entry point to the exact DP of :mod:`.dp`.

Its capabilities (what :func:`~partitioner.solvers.solve` checks before it dispatches: no custom
topologies; the interleaved schedule by its own cut search,
:mod:`partitioner.solvers.interleaved.search`) and its options record
(:class:`~partitioner.solvers.options.DpOptions`) are registered with it. It solves with the placement
mode the cluster needs (see the *Placement* section of :mod:`.dp`), falls back to the exact placement
automaton when a relaxed optimum's runs do not pack, and turns the search's limits
(:mod:`~.solvers.errors`) and an infeasible result into a candidate with a message
(:func:`explain_infeasible`, which the other exact methods use too).

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.method``.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ...core.deadline import load_slowdown
from ...core.units import format_bytes
from ...plan import Plan, PlanError, evaluate
from ...problem import Problem
from ..base import Candidate, SolveRequest, register
from ..bounds import analytic_bound
from ..errors import OutOfTime, TooLarge
from ..feasibility import feasible_stage_counts, quick_infeasibility
from ..greedy import cost_entries, run_seconds, solve_greedy
from ..interleaved.search import solve_interleaved_search
from ..options import Capabilities, DpOptions
from .compiled import engine
from .solver import DPModel

__all__ = ["solve_dp", "explain_infeasible", "CAPABILITIES"]

# CPU seconds per cost entry of building the DP's per-layer tables (DPModel): 0.8-1.2 microseconds on the 200-,
# 1,000- and 5,000-layer format-v3 synthetic problems of 4 x 8 GPUs (benchmarks/limits.py); the lower, so that
# a refusal (the tables cannot be built in the time left) is not premature.
TABLE_SECONDS_PER_ENTRY = 0.8e-6
# The most seconds past an expired deadline the fallback greedy may take beyond its first stage count (as the
# time-out fallback of :func:`partitioner.solvers.solve` gives it).
FALLBACK_GRACE = 1.0

_BOTH = frozenset({"bottleneck", "iteration"})
# interleaved: the space of equal device groups with one mesh each, by its cut search (solvers/interleaved/search.py)
CAPABILITIES = Capabilities(
    schedules={"1f1b": _BOTH, "zb-h1": _BOTH, "gpipe": _BOTH, "interleaved": _BOTH}, exact=True, partial_racks=True,
    levels=True,
)


@register("dp", options=DpOptions, capabilities=CAPABILITIES)
def solve_dp(problem: Problem, request: SolveRequest) -> Candidate:
    """Exact DP with the options of :class:`~partitioner.solvers.options.DpOptions`."""
    if problem.training.schedule == "interleaved":  # its own space and search (interleaved/search.py)
        return solve_interleaved_search(problem, request)
    options = request.options
    assert isinstance(options, DpOptions)
    budget = options.memory_budget_bytes
    forced = options.placement
    threads = options.threads
    # cut short, dp still builds its answer -- at least greedy's plan: keep the time that takes at the
    # machine's present load, and refuse at once what cannot even build its tables in the time left
    reserve = run_seconds(problem) * load_slowdown()
    deadline = request.deadline()
    if deadline is not None:
        build = TABLE_SECONDS_PER_ENTRY * cost_entries(problem) * load_slowdown()
        if build + reserve > request.left():
            reason = (f"dp: the time limit would run out while building the tables ({cost_entries(problem):,} cost "
                      f"entries: about {build:.3g} s at this load, and {reserve:.3g} s for the fallback plan, "
                      f"{request.left():.3g} s left); raise --time-limit")
            return _cut_short(problem, request, None, reason, timed_out=True)
        deadline -= reserve

    engine.take_note()  # forget a note of an earlier solve
    model = DPModel(problem)
    model.threads = threads
    # a levels cluster has one exact placement mode (offsets); elsewhere bins may be forced
    mode = "bins" if forced == "bins" and problem.cluster.levels is None else model.natural_placement()
    warm_note = _set_incumbent(problem, request, model, deadline)
    try:
        outcome = model.optimize(request.objective, mode, deadline, budget)
        if outcome.status == "optimal" and outcome.plan is None and (mode == "run" or problem.cluster.partial and mode != "bins"):
            # the relaxed optimum's runs did not pack (on partial racks, DESIGN.md "Partial racks",
            # neither need the sizes of the size-only automata): solve with the exact placement automaton
            outcome = model.optimize(request.objective, "bins", deadline, budget)
    except TooLarge as err:
        relaxed = _comm_free(problem, request, deadline, budget, threads)
        return _cut_short(problem, request, model, f"dp: {err}", kernels_note=engine.take_note(), warm_note=warm_note,
                          relaxed=relaxed)
    except OutOfTime:
        return _cut_short(problem, request, model, "dp: time limit reached before the recursion finished",
                          timed_out=True, kernels_note=engine.take_note(), warm_note=warm_note)
    if outcome.status == "infeasible":
        return Candidate("infeasible", message=explain_infeasible(problem))
    if outcome.plan is None:
        return Candidate("error", message="dp: internal error: the optimum could not be placed")
    stats = dict(outcome.stats or {})
    kernels_note = engine.take_note()
    if kernels_note:
        stats["kernels"] = kernels_note
    if warm_note:
        stats["warm_start"] = warm_note
    return Candidate(outcome.status, outcome.plan, bound=outcome.bound, extra={"dp": stats})


def _set_incumbent(problem: Problem, request: SolveRequest, model: "DPModel", deadline: float | None = None) -> str | None:
    """Give the model its incumbent where a search uses one -- the ``iteration`` objective under 1F1B
    (the walk starts below the threshold above which nothing beats it) and zb-h1 (the walks over k stop
    at its value): the better of a valid warm start and the greedy plan, the latter run only when the
    general recursion asks (:meth:`.ThresholdWalks.incumbent`). Say what became of the warm start."""
    if request.objective != "iteration" or problem.training.schedule not in ("1f1b", "zb-h1"):
        return None if request.warm_start is None else "not used: only the iteration searches under 1f1b and zb-h1 start from an incumbent"
    found, note = [], None
    if request.warm_start is not None:
        try:
            found.append((evaluate(problem, request.warm_start, request.objective).value, request.warm_start, "warm_start"))
            note = "used as an incumbent"
        except PlanError as err:
            note = f"ignored: {err}"

    def incumbent():
        clock = request.clock
        greedy = None if clock.expired() else solve_greedy(problem, SolveRequest(request.objective, time_limit=clock))
        if greedy is not None and greedy.plan is not None:
            try:
                found.append((evaluate(problem, greedy.plan, request.objective).value, greedy.plan, "greedy"))
            except PlanError:
                pass
        return min(found, key=lambda vp: vp[0]) if found else None

    model.incumbent_source = incumbent
    return note


def _without_transfers(problem: Problem) -> Problem:
    """``problem`` with every boundary free (``out_bytes`` 0): the same plans, each stage no slower."""
    return replace(problem, layers=tuple(replace(layer, out_bytes=0) for layer in problem.layers))


def _comm_free(problem: Problem, request: SolveRequest, deadline: float | None, budget: float,
               threads: int | None) -> tuple[float, Plan | None] | None:
    """The optimum of ``problem`` without transfers, and its plan, when its (much smaller) tables fit the
    budget and it finishes in time; None otherwise or when nothing carries bytes.

    A proven lower bound on ``problem``'s optimum: the plans are the same (sizes, layouts, placement
    rules), and transfers only add to stage times -- to every part of them the estimates weigh (1F1B and
    the bottleneck: t; zb-h1: u and so g; GPipe: F and B) -- and every objective is non-decreasing in
    them. Its tables have one placement state per stage size and one category (one shared key per level),
    where the tables with transfers have about sizes^2 rows of N columns per first layer."""
    if not any(layer.out_bytes for layer in problem.layers[:-1]):
        return None
    relaxed = _without_transfers(problem)
    model = DPModel(relaxed)
    model.threads = threads
    _set_incumbent(relaxed, replace(request, warm_start=None), model, deadline)
    try:
        outcome = model.optimize(request.objective, "none", deadline, budget)
    except (TooLarge, OutOfTime):
        return None
    if outcome.status != "optimal" or outcome.bound is None:
        return None
    return outcome.bound, outcome.plan


def _cut_short(problem: Problem, request: SolveRequest, model: "DPModel | None", reason: str, timed_out: bool = False,
               kernels_note: str | None = None, warm_note: str | None = None,
               relaxed: tuple[float, Plan | None] | None = None) -> Candidate:
    """The best known plan when the search cannot finish: the DP's own best so far, the greedy plan or
    (``relaxed``: the optimum without transfers and its plan, :func:`_comm_free`) that plan valued with
    its transfers, whichever is better, ``feasible`` with the best proven lower bound; ``error`` if none
    exists. ``timed_out``: the time limit (not the memory budget) stopped the search. ``kernels_note``
    (:func:`.engine.take_note`) says what the kernels' choice cost, e.g. that they were not compiled yet;
    ``warm_note`` what became of the caller's warm start (kept in the stats as on a finished search);
    the greedy plan gets what is left of the limit, or its estimated run up to :data:`FALLBACK_GRACE`."""
    if kernels_note:
        reason = f"{reason} ({kernels_note})"
    found = []
    known = getattr(model, "best_known", None)
    if known is not None:
        found.append(("dp", known[1]))
    if relaxed is not None and relaxed[1] is not None:
        found.append(("the optimum without transfers", relaxed[1]))
    # greedy gets what is left of the limit, or its estimated run at this load up to FALLBACK_GRACE seconds
    # (its first stage count always runs: a plan, past the limit on a huge problem)
    budget = max(request.left(), min(FALLBACK_GRACE, run_seconds(problem) * load_slowdown()))
    greedy = solve_greedy(problem, SolveRequest(request.objective, time_limit=budget if request.limited else None))
    if greedy.plan is not None:
        found.append(("greedy", greedy.plan))
    best = None
    for source, plan in found:
        try:
            value = evaluate(problem, plan, request.objective).value
        except PlanError:
            continue
        if best is None or value < best[0]:
            best = (value, source, plan)
    if best is None:
        return Candidate("error", message=f"{reason}; no valid plan known", timed_out=timed_out)
    bounds = [b for b in (getattr(model, "proven_bound", None),) if b is not None]
    bounds.append(analytic_bound(problem, request.objective) if model is None else model.analytic_bound(request.objective))
    if relaxed is not None:
        bounds.append(relaxed[0])
        reason += ("; the bound is the optimum of the problem without transfers (proven: transfers only add to "
                   "every stage)")
    bound = max(bounds) * (1 - 1e-9) if bounds and all(math.isfinite(b) for b in bounds) else None
    if bound is not None:
        bound = min(bound, best[0])
    return Candidate(
        "feasible",
        best[2],
        bound=bound,
        message=f"{reason}; returning the best known plan ({best[1]})",
        timed_out=timed_out,
        extra={"dp": {"cut_short": reason, "plan_from": best[1], **({"warm_start": warm_note} if warm_note else {}),
                      **({"comm_free_bound": relaxed[0]} if relaxed is not None else {})}},
    )


def explain_infeasible(problem: Problem) -> str:
    """The reason to report once an exact search found no valid plan.

    Beyond :func:`quick_infeasibility`, it re-solves with unlimited memory:
    if a plan then exists, memory is what rules every plan out, and the
    message names how much the fastest such plan needs; otherwise the
    layers' layouts cannot form stages that use every device.
    """
    quick = quick_infeasibility(problem)
    if quick:
        return quick
    counts = feasible_stage_counts(problem)
    relaxed = _without_memory_limit(problem)
    model = DPModel(relaxed)
    outcome = model.optimize("bottleneck", model.natural_placement(), None, 2**31)
    if outcome.status == "optimal" and outcome.plan is None and problem.cluster.partial:
        try:  # the relaxed optimum's sizes did not pack on the partial racks: the exact automaton decides
            outcome = model.optimize("bottleneck", "bins", None, 2**31)
        except TooLarge:
            pass
    if outcome.status == "optimal" and outcome.plan is not None:
        ev = evaluate(relaxed, outcome.plan)
        worst = max(ev.stages, key=lambda s: s.memory_bytes)
        return (
            f"no valid plan fits in {format_bytes(problem.cluster.gpu_memory_bytes)} per GPU: with unlimited memory "
            f"the fastest plan ({len(ev.stages)} stages) needs {format_bytes(worst.memory_bytes)} on stage "
            f"{worst.index} (weights {format_bytes(worst.weight_bytes)} + {worst.stash} stashed microbatches x "
            f"{format_bytes(worst.act_bytes)}); add GPUs, memory, or fewer microbatches in flight"
        )
    return (
        f"no valid plan even with unlimited memory: with {counts[0]}..{counts[-1]} stages, no cut of the "
        f"{problem.num_layers} layers into stages whose layers all have a cost entry for one shared layout "
        + ("per module segment " if problem.version >= 2 else "")
        + f"uses exactly the {problem.num_devices} devices; check the layouts listed per layer"
    )


def _without_memory_limit(problem: Problem) -> Problem:
    return replace(problem, cluster=replace(problem.cluster, gpu_memory_bytes=2**62))
