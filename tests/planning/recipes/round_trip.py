"""The round trip of a stated layout through one target's export and reader (shared by the estimate tests and
the framework tier): estimate in the target's terms, export, read the file back with ``auto``, estimate again."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from partitioner import Recipe, SolveResult, estimate
from partitioner.frameworks import ExportHints, MoeHints
from partitioner.frameworks.deepspeed import RULES as DS_RULES
from partitioner.frameworks.export import export_result
from partitioner.frameworks.recipe_files import read_recipe_file
from partitioner.frameworks.torchtitan import RULES as TITAN_RULES
from partitioner.plan.cuts import layer_roles
from partitioner.presets import load_model

__all__ = ["ROUND_TRIP_TARGETS", "export_of", "read_back", "in_terms_of", "refusal", "same_plan", "round_trip"]


def export_of(est, target: str = "megatron"):
    """What ``export --to target`` writes for an estimate's plan (the result carries the layer and MoE hints)."""
    spec = load_model(est.model)
    doc = SolveResult("feasible", "estimate", "iteration", est.evaluation.value, plan=est.plan,
                      evaluation=est.evaluation).to_dict()
    doc["export_hints"] = ExportHints(spec.name, est.problem.workload.layers, MoeHints.of_model(spec)).to_dict()
    return export_result(doc, target, est.problem)


def read_back(exported, target: str, tmp_path) -> Recipe:
    """The export as a file of what the user keeps (Megatron-LM / Bridge / torchtitan launch text, DeepSpeed's
    export JSON),
    read by ``--recipe-format auto`` as ``estimate --recipe`` reads it."""
    path = tmp_path / ("export.json" if target == "deepspeed" else f"{target}.sh")
    path.write_text(json.dumps(exported.to_dict()) if target == "deepspeed" else exported.text())
    return read_recipe_file(path)


def in_terms_of(recipe: Recipe, target: str, dp_cp: int) -> Recipe:
    """``recipe`` counted as ``target``'s reader counts it: its weight-memory count at the ZeRO stage that runs
    (none over one rank) and its experts' activation (what the reader of that target's files sets)."""
    if target == "megatron":
        return recipe
    rules = DS_RULES if target == "deepspeed" else TITAN_RULES
    zero = recipe.zero if dp_cp > 1 else 0
    return replace(recipe, memory_count=rules.memory[zero], expert_fused_glu=rules.expert_fused_glu)


def refusal(target: str, recipe: Recipe, est) -> str | None:
    """Why ``target``'s exporter must refuse the layout (None: it must express it), by that framework's rules."""
    zero = recipe.zero if est.dp * recipe.cp > 1 else 0
    if target == "megatron":
        return "per-op selective recompute" if recipe.recompute == "op" else None
    if target == "deepspeed":
        if recipe.vpp > 1:
            return "schedule interleaved"
        if zero not in DS_RULES.zero:
            return "ZeRO"
        if recipe.recompute not in DS_RULES.recompute:
            return "recompute"
        if recipe.ep > 1 and est.dp % recipe.ep:
            return "does not divide dp"
        return None
    if recipe.recompute not in TITAN_RULES.recompute:
        return "recompute"
    roles = layer_roles(est.problem)
    if recipe.recompute != "none" and any(  # a segment of its own (another config) without decoder layers
            st.configs is not None and "decoder" not in roles[a:b + 1]
            for st in est.plan.stages for (a, b), _ in st.segment_configs(est.problem)):
        return "outside the decoder layers"
    if recipe.ep > 1 and recipe.expert_tp != 1:
        return "splits each expert"
    shard = est.dp if zero or est.dp == 1 else 1
    if recipe.ep > 1 and (shard * recipe.tp) % recipe.ep:
        return "does not divide dp_shard"
    return None


ROUND_TRIP_TARGETS = ("megatron", "torchtitan", "deepspeed")


def same_plan(first, again) -> None:
    assert [(s.first_layer, s.last_layer, s.configs) for s in again.stages] == \
        [(s.first_layer, s.last_layer, s.configs) for s in first.stages]
    assert (again.schedule, again.virtual_stages, again.microbatches, again.fits) == \
        (first.schedule, first.virtual_stages, first.microbatches, first.fits)
    assert again.iteration_ms == pytest.approx(first.iteration_ms, rel=1e-9)
    assert [t for s in again.stages for t in (s.fwd_ms, s.bwd_ms)] == \
        pytest.approx([t for s in first.stages for t in (s.fwd_ms, s.bwd_ms)], rel=1e-12)
    assert [s.memory_bytes for s in again.stages] == [s.memory_bytes for s in first.stages]


def round_trip(model: str, recipe: Recipe, target: str, tmp_path, cluster: str = "dgx-h100", nodes: int = 2):
    """estimate -> export to ``target`` -> read back -> estimate: the same plan, or the exporter's refusal.

    Returns the first estimate and the export (None when the exporter refused, as it had to).
    """
    plain = estimate(model, cluster, recipe, nodes=nodes)
    first = estimate(model, cluster, in_terms_of(recipe, target, plain.dp * recipe.cp), nodes=nodes)
    exported = export_of(first, target)
    why = refusal(target, recipe, first)
    if why is not None:
        assert not exported.expressible and any(why in r for r in exported.reasons), exported.reasons
        return first, None
    assert exported.expressible, exported.reasons
    same_plan(first, estimate(model, cluster, read_back(exported, target, tmp_path), nodes=nodes))
    return first, exported
