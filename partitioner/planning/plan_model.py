"""From a model preset to a plan: the options, the steps, the result.

:func:`plan_model` (keyword arguments) and :func:`run_plan` (a
:class:`~.options.PlanOptions`) plan the training of a model preset on a
cluster preset in five steps: screen the microbatch counts with the baselines
and ``greedy`` (:mod:`.screening`); solve the most promising counts with the
method, each uniform knob setting and then each segment's own knobs
(:mod:`.knob_solve`); pick the pipeline schedule by simulation
(:mod:`.schedule_choice`); solve the kept candidate's whole problem exactly
once, each segment choosing its knobs inside the solve, which makes the status
``optimal`` over its m and schedule or says why not (:mod:`.exact`); and
assemble the result, never slower than the best baseline that fits
(:mod:`.assemble`).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Mapping

from ..core.limits import MAX_GLOBAL_BATCH, MAX_MICROBATCHES, MAX_NODES
from ..costs import CostOptions
from ..costs.fp8 import PRECISIONS
from ..plan import Plan
from ..presets import ClusterSpec, ModelSpec, load_cluster, load_model
from ..problem import OBJECTIVES, ProblemError
from ..solvers import SolverError
from ..solvers.base import check_time_limit
from .assemble import assemble, best_baselines, no_plan
from .context_report import context_report
from .deadline import Deadline
from .exact import prove_kept, space_of
from .knob_solve import solve_with_knobs
from .options import KNOB_SOLVES, PlanOptions
from .records import BaselineRun, KnobSolve, MicrobatchTrial, ScreenedCount, finite
from .results import ModelPlan
from .schedules.choice import choose_schedule, schedule_keys
from .schedules.report import ScheduleReport
from .screening import Builders, counts_to_solve, screen_counts
from .targets.memory import memory_counts
from .targets.report import target_summaries
from .targets.rules import rules_for

__all__ = ["plan_model", "run_plan", "plan_options", "with_precision", "microbatch_candidates", "RESOLVE_MIN_SECONDS"]

# Least time limit (seconds) of a re-solve under another schedule when the user set none (see plan_model):
# the re-solves are candidates the plans are then simulated against, and on the nine presets of the solver
# benchmark a 2 s floor keeps exactly the plans a 10 s one kept (DESIGN.md, "How plan picks the schedule").
RESOLVE_MIN_SECONDS = 2.0


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` >= 1 in increasing order, by trial division up to sqrt(n) (O(sqrt n) steps)."""
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
    return small + large[::-1]


def microbatch_candidates(global_batch: int, limit: int | None = None) -> list[int]:
    """Microbatch counts tried by ``microbatches="auto"``: the divisors of the global batch, at most ``limit``
    and at most :data:`~partitioner.core.limits.MAX_MICROBATCHES` (a problem's range).

    A batch of at most :data:`~partitioner.core.limits.MAX_GLOBAL_BATCH` has at most a few hundred divisors
    (2^24 has 25; the most below it, 504), found in at most 4096 steps.
    """
    cap = MAX_MICROBATCHES if limit is None else min(limit, MAX_MICROBATCHES)
    return [m for m in divisors(global_batch) if m <= cap]


def plan_options(options: Mapping[str, Any] | CostOptions | None) -> CostOptions:
    """The cost options ``plan_model`` uses: every memory-knob variant unless the options fix or restrict them."""
    if isinstance(options, CostOptions):
        return options
    given = dict(options or {})
    if not {"variants", "recompute", "zero1"} & set(given):
        given["variants"] = ("all",)
    return CostOptions.from_mapping(given)


def _check_count(value: Any, name: str, maximum: int) -> None:
    """An argument that must be an integer in 1..maximum (the API door; ranges in partitioner.core.limits)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ProblemError(f"must be an integer in 1..{maximum}, got {value!r}", path=name)


def plan_model(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    *,
    nodes: int,
    global_batch: int,
    microbatches: int | str = "auto",
    method: str = "dp",
    objective: str = "iteration",
    time_limit: float | None = None,
    options: Mapping[str, Any] | CostOptions | None = None,
    profile: Any = None,
    seed: int = 0,
    simulate: bool = True,
    auto_solves: int = 2,
    max_stages: int | None = None,
    knob_solves: str = "fast",
    schedules: bool = True,
    schedule: str = "auto",
    virtual_stages: int | None = None,
    target: str = "any",
    precision: str | None = None,
    fp8_recipe: str | None = None,
) -> ModelPlan:
    """Plan the training of a model preset on a cluster preset.

    Parameters
    ----------
    model, cluster : str or spec
        Preset names, YAML paths or spec objects.
    nodes, global_batch, microbatches, method, objective, time_limit, options, profile, seed, simulate, \
