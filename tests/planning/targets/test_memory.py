"""``plan --target T`` charges weights as T keeps them (issue 27): per ZeRO stage, unless the user set the count."""
from __future__ import annotations

import json

import pytest

from partitioner.costs.variants import parse_variant
from partitioner.planning import plan_model
from partitioner.planning.targets.memory import user_count
from partitioner.problem import Layout
from tests.conftest import run_cli

# bytes per trainable parameter on one of d data-parallel ranks, per target and ZeRO stage (param_memory's table)
FORMULA = {
    "megatron": {0: lambda d: 18.0, 1: lambda d: 6 + 12 / d, 3: lambda d: 18 / d},
    "torchtitan": {0: lambda d: 18.0, 1: lambda d: 2 + 16 / d, 3: lambda d: 16 / d},
    "deepspeed": {0: lambda d: 4 + 12 / d, 1: lambda d: 4 + 16 / d},
}
RUN = dict(nodes=1, global_batch=32, microbatches=4, method="greedy", simulate=False, schedules=False)


def _plan(target, **more):
    result = plan_model("llava-1.5-7b", "dgx-h100", target=target, **{**RUN, **more})
    assert result.plan is not None and result.problem is not None, result.message
    return result


def _per_param(problem, name="llm.5"):
    """Per layout of layer ``name``: weight bytes x tp / params (the bytes per parameter on one GPU)."""
    i = [layer.name for layer in problem.layers].index(name)
    params = next(h["params"] for h in problem.meta["layers"] if h["name"] == name)
    return {lay: cost.weight_bytes * lay.tp / params for lay, cost in problem.layers[i].costs.items()}


@pytest.mark.parametrize("target", sorted(FORMULA))
def test_a_targeted_plans_problem_charges_the_targets_count(target):
    result = _plan(target)
    got = _per_param(result.problem)
    assert {parse_variant(lay.variant).zero for lay in got if lay.dp > 1} == set(FORMULA[target])
    for lay, per in got.items():
        assert per == pytest.approx(FORMULA[target][parse_variant(lay.variant).zero](lay.dp), abs=1e-3), lay
    assert result.to_dict()["memory"]["source"] == "target"


def test_torchtitan_differs_from_megatron_by_the_documented_formula():
    """Same preset, same layouts: torchtitan's FSDP2 saves 4 - 4/d (ZeRO-1) and 2/d (ZeRO-3) bytes per parameter."""
    titan, mega = _per_param(_plan("torchtitan").problem), _per_param(_plan("megatron").problem)
    shared = [lay for lay in titan if lay in mega and lay.dp > 1]
    assert {parse_variant(lay.variant).zero for lay in shared} == {0, 1, 3}
    for lay in shared:
        zero, d = parse_variant(lay.variant).zero, lay.dp
        saved = {0: 0.0, 1: 4 - 4 / d, 3: 2 / d}[zero]
        assert mega[lay] - titan[lay] == pytest.approx(saved, abs=1e-3), lay


def test_a_frozen_weight_is_kept_in_fp32_by_torchtitan():
    """llava-1.5's vision tower is frozen: 2 B/param under Megatron, torchtitan's fp32 weight 4 (before ZeRO-3)."""
    titan, mega = _plan("torchtitan").problem, _plan("megatron").problem
    i = [layer.name for layer in mega.layers].index("vision.0")
    lay = Layout(1, 1)
    assert titan.layers[i].costs[lay].weight_bytes == pytest.approx(2 * mega.layers[i].costs[lay].weight_bytes, rel=1e-6)


def test_an_explicit_memory_count_wins_over_the_target():
    result = _plan("torchtitan", options={"memory_count": "megatron-distopt"})
    got, mega = _per_param(result.problem), _per_param(_plan("megatron").problem)
    for lay, per in got.items():
        assert per == pytest.approx(mega[lay], abs=1e-3), lay
    memory = result.to_dict()["memory"]
    assert memory["source"] == "user" and "megatron-distopt" in memory["note"]
    assert set(memory["counts"].values()) == {"megatron-distopt"}


def test_user_count_reads_mappings_and_option_objects():
    from partitioner.costs import CostOptions
    from partitioner.frameworks import target_options

    assert user_count(None) is None and user_count({"flash_attention": False}) is None
    assert user_count({"memory_count": "fsdp2"}) == "fsdp2" and user_count({"bytes_per_param": 16}) == "custom"
    assert user_count(CostOptions()) is None and user_count(target_options("deepspeed", 1)) == "deepspeed-zero1"


def test_cli_says_which_count_it_kept():
    proc = run_cli("plan", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "32",
                   "--microbatches", "4", "--method", "greedy", "--target", "torchtitan", "-c",
                   "memory_count=deepspeed-zero1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    memory = json.loads(proc.stdout)["memory"]
    assert memory["source"] == "user" and set(memory["counts"].values()) == {"deepspeed-zero1"}


def test_target_any_says_each_target_line_used_its_targets_count():
    # issue 33: each line is the plan --target T run, which charges T's own count (it was Megatron-LM's for all)
    result = plan_model("llava-1.5-7b", "dgx-h100", **RUN)
    doc = result.to_dict()
    assert doc["memory"]["source"] == "default"
    for name, line in doc["targets"].items():
        assert line["memory"]["source"] == "target" and line["memory"]["target"] == name, name
        assert line["memory"] == line["result"]["memory"], name
    assert set(doc["targets"]["deepspeed"]["memory"]["counts"]) == {"zero0", "zero1"}


@pytest.mark.parametrize("target, fused", [("any", True), ("megatron", True), ("torchtitan", False),
                                           ("deepspeed", False)])
def test_a_targeted_run_prices_its_frameworks_expert_activation(target, fused):
    """Megatron-Core fuses the experts' SwiGLU (3f kept); torchtitan's GroupedExperts and DeepSpeed's expert MLPs
    do not (4f) -- unless the user sets ``expert_fused_glu``."""
    from partitioner.planning.options import PlanOptions
    from partitioner.planning.run import PlanRun

    def costs(**options):
        opts = PlanOptions(nodes=1, global_batch=32, target=target, options=options)
        return PlanRun.start(opts).costs

    assert costs().expert_fused_glu is fused
    assert costs(expert_fused_glu=not fused).expert_fused_glu is (not fused)
