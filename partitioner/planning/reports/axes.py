"""``plan``'s answer to "why not EP?" and "why not CP?": the best plan that uses the axis, and its time.

When the kept plan runs every stage at ep 1 (or cp 1) although the problem
offers layouts with ep > 1 (cp > 1), :func:`axis_alternatives` solves the
problem again with the axis forced: every layer that has a layout with the
axis above 1 keeps only those layouts (:func:`forced_problem`), the other
layers keep theirs. Those plans are plans of the original problem (their
layouts are a subset of its layouts), so the forced optimum is the best plan
in which every layer that can use the axis does, valued by the one
``evaluate``; the kept plan is at least as good, and the difference is what
the axis would cost. When no time is left for the forced solve, or it finds
nothing better, :func:`switched_plan` states the kept plan with the axis
switched on where its layouts offer it, valued by the same ``evaluate``.
:class:`AxisAlternative` is one axis's record, the result's optional
``axes_not_chosen`` section.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping

from ...core.deadline import Deadline
from ...plan import Plan, PlanError, SolveResult, Stage, evaluate
from ...problem import Layer, Layout, Problem
from ...solvers import solve

__all__ = ["AxisAlternative", "AXES", "forced_problem", "switched_plan", "axis_alternatives", "AXIS_SOLVE_SECONDS"]

Axis = Literal["ep", "cp"]
AXES: tuple[Axis, ...] = ("ep", "cp")
# Longest a forced solve may take (seconds), and its share of what is left of a limited run: the answer is an
# explanation beside the plan, so it never takes the time the plan needs (cut short, it says so).
AXIS_SOLVE_SECONDS = 10.0
AXIS_SHARE = 0.25


@dataclass(frozen=True)
class AxisAlternative:
    """The best plan with ``axis`` > 1 on every layer that offers it, next to the kept plan.

    Parameters
    ----------
    axis : {"ep", "cp"}
        The mesh axis the kept plan does not use.
    status : str
        The forced solve's status (``optimal``, ``feasible`` when cut short,
        ``infeasible`` when no such plan fits, ``error``).
    value : float or None
        The forced plan's objective value (ms), None without a plan.
    kept_value : float
        The kept plan's objective value on the same problem (ms).
    objective : str
        ``iteration`` or ``bottleneck``.
    layouts : tuple of str
        Per stage of the forced plan, its layout keys (segments joined by ``+``).
    message : str
        The solver's message (why there is no plan, or what cut it short).
    """

    axis: Axis
    status: str
    value: float | None
    kept_value: float
    objective: str
    layouts: tuple[str, ...] = ()
    message: str = ""

    @property
    def slowdown(self) -> float | None:
        """``value / kept_value`` (>= 1 when the kept plan is optimal), None without a plan."""
        if self.value is None or self.kept_value <= 0:
            return None
        return self.value / self.kept_value

    def to_dict(self) -> dict[str, Any]:
        return {"axis": self.axis, "status": self.status, "value": self.value, "kept_value": self.kept_value,
                "objective": self.objective, "layouts": list(self.layouts), "message": self.message}

    def text(self) -> str:
        """One line: the best plan with the axis and its time against the kept plan's, or why there is none."""
        what = f"{self.axis} > 1 on every layer that offers it"
        if self.value is None:
            return f"{self.axis} not chosen: no plan with {what} ({self.status}: {self.message or 'no reason given'})"
        cut = "" if self.status == "optimal" else f" ({self.status}: {self.message or 'the forced solve was cut short'})"
        return (f"{self.axis} not chosen: the best plan with {what} takes {self.value:.1f} ms ({self.objective}), "
                f"{(self.slowdown or 1.0) - 1:+.1%} against the kept {self.kept_value:.1f} ms; "
                f"stages {' | '.join(self.layouts)}{cut}")


def _offers(layout: Layout, axis: Axis) -> bool:
    return getattr(layout, axis) > 1


def _forced_layer(layer: Layer, axis: Axis, tables: dict[int, Any]) -> Layer:
    """``layer`` keeping only its entries using ``axis`` (all of them if it has none); layers sharing a costs table
    share the kept one (``tables``, by the table's id: a built problem's layers of one signature share theirs)."""
    key = id(layer.costs)
    if key not in tables:
        tables[key] = {k: v for k, v in layer.costs.items() if _offers(k, axis)}
    kept = tables[key]
    return replace(layer, costs=kept) if kept else layer


def forced_problem(problem: Problem, axis: Axis) -> Problem | None:
    """``problem`` where every layer with a layout using ``axis`` > 1 keeps only those; None if no layer has one."""
    if not any(_offers(k, axis) for layer in problem.layers for k in layer.costs):
        return None
    tables: dict[int, Any] = {}
    return replace(problem, layers=tuple(_forced_layer(layer, axis, tables) for layer in problem.layers))


