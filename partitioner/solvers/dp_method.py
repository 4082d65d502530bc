"""The ``dp`` method: the registry's entry point to the exact DP of :mod:`.dp`.

It checks what the DP cannot take (custom topologies) and what is infeasible
without a search, solves with the placement mode the cluster needs (see the
*Placement* section of :mod:`.dp`), falls back to the exact placement
automaton when a relaxed optimum's runs do not pack, and turns the search's
limits (:mod:`.errors`) and an infeasible result into a candidate with a
message (:func:`.feasibility.explain_infeasible`).

Options: ``placement`` ("auto" | "bins") forces the exact placement
automaton; ``memory_budget_gb`` caps the DP tables (default 3).
"""
from __future__ import annotations

import time

from ..problem import Problem
from .base import Candidate, SolveRequest, register
from .dp import DPModel
from .errors import OutOfTime, TooLarge
from .feasibility import explain_infeasible, quick_infeasibility

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
    try:
        outcome = model.optimize(request.objective, mode, deadline, budget)
        if outcome.status == "optimal" and outcome.plan is None and mode == "run":
            # the relaxed optimum's runs did not pack: solve with the exact placement automaton
            outcome = model.optimize(request.objective, "bins", deadline, budget)
    except TooLarge as err:
        return Candidate("error", message=f"dp: {err}")
    except OutOfTime:
        return Candidate("error", message="dp: time limit reached before the recursion finished")
    if outcome.status == "infeasible":
        return Candidate("infeasible", message=explain_infeasible(problem))
    if outcome.plan is None:
        return Candidate("error", message="dp: internal error: the optimum could not be placed")
    return Candidate(outcome.status, outcome.plan, bound=outcome.bound, extra={"dp": outcome.stats})

