"""An FP8 plan's precision in every export (issue 34): Megatron-LM's fp8 flags, torchtitan's converters, DeepSpeed's no.

Plans are built by hand on the seed problem's layers; the precision comes as
the export context's :class:`PrecisionHints` (``plan`` writes them in
``export_hints["precision"]``). The frameworks' own checks of these settings
are the framework tier's (``tests/frameworks/test_fp8.py``).
"""
from __future__ import annotations

import pytest

from partitioner.costs import build_problem
from partitioner.frameworks.export import (
    ExportContext,
    MoeHints,
    PrecisionHints,
    export_plan,
    export_result,
    hints_from_problem,
    precision_hints,
)
from partitioner.plan import Plan, Stage
from partitioner.problem import ProblemError

G, M = 64, 16


@pytest.fixture(scope="module")
def seed():
    problem = build_problem("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=G, microbatches=M)
    n = problem.num_layers
    emb = next(i for i, layer in enumerate(problem.layers) if layer.name.endswith(".embed"))
    cuts = [0, emb + 8, emb + 16, emb + 24, n]
    plan = Plan(tuple(Stage(cuts[p], cuts[p + 1] - 1, 2, 2, 1, variant="zero1") for p in range(4)))
    return plan, hints_from_problem(problem)


def _export(seed, target, hints, **ctx):
    plan, layer_hints = seed
    return export_plan(plan, layer_hints, target, ExportContext(global_batch=G, microbatches=M, precision=hints, **ctx))


@pytest.mark.parametrize("recipe, fmt", [("tensorwise", "hybrid"), ("delayed", "hybrid"), ("blockwise", "hybrid"),
                                         ("mxfp8", "e4m3")])
def test_megatron_writes_the_recipe_and_fp8_parameters(seed, recipe, fmt):
    exp = _export(seed, "megatron", PrecisionHints(recipe, True))
    assert exp.expressible, exp.reasons
    core, ddp = exp.settings["transformer_config"], exp.settings["ddp_config"]
    assert (core["fp8"], core["fp8_recipe"], core["fp8_param"], ddp["fp8_param_gather"]) == (fmt, recipe, True, True)
    assert f"--fp8-format {fmt}" in exp.snippet and f"--fp8-recipe {recipe}" in exp.snippet
    assert "--fp8-param-gather" in exp.snippet
    assert ("--reuse-grad-buf-for-mxfp8-param-ag" in exp.snippet) == (recipe == "mxfp8")


def test_megatron_bf16_plan_writes_no_fp8_and_edge_layers_are_flags(seed):
    plain = _export(seed, "megatron", None)
    assert "fp8" not in plain.snippet and not any(k.startswith("fp8") for k in plain.settings["transformer_config"])
    edge = _export(seed, "megatron", PrecisionHints("tensorwise", False, 2))
    core = edge.settings["transformer_config"]
    assert core["first_last_layers_bf16"] and core["num_layers_at_end_in_bf16"] == 2 and "fp8_param" not in core
    assert "--num-layers-at-start-in-bf16 2" in edge.snippet and "--fp8-param-gather" not in edge.snippet


def test_megatron_refuses_torchaos_rowwise(seed):
    exp = _export(seed, "megatron", PrecisionHints("rowwise", False))
    assert not exp.expressible and any("rowwise" in r for r in exp.reasons)


def test_torchtitan_converters_per_recipe(seed):
    rowwise = _export(seed, "torchtitan", PrecisionHints("rowwise", False, 1))
    assert rowwise.expressible, rowwise.reasons
    (conv,) = rowwise.settings["converters"]
    assert "recipe_name='rowwise'" in conv and "'router.gate'" in conv and "'layers.0.'" in conv
    moe = _export(seed, "torchtitan", PrecisionHints("mxfp8", True), moe=MoeHints(8, 2, 64))
    assert moe.settings["converters"][0].startswith("MXFP8LinearConverter.Config(fqns=")
    assert moe.settings["converters"][1] == "MXFP8GroupedExpertsConverter.Config()"
    assert "config.model_spec.model = converter.build().convert(config.model_spec.model)" in moe.snippet
    for recipe in ("tensorwise", "delayed", "blockwise"):
        exp = _export(seed, "torchtitan", PrecisionHints(recipe, True))
        assert not exp.expressible and any("no " + recipe in r for r in exp.reasons)


def test_deepspeed_has_no_fp8_path(seed):
    assert _export(seed, "deepspeed", None).expressible
    exp = _export(seed, "deepspeed", PrecisionHints("tensorwise", True))
    assert not exp.expressible and "DeepSpeed 0.19.8" in exp.reasons[-1]


@pytest.mark.parametrize("doc, field", [
    ([], "export_hints.precision"),
    ({"precision": "bf16", "fp8_recipe": "tensorwise"}, "export_hints.precision.precision"),
    ({"fp8_recipe": "fp4"}, "export_hints.precision.fp8_recipe"),
    ({"fp8_recipe": "mxfp8", "fp8_param_gather": "yes"}, "export_hints.precision.fp8_param_gather"),
    ({"fp8_recipe": "mxfp8", "fp8_bf16_layers": -1}, "export_hints.precision.fp8_bf16_layers"),
])
def test_malformed_precision_hints_name_their_field(doc, field):
    with pytest.raises(ProblemError) as err:
        precision_hints(doc)
    assert err.value.path == field


def test_a_solve_result_takes_the_precision_of_its_problem():
    problem = build_problem("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=G, microbatches=M,
                            options={"precision": "fp8", "fp8_recipe": "delayed"})
    n = problem.num_layers
    emb = next(i for i, layer in enumerate(problem.layers) if layer.name.endswith(".embed"))
    plan = Plan((Stage(0, emb + 11, 4, 4, 1), Stage(emb + 12, n - 1, 4, 4, 1)))
    exp = export_result({"plan": plan.to_dict()}, "megatron", problem)
    assert exp.expressible, exp.reasons
    assert exp.settings["transformer_config"]["fp8_recipe"] == "delayed"
