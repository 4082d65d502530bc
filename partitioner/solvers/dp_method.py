"""The ``dp`` method: the registry's entry point to the exact DP of :mod:`.dp`.

It checks what the DP cannot take (custom topologies) and what is infeasible
without a search, solves with the placement mode the cluster needs (see the
*Placement* section of :mod:`.dp`), falls back to the exact placement
automaton when a relaxed optimum's runs do not pack, and turns the search's
limits (:mod:`.errors`) and an infeasible result into a candidate with a
message (:func:`.feasibility.explain_infeasible`). A search cut short by the
time limit or the memory budget returns the best plan it knows -- the DP's
own best so far or the greedy plan, whichever is better -- as ``feasible``
with the best lower bound it has proven (never nothing when a plan exists).

Options: ``placement`` ("auto" | "bins") forces the exact placement
automaton; ``memory_budget_gb`` caps the DP tables (default 3).
"""
from __future__ import annotations

import math
import time

from ..plan import PlanError, evaluate
from ..problem import Problem
from .base import Candidate, SolveRequest, register
from .dp import DPModel
from .errors import OutOfTime, TooLarge
from .feasibility import explain_infeasible, quick_infeasibility
from .greedy import solve_greedy

__all__ = ["solve_dp"]

_MEMORY_BUDGET_BYTES = 3 * 2**30


@register("dp", options=("placement", "memory_budget_gb"))
def solve_dp(problem: Problem, request: SolveRequest) -> Candidate:
    """Exact DP. Options: ``placement`` ("auto" | "bins") forces the exact
    placement automaton; ``memory_budget_gb`` caps the DP tables (default 3)."""
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

    model = DPModel(problem)
    mode = "bins" if forced == "bins" else model.natural_placement()
    warm_note = _take_warm_start(problem, request, model)
    try:
        outcome = model.optimize(request.objective, mode, deadline, budget)
        if outcome.status == "optimal" and outcome.plan is None and mode == "run":
            # the relaxed optimum's runs did not pack: solve with the exact placement automaton
            outcome = model.optimize(request.objective, "bins", deadline, budget)
    except TooLarge as err:
        return _cut_short(problem, request, model, f"dp: {err}")
    except OutOfTime:
        return _cut_short(problem, request, model, "dp: time limit reached before the recursion finished")
    if outcome.status == "infeasible":
        return Candidate("infeasible", message=explain_infeasible(problem))
    if outcome.plan is None:
        return Candidate("error", message="dp: internal error: the optimum could not be placed")
    stats = dict(outcome.stats or {})
    if warm_note:
        stats["warm_start"] = warm_note
    return Candidate(outcome.status, outcome.plan, bound=outcome.bound, extra={"dp": stats})


def _take_warm_start(problem: Problem, request: SolveRequest, model: "DPModel") -> str | None:
    """Give the model a valid warm start as its first incumbent where a search uses one (zb-h1's
    ``iteration``: the walks over k are stopped by the best value so far); say what became of it."""
    model.warm = None
    if request.warm_start is None:
        return None
    if (problem.training.schedule, request.objective) != ("zb-h1", "iteration"):
        return "not used: only zb-h1's iteration search starts from an incumbent"
    try:
        value = evaluate(problem, request.warm_start, request.objective).value
    except PlanError as err:
        return f"ignored: {err}"
    model.warm = (value, request.warm_start)
    return "used as the first incumbent"


def _cut_short(problem: Problem, request: SolveRequest, model: "DPModel", reason: str) -> Candidate:
    """The best known plan when the search cannot finish: the DP's own best so far or the greedy
    plan, whichever is better, ``feasible`` with the best proven lower bound; ``error`` if neither exists."""
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
        return Candidate("error", message=f"{reason}; no valid plan known")
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
        extra={"dp": {"cut_short": reason, "plan_from": best[1]}},
    )
