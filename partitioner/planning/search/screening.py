"""Screening the microbatch counts: each count's problems, its 1F1B baselines and a quick greedy plan.

:func:`screen_counts` builds, for every microbatch count m, the plan's problem
and the baselines' (:class:`Builders`: one :class:`~partitioner.costs.ProblemBuilder`
per option set, so what every m shares is worked out once), runs both
baselines of :mod:`~partitioner.planning.baselines` and, when several counts compete, the
``greedy`` heuristic, and records the least iteration seen as the count's
screen (:class:`~.records.ScreenedCount`). :func:`counts_to_solve` picks the
counts the method then solves.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Sequence

from ...core import progress
from ...core.deadline import Deadline, TimeLimitReached
from ...costs import CostOptions, ProblemBuilder, TermsStore
from ...presets import ClusterSpec, ModelSpec
from ...problem import Problem, ProblemError
from ...solvers import solve
from ..baselines import BASELINE_METHOD, FSDP_METHOD, StageSums, fsdp_baseline, megatron_baseline
from ..options import PlanOptions
from ..records import BaselineRun, ScreenedCount
from ..results import iteration_of, simulate_plan
from ..run import PlanRun
from ..targets.memory import merge_stages, stage_knobs, stage_options
from ..targets.rules import FrameworkRules, restrict
from .knobs import _projections

__all__ = ["Builders", "screen_counts", "counts_to_solve", "fsdp_count"]


@dataclass
class Builders:
    """The problems of one model on one cluster, one :class:`ProblemBuilder` per cost-option set.

    Builders and problems are kept in the run's :class:`~.run.CostTables`,
    which the command's other runs (each target's, after the search over
    every plan) share: a problem the command built once is not built again.
    """

    spec: ModelSpec
    cluster: ClusterSpec
    run: PlanRun

    @property
    def opts(self) -> PlanOptions:
        """The run's options."""
        return self.run.options

    def build(self, m: int, options: CostOptions, zero: int | None = None, deadline: Deadline | None = None) -> Problem:
        """The problem at m microbatches with cost options ``options`` (``zero``: only that ZeRO stage's
        entries, :meth:`~partitioner.costs.ProblemBuilder.build`).

        ``deadline`` (default: the run's) stops a build between layouts
        (:class:`~partitioner.core.deadline.TimeLimitReached`); the builders
        share one :class:`~partitioner.costs.TermsStore`.
        """
        options = self._options(options)
        tables = self.run.tables
        found = tables.problems.get((options, m, zero))
        if found is not None:
            return found
        built = self._builder(options).build(self.opts.global_batch, m, deadline or self.run.deadline, zero=zero)
        tables.problems[(options, m, zero)] = built
        return built

    def build_fsdp(self, m: int, options: CostOptions, deadline: Deadline) -> Problem:
        """The problem at m with FSDP's layouts only (tp 1, dp x cp every GPU, ZeRO-3, their ep splits): what
        :func:`~partitioner.planning.baselines.fsdp_baseline` reads, built in a fraction of the whole problem's
        time (not kept with the run's problems: it is not the problem at m)."""
        devices = self.opts.gpus or self.opts.nodes * self.cluster.gpus_per_node
        return self._builder(self._options(options)).build(
            self.opts.global_batch, m, deadline, zero=3, keep=lambda lay: lay.tp == 1 and lay.dp * lay.cp == devices)

    def _options(self, options: CostOptions) -> CostOptions:
        if not any(module.experts for module in self.spec.modules):  # the option prices routed experts only
            options = replace(options, expert_fused_glu=CostOptions().expert_fused_glu)
        return options

    def _builder(self, options: CostOptions) -> ProblemBuilder:
        """The run's builder of ``options`` (shared by the command's runs, one :class:`TermsStore` for all)."""
        tables = self.run.tables
        if options not in tables.builders:
            o = self.opts
            if tables.terms is None:
                tables.terms = TermsStore(self.spec, self.cluster, o.nodes, o.gpus)
            tables.builders[options] = ProblemBuilder(self.spec, self.cluster, nodes=o.nodes, options=options,
                                                      objective=o.objective, profile=o.profile,
                                                      max_stages=o.max_stages, gpus=o.gpus, terms=tables.terms)
        return tables.builders[options]


def _baseline_runs(base_problem: Problem, opts: PlanOptions, sums: StageSums, deadline: Deadline | None = None,
                   record: Deadline | None = None, megatron: bool = True) -> dict[str, BaselineRun]:
    """The 1F1B baselines that fit on ``base_problem``, replayed when ``opts.simulate``.

    Each baseline's search stops at ``deadline`` (its cut named on ``record``, default ``deadline``) with the
    best plan it evaluated so far (:func:`~partitioner.planning.baselines.megatron_baselines`); the FSDP one,
    a few evaluations, runs first: it is the cheapest plan a run that knows none yet can have (``megatron``
    False: the only one).
    """
    runs = {}
    fsdp = fsdp_baseline(base_problem, opts.objective, deadline, record)
    uniform = megatron_baseline(base_problem, opts.objective, sums=sums, deadline=deadline, record=record) \
        if megatron else None
    for name, found in ((BASELINE_METHOD, uniform), (FSDP_METHOD, fsdp)):
        if found is None:
            continue
        sim = simulate_plan(base_problem, found[0], found[1]) if opts.simulate else None
        runs[name] = BaselineRun(base_problem, found[0], found[1], sim, iteration_of(sim, found[1])[0])
    return runs


