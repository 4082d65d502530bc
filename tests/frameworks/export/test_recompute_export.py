"""Module recompute and torchtitan's per-op policy in the exports (issue 32): what each target writes or refuses."""
from __future__ import annotations

from dataclasses import replace

import pytest

from partitioner.costs import build_problem
from partitioner.frameworks.export import ExportContext, export_plan, hints_from_problem
from partitioner.plan import Plan, Stage
from partitioner.planning.targets.rules import RULES, restrict, runs
from partitioner.problem import Layout

G, M = 64, 16
MOE_ACTS = ["core_attn", "layernorm", "moe", "moe_act"]


@pytest.fixture(scope="module")
def seed_problem():
    return build_problem("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=G, microbatches=M,
                         options={"variants": "all", "recompute_modules": "mlp,op"})


def _plan(problem, variants):
    """Four stages of dp 2: the vision encoder and the embedding on stage 0, then the decoder."""
    n = problem.num_layers
    emb = next(i for i, layer in enumerate(problem.layers) if layer.name.endswith(".embed"))
    cuts = [0, emb + 8, emb + 16, emb + 24, n]
    return Plan(tuple(Stage(cuts[p], cuts[p + 1] - 1, 2, 2, 1, variant=variants[p]) for p in range(4)))


def _flags(snippet):
    return {line.strip().rstrip("\\\\").strip() for line in snippet.splitlines()}


def test_megatron_writes_the_module_list(seed_problem):
    hints = hints_from_problem(seed_problem)
    assert all(h.recompute_modules is not None for h in hints)
    plan = _plan(seed_problem, ["zero1+recompute-mlp"] * 4)
    mg = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert mg.expressible, mg.reasons
    assert {"--recompute-granularity selective", "--recompute-modules mlp"} <= _flags(mg.snippet)
    assert mg.settings["transformer_config"]["recompute_modules"] == ["mlp"]
    assert not runs(RULES["megatron"], seed_problem, plan)
    for target in ("torchtitan", "deepspeed"):
        exp = export_plan(plan, hints, target, ExportContext(global_batch=G, microbatches=M))
        assert not exp.expressible and any("recompute mlp" in r for r in exp.reasons), target
        assert runs(RULES[target], seed_problem, plan)


def test_module_lists_merge_where_the_modules_act(seed_problem):
    """A MoE decoder planned with layernorm+moe_act next to a dense vision segment without recompute: one list."""
    hints = [replace(h, recompute_modules=tuple(MOE_ACTS)) if h.role == "decoder" else h
             for h in hints_from_problem(seed_problem)]
    plan = _plan(seed_problem, ["zero1", "zero1+recompute-layernorm+moe_act", "zero1+recompute-layernorm+moe_act",
                                "zero1+recompute-layernorm+moe_act"])
    mg = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert not mg.expressible  # stage 0 holds decoder layers without the modules: one list cannot run both
    assert any("mixes recompute settings" in r for r in mg.reasons)
    merged = export_plan(_per_module(seed_problem, "zero1+recompute-layernorm+moe_act"), hints, "megatron",
                         ExportContext(global_batch=G, microbatches=M))
    assert merged.expressible, merged.reasons  # the vision and action segments: the modules do nothing there
    assert {"--recompute-modules layernorm moe_act", "--moe-grouped-gemm"} <= _flags(merged.snippet)
    dense_decoders = export_plan(_per_module(seed_problem, "zero1+recompute-layernorm+moe_act"),
                                 hints_from_problem(seed_problem), "megatron", ExportContext(global_batch=G, microbatches=M))
    assert dense_decoders.expressible  # on the dense seed decoder neither module acts: the list is still one


def _per_module(problem, llm_variant):
    """The four stages of :func:`_plan`, each segment in dp 2: ``llm_variant`` on the language model, ZeRO-1 elsewhere."""
    base = _plan(problem, [""] * 4)
    stages = []
    for s in base.stages:
        configs = [Layout(2, 1, llm_variant if problem.layers[a].module == "llm" else "zero1")
                   for a, _ in problem.segments(s.first_layer, s.last_layer)]
        stages.append(Stage.from_configs(s.first_layer, s.last_layer, 2, configs))
    return Plan(tuple(stages))


def test_torchtitan_runs_the_op_policy_as_selective_ac(seed_problem):
    hints = hints_from_problem(seed_problem)
    plan = _per_module(seed_problem, "zero1+recompute-op")
    tt = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M))
    assert tt.expressible, tt.reasons
    assert tt.settings["activation_checkpoint"] == "selective"
    assert tt.settings["overrides"][-1] == "activation_checkpoint:selective" and "SelectiveAC.Config()" in tt.snippet
    assert not runs(RULES["torchtitan"], seed_problem, plan)
    vision = _per_module(seed_problem, "zero1+recompute-op")
    vision = Plan((Stage.from_configs(vision.stages[0].first_layer, vision.stages[0].last_layer, 2,
                                      [Layout(2, 1, v) for v in ("zero1+recompute-op", "zero1", "zero1+recompute-op")]),
                   *vision.stages[1:]))
    tt = export_plan(vision, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M))  # the vision encoder planned with it
    assert not tt.expressible and any("outside the decoder layers" in r for r in tt.reasons)
    ds = export_plan(plan, hints, "deepspeed", ExportContext(global_batch=G, microbatches=M))
    assert not ds.expressible and any("recompute op" in r and "PipelineModule" in r for r in ds.reasons)
    uniform = _plan(seed_problem, ["zero1+recompute-op"] * 4)
    mg = export_plan(uniform, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert not mg.expressible and any("per-op" in r for r in mg.reasons)
    assert runs(RULES["megatron"], seed_problem, plan) and runs(RULES["deepspeed"], seed_problem, plan)


def test_each_target_keeps_the_recompute_it_runs(seed_problem):
    kept = {t: set(restrict(seed_problem, RULES[t]).variants) for t in RULES}
    assert {"zero1+recompute-mlp", "recompute-mlp"} <= kept["megatron"] and "recompute-op" not in kept["megatron"]
    assert "zero1+recompute-op" in kept["torchtitan"] and "recompute-mlp" not in kept["torchtitan"]
    assert kept["deepspeed"] == {"recompute-full", "zero1", "zero1+recompute-full"}
