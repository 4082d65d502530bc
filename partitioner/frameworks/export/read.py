"""Reading what an export needs from a result: the plan, the layer hints and the :class:`ExportContext`.

A result is a :class:`~partitioner.plan.SolveResult` with its problem, or
a result document (``plan --json``, ``solve --json``). The layer hints come
from the problem (the cost model's, :attr:`~partitioner.problem.Problem.workload`,
or guesses from the layer names) or from the document's ``export_hints`` (written by
``partitioner plan``); the context from the problem (batch, m, schedule) or
from the document's ``global_batch``, ``microbatches`` and ``schedule``,
plus what a ``plan`` result adds (MoE and FP8 hints, CP algorithm, its
schedule table, its arguments). Every field is checked here, at the door: a
malformed one is a :class:`~partitioner.problem.ProblemError` naming it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from ...costs.compute.fp8 import FP8_RECIPES
from ...plan import Plan, PlanError, SolveResult, evaluate
from ...problem import LayerHint, Problem, ProblemError
from .. import ExportContext, ExportHints, MlaHints, MoeHints, PlanArgs, PrecisionHints, ScheduleTime

MEMORY_RULE = 6  # evaluate's rule 6 (memory), the only one not about the plan's shape (DESIGN.md, validity rules)

__all__ = ["ExportRequest", "read_result", "hints_from_problem", "layer_hints", "moe_hints", "precision_hints",
           "problem_precision"]


@dataclass(frozen=True)
class ExportRequest:
    """A result read for export: its plan, one :class:`LayerHint` per layer, and the context."""

    plan: Plan
    hints: tuple[LayerHint, ...]
    context: ExportContext


def _guess_role(name: str, module: str) -> str:
    label = f"{module} {name}".lower()
    if "vision" in label or "vit" in label:
        return "vision"
    if "projector" in label:
        return "projector"
    if "action" in label:
        return "action"
    if name.endswith(".embed"):
        return "embedding"
    if name.endswith(".head"):
        return "loss"
    return "decoder"


def hints_from_problem(problem: Problem) -> list[LayerHint]:
    """One :class:`LayerHint` per layer: the cost model's (:attr:`Problem.workload`), or guesses from the layer names."""
    hints = problem.workload.layers
    if hints and len(hints) == problem.num_layers:
        return list(hints)
    return [LayerHint(layer.name, layer.module, _guess_role(layer.name, layer.module), (layer.name,))
            for layer in problem.layers]


def layer_hints(docs: Sequence[Any], path: str = "export_hints.layers") -> list[LayerHint]:
    """The :class:`LayerHint` of each ``{"name", "module", "role", "fqns"}`` object (missing keys: the defaults)."""
    return [LayerHint.of(doc, f"{path}[{i}]") for i, doc in enumerate(docs)]


