"""What ``plan`` reports: :class:`ModelPlan` (the result with typed sections), replays and throughput.

:class:`ModelPlan` is a :class:`~partitioner.plan.SolveResult` whose ``plan``
sections -- throughput, baselines, the microbatch counts tried, knobs, export
hints, the schedule report -- are typed fields (:mod:`.records`,
:mod:`.schedules.report`); its ``extra`` and ``to_dict`` are derived from them.
:func:`simulate_plan` replays a plan, :func:`throughput` measures it, and
:func:`stage_knobs` lists each segment's memory knobs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..costs.variants import parse_variant
from ..frameworks import ExportHints
from ..plan import Evaluation, Plan, SolveResult, evaluate
from ..problem import Problem
from ..simulate.engine import ReplaySummary, replay_check
from .records import (
    BaselineSummary,
    IterationSource,
    KnobSegment,
    MicrobatchTrial,
    MissingBaseline,
    RecipeComparison,
    StageKnobs,
    TargetSummary,
    Throughput,
)
from .reports.axes import AxisAlternative
from .reports.context import CpStage
from .schedules.report import ScheduleReport
from .targets.memory import MemoryCounts

__all__ = ["ModelPlan", "simulate_plan", "throughput", "plan_throughput", "iteration_of", "stage_knobs"]

AnyBaseline = BaselineSummary | MissingBaseline
# the result sections in the order the JSON writes them: a plan's, and an infeasible plan's
_SECTIONS = ("simulation", "throughput", "baselines", "baseline", "speedup", "model", "cluster", "nodes", "global_batch",
             "microbatches", "microbatches_tried", "knobs", "export_hints", "schedule", "schedules", "targets", "memory",
             "precision", "context_parallel", "axes_not_chosen", "recipe_baseline")
_OPTIONAL = ("simulation", "schedules", "targets", "memory", "precision", "context_parallel", "axes_not_chosen",
             "recipe_baseline")
_NO_PLAN_SECTIONS = ("microbatches_tried", "baseline", "baselines", "schedules")


@dataclass(frozen=True)
class ModelPlan(SolveResult):
    """What :func:`~partitioner.planning.plan_model` returns: a :class:`SolveResult` and its ``plan`` sections.

    ``problem`` is the problem of the kept plan, carrying its schedule (not in
    the JSON). Without a plan, ``throughput`` is None and only
    ``microbatches_tried``, ``baseline``, ``baselines`` and ``schedules`` may
    be set. ``extra`` is derived: the method's own sections (``method_extra``,
    e.g. ``dp`` statistics; taken from ``extra`` when not given) followed by
    every set section's JSON, in the order :meth:`to_dict` writes them.
    """

    problem: Problem | None = field(default=None, compare=False, repr=False)
    simulation: ReplaySummary | None = field(default=None, compare=False, repr=False)
    throughput: Throughput | None = None
    baselines: Mapping[str, AnyBaseline] | None = None
    baseline: AnyBaseline | None = None
    speedup: float | None = None
    model: str | None = None
    cluster: str | None = None
    nodes: int | None = None
    global_batch: int | None = None
    microbatches: int | None = None
    microbatches_tried: tuple[MicrobatchTrial, ...] | None = None
    knobs: tuple[StageKnobs, ...] | None = None
    export_hints: ExportHints | None = None
    schedules: ScheduleReport | None = None
    targets: Mapping[str, TargetSummary] | None = None
    memory: MemoryCounts | None = None
    precision: Mapping[str, Any] | None = None  # FP8 runs only: the problem's meta.precision (recipe, rates, what stays BF16)
    context_parallel: tuple[CpStage, ...] | None = None
    axes_not_chosen: tuple[AxisAlternative, ...] | None = None  # EP / CP offered but unused: the best plan with it
    recipe_baseline: RecipeComparison | None = None  # plan --baseline: the recipe, and the speed-up over it
    method_extra: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method_extra is None:
            object.__setattr__(self, "method_extra", dict(self.extra))
        object.__setattr__(self, "extra", {**(self.method_extra or {}), **self.sections()})

    @property
    def schedule(self) -> dict[str, Any] | None:
        """``{"schedule", "virtual_stages"}`` of the kept plan (its problem's), or None without one."""
        if self.throughput is None or self.problem is None:
            return None
        return {"schedule": self.problem.training.schedule, "virtual_stages": self.problem.training.virtual_stages}

    def sections(self) -> dict[str, Any]:
        """The JSON of every set section, in result-format order (what ``extra`` adds to the method's own)."""
        if self.throughput is None:
            found = {name: _json(getattr(self, name)) for name in _NO_PLAN_SECTIONS}
            return {name: doc for name, doc in found.items() if doc is not None}
        return {name: _json(getattr(self, name)) for name in _SECTIONS
                if name not in _OPTIONAL or getattr(self, name) is not None}


def _json(value: Any) -> Any:
    """A section's JSON: records write themselves; mappings and sequences of records are written item by item."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if isinstance(value, Mapping) and any(hasattr(v, "to_dict") for v in value.values()):
        return {k: _json(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------- simulation and throughput


def simulate_plan(problem: Problem, plan: Plan, ev: Evaluation | None = None) -> ReplaySummary:
    """Replay of ``plan`` under the problem's schedule (:func:`partitioner.simulate.engine.replay_check`)."""
    return replay_check(problem, plan, ev or evaluate(problem, plan))


def plan_throughput(problem: Problem, ev: Evaluation, iteration_ms: float | None = None,
                    source: IterationSource | None = None) -> Throughput:
    """Iteration time, tokens per second and MFU of a plan on a cost-model problem.

    ``iteration_ms`` defaults to the 1F1B estimate ``sum t_p + (m - 1) max t_p``;
    MFU = model FLOPs per iteration / (iteration time x GPUs x peak) [PaLM, App. B].
    ``source`` says where ``iteration_ms`` comes from (the kept plan's only).

    References
    ----------
    .. [PaLM] Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways", 2022, Appendix B.
    """
    work = problem.workload
    it = ev.iteration_ms if iteration_ms is None else iteration_ms
    seconds = it / 1e3
    tokens = work.tokens_per_iteration()
    flops, peak = work.model_flops_per_iteration, work.peak_flops_per_gpu
    mfu = flops / (seconds * problem.num_devices * peak) if seconds > 0 and peak > 0 else float("nan")
    return Throughput(it, tokens / seconds if seconds > 0 else float("nan"), mfu, source)


def throughput(problem: Problem, ev: Evaluation, iteration_ms: float | None = None) -> dict[str, float]:
    """``{"iteration_ms", "tokens_per_s", "mfu"}`` of a plan on a cost-model problem (:func:`plan_throughput`)."""
    return plan_throughput(problem, ev, iteration_ms).to_dict()


def iteration_of(sim: ReplaySummary | None, ev: Evaluation) -> tuple[float, IterationSource]:
    """The iteration of a plan (ms) and where it comes from: the replay's makespan, else the schedule's estimate."""
    if sim is not None and math.isfinite(sim.makespan_ms):
        return float(sim.makespan_ms), "simulator"
    return ev.iteration_ms, "estimate"


def stage_knobs(ev: Evaluation) -> tuple[StageKnobs, ...]:
    """Per stage, the memory knobs of each segment (:class:`~.records.StageKnobs`)."""
    out = []
    for st in ev.stages:
        segs = st.segments or ((st.first_layer, st.last_layer),)
        configs = st.configs or (st.layout,)
        rows = []
        for (a, b), c in zip(segs, configs):
            knobs = parse_variant(c.variant)
            rows.append(KnobSegment(a, b, c.dp, c.tp, knobs.zero, knobs.recompute))
        out.append(StageKnobs(st.index, tuple(rows)))
    return tuple(out)
