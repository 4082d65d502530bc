"""One entry point for every method: the registry, the request, and result assembly.

Each method module registers a function ``(problem, request) -> Candidate``.
:func:`solve` times it, re-evaluates the returned plan with
:func:`partitioner.plan.evaluate` (so every reported value follows the
contract, whatever the method computed internally) and builds the
:class:`~partitioner.plan.SolveResult`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..plan import Plan, PlanError, SolveResult, evaluate
from ..problem import OBJECTIVES, Problem

__all__ = ["SolveRequest", "Candidate", "register", "methods", "method_options", "solve", "SolverError", "REL_TOL"]

# Relative tolerance under which two objective values are the same optimum.
REL_TOL = 1e-9


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

    status: str
    plan: Plan | None = None
    bound: float | None = None
    message: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


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
    from . import _load_all  # noqa: F401  (imports every method module once)

    return tuple(_REGISTRY)


def method_options(method: str) -> frozenset[str]:
    """The option names ``method`` declared when it registered (what ``options=`` may hold)."""
    methods()
    if method not in _OPTIONS:
        raise SolverError(f"unknown method {method!r}; choose one of {', '.join(_REGISTRY)}")
    return _OPTIONS[method]


def solve(
    problem: Problem,
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
    problem : Problem
    method : str
        One of :func:`methods`: ``cpsat``, ``milp``, ``dp``, ``brute``,
        ``greedy``, ``uniform``, ``balanced``.
    objective : {"bottleneck", "iteration"}, optional
        Overrides the problem's objective.
    time_limit : float, optional
        Seconds; exact methods return ``feasible`` with a bound when it stops them.
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
    """
    methods()
    if method not in _REGISTRY:
        raise SolverError(f"unknown method {method!r}; choose one of {', '.join(_REGISTRY)}")
    objective = objective or problem.objective
    if objective not in OBJECTIVES:
        raise SolverError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    options = dict(options or {})
    unknown = set(options) - _OPTIONS[method]
    if unknown:
        allowed = ", ".join(sorted(_OPTIONS[method])) or "none"
        raise SolverError(f"method {method} has no option {sorted(unknown)[0]!r} (options: {allowed})")
    if time_limit is not None and time_limit <= 0:
        raise SolverError(f"time limit must be > 0 seconds, got {time_limit}")
    if isinstance(warm_start, SolveResult):
        warm_start = warm_start.plan
    request = SolveRequest(objective, time_limit, seed, warm_start, options)

    start = time.perf_counter()
    candidate = _REGISTRY[method](problem, request)
    seconds = time.perf_counter() - start
    return finish(problem, method, request, candidate, seconds, validate)


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
        from ..simulate import replay_check  # simulator is optional at import time

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
        version=problem.version,
    )
