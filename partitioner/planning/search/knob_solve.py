"""The method's solves of one problem: every uniform knob setting, then each segment's own knobs.

:func:`solve_with_knobs` solves the problem of a :class:`~.records.ScreenedCount`
once per uniform knob setting (:func:`.knobs.uniform_projection`, so that
solvers of format v1 apply), lets each stage segment pick its own knobs for
the solver's cuts and meshes (:func:`.knobs.refine_knobs`, exact for fixed cuts
and meshes) and keeps the best plan -- or the count's fastest baseline when
the method did worse, never reporting a plan slower than a baseline.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ...core.deadline import Deadline
from ...plan import Plan, SolveResult, Stage
from ...problem import Layout, Problem
from ...solvers import solve
from ..baselines import BASELINE_METHOD
from ..options import PlanOptions, solver_options
from ..records import BaselineRun, KnobSolve, ScreenedCount
from ..results import iteration_of, simulate_plan
from ..run import PlanRun
from .knobs import _projections, refine_knobs, variant_at
from .target_solve import solve_for_target

__all__ = ["solve_with_knobs"]


@dataclass
class _Tally:
    """What the uniform knob settings' solves found so far: the best refined plan, the last result, failures."""

    best: tuple[float, SolveResult] | None = None
    last: SolveResult | None = None
    messages: list[str] = field(default_factory=list)
    solved_plans: dict[str, Plan] = field(default_factory=dict)


def _warm_start(entry: ScreenedCount, variant: str, warm: Mapping[str, Plan]) -> Plan | None:
    """The plan this setting got under another schedule (a re-solve), else the Megatron baseline's when its knobs match."""
    found = warm.get(variant)
    megatron = entry.bases.get(BASELINE_METHOD)
    if found is None and megatron is not None and all(c.variant == variant_at(entry.problem, c.dp * c.cp, variant)
                                                      for s in megatron.plan.stages for c in _configs(s)):
        found = Plan(tuple(_with_variant(s, lambda c: "") for s in megatron.plan.stages))
    return found


def _configs(stage: Stage) -> tuple[Layout, ...]:
    """The configs of a stage's segments (its one config when they are all the same)."""
    return stage.configs if stage.configs is not None else (stage.layout,)


def _with_variant(stage: Stage, variant_of: Callable[[Layout], str]) -> Stage:
    """``stage`` with each segment's config given the variant ``variant_of(config)``; meshes and cp/ep/etp kept."""
    if stage.configs is None:
        return replace(stage, variant=variant_of(stage.layout))
    return Stage.from_configs(stage.first_layer, stage.last_layer, stage.devices,
                              [replace(c, variant=variant_of(c)) for c in stage.configs], stage.device_ids)


def _solve_setting(entry: ScreenedCount, variant: str, proj: Problem, opts: PlanOptions, warm: Mapping[str, Plan],
                   tally: _Tally, limit: float | None) -> SolveResult:
    """Solve one uniform knob setting within ``limit`` seconds, refine its plan's knobs per segment, keep it if best."""
    result = solve(proj, opts.method, objective=opts.objective, time_limit=limit, seed=opts.seed,
                   warm_start=_warm_start(entry, variant, warm), options=solver_options(opts))
    tally.last = result
    if result.plan is None:
        if result.message:
            tally.messages.append(f"{variant or 'plain'}: {result.message}")
        return result
    tally.solved_plans[variant] = result.plan  # a re-solve's warm start
    problem = entry.problem
    lifted = Plan(tuple(_with_variant(s, lambda c: variant_at(problem, c.dp * c.cp, variant)) for s in result.plan.stages))
    refined = refine_knobs(problem, lifted, opts.objective)
    if refined is None:
        return result
    value = refined[1].value
    if tally.best is None or value < tally.best[0]:
        tally.best = (value, replace(result, value=value, plan=refined[0], evaluation=refined[1]))
    return result


def _where(entry: ScreenedCount, variant: str) -> str:
    """``m=8, knob setting zero1`` (and the schedule when it is not 1F1B): which solve a cut note is about."""
    schedule = entry.problem.training.schedule
    return (f"m={entry.problem.microbatches}, knob setting {variant or 'plain'}"
            + (f", under {schedule}" if schedule != "1f1b" else ""))


def _fastest_baseline(entry: ScreenedCount) -> tuple[str, BaselineRun] | None:
    """(name, baseline) of the entry's baseline with the best objective value, or None."""
    if not entry.bases:
        return None
    name = min(entry.bases, key=lambda n: entry.bases[n].ev.value)
    return name, entry.bases[name]


def _failed(entry: ScreenedCount, opts: PlanOptions, tally: _Tally) -> KnobSolve:
    """No plan and no baseline: infeasible (or error, when the method's last solve was one)."""
    last = tally.last
    fail = SolveResult(status="infeasible" if last is None or last.status != "error" else "error", method=opts.method,
                       objective=opts.objective, message="; ".join(tally.messages[:3]) or "no plan fits")
    return KnobSolve(entry.problem, fail, None, math.inf, "none", fail, tally.solved_plans)


