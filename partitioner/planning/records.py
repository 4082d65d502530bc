"""The records ``plan`` passes between its steps, and the result sections they become.

Inside ``plan`` (:mod:`.plan_model` -> :mod:`.knob_solve` -> :mod:`.schedule_choice`):

* :class:`BaselineRun`: one baseline plan evaluated (and replayed) on the problem it was built on;
* :class:`ScreenedCount`: a screened microbatch count m with its problems and 1F1B baselines;
* :class:`KnobSolve`: the method's best plan for one problem, knobs chosen per segment, or a kept baseline.

In the result (:class:`~partitioner.planning.ModelPlan`'s fields, each with a
``to_dict`` that writes its JSON section):

* :class:`Throughput`, :class:`MicrobatchTrial`;
* :class:`BaselineSummary` (a baseline that fits) and :class:`MissingBaseline` (why none does).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from ..plan import Evaluation, Plan, SolveResult
from ..presets import is_moe_layer
from ..problem import Problem
from .baselines import BaselineLayout, StageSums

__all__ = [
    "MoeHints",
    "moe_export_hints",
    "PrecisionHints",
    "precision_export_hints",
    "IterationSource",
    "BaselineRun",
    "ScreenedCount",
    "KnobSolve",
    "Throughput",
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
    sim: Mapping[str, Any] | None
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
    """What :func:`~partitioner.planning.knob_solve.solve_with_knobs` kept for a problem.

    ``result`` carries the plan (or why there is none), ``sim`` its replay,
    ``iteration_ms`` the simulated iteration (or the estimate: ``iteration_source``);
    ``last`` the method's last raw result (its message explains a failure);
    ``solved_plans`` the method's plan per uniform knob setting (a re-solve
    under another schedule starts from them).
    """

    problem: Problem
    result: SolveResult
    sim: Mapping[str, Any] | None
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
            doc["iteration_source"] = self.iteration_source
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
    knobs: list[dict[str, Any]]
    simulation: Mapping[str, Any] | None = None
    layout: BaselineLayout | None = None  # pp x dp x tp x cp, ep x etp of the plan

    @property
    def iteration_ms(self) -> float:
        return self.throughput.iteration_ms

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "method": self.method, "value": self.value, "plan": self.plan, "microbatches": self.microbatches,
            "schedule": self.schedule, "virtual_stages": self.virtual_stages, "iteration_ms": self.iteration_ms,
            "throughput": self.throughput.to_dict(), "knobs": self.knobs,
        }
        if self.layout is not None:
            doc["layout"] = self.layout.to_dict()
        if self.simulation is not None:
            doc["simulation"] = self.simulation
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
            doc["message"] = self.message
        return doc


@dataclass(frozen=True)
class TargetSummary:
    """Per export target (``targets`` of ``plan --target any``): the fastest candidate it runs, or why none.

    ``speedup`` is over the result's best baseline; ``plan`` the candidate's
    shape (source, method, schedule, m, stages, meshes); ``reasons`` why the
    kept plan does not run on the target ([] when it does); ``memory`` the
    bytes-per-parameter count its iteration and fit were costed with
    (:class:`~.targets.memory.MemoryCounts` as JSON: the run's, not the
    target's own -- ``plan --target T`` charges T's).
    """

    target: str
    iteration_ms: float | None
    speedup: float | None
    plan: Mapping[str, Any] | None
    reasons: tuple[str, ...] = ()
    memory: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"iteration_ms": self.iteration_ms, "speedup": self.speedup, "plan": self.plan,
                "reasons": list(self.reasons), "memory": self.memory}


@dataclass(frozen=True)
class MoeHints:
    """The language model's mixture of experts, as the exports need it.

    ``moe_layers`` says, per decoder layer of the language model, whether it
    has routed experts (the others have the dense MLP); ``shared_ffn`` is
    the width of the shared experts together (0: none).
    """

    num_experts: int
    top_k: int
    ffn_hidden: int
    shared_ffn: int = 0
    moe_layers: tuple[bool, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"num_experts": self.num_experts, "top_k": self.top_k, "ffn_hidden": self.ffn_hidden,
                "shared_ffn": self.shared_ffn, "moe_layers": [int(b) for b in self.moe_layers]}


@dataclass(frozen=True)
class PrecisionHints:
    """The plan's FP8 training, as the exports need it (``export_hints["precision"]``; absent under BF16).

    ``fp8_recipe`` is the cost option's recipe (:data:`partitioner.costs.fp8.FP8_RECIPES`),
    ``param_gather`` whether the parameters are kept in fp8, ``bf16_layers``
    the decoder layers kept in BF16 at each end of the language model.
    """

    fp8_recipe: str
    param_gather: bool
    bf16_layers: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"precision": "fp8", "fp8_recipe": self.fp8_recipe, "fp8_param_gather": self.param_gather,
                "fp8_bf16_layers": self.bf16_layers}


def precision_export_hints(problem: Problem) -> dict[str, Any] | None:
    """``export_hints["precision"]`` of a cost-model problem: its ``meta.precision`` (None under BF16)."""
    meta = (problem.meta or {}).get("precision")
    if not isinstance(meta, Mapping):
        return None
    return PrecisionHints(str(meta["fp8_recipe"]), bool(meta["fp8_param_gather"]), int(meta["fp8_bf16_layers"])).to_dict()


def moe_export_hints(spec: Any) -> dict[str, Any] | None:
    """``export_hints["moe"]`` of a model spec: its language model's experts (None for a dense model).

    ``spec`` is a :class:`partitioner.presets.ModelSpec`; layer i of the
    ``llm`` module is a MoE layer per :func:`partitioner.presets.is_moe_layer`.
    """
    llm = next((m for m in getattr(spec, "modules", ()) if m.kind == "llm" and m.experts), None)
    if llm is None:
        return None
    return MoeHints(llm.experts, llm.top_k, llm.moe_ffn, llm.shared_ffn,
                    tuple(is_moe_layer(llm, i) for i in range(llm.layers))).to_dict()
