"""From a model preset to a plan: the options, the steps, the result.

:func:`plan_model` (keyword arguments) and :func:`run_plan` (a
:class:`~.options.PlanOptions`) plan the training of a model preset on a
cluster preset: it resolves the options once into a :class:`~.run.PlanRun`
(:mod:`.run`: target rules, cost options, schedule keys, microbatch counts,
deadline), then goes through five steps: screen the microbatch counts with the baselines
and ``greedy`` (:mod:`.search.screening`); solve the most promising counts with the
method, each uniform knob setting and then each segment's own knobs
(:mod:`.search.knob_solve`); pick the pipeline schedule by simulation
(:mod:`.schedules.choice`); solve the kept candidate's whole problem exactly
once, each segment choosing its knobs inside the solve, which makes the status
``optimal`` over its m and schedule or says why not (:mod:`.search.exact`); and
assemble the result, never slower than the best baseline that fits
(:mod:`.assemble`).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Callable, Mapping

from ..core import progress
from ..core.deadline import FIRST_PLAN_GRACE_SECONDS, Deadline
from ..core.limits import MAX_DEVICES
from ..costs import CostOptions
from ..costs.build import job_cluster_fields
from ..plan import Plan
from ..presets import ClusterSpec, ModelSpec, Workload, load_cluster, load_model
from ..problem import Problem, ProblemError
from .assemble import assemble, best_baselines, no_plan
from .options import PlanOptions, solver_options
from .recipes.baseline import RecipeBaseline, estimate_baseline, keep_faster, read_baseline, with_recipe_axes
from .records import BaselineRun, KnobSolve, MicrobatchTrial, ScreenedCount, TargetSummary, finite
from .reports.axes import axis_alternatives
from .reports.context import context_report
from .results import ModelPlan
from .run import CostTables, PlanRun
from .schedules.choice import choose_schedule
from .schedules.report import ScheduleReport
from .search.exact import DEFAULT_RUN_SECONDS, prove_kept, space_of
from .search.knob_solve import solve_with_knobs
from .search.screening import Builders, counts_to_solve, screen_counts
from .targets.report import refused_summary, target_summary
from .targets.rules import RULES, runs

__all__ = ["plan_model", "run_plan", "RESOLVE_MIN_SECONDS", "MAIN_SHARE", "TARGET_MIN_SECONDS", "TARGET_SCREEN_SHARE",
           "DEFAULT_PLAN_SECONDS"]

# Least time limit (seconds) of a re-solve under another schedule when the user set none (see plan_model):
# the re-solves are candidates the plans are then simulated against, and on the nine presets of the solver
# benchmark a 2 s floor keeps exactly the plans a 10 s one kept (docs/decisions.md, "How plan picks the schedule").
RESOLVE_MIN_SECONDS = 2.0

# With --time-limit S, the share of S the search over every plan gets when the run also plans each target
# (PlanOptions.per_target); the targets share what it leaves, each what is left over the targets left, so the
# command still answers within S plus the grace solves (docs/decisions.md, "Per-target lines are --target runs").
MAIN_SHARE = 0.5
# Without --time-limit, each target's run gets what is left of the default run's first
# exact.DEFAULT_RUN_SECONDS over the targets left, and at least this many seconds (the documented default
# bound then grows by at most three times it); a target run cut short says so on its line.
TARGET_MIN_SECONDS = 10.0
# The part of a target's share (in the default run) its screens may take once one microbatch count has a plan:
# the target's run screens the counts the search over every plan found fastest first, so the counts it leaves
# are the least likely; the rest of its share goes to its solves (without them a share spent on screening
# answers only a baseline). A policy split of the share, not a measured constant: half each.
TARGET_SCREEN_SHARE = 0.5
# Without --time-limit, the bound of the whole run (counted as --time-limit is, from the process's start): every
# step stops at it as at a limit and the answer, the best plan found, says "default time limit of ... reached"
# (core.deadline.Deadline's backstop), so that no plan command is unbounded (issue 35; docs/limits.md, "Time").
# The steps keep their default budgets (the exact solve's DEFAULT_RUN_SECONDS, the targets' TARGET_MIN_SECONDS);
# only a run that outgrows them -- a default plan of glm-4.5v on 1,024 GPUs screens 12 counts -- meets it.
DEFAULT_PLAN_SECONDS = 300.0


def plan_model(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    *,
    workload: Workload | None = None,
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
    gpus: int | None = None,
    knob_solves: str = "fast",
    schedules: bool = True,
    schedule: str = "auto",
    virtual_stages: int | None = None,
    target: str = "any",
    per_target: bool = True,
    precision: str | None = None,
    fp8_recipe: str | None = None,
    memory_budget_gb: float | None = None,
    baseline: Any = None,
) -> ModelPlan:
    """Plan the training of a model preset on a cluster preset.

    Parameters
    ----------
    model, cluster : str or spec
        Preset names, YAML paths (a Hugging Face ``config.json`` for the
        model) or spec objects.
    workload : Workload, optional
        One sample: images, image size or tiles, frames, text tokens
        (:class:`~partitioner.presets.Workload`, what ``plan --images``,
        ``--frames``, ``--tiles`` and ``--text-tokens`` state); None: the
        model's own.
    nodes, global_batch, microbatches, method, objective, time_limit, options, profile, seed, simulate, \
