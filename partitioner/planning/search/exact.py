"""``plan``'s last step: one exact solve of the kept candidate's whole problem, each segment choosing its knobs.

The screening (:mod:`.screening`, :mod:`.knob_solve`, :mod:`~partitioner.planning.schedules.choice`)
solves uniform knob settings and picks the kept candidate -- its microbatch
count m and schedule -- by simulation; each segment's knobs are then chosen
for fixed cuts and meshes only. :func:`prove_kept` solves that candidate's
problem once more, in full (every layer's configs with their memory-knob
variants, so each segment picks its knobs inside the solve), after the exact
reduction of :mod:`.dominance`, warm-started with the kept plan, within what
the run's :class:`~partitioner.core.deadline.Deadline` leaves (at most
:data:`EXACT_CAP_SECONDS` without a ``--time-limit``).

More (the detail of this module): ``docs/internals/planning.md``, section ``partitioner.planning.search.exact``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ...core.deadline import Deadline
from ...plan import PlanError, SolveResult, evaluate
from ...plan.result import Status
from ...problem import Problem
from ...solvers import solve
from ...solvers.base import EXACT_METHODS, REL_TOL, schedule_support
from ..options import PlanOptions, solver_options
from ..records import KnobSolve
from ..results import iteration_of, simulate_plan
from .dominance import Reduction, reduce_dominated

__all__ = ["EXACT_CAP_SECONDS", "ExactOutcome", "prove_kept", "space_of"]

# Without --time-limit the default plan of every preset should answer within about 30 s, the screening
# included (issue 27; docs/plan.md lists the measured times): the exact solve gets what is left of the run's
# first DEFAULT_RUN_SECONDS (the rest of the 30 s writes the result), at most EXACT_CAP_SECONDS and at least
# EXACT_MIN_SECONDS. A solve the budget stops answers feasible, its message naming the cut, its bound the solve's.
DEFAULT_RUN_SECONDS = 27.0
EXACT_CAP_SECONDS = 20.0
EXACT_MIN_SECONDS = 3.0



@dataclass(frozen=True)
class ExactOutcome:
    """What the exact solve said about the kept candidate (the result's ``exact`` extra)."""

    space: dict[str, Any]
    status: str
    bound: float | None
    seconds: float
    keys: int
    kept_keys: int
    replaced_plan: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"space": self.space, "status": self.status, "bound": self.bound, "solve_seconds": self.seconds,
                "keys": self.keys, "keys_after_dominance": self.kept_keys, "plan_from_exact_solve": self.replaced_plan,
                **({"reason": self.reason} if self.reason else {})}


def space_of(problem: Problem) -> str:
    """``m=16, schedule 1f1b`` (with v for the interleaved schedule): the space a proof is about."""
    t = problem.training
    return f"m={problem.microbatches}, schedule {t.schedule}" + (
        f" (v = {t.virtual_stages})" if t.schedule == "interleaved" else "")


def _space_doc(problem: Problem) -> dict[str, Any]:
    t = problem.training
    return {"microbatches": problem.microbatches, "schedule": t.schedule, "virtual_stages": t.virtual_stages}


_SCREENED = "other microbatch counts and schedules were screened, not proven"


def _unproven(best: KnobSolve, why: str, outcome: ExactOutcome | None = None) -> KnobSolve:
    """``best`` as ``feasible`` (a bound kept only from ``outcome``), its message saying why it is not proven."""
    r = best.result
    status: Status = "feasible" if r.status == "optimal" else r.status
    message = f"not proven optimal over its space at {space_of(best.problem)}: {why}"
    extra = dict(r.extra)
    if outcome is not None:
        extra.update(exact=outcome.to_dict())
    bound = outcome.bound if outcome is not None else None
    if bound is not None and r.value is not None:
        bound = min(bound, r.value)  # a bound of the space holds for the kept plan, which is in it
    result = replace(r, status=status, bound=bound, message="; ".join(filter(None, [message, r.message])), extra=extra)
    return replace(best, result=result)


def _limit(deadline: Deadline) -> float | None:
    """The exact solve's time limit: what the deadline leaves; without one, the default budget (see above), within
    what the run's default bound leaves (:attr:`~partitioner.core.deadline.Deadline.backstop`)."""
    if deadline.limited:
        return deadline.solve_limit()
    return deadline.solve_limit(min(EXACT_CAP_SECONDS, max(EXACT_MIN_SECONDS, DEFAULT_RUN_SECONDS - deadline.elapsed())))