def _switched(layout: Layout, axis: Axis, degree: int) -> Layout:
    """``layout`` with ``axis`` at ``degree`` on the same GPUs (cp takes its GPUs from dp; ep folds onto them)."""
    if axis == "ep":
        return replace(layout, ep=degree, etp=1)
    return replace(layout, dp=layout.dp * layout.cp // degree, cp=degree)


def _stage_switched(problem: Problem, stage: Stage, axis: Axis, degree: int) -> tuple[Stage, bool]:
    """``stage`` with every segment that offers ``axis`` at ``degree`` switched to it, and whether one was."""
    configs, changed = [], False
    for (first, last), layout in stage.segment_configs(problem):
        new = _switched(layout, axis, degree)
        if new.devices == layout.devices and all(new in problem.layers[i].costs for i in range(first, last + 1)):
            configs.append(new)
            changed = True
        else:
            configs.append(layout)
    return Stage.from_configs(stage.first_layer, stage.last_layer, stage.devices, configs, stage.device_ids), changed


def switched_plan(forced: Problem, plan: Plan, axis: Axis) -> Plan | None:
    """The kept ``plan`` with ``axis`` switched on, at the degree (one for every stage) that evaluates best.

    ``forced`` is :func:`forced_problem` of the kept plan's problem. Each
    segment whose layers all hold the same layout with ``axis`` at that
    degree on the same GPUs takes it (ep folds onto the segment's GPUs with
    etp 1; cp takes its GPUs from dp); the stage cuts, sizes and placement
    stay. The result is a plan of ``forced`` (``evaluate`` refuses any other,
    e.g. one leaving a layer that offers the axis without it), so never
    better than the forced optimum; None when no degree gives one.
    """
    problem = forced
    degrees = sorted({getattr(k, axis) for layer in problem.layers for k in layer.costs} - {1})
    best: tuple[float, Plan] | None = None
    for degree in degrees:
        stages = [_stage_switched(problem, stage, axis, degree) for stage in plan.stages]
        if not any(changed for _, changed in stages):
            continue
        candidate = Plan(tuple(stage for stage, _ in stages))
        try:
            value = evaluate(problem, candidate).value
        except PlanError:
            continue
        if best is None or value < best[0]:
            best = (value, candidate)
    return None if best is None else best[1]


def _uses(problem: Problem, plan: Plan, axis: Axis) -> bool:
    return any(_offers(c, axis) for s in plan.stages for _, c in s.segment_configs(problem))


def _layouts(problem: Problem, plan: Plan) -> tuple[str, ...]:
    return tuple("+".join(c.key for _, c in s.segment_configs(problem)) for s in plan.stages)


def _seconds(deadline: Deadline | None) -> float:
    left = None if deadline is None else deadline.solve_limit()
    return AXIS_SOLVE_SECONDS if left is None else max(0.0, min(AXIS_SOLVE_SECONDS, AXIS_SHARE * left))


def axis_alternatives(problem: Problem, plan: Plan, method: str = "dp", deadline: Deadline | None = None,
                      options: Mapping[str, Any] | None = None) -> tuple[AxisAlternative, ...]:
    """For each axis of :data:`AXES` the problem offers and ``plan`` does not use, its :class:`AxisAlternative`.

    Each forced solve runs ``method`` for at most :data:`AXIS_SOLVE_SECONDS`
    (a quarter of what is left of ``deadline``) with the method's ``options``
    (the run's, e.g. dp's memory budget); none runs once it has passed.
    """
    kept = evaluate(problem, plan)
    out: list[AxisAlternative] = []
    for axis in AXES:
        forced = forced_problem(problem, axis)
        if forced is None or _uses(problem, plan, axis):
            continue
        seconds = _seconds(deadline)
        switched = switched_plan(forced, plan, axis)
        result = solve(forced, method, time_limit=seconds, options=options) if seconds > 0 else None
        value: float | None = None
        if result is not None and result.plan is not None:
            try:
                value = evaluate(problem, result.plan).value
            except PlanError as err:  # a forced plan is a plan of the problem: say so if it ever is not
                out.append(AxisAlternative(axis, "error", None, kept.value, kept.objective, message=str(err)))
                continue
        out.append(_alternative(problem, axis, kept.value, kept.objective, result, value, switched))
    return tuple(out)


def _alternative(problem: Problem, axis: Axis, kept_value: float, objective: str, result: SolveResult | None,
                 value: float | None, switched: Plan | None) -> AxisAlternative:
    """The record of one axis: the forced solve's plan, or the switched kept plan when that is all or better."""
    own = None if switched is None else evaluate(problem, switched).value
    if switched is not None and own is not None and (value is None or own < value):
        why = ("the time limit left no time for a forced solve" if result is None else
               f"the forced solve ({result.status}) found nothing faster")
        return AxisAlternative(axis, "feasible", own, kept_value, objective, _layouts(problem, switched),
                               f"{why}: the kept plan with {axis} switched on where its layouts offer it")
    if result is None:
        return AxisAlternative(axis, "skipped", None, kept_value, objective,
                               message="the time limit left no time for it")
    layouts = _layouts(problem, result.plan) if result.plan is not None else ()
    return AxisAlternative(axis, result.status, value, kept_value, objective, layouts, result.message)
