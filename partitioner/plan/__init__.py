"""Plans, their evaluation against the v1/v2 contract, and the solver result (:mod:`.model`)."""
from __future__ import annotations

from .model import (
    RULES,
    STATUSES,
    Evaluation,
    Plan,
    PlanError,
    SolveResult,
    Stage,
    StageEvaluation,
    as_plan,
    evaluate,
    evaluate_interleaved,
    group_times,
    load_plan,
    objective_value,
)
from .model import __all__  # noqa: F401
