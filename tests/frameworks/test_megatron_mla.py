"""The exports of latent attention (MLA), multi-token prediction (MTP) and the routed scaling factor.

DeepSeek-V3 (scaled down, :mod:`tests.frameworks.scaled`, with one or two
MTP modules) on one 8-GPU node: the Megatron-LM export writes the latent
widths and places MTP modules only where Megatron-Core's
``PipelineParallelLayerLayout.validate_layer_layout`` (0.16.1) accepts them
(all in one virtual stage, the last of its rank), which megatron-core itself
confirms on the layouts written; DeepSpeed refuses MTP plans; the hints
round-trip through a result document and a malformed one is named.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest

from partitioner.costs import build_problem
from partitioner.frameworks.export import (
    ExportContext,
    MlaHints,
    MoeHints,
    export_plan,
    hints_from_problem,
    moe_hints,
    parse_megatron_layout,
)
from partitioner.plan import Plan, Stage
from partitioner.presets import load_model
from partitioner.presets.workload import with_mtp
from partitioner.problem import ProblemError
from partitioner.problem.records import Layout
from tests.frameworks.scaled import scaled

DEVICES = 8


@lru_cache(maxsize=None)
def _problem(mtp: int):
    spec = with_mtp(scaled("deepseek-v3"), mtp)
    return spec, build_problem(spec, "dgx-h100", nodes=1, global_batch=64, microbatches=8,
                               options={"ep_degrees": (2,), "zero1": False})


def _chunks(mtp: int, cuts: list[str], pp: int) -> Plan:
    """The layers split after each layer named in ``cuts``; chunk c on GPU group c mod ``pp`` (dp 2 x tp 2 x pp
    groups of 8 / pp GPUs)."""
    _, problem = _problem(mtp)
    names = [layer.name for layer in problem.layers]
    ends = [names.index(c) for c in cuts] + [len(names) - 1]
    per = DEVICES // pp
    lay = Layout(per // 2, 2, "", 1, 1, 1)
    stages, first = [], 0
    for c, last in enumerate(ends):
        group = c % pp
        stages.append(Stage.from_configs(first, last, per, [lay], tuple(range(group * per, (group + 1) * per))))
        first = last + 1
    return Plan(tuple(stages))


def _export(mtp: int, plan: Plan, target: str = "megatron", v: int = 1, mla: bool = True):
    spec, problem = _problem(mtp)
    ctx = ExportContext(global_batch=64, microbatches=8, moe=MoeHints.of_model(spec),
                        mla=MlaHints.of_model(spec) if mla else None,
                        schedule="interleaved" if v > 1 else "1f1b", virtual_stages=v)
    return export_plan(plan, hints_from_problem(problem), target, ctx)


def _validated(core: dict) -> bool:
    """Megatron-Core's own check of the layout with the export's MTP count (its assertion when it refuses)."""
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    layout = PipelineParallelLayerLayout(core["pipeline_model_parallel_layout"], core["pipeline_model_parallel_size"])
    layout.validate_layer_layout(core["num_layers"], core.get("mtp_num_layers"))
    return True


def test_latent_attention_widths_and_mtp_are_written():
    exp = _export(1, _chunks(1, ["llm.1"], 2))
    assert exp.expressible, exp.reasons
    core, llm = exp.settings["transformer_config"], _problem(1)[0].llm
    assert core["multi_latent_attention"] and core["qk_layernorm"] and core["mtp_num_layers"] == 1
    assert (core["q_lora_rank"], core["kv_lora_rank"], core["qk_head_dim"], core["qk_pos_emb_head_dim"],
            core["v_head_dim"]) == (llm.q_lora_rank, llm.kv_lora_rank, llm.d_head, llm.rope_head_dim, llm.v_dim)
    for flag in ("--multi-latent-attention", "--qk-layernorm", f"--kv-lora-rank {llm.kv_lora_rank}",
                 f"--q-lora-rank {llm.q_lora_rank}", f"--qk-pos-emb-head-dim {llm.rope_head_dim}", "--mtp-num-layers 1"):
        assert flag in exp.snippet, flag
    assert parse_megatron_layout(core["pipeline_model_parallel_layout"])[-1][-2:] == ["m", "L"]


def test_a_result_without_latent_attention_hints_is_refused():
    """Hints written before the MLA hints: the layers have latent attention (the mla_up_proj recompute module
    acts on them) but the export could not write it; Megatron-LM would build standard attention."""
    exp = _export(1, _chunks(1, ["llm.1"], 2), mla=False)
    assert not exp.expressible and any("latent attention" in r for r in exp.reasons), exp.reasons


def test_routed_scaling_factor_is_written_from_the_preset():
    """DeepSeek-V3's and Kimi-K2's routed_scaling_factor (their presets) on the scaled plan's cuts."""
    for name, scale in (("deepseek-v3", "2.5"), ("kimi-k2", "2.827")):
        spec = load_model(name)
        moe = MoeHints.of_model(spec)
        assert moe is not None and moe.topk_scale == spec.llm.routed_scale
        assert moe_hints(moe.to_dict()) == moe
        exp = export_plan(_chunks(1, ["llm.1"], 2), hints_from_problem(_problem(1)[1]), "megatron",
                          ExportContext(global_batch=64, microbatches=8, moe=replace(moe, moe_layers=(False,) + (True,) * 3),
                                        mla=MlaHints.of_model(_problem(1)[0])))
        assert exp.expressible, exp.reasons
        assert f"--moe-router-topk-scaling-factor {scale}" in exp.snippet
        assert exp.settings["transformer_config"]["moe_router_topk_scaling_factor"] == float(scale)
        assert not any("routed scaling factor" in n for n in exp.notes)


