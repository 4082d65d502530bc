"""One entry point for every method: the registry, the request, and result assembly.

Each method module registers a function ``(problem, request) -> Candidate``.
:func:`solve` checks the request at the door (the problem may be a
:class:`~partitioner.problem.Problem`, a dict or a path; the time limit a
finite number > 0), times the method, re-evaluates the returned plan with
:func:`partitioner.plan.evaluate` (so every reported value follows the
contract, whatever the method computed internally) and builds the
:class:`~partitioner.plan.SolveResult`.

Quality under a limit: when an *exact* method (:data:`EXACT_METHODS`) is
stopped by its time limit before it has a plan, :func:`solve` returns the
``greedy`` plan as ``feasible``, with the method's bound if it proved one,
and says so in the message and in ``extra["fallback"]``: an exact method cut
short returns its best known plan, never nothing. Only time-outs are
covered; any other error of a method is reported as it is.
"""
from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from ..core.limits import SOLVE_REPLAY_OPS
from ..plan import Plan, PlanError, SolveResult, Status, as_plan, evaluate
from ..problem import OBJECTIVES, Problem, as_problem
from ..simulate.engine import replay_check

__all__ = [
    "SolveRequest",
    "Candidate",
    "register",
    "methods",
    "method_options",
    "solve",
    "SolverError",
    "REL_TOL",
    "EXACT_METHODS",
]

# Relative tolerance under which two objective values are the same optimum.
REL_TOL = 1e-9
# Methods that prove optimality; cut short by the time limit without a plan they fall back to greedy.
EXACT_METHODS = ("cpsat", "milp", "dp", "brute")


class SolverError(ValueError):
    """A request a method cannot serve (unknown method or option, problem too large)."""


@dataclass(frozen=True)
class SolveRequest:
    objective: str
    time_limit: float | None = None
    seed: int = 0
    warm_start: Plan | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def option(self, name: str, default: Any) -> Any:
        return self.options.get(name, default)

    def deadline(self, start: float) -> float | None:
        return None if self.time_limit is None else start + self.time_limit


@dataclass(frozen=True)
class Candidate:
    """What a method found. ``status`` is optimal, feasible, infeasible or error."""

    status: Status
    plan: Plan | None = None
    bound: float | None = None
    message: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    # the time limit stopped the method, or it refused up front because the limit would (a model too
    # large to build in the time left): either way the limit, not the problem, left it without a plan
    timed_out: bool = False


Method = Callable[[Problem, SolveRequest], Candidate]
_REGISTRY: dict[str, Method] = {}
_OPTIONS: dict[str, frozenset[str]] = {}


def register(name: str, options: tuple[str, ...] = ()) -> Callable[[Method], Method]:
    """Register a method under ``name``; ``options`` lists the option keys it accepts."""

    def wrap(fn: Method) -> Method:
        _REGISTRY[name] = fn
        _OPTIONS[name] = frozenset(options)
        return fn

    return wrap


def methods() -> tuple[str, ...]:
    """The registered methods (:mod:`partitioner.solvers` imports every method module, so all are here)."""
    return tuple(_REGISTRY)


def method_options(method: str) -> frozenset[str]:
    """The option names ``method`` declared when it registered (what ``options=`` may hold)."""
    methods()
    if method not in _OPTIONS:
        raise SolverError(f"unknown method {method!r}; choose one of {', '.join(_REGISTRY)}")
    return _OPTIONS[method]


