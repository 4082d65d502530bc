"""The schedule candidates ``plan`` weighs and the ``schedules`` section that reports them.

:class:`ScheduleCandidate` is one plan under one schedule key ``(schedule, v)``
(:mod:`.choice` gathers them); :func:`build_report` turns the
candidates into a :class:`ScheduleReport`: every candidate as a
:class:`ScheduleRow` (fastest first, those that cannot run last), per key the
best plan and the best baseline (:class:`ScheduleSummary`), the chosen one
(:class:`ChosenSchedule`) and notes. ``to_dict`` writes the JSON of each.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Collection, Literal, Mapping, Sequence

from ...plan import Evaluation, Plan, SolveResult
from ...problem import Problem
from ...simulate.engine import ReplaySummary
from ..baselines import BaselineLayout

__all__ = ["PlanSource", "ScheduleCandidate", "ScheduleRow", "ScheduleSummary", "ChosenSchedule", "ScheduleReport",
           "best_candidate", "build_report"]

# plan: the kept plan replayed; solved: the method re-run under the schedule; baseline: the Megatron-style
# uniform split; fsdp: the FSDP baseline
PlanSource = Literal["plan", "solved", "baseline", "fsdp"]
_PLANS: tuple[PlanSource, ...] = ("plan", "solved")
_BASELINES: tuple[PlanSource, ...] = ("baseline", "fsdp")


@dataclass(frozen=True)
class ScheduleCandidate:
    """A plan under schedule key ``(schedule, virtual_stages)``: evaluated and replayed, or why it cannot run.

    ``ev`` is None exactly when it cannot run (``reason`` says why);
    ``problem`` is the problem carrying the schedule (None when no plan of
    the shape exists); ``result`` the re-solve's result (``solved`` only).
    """

    source: PlanSource
    method: str
    schedule: str
    virtual_stages: int
    problem: Problem | None
    plan: Plan | None = None
    reason: str = ""
    ev: Evaluation | None = None
    sim: ReplaySummary | None = None
    iteration_ms: float = math.inf
    result: SolveResult | None = None

    @property
    def ok(self) -> bool:
        return self.ev is not None

    @property
    def key(self) -> tuple[str, int]:
        return self.schedule, self.virtual_stages


def best_candidate(cands: Sequence[ScheduleCandidate]) -> ScheduleCandidate | None:
    """The first candidate with the least iteration (a later one must be faster by more than 1e-9 relative)."""
    best = None
    for c in cands:
        if c.ok and (best is None or c.iteration_ms < best.iteration_ms * (1 - 1e-9)):
            best = c
    return best


@dataclass(frozen=True)
class ScheduleRow:
    """One candidate in the report; ``plan``, when set, is its plan document (``best``, ``best_baseline``)."""

    schedule: str
    virtual_stages: int
    plan_source: PlanSource
    method: str
    microbatches: int | None
    ok: bool
    reason: str = ""
    iteration_ms: float = math.inf
    estimate_ms: float = math.inf
    bubble_ratio: float | None = None
    peak_memory_bytes: int | None = None
    stages: int = 0
    plan: Mapping[str, Any] | None = None
    layout: BaselineLayout | None = None  # a baseline's model-wide 5D layout

    @classmethod
    def of(cls, c: ScheduleCandidate, with_plan: bool = False) -> "ScheduleRow":
        m = c.problem.microbatches if c.problem is not None else None
        head = (c.schedule, c.virtual_stages, c.source, c.method, m)
        if c.ev is None or c.plan is None:
            return cls(*head, ok=False, reason=c.reason)
        sim = c.sim
        layout = BaselineLayout.of(c.ev, c.virtual_stages) if c.source in _BASELINES else None
        return cls(*head, ok=True, iteration_ms=c.iteration_ms, estimate_ms=c.ev.iteration_ms,
                   bubble_ratio=sim.bubble_ratio if sim else None, peak_memory_bytes=(sim.peak_bytes or None) if sim else None,
                   stages=len(c.plan.stages), plan=c.plan.to_dict(c.ev) if with_plan else None, layout=layout)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schedule": self.schedule, "virtual_stages": self.virtual_stages,
                               "plan_source": self.plan_source, "method": self.method,
                               "microbatches": self.microbatches, "ok": self.ok}
        if not self.ok:
            doc.update(reason=self.reason)
        else:
            doc.update(iteration_ms=self.iteration_ms, estimate_ms=self.estimate_ms, bubble_ratio=self.bubble_ratio,
                       peak_memory_bytes=self.peak_memory_bytes, stages=self.stages)
        if self.plan is not None:
            doc.update(plan=self.plan)
        if self.layout is not None:
            doc.update(layout=self.layout.to_dict())
        return doc


@dataclass(frozen=True)
class ScheduleSummary:
    """Per schedule key: the best plan row and the best baseline row, or (short) why none runs."""

    schedule: str
    virtual_stages: int
    plan: ScheduleRow | None
    baseline: ScheduleRow | None
    plan_reason: str | None = None
    baseline_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schedule": self.schedule, "virtual_stages": self.virtual_stages,
                               "plan": _doc(self.plan), "baseline": _doc(self.baseline)}
        if self.plan_reason is not None:
            doc.update(plan_reason=self.plan_reason)
        if self.baseline_reason is not None:
            doc.update(baseline_reason=self.baseline_reason)
        return doc


@dataclass(frozen=True)
class ChosenSchedule:
    """The kept candidate's schedule key, source and method."""

    schedule: str
    virtual_stages: int
    plan_source: PlanSource
    method: str

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "virtual_stages": self.virtual_stages, "plan_source": self.plan_source,
                "method": self.method}