def test_hints_that_predate_the_scaling_factor_leave_a_note():
    moe = replace(MoeHints.of_model(load_model("deepseek-v3")), moe_layers=(False,) + (True,) * 3, topk_scale=0.0)
    exp = export_plan(_chunks(1, ["llm.1"], 2), hints_from_problem(_problem(1)[1]), "megatron",
                      ExportContext(global_batch=64, microbatches=8, moe=moe, mla=MlaHints.of_model(_problem(1)[0])))
    assert "--moe-router-topk-scaling-factor" not in exp.snippet
    assert any("routed scaling factor" in n for n in exp.notes)


@pytest.mark.parametrize("value", [-1.0, "2.5", True, float("inf")])
def test_a_bad_scaling_factor_hint_names_its_field(value):
    doc = MoeHints.of_model(load_model("deepseek-v3")).to_dict()
    with pytest.raises(ProblemError, match="export_hints.moe.topk_scale"):
        moe_hints({**doc, "topk_scale": value})


def test_mla_hints_round_trip_through_the_result_document():
    hints = MlaHints.of_model(load_model("deepseek-v3"))
    assert hints is not None and MlaHints.from_doc(hints.to_dict()) == hints


def test_interleaved_mtp_in_the_last_virtual_stage_is_written_and_megatron_core_accepts_it():
    """P 2, v 2: the MTP module and the loss in chunk 3 (the last virtual stage of rank 1)."""
    exp = _export(1, _chunks(1, ["llm.0", "llm.2", "llm.3"], 2), v=2)
    assert exp.expressible, exp.reasons
    core = exp.settings["transformer_config"]
    assert core["virtual_pipeline_model_parallel_size"] == 2 and _validated(core)


def test_mtp_modules_in_two_stages_are_refused_as_megatron_core_refuses_them():
    """Two MTP modules split over chunks 2 and 3: refused with the reason; megatron-core asserts on that layout."""
    plan = _chunks(2, ["llm.1", "llm.3", "llm.mtp.0"], 2)
    exp = _export(2, plan, v=2)
    assert not exp.expressible and any("fall in 2 stages" in r for r in exp.reasons), exp.reasons
    with pytest.raises(AssertionError, match="same one virtual pipeline stage"):
        _validated({"pipeline_model_parallel_layout": "Et*2|t*2|m|mL", "pipeline_model_parallel_size": 2,
                    "num_layers": 4, "mtp_num_layers": 2})


def test_mtp_in_a_virtual_stage_before_the_last_is_refused_as_megatron_core_refuses_it():
    """P 1, v 2: the MTP module in chunk 0, the loss alone in chunk 1: not the rank's last virtual stage."""
    exp = _export(1, _chunks(1, ["llm.mtp.0"], 1), v=2)
    assert not exp.expressible and any("not its last" in r for r in exp.reasons), exp.reasons
    with pytest.raises(AssertionError, match="MTP should be always in the last"):
        _validated({"pipeline_model_parallel_layout": "Et*4m|L", "pipeline_model_parallel_size": 1,
                    "num_layers": 4, "mtp_num_layers": 1})


def test_deepspeed_refuses_a_plan_with_mtp_modules():
    exp = _export(1, _chunks(1, ["llm.1"], 2), target="deepspeed")
    assert not exp.expressible and any("multi-token prediction" in r for r in exp.reasons), exp.reasons
    assert not any("multi-token" in r for r in _export(0, _chunks(0, ["llm.1"], 2), target="deepspeed").reasons)


def test_torchtitan_refuses_mtp_over_pipeline_stages_and_keeps_one_stage_a_template():
    """torchtitan 0.3's MTPDecoder raises under pipeline parallelism: two stages are refused with the reason; one
    stage is a template (the scaled model has no torchtitan flavor; DeepSeek-V3's own needs num_mtp_layers and
    MTPLoss)."""
    exp = _export(1, _chunks(1, ["llm.1"], 2), target="torchtitan")
    assert not exp.expressible and any("refuses pipeline parallelism" in r for r in exp.reasons), exp.reasons
    exp = _export(1, _chunks(1, [], 1), target="torchtitan")
    assert exp.expressible, exp.reasons
    assert exp.settings["launch"] == "template"