def _greedy_screen(problem: Problem, opts: PlanOptions, deadline: Deadline | None = None) -> float:
    """The iteration of ``greedy``'s plan at the first knob setting (ms; infinite without one), within what
    ``deadline`` leaves (greedy checks it between stage counts: on 1,024 GPUs its stage counts take seconds)."""
    for _variant, proj in itertools.islice(_projections(problem, "escalate"), 1):
        left = deadline.solve_limit() if deadline is not None else None
        limit = None if left is None else max(left, 1e-3)  # a limit, never 0 (the solve's check refuses it)
        quick = solve(proj, "greedy", objective=opts.objective, time_limit=limit)
        if quick.plan is not None and quick.evaluation is not None:
            return quick.evaluation.iteration_ms
    return math.inf


def _problems(m: int, builders: Builders, options: CostOptions, deadline: Deadline | None = None) -> tuple[Problem, Problem]:
    """The plan's problem at m and the baselines' (the same when ``options`` allow every knob).

    With a target (``plan --target``), both lose the knobs the target cannot
    set (:func:`~.targets.rules.restrict`): its baselines are plans it runs.
    ``deadline`` (default: the run's) stops the builds
    (:class:`~partitioner.core.deadline.TimeLimitReached`).
    """
    rules = builders.run.rules
    problem = builders.build(m, options, deadline=deadline)
    # the baselines always see every knob (a user restricting the plan's knobs does not restrict FSDP's)
    every = replace(options, variants=("all",))
    base = problem if options.variants == ("all",) else builders.build(m, every, deadline=deadline)
    if rules is not None:
        restricted = restrict(_counted(m, builders, options, problem, rules, deadline), rules)
        if base is problem:
            return restricted, restricted
        return restricted, restrict(_counted(m, builders, every, base, rules, deadline), rules)
    return problem, base


def _counted(m: int, builders: Builders, options: CostOptions, problem: Problem, rules: FrameworkRules,
             deadline: Deadline | None = None) -> Problem:
    """``problem`` (built with ``options``) with each ZeRO stage's entries charged with the target's count there.

    :mod:`.targets.memory`: one more build per stage whose count changes the
    options; none when the user set the count (``-c memory_count=...``).
    """
    per = stage_options(rules.name, rules.zero, builders.opts.options, options)
    others = {z: o for z, o in per.items() if o != options}
    if not others:
        return problem
    knobs = stage_knobs(rules.name, others)
    built = {z: builders.build(m, o, knobs[z], deadline) for z, o in others.items()}  # only what merge_stages reads
    return merge_stages(problem, built, knobs, {z: o.memory_count for z, o in per.items()})


def _screen(m: int, problem: Problem, base_problem: Problem, opts: PlanOptions, several: bool,
            deadline: Deadline, limit: Deadline | None = None) -> ScreenedCount:
    """Count m screened: its baselines and the least iteration seen (greedy's too when ``several`` and time is
    left before ``limit``, default ``deadline``, and before ``deadline`` when a baseline fits; a cut is recorded
    on ``deadline``)."""
    sums = StageSums()  # the baselines' floors on base_problem, kept for its other schedules (choose_schedule)
    bases = _baseline_runs(base_problem, opts, sums, limit or deadline, deadline)
    screen = min((b.iteration_ms for b in bases.values()), default=math.inf)
    if several and opts.method != "greedy":
        # past the run's own deadline (in the first plan's grace), greedy runs only for a count with no baseline:
        # its projection and first stage count take seconds at 1,024 GPUs, and a baseline is the plan it looks for
        if (limit or deadline).expired() or (bases and deadline.expired()):
            deadline.cut("screening: greedy not run at", f"m={m}")
        else:
            screen = min(screen, _greedy_screen(problem, opts, limit or deadline))
    return ScreenedCount(m, problem, base_problem, bases, screen, sums)


