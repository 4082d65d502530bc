"""The solver result, :class:`SolveResult`, and :func:`as_plan`, which takes the plan out of one.

A :class:`SolveResult` is what every solver returns: status (:data:`STATUSES`),
value, bound, message and plan; :meth:`SolveResult.to_dict` writes the result
format of ``DESIGN.md`` and :meth:`SolveResult.from_dict` reads it.
:func:`as_plan` turns what the API accepts as a plan (a
:class:`~partitioner.plan.Plan`, a result, a plan or result document, a file
path) into a :class:`~partitioner.plan.Plan`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, get_args

from ..core.documents import check_document
from ..problem import ProblemError
from .records import Plan, load_plan

if TYPE_CHECKING:
    from .evaluation import Evaluation

__all__ = ["STATUSES", "Status", "SolveResult", "as_plan"]

Status = Literal["optimal", "feasible", "infeasible", "error"]  # DESIGN.md, "Result format"
STATUSES: tuple[Status, ...] = get_args(Status)


@dataclass(frozen=True)
class SolveResult:
    """What a solver returns: one object with status, value, bound and message.

    ``value`` is always recomputed by :func:`~partitioner.plan.evaluate`; ``bound`` is a proven
    lower bound on the optimum (or None); ``gap = (value - bound) / value``.
    """

    status: Status
    method: str
    objective: str
    value: float | None = None
    bound: float | None = None
    solve_seconds: float = 0.0
    message: str = ""
    plan: Plan | None = None
    evaluation: Evaluation | None = field(default=None, compare=False, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    version: int = 1  # the problem's format version; 2 adds configs and reshard_ms to every stage
    # the time limit stopped the method's search (its plan, if any, is the best it knew); not in the JSON
    timed_out: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def gap(self) -> float | None:
        if self.value is None or self.bound is None:
            return None
        if self.value == 0:
            return 0.0
        return max(0.0, (self.value - self.bound) / abs(self.value))

    @property
    def ok(self) -> bool:
        return self.status in ("optimal", "feasible")

    def to_dict(self) -> dict[str, Any]:
        """Result format v1 (DESIGN.md), plus ``gap`` and any ``extra`` sections."""
        doc: dict[str, Any] = {
            "status": self.status,
            "method": self.method,
            "objective": self.objective,
            "value": _finite_or_none(self.value),
            "bound": _finite_or_none(self.bound),
            "gap": self.gap,
            "solve_seconds": self.solve_seconds,
            "message": self.message,
            "plan": self.plan.to_dict(self.evaluation) if self.plan is not None else None,
        }
        if self.version >= 2:
            doc = {"version": self.version, **doc}
        for key, value in self.extra.items():
            doc.setdefault(key, value)
        return doc

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None) -> "SolveResult":
        if not isinstance(data, Mapping):
            raise ProblemError("a result must be an object", source=source)
        for key in ("status", "method", "objective"):
            if key not in data:
                raise ProblemError("is missing", path=key, source=source)
        if data["status"] not in STATUSES:
            raise ProblemError(f"must be one of {', '.join(STATUSES)}", path="status", source=source)
        plan = Plan.from_dict(data, source=source) if data.get("plan") is not None else None
        known = {"status", "method", "objective", "value", "bound", "gap", "solve_seconds", "message", "plan", "version"}
        return cls(
            status=data["status"],
            method=str(data["method"]),
            objective=str(data["objective"]),
            value=data.get("value"),
            bound=data.get("bound"),
            solve_seconds=float(data.get("solve_seconds") or 0.0),
            message=str(data.get("message") or ""),
            plan=plan,
            extra={k: v for k, v in data.items() if k not in known},
            version=data["version"] if data.get("version") in (1, 2) else 1,
        )


def _finite_or_none(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return value


def as_plan(value: Any, *, what: str = "plan") -> Plan:
    """What the API accepts as a plan: a :class:`Plan`, a :class:`SolveResult` with a plan,
    a plan or result document (a mapping, or a list of stages), or a file path.

    Raises
    ------
    ProblemError
        When ``value`` is none of these (saying what was expected) or is malformed.
    """
    if isinstance(value, Plan):
        return value
    if isinstance(value, SolveResult):
        if value.plan is None:
            raise ProblemError(f"this {value.status} result has no plan", path=what)
        return value.plan
    if isinstance(value, (Mapping, list, tuple)):
        check_document(value)
        return Plan.from_dict(list(value) if isinstance(value, tuple) else value)
    if isinstance(value, (str, Path)):
        return load_plan(str(value))
    kind = "None" if value is None else type(value).__name__
    raise ProblemError(
        f"expected a Plan, a SolveResult, a plan document (dict or list of stages) or the path of a plan file, got {kind}",
        path=what,
    )

