"""What ``cpsat`` and ``milp`` share around their models: the starting plan,
the time limit (early refusal, a guard inside long builds, the answer when the limit
runs out) and the message for a proven infeasibility.

The time limit covers everything a method does: a model too large to build in the
time left is refused at once (:func:`model_size_refusal`, an optimistic estimate,
so never premature), long loops call :func:`build_guard`'s check, and a build cut
short returns the starting plan as ``feasible`` with the analytic bound
(:func:`build_timeout_candidate`), or an error naming the way out when there is none.
"""
from __future__ import annotations

import time

from ...plan import Plan, PlanError, evaluate
from ...problem import Problem
from ..base import Candidate, SolveRequest
from ..bounds import analytic_bound
from ..dp.method import explain_infeasible
from ..greedy import solve_greedy
from ..options import CpsatOptions, MilpOptions

# Time to hand a built MILP to its backend, as a share of the time it took to build (measured 0.45 for
# highspy and 0.5 for CBC's MPS file on the 40-layer benchmark); the milp method and its interleaved
# model use it.
HANDOVER_SHARE = 0.5
# The most re-solves of a MILP whose plan its backend's feasibility tolerance let over the memory limit
# (milp.solver._solve_within_memory, interleaved.solve._run_milp): each cuts off one stage (device group)
# no valid plan has, and only those within the tolerance (1e-9 of the GPU's memory) can come back.
MAX_EXCLUSIONS = 64

__all__ = [
    "HANDOVER_SHARE",
    "MAX_EXCLUSIONS",
    "starting_plan",
    "infeasible_message",
    "BuildTimeout",
    "build_guard",
    "build_timeout_message",
    "build_timeout_candidate",
    "analytic_bound",
    "BUILD_SECONDS_PER_CELL",
    "model_cells",
    "model_size_refusal",
]


def starting_plan(problem: Problem, request: SolveRequest, notes: dict, check=None) -> tuple[Plan | None, str | None]:
    """The plan to start from, and where it came from.

    The caller's ``warm_start`` when it is valid (an invalid one is noted in
    ``notes["warm_start"]`` and skipped), else the greedy plan unless the
    ``hint`` option is false, else None. ``check()`` is called before the
    greedy run (it may raise :class:`BuildTimeout`).
    """
    if request.warm_start is not None:
        try:
            evaluate(problem, request.warm_start)
        except PlanError as err:
            notes["warm_start"] = f"ignored: {err}"
        else:
            return request.warm_start.with_device_ids(), "warm_start"
    if not isinstance(request.options, (CpsatOptions, MilpOptions)) or request.options.hint:
        if check is not None:
            check()

        try:
            greedy = solve_greedy(problem, request)
        except Exception as err:  # noqa: BLE001 - a baseline bug must not take the exact solver down
            notes["hint"] = f"greedy failed: {type(err).__name__}: {err}"
            return None, None
        if greedy.plan is not None:
            try:
                evaluate(problem, greedy.plan)
            except PlanError as err:  # a baseline bug must not take the exact solver down
                notes["hint"] = f"greedy plan ignored: {err}"
            else:
                return greedy.plan, "greedy"
    return None, None


def infeasible_message(problem: Problem) -> str:
    """:func:`~partitioner.solvers.dp.method.explain_infeasible`, or a plain statement if explaining fails."""
    try:
        return explain_infeasible(problem)
    except Exception as err:  # noqa: BLE001 - the proof stands; only the explanation is missing
        return f"no valid plan exists (proven by exact search; explaining why failed: {type(err).__name__}: {err})"


class BuildTimeout(Exception):
    """The time limit ran out while a model was being built."""


def build_guard(deadline: float | None):
    """A check to call inside long model-building loops: raises :class:`BuildTimeout` past ``deadline``.

    Building the slot model of a large problem takes minutes (256 layers on
    256 GPUs: about 20 s in CP-SAT, minutes in PuLP); a time limit covers it.
    """

    def check() -> None:
        if deadline is not None and time.perf_counter() > deadline:
            raise BuildTimeout

    return check


def build_timeout_message(method: str, problem: Problem) -> str:
    return (
        f"{method}: the time limit ran out while building the model ({problem.num_layers} layers, "
        f"{len(problem.layouts())} configs); raise --time-limit or use dp"
    )


def build_timeout_candidate(method: str, problem: Problem, request: SolveRequest, plan, source, extra) -> Candidate:
    """The answer when the limit ran out before the search: the starting plan if there is one
    (``feasible``, with the analytic bound), else an error."""
    message = build_timeout_message(method, problem)
    if plan is None:
        return Candidate("error", message=message, extra=extra, timed_out=True)
    bound = analytic_bound(problem, request.objective)
    return Candidate("feasible", plan, bound, f"{message}; returning the {source} plan", extra)


# Seconds per (layer, slot, config) cell to build each model: the rate on an
# idle core of the reference machine, halved, so that a refusal is never
# premature (under load the builds are 2-5x slower, and build_guard stops them).
BUILD_SECONDS_PER_CELL = {"cpsat": 1e-5, "milp": 4e-5}


def model_cells(problem: Problem) -> tuple[int, int]:
    """``(slots, cells)``: an upper bound on the slot count from the stage bounds alone, and the
    (layer, slot, config) cells of the order encoding times the configs (cheap to compute)."""
    L = problem.num_layers
    J = max(1, min(problem.stages.max, L, problem.num_devices))
    configs = len({lay for layer in problem.layers for lay in layer.costs})
    return J, (J * L - J * (J - 1) // 2) * configs


def model_size_refusal(method: str, problem: Problem, request: SolveRequest) -> str | None:
    """A message refusing a problem whose model cannot be built within the time limit, else None.

    The estimate is the cell count (:func:`model_cells`) times an optimistic
    build rate (:data:`BUILD_SECONDS_PER_CELL`): the model has at least
    that many terms. A build that still runs over is stopped by :func:`build_guard`.
    """
    if not request.limited:
        return None
    slots, cells = model_cells(problem)
    estimate = cells * BUILD_SECONDS_PER_CELL[method]
    left = request.left()
    if estimate <= left:
        return None
    return (
        f"{method}: the time limit would run out while building the model ({problem.num_layers} layers x up to "
        f"{slots} stage slots x {cells // max(1, slots * problem.num_layers - slots * (slots - 1) // 2)} configs: "
        f"at least {estimate:.3g} s to build, {max(left, 0.0):.3g} s left); raise --time-limit or use dp"
    )
