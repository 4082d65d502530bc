"""Plans, their evaluation against the v1/v2 contract, and the solver result.

A :class:`Plan` is a list of :class:`Stage` objects. :func:`evaluate` checks
the six validity rules of ``DESIGN.md`` in order and either raises
:class:`PlanError` naming the rule and the stage, or returns an
:class:`Evaluation` with every stage's forward/backward time (sends and,
in format v2, intra-stage reshards included), memory and the objective.
Every solver's value is recomputed here, so this package is the single
definition of what a plan costs.

More (the detail of this module): ``docs/internals/plan.md``, section ``partitioner.plan``.
"""
from __future__ import annotations

from .evaluation import (
    Evaluation,
    StageEvaluation,
    evaluate,
    evaluate_interleaved,
    group_times,
    objective_value,
)
from .records import RULES, Plan, PlanError, Stage, load_plan
from .result import STATUSES, SolveResult, Status, as_plan

__all__ = [
    "STATUSES",
    "Status",
    "RULES",
    "PlanError",
    "Stage",
    "Plan",
    "StageEvaluation",
    "Evaluation",
    "SolveResult",
    "evaluate",
    "evaluate_interleaved",
    "objective_value",
    "group_times",
    "load_plan",
    "as_plan",
]
