"""Plans as training-launcher settings: Megatron (Megatron-LM flags or Bridge MIMO grids), torchtitan, DeepSpeed.

Contract: every export either gives settings that run exactly the plan —
its stage cuts, each stage's (dp, tp), the microbatch count m — in the
framework, or says it cannot: ``Export.expressible`` is False and
``Export.reasons`` lists why (the CLI then exits 1). Nothing is emitted
that would silently differ from the plan -- its pipeline schedule included:
a schedule a framework lacks makes the export not expressible, saying so,
never falls back to another. ``Export.checked_with`` names
the framework versions the settings were checked against (the framework
tier ``tests/frameworks/`` runs them through those frameworks' own code).

* :mod:`.megatron` — ``--pipeline-model-parallel-layout`` and TP/PP flags, or
  a valid Megatron Bridge MIMO per-module grid;
* :mod:`.torchtitan` — torchtitan 0.3 CLI overrides / ``config_registry``
  function with ``module_fqns_per_model_part`` its split keeps;
* :mod:`.deepspeed` — a ``PipelineModule`` with the planned boundaries.

The layer roles and FQNs come from the cost model (``export_hints`` in a
``partitioner plan`` result, or ``meta.layers`` of its problem).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from ..plan import Plan, SolveResult
from ..problem import Problem, ProblemError
from .common import Export, MoeHints, hints_from_problem, moe_hints, placement_note, schedule_of, stage_views
from .deepspeed import export_deepspeed
from .megatron import export_megatron, megatron_layout, mimo_grid, parse_megatron_layout
from .precision import precision_hints, problem_precision
from .torchtitan import export_torchtitan, torchtitan_names

__all__ = [
    "TARGETS",
    "TARGET_SCHEDULES",
    "Export",
    "export_plan",
    "export_result",
    "megatron_layout",
    "parse_megatron_layout",
    "mimo_grid",
    "torchtitan_names",
    "hints_from_problem",
    "replan_hint",
    "MoeHints",
]

TARGETS = ("megatron", "torchtitan", "deepspeed")
# the pipeline schedules each target runs (the others are declared not expressible, never replaced)
TARGET_SCHEDULES = {"megatron": ("1f1b", "interleaved"), "torchtitan": ("1f1b", "gpipe", "interleaved"), "deepspeed": ("1f1b",)}
_EXPORTERS = {"megatron": export_megatron, "torchtitan": export_torchtitan, "deepspeed": export_deepspeed}


def export_plan(plan: Plan, hints: Sequence[Mapping[str, Any]], target: str, **context: Any) -> Export:
    """Export ``plan`` to ``target`` (one of :data:`TARGETS`).

    ``hints`` gives each layer's ``name``, ``module``, ``role`` (vision,
    projector, embedding, decoder, loss, action) and ``fqns``. ``context``
    may carry ``global_batch`` and ``microbatches`` (m; both needed to set
    the batch so that m holds), ``sequence_parallel`` (Megatron, default
    True), ``schedule`` and ``virtual_stages`` (the plan's pipeline schedule;
    under ``interleaved`` the plan's stages are its P·v chunks) and
    ``torchtitan_base`` (the ``config_registry`` function the torchtitan
    snippet starts from), ``precision`` (the plan's FP8,
    :class:`~partitioner.planning.records.PrecisionHints`; None: BF16), ``moe`` (:class:`MoeHints` of a MoE language
    model), ``cp_algorithm`` (the context-parallel attention the plan was
    costed with), ``by_schedule`` (``plan``'s schedule table) and ``plan_args``
    (the ``plan`` arguments, for the re-plan command a schedule refusal shows).

    Every knob of the plan (each segment's ZeRO stage and recompute, its
    variant) goes into the settings, or the export is not expressible and
    says which knob the target cannot set.
    """
    if target not in _EXPORTERS:
        raise ProblemError(f"unknown export target {target!r} (targets: {', '.join(TARGETS)})", path="--to")
    stages = stage_views(plan, hints)
    # the recompute modules that act on each layer (the cost model's hints), for merging module lists
    acts = [h.get("recompute_modules") for h in hints]
    exported = _EXPORTERS[target](stages, {"recompute_acts": acts if any(a is not None for a in acts) else None,
                                           **context})
    schedule, v = schedule_of(context)
    if not exported.expressible and schedule not in TARGET_SCHEDULES[target]:
        hint = replan_hint(target, schedule, context)
        said = [i for i, r in enumerate(exported.reasons) if f"schedule {schedule}" in r]
        reasons = list(exported.reasons) if said else [*exported.reasons, hint]
        if said:  # the hint completes the schedule's own reason
            reasons[said[0]] = reasons[said[0]].rstrip(". ") + "; " + hint
        exported = replace(exported, reasons=tuple(reasons))
    where = placement_note(stages[: len(stages) // v] if schedule == "interleaved" and len(stages) % v == 0 else stages)
    if where and exported.expressible and exported.settings.get("path") != "mimo":
        exported = replace(exported, notes=(*exported.notes, where))
    return exported


def _plan_context(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What a ``plan`` result adds to the export context: MoE hints, CP algorithm, schedule table, plan arguments."""
    out: dict[str, Any] = {}
    hint_doc = doc.get("export_hints")
    if isinstance(hint_doc, Mapping):
        out["moe"] = moe_hints(hint_doc.get("moe"))
        out["precision"] = precision_hints(hint_doc.get("precision"))
        if isinstance(hint_doc.get("cp_algorithm"), str):
            out["cp_algorithm"] = hint_doc["cp_algorithm"]
    table = doc.get("schedules")
    if isinstance(table, Mapping) and isinstance(table.get("by_schedule"), list):
        out["by_schedule"] = table["by_schedule"]
    args = {k: doc.get(k) for k in ("model", "cluster", "nodes", "global_batch")}
    if all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in args.values()):
        out["plan_args"] = args
    return out


def replan_hint(target: str, schedule: str, context: Mapping[str, Any]) -> str:
    """What to run instead of a plan kept under a schedule ``target`` lacks: ``plan`` pinned to one it runs.

    Names the target's fastest schedule in the plan's own schedule table
    (``by_schedule``, simulated iteration of its best plan or baseline) when
    the table has one, else the target's first schedule; and the ``plan``
    command with the plan's arguments when they are known.
    """
    runs = TARGET_SCHEDULES[target]
    rows = [(r["iteration_ms"], e["schedule"], e.get("virtual_stages") or 1)
            for e in context.get("by_schedule") or () if isinstance(e, Mapping) and e.get("schedule") in runs
            for r in (e.get("plan"), e.get("baseline")) if isinstance(r, Mapping) and isinstance(r.get("iteration_ms"), (int, float))]
    if rows:
        ms, best, v = min(rows)
        pin = f"--schedule {best}" + (f" --virtual-stages {v}" if best == "interleaved" else "")
        why = f"{best}{f' (v = {v})' if best == 'interleaved' else ''} is {target}'s fastest schedule in this plan's table ({ms:.1f} ms simulated)"
    else:
        pin, why = f"--schedule {runs[0]}", f"{target} runs {', '.join(runs)}"
    args = context.get("plan_args")
    cmd = ("partitioner plan --model {model} --cluster {cluster} --nodes {nodes} --global-batch {global_batch} ".format(**args)
           + pin + " [your other plan options] --json > plan.json") if args else f"partitioner plan ... {pin} --json > plan.json"
    return f"to export to {target}, plan again pinned to a schedule it runs: `{cmd}` ({why}; the plan kept {schedule})"


def export_result(result: SolveResult | Mapping[str, Any], target: str, problem: Problem | None = None) -> Export:
    """Export a result (a :class:`SolveResult`, or a result document from ``plan --json``/``solve --json``).

    Layer hints come from ``problem`` when given, else from the result's
    ``export_hints`` (written by ``partitioner plan``).
    """
    if isinstance(result, SolveResult):
        doc = result.to_dict()
        plan = result.plan
    else:
        doc = dict(result)
        plan = Plan.from_dict(doc) if doc.get("plan") is not None or "stages" in doc else None
    if plan is None:
        raise ProblemError("has no plan to export (was it infeasible?)", path="plan")
    if problem is None and getattr(result, "problem", None) is not None:
        problem = result.problem  # type: ignore[union-attr]
    context: dict[str, Any] = {}
    if problem is not None:
        hints = hints_from_problem(problem)
        context = _plan_context(doc)
        if context.get("precision") is None:  # a solve result: the precision its problem was built with
            context["precision"] = problem_precision(problem)
        meta = problem.meta or {}
        context.update(global_batch=meta.get("global_batch"), microbatches=problem.microbatches)
        training = getattr(problem, "training", None)
        if training is not None and getattr(training, "schedule", None):
            context.update(schedule=training.schedule, virtual_stages=training.virtual_stages)
    else:
        hint_doc = doc.get("export_hints")
        if not isinstance(hint_doc, Mapping) or not isinstance(hint_doc.get("layers"), list):
            raise ProblemError(
                "has no export_hints (results of `partitioner plan` carry them); pass the problem with --problem",
                path="export_hints",
            )
        hints = hint_doc["layers"]
        gb, m = doc.get("global_batch"), doc.get("microbatches")
        context = {"global_batch": gb if isinstance(gb, int) else None, "microbatches": m if isinstance(m, int) else None}
        context.update(_plan_context(doc))
        sched = doc.get("schedule")  # written by `partitioner plan`: {"schedule", "virtual_stages"}
        if isinstance(sched, Mapping) and isinstance(sched.get("schedule"), str):
            context.update(schedule=sched["schedule"], virtual_stages=sched.get("virtual_stages", 1))
    return export_plan(plan, hints, target, **context)
