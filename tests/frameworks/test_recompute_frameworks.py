"""Module recompute and the per-op policy through the frameworks' own config classes (issue 32).

Megatron: the export's ``recompute_modules`` (and the ``moe_grouped_gemm``
``moe_act`` needs) go through megatron-core 0.16.1's ``TransformerConfig``,
which validates the module names and refuses ``moe_act`` without grouped
GEMMs (so the check can fail). torchtitan: the export's
``activation_checkpoint: selective`` is torchtitan 0.3's ``SelectiveAC``.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.framework_checks import megatron_config as _config
from partitioner.costs import build_problem
from partitioner.frameworks.export import ExportContext, MoeHints, export_plan, hints_from_problem
from partitioner.plan import Plan, Stage
from partitioner.problem import Layout
from tests.frameworks.plans import NOT_INSTALLED

pytestmark = pytest.mark.slow

MOE = MoeHints(num_experts=16, top_k=2, ffn_hidden=256)


def _plan(problem, llm_variant):
    """Two stages of dp 2 (the vision encoder with the first decoder layers), ``llm_variant`` on the language model."""
    n = problem.num_layers
    emb = next(i for i, layer in enumerate(problem.layers) if layer.name.endswith(".embed"))
    cuts = [0, emb + 16, n]
    stages = []
    for a, b in zip(cuts, cuts[1:]):
        b -= 1
        configs = [Layout(2, 1, llm_variant if problem.layers[x].module == "llm" else "zero1")
                   for x, _ in problem.segments(a, b)]
        stages.append(Stage.from_configs(a, b, 2, configs))
    return Plan(tuple(stages))


def test_megatron_core_takes_the_module_list():
    pytest.importorskip("megatron.core", reason=NOT_INSTALLED)
    problem = build_problem("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=16,
                            options={"variants": "all", "recompute_modules": "layernorm+moe_act,mlp"})
    hints = [replace(h, recompute_modules=("core_attn", "layernorm", "moe", "moe_act")) if h.role == "decoder" else h
             for h in hints_from_problem(problem)]  # a MoE language model's decoder layers
    exp = export_plan(_plan(problem, "zero1+recompute-layernorm+moe_act"), hints, "megatron", ExportContext(global_batch=64,
                      microbatches=16, moe=MOE))
    assert exp.expressible, exp.reasons
    core = exp.settings["transformer_config"]
    cfg = _config(core)
    assert cfg.recompute_granularity == "selective" and list(cfg.recompute_modules) == ["layernorm", "moe_act"]
    assert cfg.moe_grouped_gemm
    without = {k: v for k, v in core.items() if k != "moe_grouped_gemm"}
    with pytest.raises(ValueError, match="moe_act in recompute_modules is only supported with moe_grouped_gemm"):
        _config(without)
    with pytest.raises(AssertionError, match="Invalid choices for recompute_modules"):
        _config({**core, "recompute_modules": ["layernorm", "activations"]})


def test_torchtitan_selective_ac_is_the_op_policy():
    ac = pytest.importorskip("torchtitan.distributed.activation_checkpoint", reason=NOT_INSTALLED)
    problem = build_problem("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=16,
                            options={"variants": "all", "recompute_modules": "op"})
    exp = export_plan(_plan(problem, "zero1+recompute-op"), hints_from_problem(problem), "torchtitan", ExportContext(global_batch=64,
                      microbatches=16))
    assert exp.expressible, exp.reasons
    assert exp.settings["activation_checkpoint"] == "selective"
    # the snippet's import and constructor are torchtitan's own: its subcommand `selective` is this class
    line = next(x for x in exp.snippet.splitlines() if "activation_checkpoint import" in x)
    name = line.rsplit(" ", 1)[1]
    assert getattr(ac, name) is ac.SelectiveAC and f"{name}.Config()" in exp.snippet
    assert isinstance(ac.SelectiveAC.Config(), ac.SelectiveAC.Config)
    assert "activation_checkpoint:selective" in exp.settings["overrides"]