def fsdp_count(counts: Sequence[int], global_batch: int, devices: int) -> int:
    """The count whose FSDP plan is likeliest to fit: the most microbatches (the least activation memory) whose
    microbatch every GPU can share as data parallel ranks (a multiple of ``devices`` samples); else the fewest."""
    whole = [m for m in counts if (global_batch // m) % devices == 0]
    return max(whole) if whole else min(counts)


def _first_plan(builders: Builders, counts: Sequence[int], options: CostOptions, limit: Deadline,
                deadline: Deadline) -> ScreenedCount | None:
    """An FSDP plan from :meth:`Builders.build_fsdp` at :func:`fsdp_count`'s count, screened; None when it was not
    built in time or nothing fits. ``plan``'s answer when no whole problem is built in time (:func:`screen_counts`)."""
    o = builders.opts
    m = fsdp_count(counts, o.global_batch, o.gpus or o.nodes * builders.cluster.gpus_per_node)
    progress.phase(f"building FSDP's layouts at m = {m} (a first plan)")
    try:
        cheap = builders.build_fsdp(m, replace(options, variants=("all",)), limit)
    except (TimeLimitReached, ProblemError):
        return None
    sums = StageSums()
    bases = _baseline_runs(cheap, o, sums, limit, deadline, megatron=False)
    found = ScreenedCount(m, cheap, cheap, bases, min((b.iteration_ms for b in bases.values()), default=math.inf), sums)
    return found if bases else None


def screen_counts(builders: Builders, counts: Sequence[int], options: CostOptions,
                  deadline: Deadline | None = None, first: Deadline | None = None,
                  stop: Deadline | None = None) -> tuple[list[ScreenedCount], list[str]]:
    """Every count screened, and why the counts that cannot be built were skipped (none could: the first
    error is raised -- an input over an accepted range is refused, exit 2, never reported as infeasible).

    Once ``deadline`` has passed, the counts not yet screened are left out
    and the deadline records the cut; until some screened count has a plan
    (a baseline or greedy's: a finite screen), the counts go on to
    ``first`` instead (default ``deadline``; the command's, when the run
    has a share of it): a count where nothing fits (too little memory at
    few microbatches) does not end the search with no plan. Builds stop at
    the deadline that applies, between layouts
    (:class:`~partitioner.core.deadline.TimeLimitReached`); a count whose
    build was stopped is not screened, and none may be. ``stop``: once some
    screened count has a plan and it has passed, no further count is
    screened, so that the time left goes to the solves (a target's run in
    the default ``plan``, which screens its likeliest counts first).

    Under a limit the user set, a run of every target (``plan --target any``) first builds FSDP's layouts
    alone at one count (:func:`_first_plan`): when no whole problem with a plan is built in time, that count,
    its problem holding FSDP's layouts only, is screened instead, and the deadline says so.
    """
    deadline = deadline or Deadline(None)
    first = first or deadline
    screened: list[ScreenedCount] = []
    skipped: list[str] = []
    refused: ProblemError | None = None
    cheap = _first_plan(builders, counts, options, first, deadline) \
        if deadline.limited and builders.run.rules is None else None
    for i, m in enumerate(counts):
        planned = any(math.isfinite(e.screen) for e in screened)
        limit = deadline if planned else first
        if screened and limit.expired():
            deadline.cut(f"screening: {len(counts) - i} of {len(counts)} microbatch counts not screened",
                         "m = " + ", ".join(map(str, counts[i:])))
            break
        if planned and stop is not None and stop.expired():
            deadline.cut(f"screening: {len(counts) - i} of {len(counts)} microbatch counts not screened (the time "
                         "left kept for the solves)", "m = " + ", ".join(map(str, counts[i:])))
            break
        progress.phase(f"building and screening m = {m} ({i + 1} of {len(counts)} microbatch counts)")
        try:
            problem, base_problem = _problems(m, builders, options, limit)
        except TimeLimitReached as stopped:
            deadline.cut("problem building stopped at the time limit", stopped.what)
            deadline.cut(f"screening: {len(counts) - i} of {len(counts)} microbatch counts not screened",
                         "m = " + ", ".join(map(str, counts[i:])))
            break
        except ProblemError as err:
            refused = refused or err
            skipped.append(f"m={m}: {err.reason}")
            continue
        screened.append(_screen(m, problem, base_problem, builders.opts, len(counts) > 1, deadline, limit))
    if cheap is not None and not any(math.isfinite(e.screen) for e in screened) \
            and all(e.m != cheap.m for e in screened):
        deadline.cut("screening: the answer's problem holds FSDP's layouts only", f"m={cheap.m}, its whole problem "
                     "was not built in time")
        screened.append(cheap)
    if not screened and refused is not None:  # no count could be built: the input is refused, not infeasible
        raise refused
    return screened, skipped


def counts_to_solve(screened: Sequence[ScreenedCount], several: bool, opts: PlanOptions) -> list[ScreenedCount]:
    """The counts the method solves: the ``auto_solves`` best screened (every one for ``greedy``)."""
    if not several:
        return list(screened)
    order = sorted((e for e in screened if math.isfinite(e.screen)), key=lambda e: e.screen)
    if not order:  # nothing fits anywhere: let the method try the smallest microbatches
        order = sorted(screened, key=lambda e: -e.m)
    return order[: max(1, opts.auto_solves)] if opts.method != "greedy" else order
