"""Plans, their evaluation against the v1/v2 contract, and the solver result.

A :class:`Plan` is a list of :class:`Stage` objects. :func:`evaluate` checks
the six validity rules of ``DESIGN.md`` in order and either raises
:class:`PlanError` naming the rule and the stage, or returns an
:class:`Evaluation` with every stage's forward/backward time (sends and,
in format v2, intra-stage reshards included), memory and the objective.
Every solver's value is recomputed here, so this package is the single
definition of what a plan costs.

Format v2 (``DESIGN.md``, "Problem format v2"): a stage has one config
(dp, tp, variant) per *segment* (:meth:`~partitioner.problem.Problem.segments`);
between two segments whose (dp, tp) differ the stage pays the reshard time
r of :func:`partitioner.cluster.reshard.segment_reshard_ms` in its forward and in
its backward. A stage without ``configs`` uses its ``dp``/``tp``/``variant``
for every segment (the v1 shorthand).

One job per module, every name imported from here:

- :mod:`.records`: the plan data model and its loader (:class:`Stage`,
  :class:`Plan`, :class:`PlanError`, :data:`RULES`, :func:`load_plan`);
- :mod:`.result`: the solver result (:class:`SolveResult`, :data:`STATUSES`)
  and :func:`as_plan`, the plan out of whatever the API is given;
- :mod:`.evaluation`: the validity check and the evaluation (:func:`evaluate`,
  :func:`evaluate_interleaved`, :class:`Evaluation`, :class:`StageEvaluation`,
  :func:`objective_value`, :func:`group_times`).

The imports run model -> result -> evaluation, with no cycle.
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