def _kept_baseline(entry: ScreenedCount, name: str, b: BaselineRun, opts: PlanOptions, tally: _Tally) -> KnobSolve:
    """The faster baseline's plan (on the problem it was built on), the message saying why."""
    r = tally.last if tally.best is None else tally.best[1]
    why = ("found no plan" if tally.last is not None else "ran no solve in the time left") if tally.best is None else f"returned {tally.best[0]:.6g} ms > {name} baseline {b.ev.value:.6g} ms"
    message = "; ".join(filter(None, [*tally.messages[:3], f"{opts.method} {why}: kept the {name} baseline plan"]))
    result = SolveResult(status="feasible", method=opts.method, objective=opts.objective, value=b.ev.value,
                         solve_seconds=r.solve_seconds if r is not None else 0.0, message=message, plan=b.plan,
                         evaluation=b.ev)
    it, src = iteration_of(b.sim, b.ev)
    return KnobSolve(entry.base_problem, result, b.sim, it, src, tally.last, tally.solved_plans)


def _solved(problem: Problem, result: SolveResult, opts: PlanOptions, tally: _Tally) -> KnobSolve:
    """The method's best plan, replayed; a format-v2 result says its knobs were chosen per segment."""
    if problem.version >= 2 and problem.variants:
        note = f"{opts.method} solved uniform knob settings (knob_solves={opts.knob_solves}); knobs then chosen per segment"
        result = replace(result, status="feasible" if result.status == "optimal" else result.status, bound=None,
                         message="; ".join(filter(None, [result.message, note])))
    sim = simulate_plan(problem, result.plan, result.evaluation) if (opts.simulate and result.plan is not None) else None
    it, src = iteration_of(sim, result.evaluation) if result.evaluation is not None else (math.inf, "none")
    return KnobSolve(problem, result, sim, it, src, tally.last, tally.solved_plans)


def _limit(entry: ScreenedCount, variant: str, opts: PlanOptions, tally: _Tally, deadline: Deadline,
           cap: float | None, found: bool) -> float | None:
    """The time limit of one setting's solve: what the deadline leaves, at most ``cap``; 0 to skip it.

    A run that has found nothing at all yet (``found`` False: no baseline
    fits, no plan so far) may still solve once for :data:`~partitioner.core.deadline.GRACE_SECONDS`.
    """
    limit = deadline.solve_limit(cap)
    if limit is not None and limit <= 0 and not found and tally.best is None and not entry.bases:
        limit = deadline.grace()
        deadline.cut(f"{opts.method} solves given only the {limit:g} s grace after the deadline", _where(entry, variant))
    if limit is not None and limit <= 0:
        deadline.cut(f"{opts.method} solves not started", _where(entry, variant))
    return limit


def solve_with_knobs(entry: ScreenedCount, run: PlanRun, warm: Mapping[str, Plan] | None = None,
                     cap: float | None = None, found: bool = True) -> KnobSolve:
    """Solve every uniform knob setting of the entry's problem, refine each plan's knobs per segment, keep the best.

    ``warm``: per knob setting, a plan that starts the method (the plans of
    another schedule's solve). The solves get what the run's deadline leaves,
    at most ``cap`` seconds together (the settings left when the cap is spent
    are not solved); the settings left when the deadline has passed are not
    solved (the deadline records it; ``found`` False: nothing was found
    before this call, so one short solve may still run). Never slower than
    the entry's fastest baseline: its plan is kept instead, and the message
    says so.
    """
    opts, deadline = run.options, run.deadline
    if run.rules is not None:  # plan --target: the target's space, solved exactly (no per-segment knob choice after)
        solved = solve_for_target(entry, opts, run.rules, deadline, cap)
        kept = _fastest_baseline(entry)
        value = solved.result.value if solved.has_plan else None
        if kept is not None and (value is None or value > kept[1].ev.value * (1 + 1e-9)):
            best = (value, solved.result) if value is not None else None
            return _kept_baseline(entry, *kept, opts, _Tally(best=best, last=solved.last))
        return solved
    tally = _Tally()
    started = time.perf_counter()
    for variant, proj in _projections(entry.problem, "all" if opts.knob_solves == "all" else "escalate"):
        if opts.knob_solves == "fast" and tally.best is not None:
            break  # the first setting with a plan; its knobs are then refined per segment
        left = None if cap is None else cap - (time.perf_counter() - started)  # cap bounds the call, not each setting
        if left is not None and left <= 0:
            break  # the caller's cap (a re-solve's), not the run's deadline: nothing to record
        limit = _limit(entry, variant, opts, tally, deadline, left, found)
        if limit is not None and limit <= 0:
            break
        result = _solve_setting(entry, variant, proj, opts, warm or {}, tally, limit)
        if limit is not None and deadline.limited and result.timed_out:  # the method says its limit stopped it
            deadline.cut(f"{opts.method} solves stopped at the time limit", f"{_where(entry, variant)} ({result.status})")
    kept = _fastest_baseline(entry)
    if tally.best is None and kept is None:
        return _failed(entry, opts, tally)
    if kept is not None and (tally.best is None or tally.best[0] > kept[1].ev.value * (1 + 1e-9)):
        return _kept_baseline(entry, *kept, opts, tally)
    assert tally.best is not None
    return _solved(entry.problem, tally.best[1], opts, tally)
