"""The records ``plan`` passes between its steps, and the result sections they become.

Inside ``plan`` (:mod:`.plan_model` -> :mod:`.search.knob_solve` -> :mod:`.schedules.choice`):

* :class:`BaselineRun`: one baseline plan evaluated (and replayed) on the problem it was built on;
* :class:`ScreenedCount`: a screened microbatch count m with its problems and 1F1B baselines;
* :class:`KnobSolve`: the method's best plan for one problem, knobs chosen per segment, or a kept baseline.

In the result (:class:`~partitioner.planning.ModelPlan`'s fields, each with a
``to_dict`` that writes its JSON section):

* :class:`Throughput`, :class:`MicrobatchTrial`, :class:`StageKnobs` (with its :class:`KnobSegment`);
* :class:`BaselineSummary` (a baseline that fits) and :class:`MissingBaseline` (why none does).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from ..plan import Evaluation, Plan, SolveResult
from ..problem import Problem
from ..simulate.engine import ReplaySummary
from .baselines import BaselineLayout, StageSums

__all__ = [
    "IterationSource",
    "RecipeComparison",
    "BaselineRun",
    "ScreenedCount",
    "KnobSolve",
    "Throughput",
    "KnobSegment",
    "StageKnobs",
    "MicrobatchTrial",
    "BaselineSummary",
    "MissingBaseline",
    "TargetSummary",
    "finite",
]

IterationSource = Literal["simulator", "estimate", "none"]


def finite(x: float | None) -> float | None:
    """``x``, or None when it is None or not finite (JSON has no infinity)."""
    return x if x is not None and math.isfinite(x) else None


@dataclass(frozen=True)
class BaselineRun:
    """A baseline plan on ``problem`` (the problem it was built on): its evaluation, replay and iteration."""

    problem: Problem
    plan: Plan
    ev: Evaluation
    sim: ReplaySummary | None
    iteration_ms: float

    @property
    def layout(self) -> BaselineLayout:
        """The plan's model-wide layout: pp x dp x tp x cp, ep x etp (:class:`BaselineLayout`)."""
        return BaselineLayout.of(self.ev, self.problem.training.virtual_stages)


@dataclass(frozen=True)
class ScreenedCount:
    """A microbatch count m as screening left it.

    ``problem`` is the plan's problem at m (the user's knob options);
    ``base_problem`` the baselines' (every knob; the same object when the
    options do not restrict the knobs); ``bases`` the 1F1B baselines that fit,
    by name; ``screen`` the least iteration the screen saw (ms; infinite when
    nothing fits); ``stage_sums`` the baselines' stage sums on ``base_problem``,
    kept for its other schedules.
    """

    m: int
    problem: Problem
    base_problem: Problem
    bases: Mapping[str, BaselineRun] = field(default_factory=dict)
    screen: float = math.inf
    stage_sums: StageSums | None = None


@dataclass(frozen=True)
class KnobSolve:
    """What :func:`~partitioner.planning.search.knob_solve.solve_with_knobs` kept for a problem.

    ``result`` carries the plan (or why there is none), ``sim`` its replay,
    ``iteration_ms`` the simulated iteration (or the estimate: ``iteration_source``);
    ``last`` the method's last raw result (its message explains a failure);
    ``solved_plans`` the method's plan per uniform knob setting (a re-solve
    under another schedule starts from them).
    """

    problem: Problem
    result: SolveResult
    sim: ReplaySummary | None
    iteration_ms: float
    iteration_source: IterationSource
    last: SolveResult | None = None
    solved_plans: Mapping[str, Plan] = field(default_factory=dict)

    @property
    def has_plan(self) -> bool:
        return self.result.plan is not None


@dataclass(frozen=True)
class Throughput:
    """Iteration time, tokens per second and MFU of a plan (``throughput`` in the result)."""

    iteration_ms: float
    tokens_per_s: float
    mfu: float
    iteration_source: IterationSource | None = None  # the kept plan's only

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"iteration_ms": self.iteration_ms, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu}
        if self.iteration_source is not None:
            doc.update(iteration_source=self.iteration_source)
        return doc


@dataclass(frozen=True)
class MicrobatchTrial:
    """One screened microbatch count in ``microbatches_tried``."""

    microbatches: int
    screen_ms: float | None
    solved: bool
    value: float | None
    iteration_ms: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"microbatches": self.microbatches, "screen_ms": self.screen_ms, "solved": self.solved,
                "value": self.value, "iteration_ms": self.iteration_ms}


@dataclass(frozen=True)
class KnobSegment:
    """One stage segment's layers ``first..last``, its mesh (dp, tp) and its memory knobs (ZeRO stage, recompute)."""

    first: int
    last: int
    dp: int
    tp: int
    zero: int
    recompute: str

    def to_dict(self) -> dict[str, Any]:
        return {"layers": [self.first, self.last], "dp": self.dp, "tp": self.tp, "zero": self.zero,
                "recompute": self.recompute}