@dataclass(frozen=True)
class ScheduleReport:
    """The ``schedules`` section of ``plan``'s result.

    ``chosen`` (None: nothing runs under the pinned schedule), ``pinned``
    (the user fixed the schedule), ``rows`` (every candidate, fastest first,
    those that cannot run last), ``by_schedule``, ``best`` and
    ``best_baseline`` (rows with their plan documents) and ``notes``.
    """

    chosen: ChosenSchedule | None
    pinned: bool
    rows: tuple[ScheduleRow, ...]
    by_schedule: tuple[ScheduleSummary, ...]
    best: ScheduleRow | None
    best_baseline: ScheduleRow | None
    notes: tuple[str, ...]
    candidates: tuple[ScheduleCandidate, ...] = field(default=(), compare=False, repr=False)  # not in the JSON

    def to_dict(self) -> dict[str, Any]:
        return {
            "chosen": _doc(self.chosen),
            "pinned": self.pinned,
            "rows": [r.to_dict() for r in self.rows],
            "by_schedule": [s.to_dict() for s in self.by_schedule],
            "best": _doc(self.best),
            "best_baseline": _doc(self.best_baseline),
            "notes": list(self.notes),
        }


def _doc(record: Any) -> dict[str, Any] | None:
    return None if record is None else record.to_dict()


def _short(reason: str) -> str:
    """A table cell for why a candidate cannot run."""
    return "does not fit in memory" if reason.startswith("rule 6") or "fits in memory" in reason else "cannot run"


def _summary(key: tuple[str, int], mine: Sequence[ScheduleCandidate]) -> ScheduleSummary:
    """The best plan and the best baseline of the candidates under ``key``; why not, when none runs."""
    plan, plan_reason = _best_side(mine, _PLANS)
    baseline, baseline_reason = _best_side(mine, _BASELINES)
    return ScheduleSummary(key[0], key[1], plan, baseline, plan_reason, baseline_reason)


def _best_side(mine: Sequence[ScheduleCandidate], sources: Collection[str]) -> tuple[ScheduleRow | None, str | None]:
    """The row of the best candidate from ``sources``, or (short) why none of them runs."""
    best = best_candidate([c for c in mine if c.source in sources])
    if best is not None:
        return ScheduleRow.of(best), None
    failed = [c for c in mine if c.source in sources and not c.ok]
    return None, _short(failed[0].reason) if failed else None


def build_report(cands: Sequence[ScheduleCandidate], chosen: ScheduleCandidate | None, notes: Sequence[str],
                 pinned: bool) -> ScheduleReport:
    """The report of the candidates, ``chosen`` the kept one (or None)."""
    ordered = sorted(cands, key=lambda c: (not c.ok, c.iteration_ms if c.ok else 0.0))
    keys = list(dict.fromkeys(c.key for c in cands))
    by_schedule = tuple(_summary(key, [c for c in cands if c.key == key]) for key in keys)
    best_base = best_candidate([c for c in cands if c.source in _BASELINES])
    return ScheduleReport(
        chosen=None if chosen is None else ChosenSchedule(chosen.schedule, chosen.virtual_stages, chosen.source,
                                                          chosen.method),
        pinned=pinned,
        rows=tuple(ScheduleRow.of(c) for c in ordered),
        by_schedule=by_schedule,
        best=None if chosen is None else ScheduleRow.of(chosen, with_plan=True),
        best_baseline=None if best_base is None else ScheduleRow.of(best_base, with_plan=True),
        notes=tuple(notes),
        candidates=tuple(c for c in ordered if c.ok),
    )