auto_solves, max_stages, gpus, knob_solves, schedules, schedule, virtual_stages, target, per_target, precision, \
fp8_recipe, memory_budget_gb, baseline
        The fields of :class:`~partitioner.planning.options.PlanOptions`, documented there.

    Returns
    -------
    ModelPlan
        The result format plus its typed sections: ``baseline`` (the best
        baseline that fits), ``baselines`` (each baseline's best, or why none
        fits), ``knobs`` (per stage: its segments' variants), ``throughput``,
        ``microbatches``, ``speedup`` (over the best baseline; with
        ``baseline``, over the recipe: ``recipe_baseline``),
        ``export_hints``, ``schedule`` (of the kept plan) and ``schedules``
        (every schedule's candidates); ``problem`` is the problem of the kept
        plan and carries its schedule, so ``evaluate``, ``simulate`` and the
        exports agree with it.

    Raises
    ------
    ProblemError
        An argument out of its type or range, naming it (:class:`~.options.PlanOptions`);
        a model, cluster or cost option that does not follow its format.
    """
    opts = PlanOptions(nodes=nodes, global_batch=global_batch, microbatches=microbatches,  # type: ignore[arg-type]
                       method=method, objective=objective, time_limit=time_limit,  # type: ignore[arg-type]
                       options=options, profile=profile, seed=seed, simulate=simulate, auto_solves=auto_solves,
                       max_stages=max_stages, gpus=gpus, knob_solves=knob_solves, schedules=schedules,  # type: ignore[arg-type]
                       schedule=schedule, virtual_stages=virtual_stages, target=target,  # type: ignore[arg-type]
                       per_target=per_target,
                       precision=precision, fp8_recipe=fp8_recipe,  # type: ignore[arg-type]
                       memory_budget_gb=memory_budget_gb, baseline=baseline)
    return run_plan(model if workload is None else load_model(model, workload), cluster, opts)


def _solve_counts(chosen: list[ScreenedCount], run: PlanRun) -> tuple[KnobSolve | None, dict[int, KnobSolve]]:
    """Solve each chosen count with the method; the fastest plan (the first on ties) and every count's solve.

    Once the run's deadline has passed, the counts left are not solved (the deadline records it).
    """
    deadline = run.deadline
    best: KnobSolve | None = None
    done: dict[int, KnobSolve] = {}
    for i, entry in enumerate(chosen):
        found = best is not None or any(e.bases for e in chosen)
        # once the deadline has passed, a count is still "solved" only to keep its baseline, or for the one
        # grace solve of a run that found nothing
        if deadline.expired() and (best is not None or (not entry.bases and (found or not deadline.has_grace))):
            deadline.cut(f"{run.options.method} solves not started", "m=" + ", m=".join(str(e.m) for e in chosen[i:]))
            break
        progress.phase(f"solving m = {entry.m} with {run.options.method} ({i + 1} of {len(chosen)} counts)")
        solved = done[entry.m] = solve_with_knobs(entry, run, found=found)
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


def _no_plan_reason(chosen: list[ScreenedCount], done: Mapping[int, KnobSolve], skipped: list[str],
                    deadline: Deadline) -> str:
    """Why no count has a plan: the last solved count's messages, else why counts were skipped, else (no count
    built in time) that the time limit came first."""
    solved = [done[e.m] for e in chosen if e.m in done and done[e.m].last is not None]
    if not solved and not chosen and deadline.cuts:
        return "time limit reached before any plan was found (no microbatch count's problem was built in time)"
    return (solved[-1].result.message if solved else "") or "; ".join(skipped[:3]) or "no plan fits"


def _check_devices(nodes: int, cluster: ClusterSpec) -> None:
    """The devices (``nodes`` x the cluster's GPUs per node) within the accepted range: a refusal of the input
    at the door (exit 2, naming ``nodes``), never an infeasible plan (issue 35)."""
    devices = nodes * cluster.gpus_per_node
    if devices > MAX_DEVICES:
        raise ProblemError(f"{nodes} nodes x {cluster.gpus_per_node} GPUs of {cluster.name} = {devices} devices, more "
                           f"than the {MAX_DEVICES} accepted (see the accepted ranges in docs/limits.md)", path="nodes")


def run_plan(model: str | ModelSpec, cluster: str | ClusterSpec, opts: PlanOptions,
             deadline: Deadline | None = None) -> ModelPlan:
    """:func:`plan_model` with its options gathered in a :class:`~.options.PlanOptions`; ``deadline``, when
    given, is the run's time limit instead of ``opts.time_limit`` started now (the command line's counts the
    process's start-up).

    With ``target="any"`` and ``per_target``, the search over every plan (in
    :data:`MAIN_SHARE` of the limit) is followed by one run per framework with
    ``target=T`` and the same options (:func:`_per_target`): each ``targets``
    entry is that run's answer. Every run may build and screen counts up to
    :data:`~partitioner.core.deadline.FIRST_PLAN_GRACE_SECONDS` past its
    limit (the command's, or a target's share) while it knows no plan at all
    (:func:`~.screening.screen_counts`); a target's run screens the counts
    the search over every plan found fastest first (:func:`_first_counts`)
    and stops screening at :data:`TARGET_SCREEN_SHARE` of its share once one
    has a plan, so that its share ends with a plan it runs, solved where
    time allows.
    """
    clock = deadline if deadline is not None else Deadline(opts.time_limit)  # the command's one limit
    clock = clock.with_backstop(DEFAULT_PLAN_SECONDS)  # no --time-limit: the default bound
    first = clock.extended(FIRST_PLAN_GRACE_SECONDS)  # the builds and screens of a run that knows no plan yet
    if opts.target != "any" or not opts.per_target:
        return _run_one(model, cluster, opts, clock, first=first)[0]
    spec, cl = load_model(model), load_cluster(cluster)
    main = clock if clock.seconds is None else clock.share(clock.seconds * MAIN_SHARE, spent=clock.elapsed(),
                                                            whole=clock.seconds)
    tables = CostTables()  # the problems every run of this command builds, built once
    result = _run_one(spec, cl, opts, main, tables, first=first)[0]
    if result.plan is None:
        return result
    return replace(result, targets=_per_target(spec, cl, opts, result, clock, tables, first))


def _target_seconds(clock: Deadline, left_targets: int) -> float:
    """The time limit of the next target's run: what the command's limit leaves over the targets left; without
    one, what is left of the default run's first :data:`~.search.exact.DEFAULT_RUN_SECONDS` over them, at least
    :data:`TARGET_MIN_SECONDS`, at most what :data:`DEFAULT_PLAN_SECONDS` leaves over them."""
    share = max(clock.left() / left_targets, 1e-3)  # a spent limit still runs the target's one grace solve
    if clock.limited:
        return share
    # the default budget, within the default bound (DEFAULT_PLAN_SECONDS) when the run has grown to it
    return min(share, max(TARGET_MIN_SECONDS, (DEFAULT_RUN_SECONDS - clock.elapsed()) / left_targets))


def _first_counts(result: ModelPlan) -> tuple[int, ...]:
    """The counts a target's run screens first: the kept plan's, then every count with a plan in the search over
    every plan, fastest screen first (a target's plan most likely fits there; the rest follow in their order)."""
    tried = sorted((t for t in result.microbatches_tried or () if t.screen_ms is not None),
                   key=lambda t: (t.screen_ms, t.microbatches))
    kept = () if result.microbatches is None else (result.microbatches,)
    return tuple(dict.fromkeys((*kept, *(t.microbatches for t in tried))))


def _per_target(spec: ModelSpec, cl: ClusterSpec, opts: PlanOptions, result: ModelPlan, clock: Deadline,
                tables: CostTables, first: Deadline) -> dict[str, TargetSummary]:
    """Per framework, ``plan`` with ``target=T`` and ``opts`` (its share of the time): the run's ``targets``.

    A framework's builds may go on :data:`~partitioner.core.deadline.FIRST_PLAN_GRACE_SECONDS` past its share
    while it knows no plan, but never past ``first``, the command's own first-plan limit: the runs that start
    after the command's limit share what is left of that grace instead of taking it each."""
    out: dict[str, TargetSummary] = {}
    names = list(RULES)
    order = _first_counts(result)
    for i, name in enumerate(names):
        seconds = _target_seconds(clock, len(names) - i)
        progress.phase(f"the best plan {name} runs (plan --target {name}, {seconds:.3g} s)")
        within = min(seconds, clock.left())  # a spent command limit gives a spent share (its grace solve still runs)
        share = clock.share(within)
        try:  # the options T refuses (an FP8 recipe it has no path for) are T's answer: it has no plan
            sub_opts = replace(opts, target=name, time_limit=seconds)  # type: ignore[arg-type]
            # its builds go on past its share, as the command's own do, while it knows no plan at all
            # and its screens stop at TARGET_SCREEN_SHARE of it once one count has a plan: the rest is the solves'
            grace = min(FIRST_PLAN_GRACE_SECONDS, max(0.0, first.left() - within))
            sub, cut = _run_one(spec, cl, sub_opts, share, tables, share.extended(grace), order,
                                clock.share(within * TARGET_SCREEN_SHARE))
        except ProblemError as refused:
            out[name] = refused_summary(name, RULES[name], result, str(refused))
            continue
        out[name] = target_summary(name, sub, RULES[name], result, seconds, cut, clock.limited)
    return out


def _run_one(model: str | ModelSpec, cluster: str | ClusterSpec, opts: PlanOptions, deadline: Deadline | None = None,
             tables: CostTables | None = None, first: Deadline | None = None,
             order: tuple[int, ...] = (), screening: Deadline | None = None) -> tuple[ModelPlan, bool]:
    """One search (``opts.target``'s space), and whether its deadline cut anything short.

    ``deadline``: the run's limit (default ``opts.time_limit`` started now); ``tables``: the problems the
    command's other runs built (shared; :class:`~.run.CostTables`); ``first``: the limit of the builds until
    one microbatch count is screened (the command's, when ``deadline`` is a share of it; default ``deadline``);
    ``order``: the counts to screen first (:attr:`~.run.PlanRun.screen_order`); ``screening``: when the screens
    stop once a count has a plan (:attr:`~.run.PlanRun.screening`).
    """
    run = PlanRun.start(opts, deadline, tables, order, screening)  # resolved once, before any work: every step below reads it
    result = _search(model, cluster, run, first)
    return result, bool(run.deadline.cuts)


def _with_mtp_rule(run: PlanRun, spec: ModelSpec) -> PlanRun:
    """``run`` within its target's :attr:`~partitioner.frameworks.FrameworkRules.mtp_stages` when ``spec`` trains
    multi-token prediction modules: at most that many stages, or refused (``target``) where it trains none."""
    rules = run.rules
    if rules is None or rules.mtp_stages is None or not any(m.mtp_layers for m in spec.modules):
        return run
    if rules.mtp_stages == 0:
        raise ProblemError(f"{rules.name} trains no multi-token prediction modules; plan {spec.name} without them "
                           "(--mtp-layers 0)", path="target")
    cap = rules.mtp_stages if run.options.max_stages is None else min(run.options.max_stages, rules.mtp_stages)
    return replace(run, options=replace(run.options, max_stages=cap))


def _search(model: str | ModelSpec, cluster: str | ClusterSpec, run: PlanRun, first: Deadline | None = None) -> ModelPlan:
    """The steps of one run (the module docstring), under ``run``'s options and deadline (``first``: :func:`_run_one`)."""
    opts, deadline = run.options, run.deadline
    spec, cl = load_model(model), load_cluster(cluster)
    run = _with_mtp_rule(run, spec)
    opts = run.options
    _check_devices(run.options.nodes, cl)
    job_cluster_fields(cl, run.options.nodes, run.options.gpus)  # --gpus within the nodes: refused at the door
    recipe = None
    if opts.baseline is not None:  # the user's recipe on this job (bad input: exit 2 before any solve)
        stated = read_baseline(opts.baseline, spec, cl, opts, run.costs)
        recipe = estimate_baseline(stated, spec, cl, opts)
        run = replace(run, costs=with_recipe_axes(run.costs, stated.recipe, cl.gpus_per_node))  # its keys offered
    screened, skipped = screen_counts(Builders(spec, cl, run), run.screen_order, run.costs, deadline, first,
                                      run.screening)
    screened.sort(key=lambda e: run.counts.index(e.m))  # read in count order, whatever order they were screened in
    chosen = counts_to_solve(screened, len(run.counts) > 1, opts)
    began = time.perf_counter()
    best, done = _solve_counts(chosen, run)
    tried = _trials(screened, done)
    if best is None and recipe is not None:  # nothing solved in time: the recipe's plan, when it fits
        kept, note = keep_faster(None, recipe, opts.method, opts.objective, _admits(run))
        if kept is not None:
            result = assemble(kept, best_baselines(screened), tried, spec, cl)
            return _cut_short(_with_recipe(result, recipe, note), deadline)
    if best is None:
        why = _no_plan_reason(chosen, done, skipped, deadline)
        return no_plan(opts.method, opts.objective, "; ".join(filter(None, [f"no plan found: {why}", deadline.message()])),
                       tried, status="error" if deadline.cuts else "infeasible")
    bests, report = best_baselines(screened), None
    if opts.tries_schedules:
        # a re-solve under another schedule gets as long as the 1F1B solves took (at least
        # RESOLVE_MIN_SECONDS), within what the deadline leaves: an exact method cut short answers its
        # best plan, and the schedules are compared by simulation anyway
        cap = max(RESOLVE_MIN_SECONDS, time.perf_counter() - began)
        progress.phase("trying the other schedules")
        best, bests, report = _pick_schedule(best, screened, run, cap)
        if report.chosen is None:  # a pinned schedule nothing runs under: say so, never fall back to another
            why = "; ".join(dict.fromkeys(f"{r.plan_source} under {r.schedule}: {r.reason}" for r in report.rows))
            return no_plan(opts.method, opts.objective, "; ".join(filter(None, [
                f"no plan runs under the pinned schedule {opts.schedule}: {why or 'no candidate'}", deadline.message()])),
                tried, report, status="error" if deadline.cuts else "infeasible")
    if run.rules is None:  # --target proves over the target's space in its own solves
        screened_best = best
        progress.phase(f"proving the kept plan optimal with {opts.method}")
        best = prove_kept(best, opts, deadline)
        if report is not None and best.result.plan is not screened_best.result.plan:
            report = replace(report, notes=(*report.notes, (
                f"the exact {opts.method} solve at {space_of(best.problem)} replaced the chosen plan "
                f"({screened_best.iteration_ms:.6g} ms) with a faster one ({best.iteration_ms:.6g} ms simulated)")))
    note = None
    if recipe is not None:  # never slower than the user's recipe: its plan when the solver kept nothing faster
        best, note = keep_faster(best, recipe, opts.method, opts.objective, _admits(run))
        assert best is not None
    result = assemble(best, bests, tried, spec, cl, report)
    # which bytes-per-parameter count the problems charged (plan --target T: T's, per ZeRO stage; screening.py)
    result = replace(result, memory=run.memory, precision=result.problem.workload.precision
                     if result.problem is not None else None)
    if result.plan is not None and best.problem is not None:  # per stage, what its context parallelism costs and holds
        result = replace(result, context_parallel=context_report(spec, cl, best.problem, result.plan))
    if result.plan is not None and result.problem is not None:  # EP / CP offered and unused: the best plan with it
        progress.phase("solving with EP / CP forced (why they were not chosen)")
        result = replace(result, axes_not_chosen=axis_alternatives(
            result.problem, result.plan, opts.method, deadline, solver_options(opts)) or None)
    return _cut_short(_with_recipe(result, recipe, note) if recipe is not None else result, deadline)


def _admits(run: PlanRun) -> Callable[[Problem, Plan], list[str]] | None:
    """The target's reasons not to run a plan (None for ``--target any``)."""
    rules = run.rules
    return None if rules is None else (lambda problem, plan: runs(rules, problem, plan))


def _with_recipe(result: ModelPlan, recipe: RecipeBaseline, note: str | None) -> ModelPlan:
    """``result`` with the recipe as its one reference: ``speedup`` over the recipe, ``recipe_baseline``, the note."""
    tput = result.throughput
    comparison = recipe.comparison(tput.iteration_ms if tput is not None else None, result.problem, result.plan)
    return replace(result, speedup=comparison.speedup, recipe_baseline=comparison,
                   message="; ".join(filter(None, [result.message, note])))


def _cut_short(result: ModelPlan, deadline: Deadline) -> ModelPlan:
    """``result``, ``feasible`` and its message naming what the deadline cut short, when it cut anything."""
    if not deadline.cuts:
        return result
    status = "feasible" if result.status == "optimal" else result.status
    return replace(result, status=status, message="; ".join(filter(None, [result.message, deadline.message()])))


def _pick_schedule(best: KnobSolve, screened: list[ScreenedCount], run: PlanRun,
                   cap: float) -> tuple[KnobSolve, dict[str, BaselineRun], ScheduleReport]:
    """:func:`choose_schedule` of ``best``; each re-solve gets at most ``cap`` seconds of what the deadline leaves."""
    opts = run.options

    def resolve(entry: ScreenedCount, warm: Mapping[str, Plan]) -> KnobSolve:
        return solve_with_knobs(entry, run, warm, cap=cap)

    rules = run.rules
    admits = None if rules is None else (lambda problem, plan: runs(rules, problem, plan))
    return choose_schedule(best, screened, method=opts.method, objective=opts.objective, resolve=resolve,
                           keys=list(run.schedule_keys), simulate=opts.simulate,
                           pinned=opts.schedule != "auto", deadline=run.deadline, admits=admits)
