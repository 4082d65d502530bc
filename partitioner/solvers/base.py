"""One entry point for every method: the registry, the request, the door and result assembly.

Each method module registers (:func:`register`) a function ``(problem, request) -> Candidate``
with its typed options record and its :class:`~.options.Capabilities`. :func:`solve` is the
door: it checks the request once, before anything runs -- the problem (a
:class:`~partitioner.problem.Problem`, a dict or a path), the method, the objective, the
options (built into the method's record, :func:`~.options.options_record`), the time limit
(seconds or a :class:`~partitioner.core.deadline.Deadline`), the seed and the warm start --
then the problem against the method's capabilities (schedule and objective, topology, format,
tied weights: ``error`` saying why) and against the quick infeasibility proofs
(:func:`~.feasibility.quick_infeasibility`: ``infeasible`` with the reason).

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.base``.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from ..core.deadline import Deadline
from ..core.limits import SOLVE_REPLAY_OPS
from ..plan import Plan, PlanError, SolveResult, Status, as_plan, evaluate
from ..problem import OBJECTIVES, SCHEDULES, Problem, as_problem
from ..simulate.engine import replay_check
from .errors import SolverError
from .feasibility import quick_infeasibility
from .options import Capabilities, MethodOptions, NoOptions, options_from_text, options_record

__all__ = [
    "SolveRequest",
    "Candidate",
    "MethodSpec",
    "register",
    "methods",
    "method_spec",
    "method_options",
    "solve",
    "SolverError",
    "REL_TOL",
    "EXACT_METHODS",
    "DEFAULT_METHOD",
    "schedule_support",
    "check_time_limit",
]

# Relative tolerance under which two objective values are the same optimum.
REL_TOL = 1e-9
# Methods that prove optimality; cut short by the time limit without a plan they fall back to greedy.
EXACT_METHODS = ("cpsat", "milp", "dp", "brute")
# The method of solve() and of `partitioner solve` when none is named: the exact method that scales
# (docs/methods.md); plan uses it too.
DEFAULT_METHOD = "dp"


@dataclass(frozen=True)
class SolveRequest:
    """What a method is asked: the objective, the deadline, the seed, a warm start and its typed options.

    ``time_limit`` may be seconds (a :class:`~partitioner.core.deadline.Deadline` starts now) or a
    Deadline (shared with the caller: the solve ends when it does); it is kept as the Deadline.
    """

    objective: str
    time_limit: Deadline | float | None = None
    seed: int = 0
    warm_start: Plan | None = None
    options: MethodOptions = field(default_factory=NoOptions)

    def __post_init__(self) -> None:
        object.__setattr__(self, "time_limit", Deadline.of(self.time_limit))

    @property
    def clock(self) -> Deadline:
        """The request's :class:`~partitioner.core.deadline.Deadline` (never None; unlimited without a limit)."""
        assert isinstance(self.time_limit, Deadline)
        return self.time_limit

    @property
    def limited(self) -> bool:
        """Whether the request has a time limit."""
        return self.clock.limited

    def left(self) -> float:
        """Seconds left (infinite without a limit)."""
        return self.clock.left()

    def deadline(self, start: float | None = None) -> float | None:
        """The deadline on :func:`time.perf_counter`'s clock, None without a limit (``start`` is ignored)."""
        return self.clock.at()

    def option(self, name: str, default: Any = None) -> Any:
        """Option ``name`` of the record, ``default`` when it is None or not declared (for registered plug-ins)."""
        value = getattr(self.options, name, None)
        return default if value is None else value


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
# A method registered without capabilities: every schedule and objective, any topology (it decides).
_ANYTHING = Capabilities(schedules={s: frozenset(OBJECTIVES) for s in SCHEDULES}, topology=True, partial_racks=True,
                         levels=True)


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its function, its options record type and its capabilities."""

    name: str
    run: Method
    options: type[MethodOptions]
    capabilities: Capabilities


_METHODS: dict[str, MethodSpec] = {}


def register(
    name: str,
    options: type[MethodOptions] | tuple[str, ...] = NoOptions,
    capabilities: Capabilities | None = None,
) -> Callable[[Method], Method]:
    """Register a method under ``name`` with its options record and capabilities.

    ``options`` is a :class:`~.options.MethodOptions` subclass (the built-in methods'), or, for a plug-in,
    a tuple of option names, which become a record of untyped fields (default None) read with
    :meth:`SolveRequest.option`. ``capabilities`` defaults to every schedule and objective on any topology.
    """
    record = options if isinstance(options, type) else _loose_record(name, tuple(options))

    def wrap(fn: Method) -> Method:
        _METHODS[name] = MethodSpec(name, fn, record, capabilities or _ANYTHING)
        return fn

    return wrap


def _loose_record(method: str, names: tuple[str, ...]) -> type[MethodOptions]:
    fields = [(n, Any, dataclasses.field(default=None)) for n in names]
    record = dataclasses.make_dataclass(f"{method.title()}Options", fields, bases=(MethodOptions,), frozen=True)
    record.method = method  # type: ignore[attr-defined]
    return record


def methods() -> tuple[str, ...]:
    """The registered methods (:mod:`partitioner.solvers` imports every method module, so all are here)."""
    return tuple(_METHODS)


def method_spec(method: str) -> MethodSpec:
    """The registered method ``method``; a :class:`SolverError` naming the choices if there is none."""
    if not isinstance(method, str) or method not in _METHODS:
        raise SolverError(f"unknown method {method!r}; choose one of {', '.join(_METHODS)}")
    return _METHODS[method]


def method_options(method: str) -> frozenset[str]:
    """The option names ``method`` declared when it registered (what ``options=`` may hold)."""
    return frozenset(f.name for f in dataclasses.fields(method_spec(method).options))


def solve(
    problem: Problem | Mapping[str, Any] | str,
    method: str = DEFAULT_METHOD,
    *,
    objective: str | None = None,
    time_limit: float | Deadline | None = None,
    seed: int = 0,
    warm_start: Plan | SolveResult | None = None,
    options: MethodOptions | Mapping[str, Any] | None = None,
    validate: bool = False,
) -> SolveResult:
    """Plan ``problem`` with ``method``.

    Parameters
    ----------
    problem : Problem, dict or path
        A problem, a problem document (as :meth:`Problem.from_dict` takes),
        or the path of a JSON/YAML problem file.
    method : str
        One of :func:`methods`: ``dp`` (the default, :data:`DEFAULT_METHOD`), ``cpsat``, ``milp``,
        ``brute``, ``greedy``, ``uniform``, ``balanced``.
    objective : {"bottleneck", "iteration"}, optional
        Overrides the problem's objective.
    time_limit : float or Deadline, optional
        Seconds, a finite number > 0, or a :class:`~partitioner.core.deadline.Deadline` shared with the
        caller (the solve ends when it does; an expired one still gets the method's quickest answer).
        Exact methods return ``feasible`` with a bound when it stops them (the greedy plan if they had none yet).
    seed : int
        For randomized methods (CP-SAT).
    warm_start : Plan or SolveResult, optional
        A plan to start from (a hint for CP-SAT / MILP).
    options : mapping or the method's options record, optional
        Method-specific options (:mod:`partitioner.solvers.options`: each method's record documents them).
    validate : bool
        Replay the plan in the 1F1B simulator and attach the result.

    Returns
    -------
    SolveResult
        ``value`` recomputed by :func:`~partitioner.plan.evaluate`. ``error`` when the method cannot plan
        this problem (its schedule, topology or format), with the reason; ``infeasible`` when no plan exists.

    Raises
    ------
    ProblemError
        ``problem`` is not a valid problem (or not a Problem, dict or path), or the request is bad: a
        :class:`SolverError` (a ProblemError) names the unknown method, objective or option, or the
        option value, time limit or seed that is out of range.
    """
    problem = as_problem(problem)
    spec = method_spec(method)
    request = _request(problem, spec, objective, time_limit, seed, warm_start, options)
    start = time.perf_counter()
    refusal = refusal_of(spec, problem, request.objective)
    if refusal is not None:
        return finish(problem, method, request, refusal, time.perf_counter() - start, validate)
    try:
        candidate = spec.run(problem, request)
    except MemoryError:
        candidate = Candidate("error", message=f"{method}: ran out of memory on this problem; try dp or greedy, or a smaller problem")
    if spec.capabilities.exact and _cut_short(candidate, request):
        candidate = _fallback(problem, method, request, candidate, start)
    seconds = time.perf_counter() - start
    return finish(problem, method, request, candidate, seconds, validate)


def method_options_from_text(method: str, pairs: Mapping[str, str]) -> MethodOptions:
    """``method``'s options record from the CLI's ``-o key=value`` text (:func:`~.options.options_from_text`)."""
    return options_from_text(method_spec(method).options, method, pairs)


def _request(problem: Problem, spec: MethodSpec, objective: Any, time_limit: Any, seed: Any, warm_start: Any,
             options: Any) -> SolveRequest:
    """The checked request (module docstring: the door)."""
    objective = problem.objective if objective is None else objective
    if objective not in OBJECTIVES:
        raise SolverError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    record = options_record(spec.options, spec.name, options)
    clock = time_limit if isinstance(time_limit, Deadline) else Deadline(check_time_limit(time_limit))
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < 2**31:
        raise SolverError(f"seed must be an integer in 0..2^31-1, got {seed!r}")
    if warm_start is not None:
        warm_start = as_plan(warm_start, what="warm_start")
    return SolveRequest(objective, clock, int(seed), warm_start, record)


def refusal_of(spec: MethodSpec, problem: Problem, objective: str) -> Candidate | None:
    """What :func:`solve` answers without running the method, if anything: ``error`` when the method cannot
    plan this problem (its capabilities), ``infeasible`` when a quick proof rules every plan out."""
    why = _capability_gap(spec, problem, objective)
    if why:
        return Candidate("error", message=why)
    if problem.training.schedule != "interleaved":
        reason = quick_infeasibility(problem)  # interleaved plans have their own space (group counts)
        if reason:
            return Candidate("infeasible", message=reason)
    return None


def _capability_gap(spec: MethodSpec, problem: Problem, objective: str) -> str:
    """Why ``spec`` cannot plan ``problem`` with ``objective`` ("" when it can)."""
    caps, method = spec.capabilities, spec.name
    schedule = problem.training.schedule
    if not caps.supports(schedule, objective):
        return schedule_support(method, schedule, objective)
    if problem.cluster.topology is not None and not caps.topology:
        return f"{method}: custom cluster topologies are not supported by the solvers yet"
    if problem.version not in caps.formats:
        return f"{method}: problem format v{problem.version} is not supported (it reads v{', v'.join(map(str, sorted(caps.formats)))})"
    if problem.ties and not caps.tied_weights:
        return f"{method}: tied weights (tied_to, format v3) are not supported"
    gap = _partial_rack_gap(method, caps, schedule) if problem.cluster.partial else ""
    if not gap and problem.cluster.levels is not None:
        gap = _levels_gap(method, caps, schedule)
    return gap


def _levels_gap(method: str, caps: Capabilities, schedule: str) -> str:
    """Why ``method`` cannot plan a cluster with network ``levels`` under ``schedule`` ("" if it can)."""
    return _cluster_gap(method, schedule, caps.levels, "levels", "network levels",
                        "network levels (cluster.levels) are not supported by this method yet", "")


def _partial_rack_gap(method: str, caps: Capabilities, schedule: str) -> str:
    """Why ``method`` cannot plan a cluster with ``stage_sizes`` or ``devices`` under ``schedule`` ("" if it can)."""
    return _cluster_gap(method, schedule, caps.partial_racks, "partial_racks",
                        "stage_sizes or devices (partial racks)",
                        "stage_sizes or devices (partial racks) are not supported by this method", "brute")


def _cluster_gap(method: str, schedule: str, able: bool, capability: str, what: str, refusal: str,
                 fallback: str) -> str:
    """Why ``method`` cannot plan a cluster with ``what`` under ``schedule`` ("" if it can): no method plans
    the interleaved schedule there yet; a method without the ``capability`` says ``refusal`` and names the
    methods that have it (else ``fallback``, when given)."""
    if schedule == "interleaved":
        return (f"{method}: the interleaved schedule is not planned on clusters with {what} yet; "
                "plan with schedule 1f1b, zb-h1 or gpipe")
    if able:
        return ""
    others = [m for m, s in _METHODS.items() if s.capabilities is not _ANYTHING
              and getattr(s.capabilities, capability) and s.capabilities.supports(schedule, "bottleneck")]
    named = " or ".join(others) or fallback
    return f"{method}: clusters with {refusal}" + (f"; use {named}" if named else "")


def schedule_support(method: str, schedule: str, objective: str) -> str:
    """Why ``method`` cannot plan for ``schedule`` with ``objective`` ("" when it can).

    A method must never certify an optimum of another objective than the
    problem's: until it models a schedule, it says so instead of solving.
    """
    caps = method_spec(method).capabilities
    if caps.supports(schedule, objective):
        return ""
    able = [m for m, s in _METHODS.items() if s.capabilities is not _ANYTHING and s.capabilities.supports(schedule, objective)]
    hint = f"use {' or '.join(able)}" if able else "use brute on a small problem"
    if schedule in caps.why_not:
        return f"{method} cannot optimise schedule {schedule!r}: {caps.why_not[schedule]}; {hint}"
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
    return request.limited and candidate.timed_out


def _fallback(problem: Problem, method: str, request: SolveRequest, cut: Candidate, start: float) -> Candidate:
    """The greedy plan, as ``feasible`` with the exact method's bound, or ``cut`` if greedy has none
    (or cannot plan this problem: its schedule, topology or format)."""
    greedy = _METHODS.get("greedy")
    limit = request.clock.seconds
    if greedy is None or limit is None:  # no limit: nothing was cut short (see _cut_short)
        return cut
    if _capability_gap(greedy, problem, request.objective):  # e.g. interleaved: greedy's stash is 1F1B's
        return cut
    budget = max(request.left(), min(1.0, limit))
    found = greedy.run(problem, replace(request, time_limit=budget, warm_start=None, options=NoOptions()))
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
            extra["simulation"] = replay_check(problem, plan, ev).to_dict()
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
