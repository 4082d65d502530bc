"""MoE router and performance flags of the Megatron export, through megatron-core 0.16.1's own code.

For the experts of every MoE preset (Qwen3-VL 30B/235B, GLM-4.5V,
DeepSeek-V3, Kimi-K2) on a tier plan's cuts:

* every written flag is a ``TransformerConfig`` field (or a DDP / batch
  flag) holding the value the settings state, and ``TransformerConfig``
  accepts the settings (it refuses expert bias without sigmoid, groups that
  do not divide the experts, ...); fused permutation, the one field
  megatron-core checks against Transformer Engine, is accepted where TE is
  installed and refused here with exactly the TE message;
* megatron-core's router (``topk_routing_with_score_function``) run with
  the exported config chooses the experts and weights the routing the
  preset states does (a reference of the Hugging Face routers, written here
  from transformers' ``Qwen3MoeSparseMoeBlock`` / ``DeepseekV3TopkRouter``
  semantics: softmax then top-k then renormalise; sigmoid plus the
  correction bias for the choice, group-limited, weights renormalised).
  The reference follows the preset: the glm-4.5v preset states no router
  (softmax by default) where transformers' GLM-4.5V router is sigmoid with a
  correction bias, so for GLM-4.5V this checks the preset, not the model
  (its Bridge launch leaves the router to the provider).
"""
from __future__ import annotations

import dataclasses as dc
from dataclasses import replace

import pytest

from partitioner.frameworks.export import ExportContext, MoeHints, export_plan, layer_hints, moe_hints
from partitioner.frameworks.megatron.recipe import megatron_tokens
from partitioner.presets import load_model
from partitioner.problem import ProblemError
from tests.frameworks.plans import NOT_INSTALLED, planned

pytest.importorskip("megatron.core", reason=NOT_INSTALLED)

pytestmark = pytest.mark.slow  # the framework tier: plans and framework code, minutes on 2 cores

from benchmarks.framework_checks import BATCH_FLAGS, FLAG_FIELDS  # noqa: E402
from benchmarks.framework_checks import megatron_config as _config  # noqa: E402

MOE_PRESETS = ["qwen3-vl-30b-a3b", "qwen3-vl-235b-a22b", "glm-4.5v", "deepseek-v3", "kimi-k2"]


def _preset_moe(name: str, n_layers: int) -> MoeHints:
    moe = MoeHints.of_model(load_model(name))
    assert moe is not None
    return replace(moe, moe_layers=moe.moe_layers[:n_layers])  # the tier plan's decoder layers


def _export(moe: MoeHints, ep: int = 4):
    """llava-1.5-7b's tier cuts (32 decoder layers, 16 GPUs) as one dp 8 x tp 1 ... layout with ``moe``'s experts."""
    from tests.frameworks.test_megatron import _moe_plan

    result = planned("llava-1.5-7b")
    hints = layer_hints(result.to_dict()["export_hints"]["layers"])
    stages = len(result.plan.stages)
    dp = result.problem.cluster.num_devices // stages
    plan = _moe_plan(result, dp=dp, tp=1, cp=1, ep=ep, etp=1)
    return export_plan(plan, hints, "megatron", ExportContext(global_batch=512, microbatches=64, moe=moe))


def _flags(snippet: str) -> dict[str, str | None]:
    """Each ``--flag`` of the launch (shell words) and the word after it (None: a switch)."""
    words = megatron_tokens(snippet)
    return {w[2:]: (words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None)
            for i, w in enumerate(words) if w.startswith("--")}


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_moe_flags_are_transformer_config_fields_megatron_core_accepts(name):
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig

    exp = _export(_preset_moe(name, 32))
    assert exp.expressible, exp.reasons
    core, te = exp.settings["transformer_config"], exp.settings["transformer_config_te"]
    cfg = _config(core)  # megatron-core's own validation of every MoE field
    fields = {f.name for f in dc.fields(TransformerConfig)} | {f.name for f in dc.fields(DistributedDataParallelConfig)}
    flags = _flags(exp.snippet)
    for flag, value in flags.items():
        dest = FLAG_FIELDS.get(flag.replace("-", "_"), flag.replace("-", "_"))
        assert dest in fields or dest in BATCH_FLAGS, f"--{flag}"
        want = {**core, **te}.get(dest)
        if isinstance(want, bool):
            assert want and value is None, flag
        elif want is not None and not isinstance(want, list):
            assert value == str(want), flag
    for field in ("moe-grouped-gemm", "moe-permute-fusion", "moe-router-dtype", "moe-router-score-function",
                  "moe-router-load-balancing-type", "moe-aux-loss-coeff"):
        assert field in flags, field
    assert cfg.moe_grouped_gemm and cfg.moe_router_dtype == "fp32" and te == {"moe_permute_fusion": True}
    spec = load_model(name).llm
    assert cfg.moe_router_score_function == spec.router_score
    assert cfg.moe_router_enable_expert_bias == (spec.router_score == "sigmoid")
    assert (cfg.moe_router_num_groups or 1) == max(spec.expert_groups, 1)
    assert bool(cfg.moe_shared_expert_overlap) == bool(spec.shared_ffn)
    assert cfg.moe_shared_expert_intermediate_size == (spec.shared_ffn or None)
    try:  # fused permutation: a TransformerConfig field whose only check is Transformer Engine's kernels
        _config({**core, **te})
    except ValueError as err:
        assert "TE >= 2.1" in str(err)
    except ImportError as err:
        assert "fused_permute" in str(err)


