"""Plans as training-launcher settings: the door to the framework homes' exporters.

Contract: every export either gives settings that run exactly the plan —
its stage cuts, each stage's (dp, tp), the microbatch count m — in the
framework, or says it cannot: ``Export.expressible`` is False and
``Export.reasons`` lists why (the CLI then exits 1). Nothing is emitted
that would silently differ from the plan -- its pipeline schedule included:
a schedule a framework lacks makes the export not expressible, saying so,
never falls back to another. ``Export.checked_with`` names the framework
versions the settings were checked against (the framework tier
``tests/frameworks/`` runs them through those frameworks' own code).

More (the detail of this module): ``docs/internals/frameworks.md``, section ``partitioner.frameworks.export``.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from ...plan import Plan, SolveResult
from ...problem import Problem, ProblemError
from .. import EXPORTERS, RULES, TARGETS, Export, ExportContext, LayerHint, MlaHints, MoeHints, PrecisionHints, stage_views
from ..megatron import megatron_layout, mimo_grid, parse_megatron_layout
from ..stages import placement_note
from ..torchtitan import torchtitan_names
from .read import (
    ExportRequest,
    hints_from_problem,
    layer_hints,
    moe_hints,
    precision_hints,
    problem_precision,
    read_result,
)

__all__ = [
    "TARGETS",
    "Export",
    "ExportContext",
    "ExportRequest",
    "LayerHint",
    "MoeHints",
    "MlaHints",
    "PrecisionHints",
    "export_plan",
    "export_result",
    "read_result",
    "megatron_layout",
    "parse_megatron_layout",
    "mimo_grid",
    "torchtitan_names",
    "hints_from_problem",
    "layer_hints",
    "moe_hints",
    "precision_hints",
    "problem_precision",
    "replan_hint",
]


def export_plan(plan: Plan, hints: Sequence[LayerHint], target: str, context: ExportContext | None = None) -> Export:
    """Export ``plan`` to ``target`` (one of :data:`TARGETS`), ``hints`` giving each layer's role and FQNs.

    Every knob of the plan (each segment's ZeRO stage and recompute, its
    variant) goes into the settings, or the export is not expressible and
    says which knob the target cannot set.
    """
    if target not in EXPORTERS:
        raise ProblemError(f"unknown export target {target!r} (targets: {', '.join(TARGETS)})", path="--to")
    ctx = context or ExportContext()
    acts = tuple(h.recompute_modules for h in hints)  # where each recompute module acts (Megatron merges its lists)
    if ctx.recompute_acts is None and any(a is not None for a in acts):
        ctx = replace(ctx, recompute_acts=acts)
    stages = stage_views(plan, hints)
    exported = EXPORTERS[target](stages, ctx)
    schedule, v = ctx.schedule, ctx.chunks
    if not exported.expressible and schedule not in RULES[target].schedules:
        hint = replan_hint(target, schedule, ctx)
        said = [i for i, r in enumerate(exported.reasons) if f"schedule {schedule}" in r]
        reasons = list(exported.reasons) if said else [*exported.reasons, hint]
        if said:  # the hint completes the schedule's own reason
            reasons[said[0]] = reasons[said[0]].rstrip(". ") + "; " + hint
        exported = replace(exported, reasons=tuple(reasons))
    where = placement_note(stages[: len(stages) // v] if schedule == "interleaved" and len(stages) % v == 0 else stages)
    if where and exported.expressible and exported.settings.get("path") != "mimo":
        exported = replace(exported, notes=(*exported.notes, where))
    return exported


def replan_hint(target: str, schedule: str, context: ExportContext) -> str:
    """What to run instead of a plan kept under a schedule ``target`` lacks: ``plan`` pinned to one it runs.

    Names the target's fastest schedule in the plan's own schedule table
    (``by_schedule``: simulated iteration of its best plan or baseline) when
    the table has one, else the target's first schedule; and the ``plan``
    command with the plan's arguments when they are known.
    """
    runs = RULES[target].schedules
    rows = [(r.iteration_ms, r.schedule, r.virtual_stages) for r in context.by_schedule if r.schedule in runs]
    if rows:
        ms, best, v = min(rows)
        pin = f"--schedule {best}" + (f" --virtual-stages {v}" if best == "interleaved" else "")
        why = f"{best}{f' (v = {v})' if best == 'interleaved' else ''} is {target}'s fastest schedule in this plan's table ({ms:.1f} ms simulated)"
    else:
        pin, why = f"--schedule {runs[0]}", f"{target} runs {', '.join(runs)}"
    args = context.plan_args
    cmd = (f"partitioner plan --model {args.model} --cluster {args.cluster} --nodes {args.nodes} --global-batch "
           f"{args.global_batch} " + pin + " [your other plan options] --json > plan.json") if args else \
        f"partitioner plan ... {pin} --json > plan.json"
    return f"to export to {target}, plan again pinned to a schedule it runs: `{cmd}` ({why}; the plan kept {schedule})"


def export_result(result: SolveResult | Mapping[str, Any], target: str, problem: Problem | None = None) -> Export:
    """Export a result (a :class:`SolveResult`, or a result document from ``plan --json``/``solve --json``).

    Layer hints come from ``problem`` when given, else from the result's
    ``export_hints`` (written by ``partitioner plan``).
    """
    request = read_result(result, problem)
    return export_plan(request.plan, request.hints, target, request.context)
