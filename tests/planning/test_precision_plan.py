"""``plan --precision`` / ``plan_model(precision=...)`` (issue 34): the door, the targets' FP8 recipes, the result."""
from __future__ import annotations

import json

import pytest

from partitioner import plan_model
from partitioner.costs import CostOptions
from partitioner.planning.options import PlanOptions
from partitioner.planning.run import with_precision
from partitioner.planning.targets.rules import RULES
from partitioner.problem import ProblemError
from tests.conftest import run_cli

SMALL = dict(nodes=1, global_batch=64, microbatches=8, schedule="1f1b", simulate=False)


def test_precision_merges_into_the_cost_options():
    opts = with_precision(PlanOptions(nodes=1, global_batch=8, precision="fp8", fp8_recipe="blockwise",
                                      options={"variants": ["all"]}))
    assert opts.options == {"variants": ["all"], "precision": "fp8", "fp8_recipe": "blockwise"}
    assert opts.precision is None and opts.fp8_recipe is None
    alone = with_precision(PlanOptions(nodes=1, global_batch=8, fp8_recipe="delayed"))  # a recipe asks for FP8
    assert alone.options == {"fp8_recipe": "delayed", "precision": "fp8"}
    obj = with_precision(PlanOptions(nodes=1, global_batch=8, precision="fp8", options=CostOptions()))
    assert isinstance(obj.options, CostOptions) and obj.options.fp8


@pytest.mark.parametrize("kwargs, field", [
    (dict(precision="fp8", options={"precision": "bf16"}), "precision"),
    (dict(precision="fp16"), "precision"),
    (dict(precision="bf16", fp8_recipe="mxfp8"), "fp8_recipe"),
    (dict(fp8_recipe="float8"), "fp8_recipe"),  # PlanOptions names its own field (the CLI: --fp8-recipe)
])
def test_contradictions_and_bad_words_are_bad_input(kwargs, field):
    with pytest.raises(ProblemError) as err:
        with_precision(PlanOptions(nodes=1, global_batch=8, **kwargs))
    assert err.value.path == field


@pytest.mark.parametrize("target, recipe, field", [("deepspeed", "tensorwise", "precision"),
                                                    ("torchtitan", "tensorwise", "fp8_recipe"),
                                                    ("megatron", "rowwise", "fp8_recipe")])
def test_a_target_without_the_recipe_refuses_it_before_any_work(target, recipe, field):
    with pytest.raises(ProblemError) as err:
        plan_model("llava-1.5-7b", "dgx-h100", target=target, precision="fp8", fp8_recipe=recipe, **SMALL)
    assert err.value.path == field
    assert RULES["megatron"].fp8_recipes == ("tensorwise", "delayed", "blockwise", "mxfp8")
    assert RULES["deepspeed"].fp8_recipes == ()


def test_fp8_plan_states_its_precision_and_bf16_plan_does_not():
    f = plan_model("llava-1.5-7b", "dgx-h100", precision="fp8", **SMALL)
    assert f.precision is not None and f.precision["fp8_recipe"] == "tensorwise"
    assert f.to_dict()["precision"] == f.precision == f.problem.meta["precision"]
    b = plan_model("llava-1.5-7b", "dgx-h100", **SMALL)
    assert b.precision is None and "precision" not in b.to_dict()
    assert f.throughput.iteration_ms < b.throughput.iteration_ms  # FP8 GEMMs on a 7B decoder on H100
    # the per-target report: torchtitan 0.3 has no tensorwise recipe, DeepSpeed no FP8 at all
    assert f.targets["megatron"].plan is not None
    for name, words in (("torchtitan", "runs rowwise, mxfp8"), ("deepspeed", "has no FP8 training path")):
        assert f.targets[name].plan is None and any(words in r for r in f.targets[name].reasons)
    assert b.targets["deepspeed"].plan is not None


@pytest.mark.parametrize("args, words", [
    (("--precision", "fp8", "--target", "deepspeed"), "no FP8 training path"),
    (("--precision", "fp16"), "--precision"),
    (("--precision", "fp8", "--fp8-recipe", "mxfp8"), "Blackwell"),
    (("--precision", "fp8", "--cluster", "dgx-a100-80g"), "peak_tflops_fp8"),
])
def test_cli_refuses_at_the_door_with_exit_2(args, words):
    base = ["--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "64",
            "--microbatches", "8"]
    if "--cluster" in args:
        base = base[:2] + base[4:]
    proc = run_cli("plan", *base, *args)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_cli_plans_in_fp8_and_says_so():
    proc = run_cli("plan", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "64",
                   "--microbatches", "8", "--precision", "fp8", "--schedule", "1f1b", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["precision"]["precision"] == "fp8" and doc["precision"]["fp8_param_gather"] is True
