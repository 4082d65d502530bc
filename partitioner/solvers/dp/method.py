"""The ``dp`` method: the registry's entry point to the exact DP of :mod:`.dp`.

It checks what the DP cannot take (custom topologies) and what is infeasible
without a search, solves with the placement mode the cluster needs (see the
*Placement* section of :mod:`.dp`), falls back to the exact placement
automaton when a relaxed optimum's runs do not pack, and turns the search's
limits (:mod:`.errors`) and an infeasible result into a candidate with a
message (:func:`explain_infeasible`, which the other exact methods use too). A search cut short by the
time limit or the memory budget returns the best plan it knows -- the DP's
own best so far or the greedy plan, whichever is better -- as ``feasible``
with the best lower bound it has proven (never nothing when a plan exists).

Options: ``placement`` ("auto" | "bins") forces the exact placement
automaton; ``memory_budget_gb`` caps the DP tables (default 3); ``threads``
the threads of a level (:mod:`.dp_recursion`).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

from ...core.units import format_bytes
from ...plan import PlanError, evaluate
from ...problem import Problem
from ..base import Candidate, SolveRequest, register
from ..errors import OutOfTime, TooLarge
from ..feasibility import feasible_stage_counts, quick_infeasibility
from ..greedy import solve_greedy
from ..interleaved.search import solve_interleaved_search
from .compiled import engine
from .solver import DPModel

__all__ = ["solve_dp", "explain_infeasible"]

_MEMORY_BUDGET_BYTES = 3 * 2**30


@register("dp", options=("placement", "memory_budget_gb", "threads"))
def solve_dp(problem: Problem, request: SolveRequest) -> Candidate:
    """Exact DP. Options: ``placement`` ("auto" | "bins") forces the exact
    placement automaton; ``memory_budget_gb`` caps the DP tables (default 3);
    ``threads`` the threads a level's first layers are shared among (default
    ``PARTITIONER_DP_THREADS`` or one per core; a batch sweep gives each job
    its share of the cores)."""
    if problem.training.schedule == "interleaved":  # its own space and search (interleaved/search.py)
        return solve_interleaved_search(problem, request)
    if problem.cluster.topology is not None:
        return Candidate("error", message="dp: custom cluster topologies are not supported by the solvers yet")
    reason = quick_infeasibility(problem)
    if reason:
        return Candidate("infeasible", message=reason)
    start = time.perf_counter()
    deadline = request.deadline(start)
    budget = float(request.option("memory_budget_gb", _MEMORY_BUDGET_BYTES / 2**30)) * 2**30
    forced = request.option("placement", "auto")
    if forced not in ("auto", "bins"):
        return Candidate("error", message=f"dp: option placement must be 'auto' or 'bins', got {forced!r}")

    threads = request.option("threads", None)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        return Candidate("error", message=f"dp: option threads must be a positive integer, got {threads!r}")

    engine.take_note()  # forget a note of an earlier solve
    model = DPModel(problem)
    model.threads = threads
    mode = "bins" if forced == "bins" else model.natural_placement()
    warm_note = _set_incumbent(problem, request, model, deadline)
    try:
        outcome = model.optimize(request.objective, mode, deadline, budget)
        if outcome.status == "optimal" and outcome.plan is None and mode == "run":
            # the relaxed optimum's runs did not pack: solve with the exact placement automaton
            outcome = model.optimize(request.objective, "bins", deadline, budget)
    except TooLarge as err:
        return _cut_short(problem, request, model, f"dp: {err}", kernels_note=engine.take_note(), warm_note=warm_note)
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
        left = None if deadline is None else deadline - time.perf_counter()
        greedy = solve_greedy(problem, SolveRequest(request.objective, time_limit=left)) if left is None or left > 0 else None
        if greedy is not None and greedy.plan is not None:
            try:
                found.append((evaluate(problem, greedy.plan, request.objective).value, greedy.plan, "greedy"))
            except PlanError:
                pass
        return min(found, key=lambda vp: vp[0]) if found else None

    model.incumbent_source = incumbent
    return note


def _cut_short(problem: Problem, request: SolveRequest, model: "DPModel", reason: str, timed_out: bool = False,
               kernels_note: str | None = None, warm_note: str | None = None) -> Candidate:
    """The best known plan when the search cannot finish: the DP's own best so far or the greedy
    plan, whichever is better, ``feasible`` with the best proven lower bound; ``error`` if neither exists.
    ``timed_out``: the time limit (not the memory budget) stopped the search. ``kernels_note``
    (:func:`.engine.take_note`) says what the kernels' choice cost, e.g. that they were not compiled yet;
    ``warm_note`` what became of the caller's warm start (kept in the stats as on a finished search)."""
    if kernels_note:
        reason = f"{reason} ({kernels_note})"
    found = []
    known = getattr(model, "best_known", None)
    if known is not None:
        found.append(("dp", known[1]))
    greedy = solve_greedy(problem, SolveRequest(request.objective))
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
    bounds.append(model.analytic_bound(request.objective))
    bound = max(bounds) * (1 - 1e-9) if bounds and all(math.isfinite(b) for b in bounds) else None
    if bound is not None:
        bound = min(bound, best[0])
    return Candidate(
        "feasible",
        best[2],
        bound=bound,
        message=f"{reason}; returning the best known plan ({best[1]})",
        timed_out=timed_out,
        extra={"dp": {"cut_short": reason, "plan_from": best[1], **({"warm_start": warm_note} if warm_note else {})}},
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
