"""Which pipeline schedule runs a plan fastest: every schedule replayed, the best kept.

:func:`compare_schedules` takes a problem, a (non-interleaved) plan and the
Megatron-style uniform baseline, and replays both in the simulator under
``1f1b``, ``zb-h1`` and ``gpipe`` (the same stages; each schedule's own
memory rule, so GPipe's stash of m may not fit), and under ``interleaved``
the plan a Megatron-LM user would run with virtual stages: the baseline's
uniform split (:func:`partitioner.planning.megatron_baseline`; vision and
projector on chunk 0, the head on the last chunk, decoder layers even) cut
into P·v chunks on the baseline's groups and layout, for v = 2, 3, 4 where
m is a multiple of P. Every row says the simulated iteration (the
makespan), the schedule's estimate, the bubble, the peak memory and, for a
schedule that cannot run the plan, why. The schedules are compared by
simulation, not by their estimates (``DESIGN.md``: ``plan`` picks the
schedule by simulation).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from ...plan import Plan, PlanError, evaluate
from ...plan.cuts import interleaved_uniform_plan
from ...problem import Problem
from ...simulate.engine import simulate

__all__ = ["with_schedule", "compare_schedules", "ScheduleReplay", "PLAIN_SCHEDULES"]

PLAIN_SCHEDULES = ("1f1b", "zb-h1", "gpipe")


def with_schedule(problem: Problem, schedule: str, virtual_stages: int = 1) -> Problem:
    """``problem`` with ``training.schedule`` (and ``virtual_stages``) replaced."""
    return replace(problem, training=replace(problem.training, schedule=schedule, virtual_stages=virtual_stages))


@dataclass(frozen=True)
class ScheduleReplay:
    """One replay of :func:`compare_schedules`: a plan under one schedule key, its figures, or why it cannot run."""

    schedule: str
    virtual_stages: int
    plan_source: str
    ok: bool
    reason: str = ""
    iteration_ms: float = 0.0
    estimate_ms: float = 0.0
    bubble_ratio: float = 0.0
    peak_memory_bytes: int = 0
    plan: Plan | None = None

    def to_dict(self, with_plan: bool = False) -> dict[str, Any]:
        """The row (``with_plan``: and its plan as a plan document)."""
        doc: dict[str, Any] = {"schedule": self.schedule, "virtual_stages": self.virtual_stages,
                               "plan_source": self.plan_source, "ok": self.ok}
        if not self.ok:
            return {**doc, "reason": self.reason}
        doc.update(iteration_ms=self.iteration_ms, estimate_ms=self.estimate_ms, bubble_ratio=self.bubble_ratio,
                   peak_memory_bytes=self.peak_memory_bytes, stages=len(self.plan.stages) if self.plan else 0)
        if with_plan and self.plan is not None:
            doc.update(plan=self.plan.to_dict())
        return doc


def _row(problem: Problem, plan: Plan, schedule: str, v: int, source: str) -> ScheduleReplay:
    sched_problem = with_schedule(problem, schedule, v)
    try:
        ev = evaluate(sched_problem, plan)
    except PlanError as err:
        return ScheduleReplay(schedule, v, source, False, str(err))
    sim = simulate(sched_problem, plan, evaluation=ev)
    return ScheduleReplay(schedule, v, source, True, iteration_ms=sim.makespan_ms, estimate_ms=ev.iteration_ms,
                          bubble_ratio=sim.bubble_ratio, peak_memory_bytes=max(sim.peak_memory_bytes or (0,)), plan=plan)


def _group_shape(plan: Plan) -> tuple[int, int, int, int] | None:
    """``(P, devices, dp, tp)`` when every stage of ``plan`` has the same size and one layout."""
    first = plan.stages[0]
    if all(s.devices == first.devices and s.configs is None and (s.dp, s.tp) == (first.dp, first.tp) for s in plan.stages):
        return len(plan.stages), first.devices, first.dp, first.tp
    return None


def compare_schedules(
    problem: Problem,
    plan: Plan,
    *,
    baseline: Plan | None = None,
    virtual: Sequence[int] = (2, 3, 4),
) -> dict[str, Any]:
    """Replay ``plan`` and the Megatron-style ``baseline`` under every schedule; the best first.

    Parameters
    ----------
    problem : Problem
        Its ``training.schedule`` is ignored; its microbatches, cluster and costs are used.
    plan : Plan
        A plan of P stages (not chunks).
    baseline : Plan, optional
        The uniform plan a Megatron-LM user runs (equal stages, one layout);
        replayed under every schedule, and cut into P·v chunks for
        ``interleaved`` (without a baseline, ``plan`` is cut when its stages
        are equal).
    virtual : sequence of int
        The v tried for ``interleaved``.

    Returns
    -------
    dict
        ``rows`` (one per plan, schedule and v: ``plan_source`` "plan" or
        "baseline", sorted by simulated iteration, those that cannot run
        last, without their plans), ``best`` (the fastest row, with its
        ``plan`` as a plan document, or None) and ``best_baseline`` (the
        fastest baseline row, likewise).
    """
    rows = [_row(problem, plan, s, 1, "plan") for s in PLAIN_SCHEDULES]
    uniform, source = (baseline, "baseline") if baseline is not None else (plan, "plan")
    if baseline is not None:
        rows += [_row(problem, baseline, s, 1, "baseline") for s in PLAIN_SCHEDULES]
    shape = _group_shape(uniform)
    if shape is not None:
        P, devices, dp, tp = shape
        for v in (v for v in virtual if v >= 2):
            chunks = interleaved_uniform_plan(problem, P, v, devices, dp, tp)
            if problem.microbatches % P:
                rows.append(ScheduleReplay("interleaved", v, source, False,
                                           f"microbatches ({problem.microbatches}) not a multiple of the {P} groups"))
            elif chunks is None:
                rows.append(ScheduleReplay("interleaved", v, source, False, f"fewer decoder layers than the {P * v} chunks"))
            else:
                rows.append(_row(problem, chunks, "interleaved", v, source))
    rows.sort(key=lambda r: (not r.ok, r.iteration_ms))
    ok = [r for r in rows if r.ok]
    best_base = next((r for r in ok if r.plan_source == "baseline"), None)
    return {
        "rows": [r.to_dict() for r in rows],
        "best": ok[0].to_dict(with_plan=True) if ok else None,
        "best_baseline": best_base.to_dict(with_plan=True) if best_base else None,
    }