def solve(
    problem: Problem | Mapping[str, Any] | str,
    method: str = "cpsat",
    *,
    objective: str | None = None,
    time_limit: float | None = None,
    seed: int = 0,
    warm_start: Plan | SolveResult | None = None,
    options: Mapping[str, Any] | None = None,
    validate: bool = False,
) -> SolveResult:
    """Plan ``problem`` with ``method``.

    Parameters
    ----------
    problem : Problem, dict or path
        A problem, a problem document (as :meth:`Problem.from_dict` takes),
        or the path of a JSON/YAML problem file.
    method : str
        One of :func:`methods`: ``cpsat``, ``milp``, ``dp``, ``brute``,
        ``greedy``, ``uniform``, ``balanced``.
    objective : {"bottleneck", "iteration"}, optional
        Overrides the problem's objective.
    time_limit : float, optional
        Seconds, a finite number > 0; exact methods return ``feasible`` with a
        bound when it stops them (the greedy plan if they had none yet).
    seed : int
        For randomized methods (CP-SAT).
    warm_start : Plan or SolveResult, optional
        A plan to start from (a hint for CP-SAT / MILP).
    options : mapping, optional
        Method-specific options (see each method's docstring).
    validate : bool
        Replay the plan in the 1F1B simulator and attach the result.

    Returns
    -------
    SolveResult
        ``value`` recomputed by :func:`~partitioner.plan.evaluate`.

    Raises
    ------
    ProblemError
        ``problem`` is not a valid problem (or not a Problem, dict or path).
    SolverError
        An unknown method, objective or option, or a time limit or seed that
        is not a number in range.
    """
    problem = as_problem(problem)
    methods()
    if not isinstance(method, str) or method not in _REGISTRY:
        raise SolverError(f"unknown method {method!r}; choose one of {', '.join(_REGISTRY)}")
    objective = objective or problem.objective
    if objective not in OBJECTIVES:
        raise SolverError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if options is not None and not isinstance(options, Mapping):
        raise SolverError(f"options must be a mapping of option name to value, got {type(options).__name__}")
    options = dict(options or {})
    unknown = set(options) - _OPTIONS[method]
    if unknown:
        allowed = ", ".join(sorted(_OPTIONS[method])) or "none"
        raise SolverError(f"method {method} has no option {sorted(unknown)[0]!r} (options: {allowed})")
    time_limit = check_time_limit(time_limit)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**31:
        raise SolverError(f"seed must be an integer in 0..2^31-1, got {seed!r}")
    if warm_start is not None:
        warm_start = as_plan(warm_start, what="warm_start")
    request = SolveRequest(objective, time_limit, int(seed), warm_start, options)

    start = time.perf_counter()
    unsupported = schedule_support(method, problem.training.schedule, objective)
    if unsupported:
        return finish(problem, method, request, Candidate("error", message=unsupported), 0.0, validate)
    try:
        candidate = _REGISTRY[method](problem, request)
    except MemoryError:
        candidate = Candidate("error", message=f"{method}: ran out of memory on this problem; try dp or greedy, or a smaller problem")
    if method in EXACT_METHODS and _cut_short(candidate, request):
        candidate = _fallback(problem, method, request, candidate, start)
    seconds = time.perf_counter() - start
    return finish(problem, method, request, candidate, seconds, validate)


# What each method optimises exactly (or, for the heuristics, plans validly) beyond 1F1B: the
# exact methods model zb-h1's and GPipe's objectives and stashes (DESIGN.md, "Decisions");
# interleaved plans have P*v chunks, which only cpsat and milp (below) and brute model.
_SCHEDULES_BEYOND_1F1B = {
    "dp": {("zb-h1", "bottleneck"), ("zb-h1", "iteration"), ("gpipe", "bottleneck"), ("gpipe", "iteration")},
    # zb-h1 iteration with a coarser default time unit (slottimes.RESOLUTION_ZB_H1 says why)
    "cpsat": {("zb-h1", "bottleneck"), ("zb-h1", "iteration"), ("gpipe", "bottleneck"), ("gpipe", "iteration")},
    "milp": {("zb-h1", "bottleneck"), ("zb-h1", "iteration"), ("gpipe", "bottleneck"), ("gpipe", "iteration")},
    "greedy": {("zb-h1", "bottleneck"), ("zb-h1", "iteration")},
    "uniform": {("zb-h1", "bottleneck"), ("zb-h1", "iteration")},
    "balanced": {("zb-h1", "bottleneck"), ("zb-h1", "iteration")},
}
# cpsat, milp and dp search the interleaved space of equal device groups with one mesh each
# (solvers/interleaved/space.py), both objectives (dp by its cut search, solvers/interleaved/search.py).
for _method in ("cpsat", "milp", "dp"):
    _SCHEDULES_BEYOND_1F1B[_method] |= {("interleaved", "bottleneck"), ("interleaved", "iteration")}
# Why a method cannot model a schedule at all, when "not yet" would mislead.
_WHY_NOT: dict[tuple[str, str], str] = {}


def schedule_support(method: str, schedule: str, objective: str) -> str:
    """Why ``method`` cannot plan for ``schedule`` with ``objective`` ("" when it can).

    A method must never certify an optimum of another objective than the
    problem's: until it models a schedule, it says so instead of solving.
    """
    if schedule == "1f1b" or method not in _SCHEDULES_BEYOND_1F1B:
        return ""
    if (schedule, objective) in _SCHEDULES_BEYOND_1F1B[method]:
        return ""
    able = [m for m, pairs in _SCHEDULES_BEYOND_1F1B.items() if (schedule, objective) in pairs]
    hint = f"use {' or '.join(able)}" if able else "use brute on a small problem"
    if (method, schedule) in _WHY_NOT:
        return f"{method} cannot optimise schedule {schedule!r}: {_WHY_NOT[method, schedule]}; {hint}"
    return (
        f"{method} does not optimise the {objective} objective under schedule {schedule!r} yet "
        f"(it models 1F1B's estimate and stash); {hint}, or plan with schedule 1f1b and compare "
        "schedules by simulation (partitioner plan does)"
    )