auto_solves, max_stages, knob_solves, schedules, schedule, virtual_stages, target, precision, fp8_recipe
        The fields of :class:`~partitioner.planning.options.PlanOptions`, documented there.

    Returns
    -------
    ModelPlan
        The result format plus its typed sections: ``baseline`` (the best
        baseline that fits), ``baselines`` (each baseline's best, or why none
        fits), ``knobs`` (per stage: its segments' variants), ``throughput``,
        ``microbatches``, ``speedup`` (over the best baseline),
        ``export_hints``, ``schedule`` (of the kept plan) and ``schedules``
        (every schedule's candidates); ``problem`` is the problem of the kept
        plan and carries its schedule, so ``evaluate``, ``simulate`` and the
        exports agree with it.

    Raises
    ------
    SolverError, ProblemError
        An unknown objective, method or ``knob_solves``; an argument out of range.
    """
    opts = PlanOptions(nodes=nodes, global_batch=global_batch, microbatches=microbatches,  # type: ignore[arg-type]
                       method=method, objective=objective, time_limit=time_limit,  # type: ignore[arg-type]
                       options=options, profile=profile, seed=seed, simulate=simulate, auto_solves=auto_solves,
                       max_stages=max_stages, knob_solves=knob_solves, schedules=schedules,  # type: ignore[arg-type]
                       schedule=schedule, virtual_stages=virtual_stages, target=target,  # type: ignore[arg-type]
                       precision=precision, fp8_recipe=fp8_recipe)  # type: ignore[arg-type]
    return run_plan(model, cluster, opts)


def _check_choices(opts: PlanOptions) -> None:
    """The words of the options, checked before any work."""
    if opts.objective not in OBJECTIVES:
        raise SolverError(f"unknown objective {opts.objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if opts.knob_solves not in KNOB_SOLVES:
        raise SolverError(f"knob_solves must be fast or all, got {opts.knob_solves!r}")
    _keys(opts)
    _check_target_precision(opts)


def with_precision(opts: PlanOptions) -> PlanOptions:
    """``opts`` with its ``precision`` and ``fp8_recipe`` merged into the cost options (validated there).

    A value the cost options already set differently is bad input: one
    setting, one meaning.
    """
    given = {k: v for k, v in (("precision", opts.precision), ("fp8_recipe", opts.fp8_recipe)) if v is not None}
    if not given:
        return opts
    if given.get("precision", "fp8") not in PRECISIONS:
        raise ProblemError(f"must be one of {', '.join(PRECISIONS)}, got {given['precision']!r}", path="precision")
    base = opts.options
    doc = base.to_dict() if isinstance(base, CostOptions) else dict(base or {})
    for key, value in given.items():
        if key in doc and doc[key] != value:
            raise ProblemError(f"{value!r} contradicts the cost option {key}={doc[key]!r}", path=key)
    if given.get("precision") == "bf16" and "fp8_recipe" in given:
        raise ProblemError("an FP8 recipe needs precision fp8", path="fp8_recipe")
    if "fp8_recipe" in given and "precision" not in given and doc.get("precision") != "fp8":
        given["precision"] = "fp8"  # a recipe alone asks for FP8
    merged = CostOptions.from_mapping({**doc, **given})  # a ProblemError naming options.<key> if bad
    return replace(opts, options=merged if isinstance(base, CostOptions) else {**doc, **given}, precision=None,
                   fp8_recipe=None)


def _check_target_precision(opts: PlanOptions) -> None:
    """A target whose framework has no training path for the options' FP8 recipe is bad input (exit 2)."""
    rules = rules_for(opts.target)
    cost = opts.options if isinstance(opts.options, CostOptions) else CostOptions.from_mapping(opts.options)
    if rules is None or not cost.fp8 or cost.fp8_recipe in rules.fp8_recipes:
        return
    if not rules.fp8_recipes:
        raise ProblemError(f"{rules.name} has no FP8 training path ({rules.fp8_note}); plan it in BF16",
                           path="precision")
    raise ProblemError(f"{rules.name} does not run the FP8 recipe {cost.fp8_recipe} (it runs "
                       f"{', '.join(rules.fp8_recipes)}: {rules.fp8_note})", path="fp8_recipe")


def _keys(opts: PlanOptions) -> list[tuple[str, int]]:
    """The ``(schedule, v)`` pairs to try: :func:`schedule_keys`, only the target's schedules with a target."""
    keys = schedule_keys(opts.schedule, opts.virtual_stages)
    rules = rules_for(opts.target)
    if rules is None:
        return keys
    if opts.schedule != "auto" and opts.schedule not in rules.schedules:
        raise ProblemError(f"{rules.name} does not run schedule {opts.schedule} (it runs {', '.join(rules.schedules)})",
                           path="schedule")
    return [k for k in keys if k[0] in rules.schedules]


def _microbatch_counts(opts: PlanOptions) -> list[int]:
    """The counts to screen: every divisor of the global batch for ``auto``, else the one given."""
    _check_count(opts.nodes, "nodes", MAX_NODES)
    _check_count(opts.global_batch, "global_batch", MAX_GLOBAL_BATCH)
    g = opts.global_batch
    if opts.microbatches == "auto":
        return microbatch_candidates(g)
    if isinstance(opts.microbatches, int) and not isinstance(opts.microbatches, bool):
        return [opts.microbatches]
    raise ProblemError(f"must be a positive integer or 'auto', got {opts.microbatches!r}", path="microbatches")


def _solve_counts(chosen: list[ScreenedCount], opts: PlanOptions,
                  deadline: Deadline) -> tuple[KnobSolve | None, dict[int, KnobSolve]]:
    """Solve each chosen count with the method; the fastest plan (the first on ties) and every count's solve.

    Once ``deadline`` has passed, the counts left are not solved (the deadline records it).
    """
    best: KnobSolve | None = None
    done: dict[int, KnobSolve] = {}
    for i, entry in enumerate(chosen):
        found = best is not None or any(e.bases for e in chosen)
        # once the deadline has passed, a count is still "solved" only to keep its baseline, or for the one
        # grace solve of a run that found nothing
        if deadline.expired() and (best is not None or (not entry.bases and (found or not deadline.has_grace))):
            deadline.cut(f"{opts.method} solves not started", "m=" + ", m=".join(str(e.m) for e in chosen[i:]))
            break
        solved = done[entry.m] = solve_with_knobs(entry, opts, deadline=deadline, found=found)
        if solved.has_plan and (best is None or solved.iteration_ms < best.iteration_ms):
            best = solved
    return best, done


def _trials(screened: list[ScreenedCount], done: Mapping[int, KnobSolve]) -> list[MicrobatchTrial]:
    """``microbatches_tried``: every screened count, its screen and, if solved, its value and iteration."""
    def trial(e: ScreenedCount) -> MicrobatchTrial:
        d = done.get(e.m)
        return MicrobatchTrial(e.m, finite(e.screen), d is not None, d.result.value if d is not None else None,
                               finite(d.iteration_ms if d is not None else math.inf))
    return [trial(e) for e in screened]


def _no_plan_reason(chosen: list[ScreenedCount], done: Mapping[int, KnobSolve], skipped: list[str]) -> str:
    """Why no count has a plan: the last solved count's messages, else why counts were skipped."""
    solved = [done[e.m] for e in chosen if e.m in done and done[e.m].last is not None]
    return (solved[-1].result.message if solved else "") or "; ".join(skipped[:3]) or "no plan fits"


def run_plan(model: str | ModelSpec, cluster: str | ClusterSpec, opts: PlanOptions) -> ModelPlan:
    """:func:`plan_model` with its options gathered in a :class:`~.options.PlanOptions`."""
    deadline = Deadline(check_time_limit(opts.time_limit))  # one limit for the whole run, from its start
    opts = with_precision(opts)
    _check_choices(opts)  # bad input fails before any work
    spec, cl = load_model(model), load_cluster(cluster)
    counts = _microbatch_counts(opts)
    screened, skipped = screen_counts(Builders(spec, cl, opts), counts, plan_options(opts.options), deadline)
    chosen = counts_to_solve(screened, len(counts) > 1, opts)
    began = time.perf_counter()
    best, done = _solve_counts(chosen, opts, deadline)
    tried = _trials(screened, done)
    if best is None:
        why = _no_plan_reason(chosen, done, skipped)
        return no_plan(opts.method, opts.objective, "; ".join(filter(None, [f"no plan found: {why}", deadline.message()])),
                       tried, status="error" if deadline.cuts else "infeasible")
    bests, report = best_baselines(screened), None
    if opts.tries_schedules:
        # a re-solve under another schedule gets as long as the 1F1B solves took (at least
        # RESOLVE_MIN_SECONDS), within what the deadline leaves: an exact method cut short answers its
        # best plan, and the schedules are compared by simulation anyway
        cap = max(RESOLVE_MIN_SECONDS, time.perf_counter() - began)
        best, bests, report = _pick_schedule(best, screened, opts, deadline, cap)
        if report.chosen is None:  # a pinned schedule nothing runs under: say so, never fall back to another
            why = "; ".join(dict.fromkeys(f"{r.plan_source} under {r.schedule}: {r.reason}" for r in report.rows))
            return no_plan(opts.method, opts.objective, "; ".join(filter(None, [
                f"no plan runs under the pinned schedule {opts.schedule}: {why or 'no candidate'}", deadline.message()])),
                tried, report, status="error" if deadline.cuts else "infeasible")
    if rules_for(opts.target) is None:  # --target proves over the target's space in its own solves
        screened_best = best
        best = prove_kept(best, opts, deadline)
        if report is not None and best.result.plan is not screened_best.result.plan:
            report = replace(report, notes=(*report.notes, (
                f"the exact {opts.method} solve at {space_of(best.problem)} replaced the chosen plan "
                f"({screened_best.iteration_ms:.6g} ms) with a faster one ({best.iteration_ms:.6g} ms simulated)")))
    result = assemble(best, bests, tried, spec, cl, report)
    # which bytes-per-parameter count the problems charged (plan --target T: T's, per ZeRO stage; screening.py)
    rules = rules_for(opts.target)
    memory = memory_counts(opts.target, rules.zero if rules else (0, 1, 3), opts.options, plan_options(opts.options))
    result = replace(result, memory=memory, precision=(result.problem.meta or {}).get("precision")
                     if result.problem is not None else None)
    if result.plan is not None and best.problem is not None:  # per stage, what its context parallelism costs and holds
        result = replace(result, context_parallel=context_report(spec, cl, best.problem, result.plan))
    if rules is None and result.plan is not None:  # --target any: what each framework runs of it
        result = replace(result, targets=target_summaries(result, report, bests, memory))
    return _cut_short(result, deadline)


def _cut_short(result: ModelPlan, deadline: Deadline) -> ModelPlan:
    """``result``, ``feasible`` and its message naming what the deadline cut short, when it cut anything."""
    if not deadline.cuts:
        return result
    status = "feasible" if result.status == "optimal" else result.status
    return replace(result, status=status, message="; ".join(filter(None, [result.message, deadline.message()])))


def _pick_schedule(best: KnobSolve, screened: list[ScreenedCount], opts: PlanOptions, deadline: Deadline,
                   cap: float) -> tuple[KnobSolve, dict[str, BaselineRun], ScheduleReport]:
    """:func:`choose_schedule` of ``best``; each re-solve gets at most ``cap`` seconds of what ``deadline`` leaves."""

    def resolve(entry: ScreenedCount, warm: Mapping[str, Plan]) -> KnobSolve:
        return solve_with_knobs(entry, opts, warm, deadline=deadline, cap=cap)

    return choose_schedule(best, screened, method=opts.method, objective=opts.objective, resolve=resolve,
                           keys=_keys(opts), simulate=opts.simulate,
                           pinned=opts.schedule != "auto", deadline=deadline)
