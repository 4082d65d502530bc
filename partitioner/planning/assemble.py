"""The :class:`~.results.ModelPlan` ``plan`` returns, assembled from its kept plan and baselines.

:func:`assemble` keeps the faster of the kept plan and the best baseline that
fits (never reporting a plan slower than a baseline), and fills the result's
sections: throughput, every baseline's summary and the best one, the
speed-up, the microbatch counts tried, knobs and export hints.
:func:`no_plan` is the result when nothing fits or runs.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from ..frameworks import ExportHints, MlaHints, MoeHints
from ..frameworks.export import problem_precision
from ..plan import SolveResult
from ..plan.result import Status
from ..presets import ClusterSpec, ModelSpec
from .baselines import BASELINE_METHOD, BASELINES, FSDP_METHOD
from .records import BaselineRun, BaselineSummary, KnobSolve, MicrobatchTrial, MissingBaseline, ScreenedCount
from .results import ModelPlan, iteration_of, plan_throughput, stage_knobs
from .schedules.report import ScheduleReport

__all__ = ["NO_FIT", "best_baselines", "assemble", "no_plan"]

NO_FIT = {
    BASELINE_METHOD: "no Megatron-style uniform plan fits in memory",
    FSDP_METHOD: "FSDP (one stage, dp x cp = all GPUs, ZeRO-3, ep from the keys) does not fit or dp does not divide "
                 "the microbatch",
}


def best_baselines(screened: Sequence[ScreenedCount]) -> dict[str, BaselineRun]:
    """Per baseline name, its run with the least iteration over the screened counts (the first on ties)."""
    bests = {}
    for name in BASELINES:
        runs = [e.bases[name] for e in screened if name in e.bases]
        if runs:
            bests[name] = min(runs, key=lambda b: b.iteration_ms)
    return bests


def _fastest(bests: Mapping[str, BaselineRun]) -> str | None:
    return min(bests, key=lambda n: bests[n].iteration_ms) if bests else None


def _keep_faster(best: KnobSolve, bests: Mapping[str, BaselineRun]) -> tuple[KnobSolve, list[str]]:
    """``best``, or the best baseline when it is faster (with the message saying so)."""
    top = _fastest(bests)
    if top is None or not bests[top].iteration_ms < best.iteration_ms * (1 - 1e-9):
        return best, []
    b, r = bests[top], best.result
    message = (f"{r.method} at m={best.problem.microbatches} ({best.iteration_ms:.6g} ms) is slower than the "
               f"{top} baseline at m={b.problem.microbatches} ({b.iteration_ms:.6g} ms): kept the {top} baseline plan")
    result = SolveResult(status="feasible", method=r.method, objective=r.objective, value=b.ev.value,
                         solve_seconds=r.solve_seconds, plan=b.plan, evaluation=b.ev)
    return KnobSolve(b.problem, result, b.sim, b.iteration_ms, iteration_of(b.sim, b.ev)[1]), [message]


def _summary(name: str, b: BaselineRun) -> BaselineSummary:
    """Baseline ``name``'s run as the result reports it."""
    training = b.problem.training
    return BaselineSummary(method=name, value=b.ev.value, plan=b.plan.to_dict(b.ev), microbatches=b.problem.microbatches,
                           schedule=training.schedule, virtual_stages=training.virtual_stages,
                           throughput=plan_throughput(b.problem, b.ev, b.iteration_ms), knobs=stage_knobs(b.ev),
                           simulation=b.sim, layout=b.layout)


def _baseline_sections(bests: Mapping[str, BaselineRun]) -> tuple[dict[str, BaselineSummary | MissingBaseline],
                                                                   BaselineSummary | MissingBaseline]:
    """Every baseline's summary (or why none fits), and the best one's."""
    baselines: dict[str, BaselineSummary | MissingBaseline] = {
        name: _summary(name, bests[name]) if name in bests else MissingBaseline(name, NO_FIT[name]) for name in BASELINES}
    top = _fastest(bests)
    return baselines, baselines[top] if top is not None else MissingBaseline(None, "; ".join(NO_FIT.values()))


def assemble(best: KnobSolve, bests: Mapping[str, BaselineRun], tried: Sequence[MicrobatchTrial], spec: ModelSpec,
             cl: ClusterSpec, schedules: ScheduleReport | None = None) -> ModelPlan:
    """The result of the kept plan ``best`` (or of the faster best baseline) against the ``bests`` baselines."""
    best, messages = _keep_faster(best, bests)
    problem, result = best.problem, best.result
    assert result.evaluation is not None
    tput = plan_throughput(problem, result.evaluation, best.iteration_ms, best.iteration_source)
    baselines, baseline = _baseline_sections(bests)
    speedup = (baseline.iteration_ms / tput.iteration_ms if tput.iteration_ms > 0 else None) \
        if isinstance(baseline, BaselineSummary) else None
    return ModelPlan(
        status=result.status, method=result.method, objective=result.objective, value=result.value,
        bound=result.bound, solve_seconds=result.solve_seconds, message="; ".join(filter(None, [result.message, *messages])),
        plan=result.plan, evaluation=result.evaluation, extra=result.extra, problem=problem, simulation=best.sim,
        throughput=tput, baselines=baselines, baseline=baseline, speedup=speedup, model=spec.name, cluster=cl.name,
        nodes=problem.cluster.nodes, global_batch=problem.workload.global_batch, microbatches=problem.microbatches,
        microbatches_tried=tuple(tried), knobs=stage_knobs(result.evaluation),
        export_hints=ExportHints(spec.name, problem.workload.layers, MoeHints.of_model(spec), problem_precision(problem),
                                 mla=MlaHints.of_model(spec)),
        schedules=schedules,
    )


def no_plan(method: str, objective: str, message: str, tried: Sequence[MicrobatchTrial],
            schedules: ScheduleReport | None = None, status: Status = "infeasible") -> ModelPlan:
    """The result without a plan: why, the counts tried, and either the schedule report or the baselines' reasons.

    ``status``: ``infeasible``, or ``error`` when the time limit, not the
    problem, left the run without a plan.
    """
    if schedules is not None:  # a pinned schedule nothing runs under
        return ModelPlan(status=status, method=method, objective=objective, message=message,
                         microbatches_tried=tuple(tried), schedules=schedules)
    return ModelPlan(status=status, method=method, objective=objective, message=message,
                     microbatches_tried=tuple(tried), baseline=MissingBaseline(None),
                     baselines={name: MissingBaseline(name, NO_FIT[name], named=False) for name in BASELINES})