def _reference_routing(logits, moe: MoeHints, bias):
    """The model's routing (Hugging Face semantics): (chosen expert mask, weight per expert)."""
    import torch

    k = moe.top_k
    if moe.router_score == "softmax":
        probs = torch.softmax(logits.float(), dim=-1)
        weights, idx = torch.topk(probs, k, dim=-1)
    else:
        scores = torch.sigmoid(logits.float())
        choice = scores + bias
        if moe.expert_groups > 1:
            g = moe.expert_groups
            grouped = choice.view(len(logits), g, -1)
            group_scores = grouped.topk(2, dim=-1)[0].sum(dim=-1)  # DeepSeek-V3: the sum of each group's top 2
            keep = torch.zeros_like(group_scores).scatter(1, group_scores.topk(moe.group_top_k, dim=-1)[1], 1)
            choice = choice.masked_fill(~keep.bool().repeat_interleave(moe.num_experts // g, dim=1), float("-inf"))
        idx = torch.topk(choice, k, dim=-1)[1]
        weights = scores.gather(1, idx)
    if moe.norm_topk:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights * (moe.topk_scale or 1.0)  # routed_scaling_factor (DeepseekV3TopkRouter: after renormalising)
    out = torch.zeros_like(logits.float()).scatter(1, idx, weights)
    return out > 0, out


def _megatron_routing(cfg, logits, bias):
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

    probs, chosen = topk_routing_with_score_function(
        logits.float(), cfg.moe_router_topk, use_pre_softmax=cfg.moe_router_pre_softmax,
        num_groups=cfg.moe_router_num_groups, group_topk=cfg.moe_router_group_topk,
        scaling_factor=cfg.moe_router_topk_scaling_factor, score_function=cfg.moe_router_score_function,
        expert_bias=bias if cfg.moe_router_enable_expert_bias else None)
    return chosen, probs


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_megatron_core_routes_as_the_preset_states_with_the_exported_router(name):
    import torch

    moe = _preset_moe(name, 32)
    cfg = _config(_export(moe).settings["transformer_config"])
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, moe.num_experts, generator=gen)
    bias = 0.1 * torch.randn(moe.num_experts, generator=gen)
    want_map, want = _reference_routing(logits, moe, bias)
    got_map, got = _megatron_routing(cfg, logits, bias)
    assert torch.equal(got_map, want_map)
    assert torch.allclose(got.float(), want, atol=1e-6)


def test_routing_check_can_fail():
    """A router setting other than the model's routes otherwise: softmax over all experts without renormalising
    (``--moe-router-pre-softmax``) for Qwen3's renormalised top-k weights."""
    import torch

    moe = _preset_moe("qwen3-vl-30b-a3b", 32)
    cfg = _config({**_export(moe).settings["transformer_config"], "moe_router_pre_softmax": True})
    logits = torch.randn(16, moe.num_experts, generator=torch.Generator().manual_seed(1))
    _, want = _reference_routing(logits, moe, None)
    _, got = _megatron_routing(cfg, logits, None)
    assert not torch.allclose(got.float(), want, atol=1e-3)


def test_transformer_config_refuses_expert_bias_with_softmax():
    """The check can fail: megatron-core refuses an expert bias on a softmax router."""
    core = dict(_export(_preset_moe("qwen3-vl-30b-a3b", 32)).settings["transformer_config"])
    with pytest.raises(ValueError, match="sigmoid"):
        _config({**core, "moe_router_enable_expert_bias": True})


def test_unstated_router_writes_no_routing_flags():
    """Hints written before the router fields: performance flags only, and a note to plan again."""
    exp = _export(MoeHints(16, 2, 256))
    flags = _flags(exp.snippet)
    assert "moe-grouped-gemm" in flags and "moe-router-score-function" not in flags
    assert "moe-router-load-balancing-type" not in flags
    assert any("do not state the router" in n for n in exp.notes)


def test_router_hints_round_trip_and_bad_input_names_the_field():
    moe = MoeHints.of_model(load_model("deepseek-v3"))
    assert moe is not None and moe_hints(moe.to_dict()) == moe
    for key, value in (("router_score", "relu"), ("norm_topk", 1), ("expert_groups", -1)):
        with pytest.raises(ProblemError, match=f"export_hints.moe.{key}"):
            moe_hints({**moe.to_dict(), key: value})


@pytest.fixture(scope="module")
def _deepseek():
    from partitioner import plan_model

    return plan_model("deepseek-v3", "dgx-h100", nodes=64, global_batch=1024, microbatches=64, method="greedy",
                      schedule="1f1b", target="megatron")


def test_deepseek_v3_language_model_launch_with_mtp_and_group_routing(_deepseek):
    """A language-only DeepSeek-V3 plan: pretrain_gpt.py flags, its MTP module in the layout (``m``) with
    ``--mtp-num-layers``, latent attention (``MLATransformerConfig`` with the config.json widths), group-limited
    sigmoid routing with expert bias and the routed scaling factor; megatron-core takes the config and places
    the plan's decoder layers and MTP module."""
    from benchmarks.framework_checks import PlannedJob, check_megatron_layout, llm_stages
    from partitioner.frameworks.export import export_result, parse_megatron_layout

    exp = export_result(_deepseek, "megatron")
    assert exp.expressible, exp.reasons
    assert exp.settings["launch"] == "command" and "pretrain_gpt.py" in exp.snippet
    core = exp.settings["transformer_config"]
    cfg = _config(core)
    assert cfg.mtp_num_layers == 1 and _flags(exp.snippet)["mtp-num-layers"] == "1"
    layout = parse_megatron_layout(core["pipeline_model_parallel_layout"])
    assert sum(st.count("m") for st in layout) == 1 and "m" in layout[-1]
    assert (cfg.moe_router_num_groups, cfg.moe_router_group_topk, cfg.moe_router_score_function) == (8, 4, "sigmoid")
    assert cfg.moe_router_enable_expert_bias and cfg.moe_router_load_balancing_type == "seq_aux_loss"
    assert cfg.moe_router_topk_scaling_factor == 2.5 and _flags(exp.snippet)["moe-router-topk-scaling-factor"] == "2.5"
    from megatron.core.transformer import MLATransformerConfig  # --multi-latent-attention: Megatron-LM's MLA config

    assert isinstance(cfg, MLATransformerConfig) and cfg.multi_latent_attention and cfg.qk_layernorm
    assert (cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_head_dim, cfg.qk_pos_emb_head_dim, cfg.v_head_dim) == \
        (1536, 512, 128, 64, 128)
    job = PlannedJob.from_result(_deepseek)
    check_megatron_layout(job, core, llm_stages(job))


def test_layout_without_the_mtp_module_is_refused():
    """The check can fail: megatron-core refuses mtp_num_layers without the ``m`` in the layout."""
    with pytest.raises(AssertionError, match="mtp"):
        _config({"num_layers": 8, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2,
                 "pipeline_model_parallel_layout": "Et*4|t*4L", "mtp_num_layers": 1, "bf16": True})


def test_deepseek_v3_flags_estimate_as_the_plan(_deepseek):
    """export -> estimate with the MTP module in the layout: the same cuts and iteration time."""
    from partitioner import estimate
    from partitioner.frameworks.export import export_result
    from partitioner.frameworks.megatron.recipe import read_megatron_args

    recipe = read_megatron_args(export_result(_deepseek, "megatron").text(), "export")
    est = estimate("deepseek-v3", "dgx-h100", recipe, nodes=64)
    assert [(s.first_layer, s.last_layer) for s in est.evaluation.stages] == \
        [(s.first_layer, s.last_layer) for s in _deepseek.evaluation.stages]
    assert est.iteration_ms == pytest.approx(_deepseek.throughput.iteration_ms, rel=1e-9)
