"""``targets`` of ``plan --target any``: per framework, what ``plan --target T`` answers, and why the kept plan does not run there.

The default run plans every framework's space with the same function and
options ``plan --target T`` uses (:func:`~partitioner.planning.plan_model.run_plan`
with ``target=T``), within its share of the time
(:data:`~partitioner.planning.plan_model.MAIN_SHARE`); this module turns each
of those results into the :class:`~..records.TargetSummary` the default
output prints: the target run's iteration time, speed-up (over that run's
own best baseline, as ``--target T`` reports it), status and message, the
plan's shape, whether the time limit cut the run short, and why the search
over every plan kept a plan that target does not run (:func:`~.rules.runs`).
"""
from __future__ import annotations

from typing import Any

from ...plan import Plan
from ...problem import Problem
from ..records import TargetSummary
from ..results import ModelPlan
from .rules import FrameworkRules, runs

__all__ = ["target_summary", "refused_summary", "plan_shape"]


def plan_shape(problem: Problem, plan: Plan) -> dict[str, Any]:
    """A plan's shape in a few fields: schedule, v, m, stages, the meshes and knobs of its segments."""
    configs = [cfg for s in plan.stages for _, cfg in s.segment_configs(problem)]
    t = problem.training
    return {"schedule": t.schedule, "virtual_stages": t.virtual_stages, "microbatches": problem.microbatches,
            "stages": len(plan.stages), "meshes": sorted({f"dp {c.dp} x tp {c.tp}" for c in configs}),
            "knobs": sorted({c.variant or "plain" for c in configs})}


def _kept_reasons(rules: FrameworkRules, kept: ModelPlan) -> tuple[str, ...]:
    """Why the target does not run the default run's kept plan (() when it does)."""
    return tuple(runs(rules, kept.problem, kept.plan)) if kept.problem is not None and kept.plan is not None else ()


def refused_summary(name: str, rules: FrameworkRules, kept: ModelPlan, why: str) -> TargetSummary:
    """The ``targets`` entry of a framework whose ``--target`` run refuses the options (exit 2 there): no plan, and why."""
    return TargetSummary(name, None, None, None, _kept_reasons(rules, kept), None, status="refused", message=why)


def target_summary(name: str, sub: ModelPlan, rules: FrameworkRules, kept: ModelPlan, seconds: float, cut: bool,
                   limited: bool) -> TargetSummary:
    """The ``targets`` entry of framework ``name``: the ``target=name`` run ``sub`` as the default output states it.

    Parameters
    ----------
    name : str
        The framework (a key of :data:`~.rules.RULES`).
    sub : ModelPlan
        The result of the run with ``target=name`` and the default run's options.
    rules : FrameworkRules
        The framework's rules, to say why the kept plan does not run there.
    kept : ModelPlan
        The default run's result (its kept plan and problem).
    seconds : float
        The time limit the target's run had (its share of ``--time-limit``, or the default budget's).
    cut : bool
        Whether that limit cut the target's run short: then ``--target name`` with more time may find a faster plan.
    limited : bool
        Whether the user set ``--time-limit`` (else ``seconds`` is the default budget's).
    """
    reasons = _kept_reasons(rules, kept)
    tput = sub.throughput
    shape = plan_shape(sub.problem, sub.plan) if sub.problem is not None and sub.plan is not None else None
    budget = f"its {seconds:.3g} s share of --time-limit" if limited else f"its default budget of {seconds:.3g} s"
    note = (f"best found in {budget}; plan --target {name} with more time may find a faster plan" if cut else
            f"plan --target {name} answers the same")
    return TargetSummary(name, tput.iteration_ms if tput is not None else None, sub.speedup, shape, reasons,
                         sub.memory.to_dict() if sub.memory is not None else None, status=sub.status,
                         message=sub.message, seconds=seconds, cut=cut, note=note, result=sub)