def moe_hints(doc: Any) -> MoeHints | None:
    """The :class:`MoeHints` of an ``export_hints.moe`` object, None when absent; ProblemError when malformed."""
    if doc is None:
        return None
    if not isinstance(doc, Mapping):
        raise ProblemError("must be an object", path="export_hints.moe")
    counts = {}
    for key in ("num_experts", "top_k", "ffn_hidden"):
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(f"must be a positive integer, got {value!r}", path=f"export_hints.moe.{key}")
        counts[key] = value
    shared = doc.get("shared_ffn", 0)
    layers = doc.get("moe_layers", [])
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        raise ProblemError(f"must be a non-negative integer, got {shared!r}", path="export_hints.moe.shared_ffn")
    if not isinstance(layers, list) or any(v not in (0, 1) for v in layers):
        raise ProblemError("must be a list of 0/1 per decoder layer", path="export_hints.moe.moe_layers")
    score, norm, groups, group_top_k = _router_hints(doc)
    scale = doc.get("topk_scale", 0.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 <= scale < float("inf"):
        raise ProblemError(f"must be a non-negative number, got {scale!r}", path="export_hints.moe.topk_scale")
    return MoeHints(counts["num_experts"], counts["top_k"], counts["ffn_hidden"], shared_ffn=shared,
                    moe_layers=tuple(bool(v) for v in layers), router_score=score, norm_topk=norm,
                    expert_groups=groups, group_top_k=group_top_k, topk_scale=float(scale))


def _router_hints(doc: Mapping[str, Any]) -> tuple[str, bool, int, int]:
    """The router fields of ``export_hints.moe`` (absent in results written before they were: not stated)."""
    score, norm = doc.get("router_score", ""), doc.get("norm_topk", False)
    if score not in ("", "softmax", "sigmoid"):
        raise ProblemError(f"must be softmax or sigmoid (or absent), got {score!r}", path="export_hints.moe.router_score")
    if not isinstance(norm, bool):
        raise ProblemError(f"must be true or false, got {norm!r}", path="export_hints.moe.norm_topk")
    counts = []
    for key in ("expert_groups", "group_top_k"):
        value = doc.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ProblemError(f"must be a non-negative integer, got {value!r}", path=f"export_hints.moe.{key}")
        counts.append(value)
    return str(score), norm, counts[0], counts[1]


def precision_hints(doc: Any) -> PrecisionHints | None:
    """The :class:`PrecisionHints` of an ``export_hints.precision`` object; None when absent; ProblemError when malformed."""
    if doc is None:
        return None
    where = "export_hints.precision"
    if not isinstance(doc, Mapping):
        raise ProblemError("must be an object", path=where)
    recipe, gather, edge = doc.get("fp8_recipe"), doc.get("fp8_param_gather", False), doc.get("fp8_bf16_layers", 0)
    if doc.get("precision", "fp8") != "fp8":
        raise ProblemError(f"must be fp8 (a BF16 plan carries no precision hints), got {doc.get('precision')!r}",
                           path=f"{where}.precision")
    if recipe not in FP8_RECIPES:
        raise ProblemError(f"must be one of {', '.join(FP8_RECIPES)}, got {recipe!r}", path=f"{where}.fp8_recipe")
    if not isinstance(gather, bool):
        raise ProblemError(f"must be true or false, got {gather!r}", path=f"{where}.fp8_param_gather")
    if isinstance(edge, bool) or not isinstance(edge, int) or edge < 0:
        raise ProblemError(f"must be a non-negative integer, got {edge!r}", path=f"{where}.fp8_bf16_layers")
    return PrecisionHints(str(recipe), gather, edge)


def problem_precision(problem: Problem) -> PrecisionHints | None:
    """The hints of a cost-model problem's FP8 (:attr:`~partitioner.problem.ModelWorkload.precision`; None under BF16)."""
    fp8 = problem.workload.precision
    return precision_hints(fp8) if fp8 is not None else None


def _int(value: Any) -> int | None:
    """``value`` when it is an integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _schedule_times(table: Any) -> tuple[ScheduleTime, ...]:
    """Each simulated iteration of a ``schedules.by_schedule`` table (its plan's and its baseline's)."""
    rows = table.get("by_schedule") if isinstance(table, Mapping) else None
    out = []
    for entry in rows if isinstance(rows, list) else ():
        schedule = entry.get("schedule") if isinstance(entry, Mapping) else None
        if not isinstance(schedule, str):
            continue
        v = _int(entry.get("virtual_stages")) or 1
        for run in (entry.get("plan"), entry.get("baseline")):
            ms = run.get("iteration_ms") if isinstance(run, Mapping) else None
            if isinstance(ms, (int, float)) and not isinstance(ms, bool):
                out.append(ScheduleTime(schedule, v, float(ms)))
    return tuple(out)


def _plan_args(doc: Mapping[str, Any]) -> PlanArgs | None:
    """The ``plan`` arguments of a result, when it has all four."""
    model, cluster, nodes, batch = doc.get("model"), doc.get("cluster"), _int(doc.get("nodes")), _int(doc.get("global_batch"))
    if isinstance(model, str) and isinstance(cluster, str) and nodes is not None and batch is not None:
        return PlanArgs(model, cluster, nodes, batch)
    return None


def _export_hints(doc: Mapping[str, Any]) -> ExportHints | None:
    """The ``export_hints`` of a result document (None when it has none)."""
    hint_doc = doc.get("export_hints")
    if not isinstance(hint_doc, Mapping):
        return None
    layers, algorithm = hint_doc.get("layers"), hint_doc.get("cp_algorithm")
    return ExportHints(str(hint_doc.get("model", "")), tuple(layer_hints(layers)) if isinstance(layers, list) else (),
                       moe_hints(hint_doc.get("moe")), precision_hints(hint_doc.get("precision")),
                       algorithm if isinstance(algorithm, str) else None, MlaHints.from_doc(hint_doc.get("mla")))


def _plan_context(doc: Mapping[str, Any], hints: ExportHints | None) -> ExportContext:
    """What a ``plan`` result adds to the export context: MoE hints, CP algorithm, schedule table, plan arguments."""
    return ExportContext(moe=hints.moe if hints else None, precision=hints.precision if hints else None,
                         cp_algorithm=hints.cp_algorithm if hints else None,
                         by_schedule=_schedule_times(doc.get("schedules")), plan_args=_plan_args(doc),
                         model=(hints.model or None) if hints else None, seq_length=_llm_tokens(doc),
                         mla=hints.mla if hints else None)


def _llm_tokens(doc: Mapping[str, Any]) -> int | None:
    """The language model's tokens per sample of a ``plan --json`` result (``sequences.llm_tokens``), when given."""
    seqs = doc.get("sequences")
    tokens = _int(seqs.get("llm_tokens")) if isinstance(seqs, Mapping) else None
    return tokens if tokens is not None and tokens > 0 else None


def _problem_context(doc: Mapping[str, Any], hints: ExportHints | None, problem: Problem) -> ExportContext:
    """The context of a result with its problem: batch and m from the problem, its schedule when it has one."""
    context = replace(_plan_context(doc, hints), global_batch=problem.workload.global_batch, microbatches=problem.microbatches)
    tokens = getattr(problem.workload, "llm_tokens_per_sample", None)  # model workloads carry it (a float)
    if isinstance(tokens, (int, float)) and not isinstance(tokens, bool) and tokens > 0 and float(tokens).is_integer():
        context = replace(context, seq_length=int(tokens))
    if context.precision is None:  # a solve result: the precision its problem was built with
        context = replace(context, precision=problem_precision(problem))
    training = problem.training
    if training.schedule:
        context = replace(context, schedule=training.schedule, virtual_stages=training.virtual_stages)
    return context


def _document_context(doc: Mapping[str, Any], hints: ExportHints | None) -> ExportContext:
    """The context of a result document alone: its batch, m and ``schedule`` (``{"schedule", "virtual_stages"}``)."""
    context = replace(_plan_context(doc, hints), global_batch=_int(doc.get("global_batch")),
                      microbatches=_int(doc.get("microbatches")))
    sched = doc.get("schedule")  # written by `partitioner plan`
    if isinstance(sched, Mapping) and isinstance(name := sched.get("schedule"), str):
        context = replace(context, schedule=name, virtual_stages=_int(sched.get("virtual_stages", 1)) or 1)
    return context


def _check_against(plan: Plan, problem: Problem) -> None:
    """A plan that breaks a structural rule of its problem (rules 1-5 of ``evaluate``) is bad input, never exported.

    Catches what the reader alone cannot see: an axis of 0 in a segment's
    config, stages over the wrong layers or devices, a plan given with
    another model's problem. Memory (rule 6, checked last) is the cost
    model's estimate, not the plan's shape: a plan over it is still exported
    as given, as before.
    """
    try:
        evaluate(problem, plan)
    except PlanError as e:
        if e.rule != MEMORY_RULE:
            raise ProblemError(f"is not a valid plan of the problem given: {e}", path="plan") from None


def read_result(result: SolveResult | Mapping[str, Any], problem: Problem | None = None) -> ExportRequest:
    """The :class:`ExportRequest` of a result (layer hints from ``problem`` when given, else from ``export_hints``)."""
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
    typed = getattr(result, "export_hints", None)  # a ``plan`` result's own record
    hints = typed if isinstance(typed, ExportHints) else _export_hints(doc)
    if problem is not None:
        _check_against(plan, problem)
        return ExportRequest(plan, tuple(hints_from_problem(problem)), _problem_context(doc, hints, problem))
    if (hints is None or not hints.layers) and "estimate_ms" in doc:
        raise ProblemError(
            "is an `estimate --json` report: its recipe already is the framework's settings; export reads the "
            "results of `partitioner plan` (or pass the problem with --problem)", path="export_hints")
    if hints is None or not hints.layers:
        raise ProblemError(
            "has no export_hints (results of `partitioner plan` carry them); pass the problem with --problem",
            path="export_hints",
        )
    return ExportRequest(plan, hints.layers, _document_context(doc, hints))