@dataclass(frozen=True)
class StageKnobs:
    """The memory knobs of one stage, segment by segment (``knobs[i]`` in the result)."""

    stage: int
    segments: tuple[KnobSegment, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "segments": [g.to_dict() for g in self.segments]}


@dataclass(frozen=True)
class BaselineSummary:
    """A baseline that fits, as the result reports it (``baselines[name]``, ``baseline``).

    ``layout`` is its model-wide 5D layout (``layout`` in the JSON: pp, dp,
    tp, cp, ep, etp and the label ``dp 4 x tp 2 x cp 2 x ep 8``).
    """

    method: str
    value: float
    plan: Mapping[str, Any]  # the plan document
    microbatches: int
    schedule: str
    virtual_stages: int
    throughput: Throughput
    knobs: tuple[StageKnobs, ...]
    simulation: ReplaySummary | None = None
    layout: BaselineLayout | None = None  # pp x dp x tp x cp, ep x etp of the plan

    @property
    def iteration_ms(self) -> float:
        return self.throughput.iteration_ms

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "method": self.method, "value": self.value, "plan": self.plan, "microbatches": self.microbatches,
            "schedule": self.schedule, "virtual_stages": self.virtual_stages, "iteration_ms": self.iteration_ms,
            "throughput": self.throughput.to_dict(), "knobs": [k.to_dict() for k in self.knobs],
        }
        if self.layout is not None:
            doc.update(layout=self.layout.to_dict())
        if self.simulation is not None:
            doc.update(simulation=self.simulation.to_dict())
        return doc


@dataclass(frozen=True)
class MissingBaseline:
    """No baseline plan: ``value`` and ``plan`` are null; ``message`` says why.

    ``method`` is the baseline's name (None for "the best baseline" when none
    fits); ``named`` False leaves the ``method`` key out, and ``message`` None
    the ``message`` key (the result formats of an infeasible ``plan``).
    """

    method: str | None
    message: str | None = None
    named: bool = True

    value = None
    plan = None

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"method": self.method} if self.named else {}
        doc.update(value=None, plan=None)
        if self.message is not None:
            doc.update(message=self.message)
        return doc


@dataclass(frozen=True)
class TargetSummary:
    """Per export target (``targets`` of ``plan --target any``): what ``plan --target T`` answers, or why no plan.

    The default run ran ``plan`` with ``target=T`` and its own options
    (:func:`~partitioner.planning.plan_model.run_plan`); ``iteration_ms``,
    ``speedup`` (over that run's best baseline), ``status`` and ``message``
    are that run's; ``plan`` its plan's shape (schedule, m, stages, meshes,
    knobs); ``reasons`` why the default run's kept plan does not run on the
    target ([] when it does); ``memory`` the bytes-per-parameter count the
    target's run charged (the target's own); ``seconds`` the time limit it
    had and ``cut`` whether that limit cut it short (then ``note`` says that
    ``--target T`` with more time may find a faster plan); ``result`` the
    whole result (its JSON is what ``plan --target T --json`` prints, which
    ``partitioner export`` reads).
    """

    target: str
    iteration_ms: float | None
    speedup: float | None
    plan: Mapping[str, Any] | None
    reasons: tuple[str, ...] = ()
    memory: Mapping[str, Any] | None = None
    status: str | None = None
    message: str | None = None
    seconds: float | None = None
    cut: bool = False
    note: str | None = None
    result: Any = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"iteration_ms": self.iteration_ms, "speedup": self.speedup, "status": self.status,
                "message": self.message, "seconds": self.seconds, "cut": self.cut, "note": self.note,
                "plan": self.plan, "reasons": list(self.reasons), "memory": self.memory,
                "result": self.result.to_dict() if self.result is not None else None}


@dataclass(frozen=True)
class RecipeComparison:
    """The user's recipe as ``plan --baseline`` reports it (``recipe_baseline`` in the JSON).

    ``name`` says which recipe (``your recipe launch.sh``, or a published
    recipe with its ``source`` URL); ``layout`` its layout in one phrase;
    ``iteration_ms`` its simulated iteration on the plan's job; ``speedup``
    that over the returned plan's iteration (the result's ``speedup``);
    ``kept`` True when the returned plan is the recipe's own (the solver kept
    nothing faster). ``fits`` False: over memory (``over_memory`` says where),
    its times those of the same plan with the memory check lifted.
    """

    name: str
    layout: str
    iteration_ms: float
    fits: bool
    speedup: float | None
    kept: bool
    microbatches: int
    schedule: str
    virtual_stages: int
    throughput: Throughput
    recipe: Mapping[str, Any]
    plan: Mapping[str, Any] | None
    over_memory: tuple[str, ...] = ()
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "layout": self.layout, "iteration_ms": self.iteration_ms,
                "fits": self.fits, "over_memory": list(self.over_memory), "speedup": self.speedup, "kept": self.kept,
                "microbatches": self.microbatches, "schedule": self.schedule, "virtual_stages": self.virtual_stages,
                "throughput": self.throughput.to_dict(), "recipe": dict(self.recipe), "plan": self.plan}

