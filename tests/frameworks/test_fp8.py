"""FP8 exports through the frameworks' own code (issue 34), and the checks failing when the export is wrong.

The tier's FP8 plans (``tests/frameworks/plans.py``: tensorwise for Megatron on
H100, MXFP8 on B200, torchao's rowwise for torchtitan) run through the
per-framework tests like every plan; here: what the door refuses is what
megatron-core refuses, each check fails on a wrong export, and the recipes
each target is said to run are the ones its code offers.
"""
from __future__ import annotations

import dataclasses
from typing import get_args, get_type_hints

import pytest

from benchmarks.framework_checks import PlannedJob, check_megatron_fp8, check_torchtitan_converters, megatron_config
from partitioner.costs import CostOptions
from partitioner.frameworks import PrecisionHints
from partitioner.frameworks.export import ExportContext, export_plan, export_result, layer_hints
from partitioner.planning.targets.rules import RULES
from partitioner.problem import ProblemError
from tests.frameworks.plans import NOT_INSTALLED, planned

pytest.importorskip("megatron.core", reason=NOT_INSTALLED)
pytest.importorskip("torchtitan", reason=NOT_INSTALLED)

pytestmark = pytest.mark.slow  # plans the tier's FP8 cases


def _core(**more):
    return {"num_layers": 8, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2,
            "pipeline_model_parallel_layout": "Et*4|t*4L", "bf16": True, **more}


def test_megatron_check_fails_on_a_recipe_the_plan_did_not_cost():
    result = planned("llava-fp8-megatron")
    exp = export_result(result, "megatron")
    assert exp.expressible, exp.reasons
    job = PlannedJob.from_result(result)
    core, ddp = dict(exp.settings["transformer_config"]), exp.settings["ddp_config"]
    check_megatron_fp8(job, core, ddp)
    with pytest.raises(AssertionError):
        check_megatron_fp8(job, {**core, "fp8_recipe": "delayed"}, ddp)
    with pytest.raises(AssertionError):  # a BF16 export of an FP8 plan
        check_megatron_fp8(job, {k: v for k, v in core.items() if not k.startswith("fp8")}, {})


def test_bf16_edge_layers_pass_megatron_core_and_too_many_are_refused_by_both():
    result = planned("llava-1.5-7b")
    hints = layer_hints(result.to_dict()["export_hints"]["layers"])
    plan = result.plan
    ok = export_plan(plan, hints, "megatron", ExportContext(global_batch=512, microbatches=64,
                     precision=PrecisionHints("tensorwise", True, 1)))
    assert ok.expressible, ok.reasons
    cfg = megatron_config(ok.settings["transformer_config"])
    assert cfg.first_last_layers_bf16 and cfg.num_layers_at_start_in_bf16 == 1
    per_rank = cfg.num_layers // cfg.pipeline_model_parallel_size
    too_many = export_plan(plan, hints, "megatron", ExportContext(global_batch=512, microbatches=64,
                           precision=PrecisionHints("tensorwise", True, per_rank + 1)))
    assert not too_many.expressible and any("BF16 layers" in r for r in too_many.reasons)
    with pytest.raises(ValueError, match="num_layers_at_start_in_bf16"):
        megatron_config(_core(fp8="hybrid", fp8_recipe="tensorwise", first_last_layers_bf16=True,
                              num_layers_at_start_in_bf16=5, num_layers_at_end_in_bf16=1))


def test_the_option_door_refuses_what_megatron_core_refuses():
    """First/last BF16 layers with delayed scaling: megatron-core's TransformerConfig and our options alike."""
    with pytest.raises(ValueError, match="Delayed scaling does not support first / last layer"):
        megatron_config(_core(fp8="hybrid", fp8_recipe="delayed", first_last_layers_bf16=True))
    with pytest.raises(ProblemError):
        CostOptions.from_mapping({"precision": "fp8", "fp8_recipe": "delayed", "fp8_bf16_layers": 1})
    with pytest.raises(ValueError, match="fp8_param must be used together with fp8"):
        megatron_config(_core(fp8_param=True))


def test_moe_fp8_config_asks_for_transformer_engine():
    """megatron-core checks TE's version for MoE FP8; the CPU tier has no TE, so the check stands in for it."""
    from megatron.core.transformer import TransformerConfig

    moe = dict(num_moe_experts=8, moe_router_topk=2, moe_ffn_hidden_size=32, fp8="hybrid", fp8_recipe="tensorwise")
    with pytest.raises((TypeError, ValueError)):
        TransformerConfig(num_layers=8, hidden_size=64, num_attention_heads=4, **moe)
    assert megatron_config(_core(**moe)).fp8_recipe == "tensorwise"


def test_torchtitan_converters_are_checked_and_a_missed_router_fails():
    from torchtitan.components.quantization import Float8LinearConverter

    result = planned("llava-rowwise-torchtitan")
    exp = export_result(result, "torchtitan")
    assert exp.expressible, exp.reasons
    assert "CONVERTERS = [Float8LinearConverter.Config(recipe_name='rowwise'" in exp.snippet
    good = Float8LinearConverter.Config(recipe_name="rowwise", filter_fqns=["lm_head", "router.gate"])
    check_torchtitan_converters([good], ["x"])
    with pytest.raises(AssertionError):  # the router would run in FP8, the plan costs it in BF16
        check_torchtitan_converters([dataclasses.replace(good, filter_fqns=["lm_head"])], ["x"])
    with pytest.raises(AssertionError):  # a recipe torchtitan 0.3 does not know
        check_torchtitan_converters([dataclasses.replace(good, recipe_name="tensorwise")], ["x"])


def test_each_target_runs_the_recipes_its_code_offers():
    """Megatron: TransformerConfig.fp8_recipe's words; torchtitan: its converters' recipes; DeepSpeed: none."""
    from megatron.core.transformer import TransformerConfig
    from torchtitan.components.quantization import Float8LinearConverter

    megatron = set(get_args(get_args(get_type_hints(TransformerConfig)["fp8_recipe"])[0])) - {"custom"}
    assert set(RULES["megatron"].fp8_recipes) == megatron
    titan = get_args(get_type_hints(Float8LinearConverter.Config)["recipe_name"])
    assert "rowwise" in titan and "tensorwise" not in titan
    assert set(RULES["torchtitan"].fp8_recipes) == {"rowwise", "mxfp8"}
    import deepspeed.runtime.constants as ds

    assert ds.BFLOAT16 == "bf16" and ds.FP16 == "fp16"
    assert not [name for name in dir(ds) if "FP8" in name.upper()]  # no FP8 section in DeepSpeed 0.19.8's config
    assert RULES["deepspeed"].fp8_recipes == ()
    assert not export_result(planned("llava-fp8-megatron"), "deepspeed").expressible