def check_time_limit(time_limit: Any) -> float | None:
    """``time_limit`` as a float, or None; a :class:`SolverError` unless it is a finite number > 0."""
    if time_limit is None:
        return None
    if isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real):
        raise SolverError(f"time limit must be a number of seconds, got {time_limit!r}")
    value = float(time_limit)
    if not math.isfinite(value) or value <= 0:
        raise SolverError(f"time limit must be > 0 seconds and finite, got {time_limit!r}")
    return value


def _cut_short(candidate: Candidate, request: SolveRequest) -> bool:
    """Did the time limit stop the method before it had a plan?"""
    if candidate.plan is not None or candidate.status in ("infeasible", "optimal", "feasible"):
        return False
    if request.time_limit is None:
        return False
    return candidate.timed_out


def _fallback(problem: Problem, method: str, request: SolveRequest, cut: Candidate, start: float) -> Candidate:
    """The greedy plan, as ``feasible`` with the exact method's bound, or ``cut`` if greedy has none."""
    greedy = _REGISTRY.get("greedy")
    limit = request.time_limit
    if greedy is None or limit is None:  # no limit: nothing was cut short (see _cut_short)
        return cut
    remaining = limit - (time.perf_counter() - start)
    budget = max(remaining, min(1.0, limit))
    found = greedy(problem, replace(request, time_limit=budget, warm_start=None, options={}))
    if found.plan is None or found.status not in ("feasible", "optimal"):
        return cut
    try:  # greedy plans plain stages: an interleaved problem needs P*v chunks, so its plan may not be valid
        evaluate(problem, found.plan.with_device_ids(), request.objective)
    except PlanError:
        return cut
    reason = (cut.message or f"{method}: time limit reached").rstrip(".")
    extra = dict(cut.extra)
    extra["fallback"] = "greedy"
    return Candidate(
        "feasible",
        found.plan,
        cut.bound,
        f"{reason}; returning the greedy plan (feasible, not proven optimal)",
        extra,
        timed_out=True,
    )


def finish(
    problem: Problem, method: str, request: SolveRequest, candidate: Candidate, seconds: float, validate: bool = False
) -> SolveResult:
    """Evaluate a candidate's plan and build the result."""
    objective = request.objective
    if candidate.plan is None or candidate.status in ("infeasible", "error"):
        return SolveResult(
            status=candidate.status if candidate.status in ("infeasible", "error") else "error",
            method=method,
            objective=objective,
            bound=candidate.bound,
            solve_seconds=seconds,
            message=candidate.message or ("no plan found" if candidate.status != "infeasible" else ""),
            extra=dict(candidate.extra),
            version=problem.version,
            timed_out=candidate.timed_out,
        )
    plan = candidate.plan.with_device_ids()
    try:
        ev = evaluate(problem, plan, objective)
    except PlanError as err:  # a solver bug: say so instead of returning a wrong plan
        return SolveResult(
            status="error",
            method=method,
            objective=objective,
            solve_seconds=seconds,
            message=f"internal error: {method} returned an invalid plan: {err}",
            version=problem.version,
        )
    value = ev.value
    bound = candidate.bound
    status = candidate.status
    if status == "optimal":
        bound = value if bound is None else min(bound, value)
    extra = dict(candidate.extra)
    if validate:
        ops = 2 * problem.microbatches * plan.num_stages
        if ops > SOLVE_REPLAY_OPS:
            extra["simulation_skipped"] = (
                f"the 1F1B replay would run {ops} operations (2 x {problem.microbatches} microbatches x "
                f"{plan.num_stages} stages), more than the {SOLVE_REPLAY_OPS} a solve replays"
            )
        else:
            extra["simulation"] = replay_check(problem, plan, ev)
    return SolveResult(
        status=status,
        method=method,
        objective=objective,
        value=value,
        bound=bound,
        solve_seconds=seconds,
        message=candidate.message,
        plan=plan,
        evaluation=ev,
        extra=extra,
        timed_out=candidate.timed_out,
        version=problem.version,
    )