def _better(best: KnobSolve, found: SolveResult, opts: PlanOptions) -> tuple[KnobSolve | None, float | None]:
    """The exact solve's plan as a kept candidate when its value and its simulated iteration beat ``best``'s
    (else None), and that iteration (None when its value does not beat ``best``'s)."""
    problem = best.problem
    if found.plan is None or best.result.value is None or found.value is None:
        return None, None
    if not found.value < best.result.value * (1 - REL_TOL):
        return None, None
    try:
        ev = evaluate(problem, found.plan, opts.objective)  # on the unreduced problem: the plan the result reports
    except PlanError:
        return None, None
    sim = simulate_plan(problem, found.plan, ev) if opts.simulate else None
    it, src = iteration_of(sim, ev)
    if not it < best.iteration_ms * (1 - REL_TOL):
        return None, it
    result = replace(best.result, value=ev.value, plan=found.plan, evaluation=ev, solve_seconds=found.solve_seconds,
                     extra={**best.result.extra, **found.extra})
    return KnobSolve(problem, result, sim, it, src, best.last, best.solved_plans), it


def prove_kept(best: KnobSolve, opts: PlanOptions, deadline: Deadline) -> KnobSolve:
    """``best`` proven ``optimal`` over its space by one exact solve of its full problem, or why not (module docstring)."""
    problem, r = best.problem, best.result
    if r.plan is None or r.value is None:
        return best
    if opts.method not in EXACT_METHODS:
        return _unproven(best, f"{opts.method} is a heuristic (an exact method -- dp, cpsat, milp -- proves plans)")
    why = schedule_support(opts.method, problem.training.schedule, opts.objective)
    if why:
        return _unproven(best, why)
    limit = _limit(deadline)
    if limit is not None and limit <= 0:
        deadline.cut("exact solve not started", space_of(problem))
        return _unproven(best, "the time limit left no time for the exact solve")
    reduction: Reduction = reduce_dominated(problem)
    warm = reduction.map_plan(problem, r.plan)
    found = solve(reduction.problem, opts.method, objective=opts.objective, time_limit=limit, seed=opts.seed,
                  warm_start=warm, options=solver_options(opts))
    better, its_iteration = _better(best, found, opts)
    kept = better or best
    outcome = ExactOutcome(_space_doc(problem), found.status, _finite(found.bound), found.solve_seconds,
                           reduction.keys, reduction.kept, kept is not best)
    value = kept.result.value
    assert value is not None
    # the method proved its plan optimal (to its own resolution: cpsat's time unit): the kept plan is when it is
    # as good, and the method's bound is the result's
    if found.status == "optimal" and found.value is not None and found.bound is not None \
            and value <= found.value * (1 + REL_TOL):
        return _proven(kept, opts, outcome)
    reason = _reason(found, limit, deadline, opts, (its_iteration, best.iteration_ms))
    if found.timed_out and deadline.limited:
        deadline.cut("exact solve stopped at the time limit", space_of(problem))
    return _unproven(kept, reason, replace(outcome, reason=reason))


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _reason(found: SolveResult, limit: float | None, deadline: Deadline, opts: PlanOptions,
            iterations: tuple[float | None, float]) -> str:
    """Why the exact solve did not prove the kept plan (``iterations``: the solve's plan's and the kept one's)."""
    if found.timed_out:
        if deadline.limited:
            return f"the exact {opts.method} solve was cut short by the time limit ({limit:.3g} s were left)"
        return (f"the exact {opts.method} solve was cut short after {limit:.3g} s by the default budget (without "
                f"--time-limit: what is left of the run's first {DEFAULT_RUN_SECONDS:g} s, at most "
                f"{EXACT_CAP_SECONDS:g} s, at least {EXACT_MIN_SECONDS:g} s; --time-limit S gives it what S leaves)")
    if found.status == "optimal":  # proven, but the kept plan simulates faster than the optimum of the estimate
        its, kept = iterations
        if its is None:
            return f"the {opts.method} optimum ({found.value:.6g} ms) is not below the kept plan's value"
        return (f"the {opts.method} optimum of the estimate ({found.value:.6g} ms) runs {its:.6g} ms in the simulator, "
                f"slower than the kept plan ({kept:.6g} ms), which is kept")
    return f"the exact {opts.method} solve answered {found.status}" + (f": {found.message}" if found.message else "")


def _proven(kept: KnobSolve, opts: PlanOptions, outcome: ExactOutcome) -> KnobSolve:
    """``kept`` as ``optimal`` over its space, with the solve's bound."""
    r = kept.result
    assert r.value is not None and outcome.bound is not None
    bound = min(outcome.bound, r.value)
    note = (f"optimal over its space at {space_of(kept.problem)} (one exact {opts.method} solve, every segment "
            f"choosing its knobs; {outcome.kept_keys} of {outcome.keys} configs left by dominance"
            + ("; its plan replaced the screened one" if outcome.replaced_plan else "") + f"); {_SCREENED}")
    result = replace(r, status="optimal", bound=bound, message="; ".join(filter(None, [note, r.message])),
                     extra={**r.extra, "exact": outcome.to_dict()})
    return replace(kept, result=result)
