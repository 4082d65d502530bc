"""The export invariant for every model preset: the framework's own model, built from our export, holds what the plan charged.

Every preset (``partitioner models``), scaled down with its structure kept
(:mod:`tests.frameworks.scaled`), is costed on one 8-GPU node with ep
{2, 4} and etp {1, 2} offered and no optimizer sharding (a trained
parameter is 18 bytes, a frozen one 2: a layer's weight bytes / that is
the parameters the plan charged each of its ranks). Each case forces a
two-stage plan of 4 GPUs per stage, cut after the language model's second
layer (the vision tower and projector on stage 0, as Megatron-LM's and
torchtitan's VLMs run them): dp 2 x tp 2 for every preset; a MoE preset
also ep 2 with etp 1 and with etp 2 (the vision layers keep ep 1: the
cost model has no expert split for layers without experts), and ep 4 on
tp 1. Each case is exported to each target:

* **Megatron** (megatron-core's ``GPTModel`` on a fake process group of
  the 8 ranks, CPU, its ``initialize_model_parallel`` with the export's
  sizes, Megatron-LM's decoder block spec with the preset's attention --
  standard, or multi-head latent as the Transformer Engine spec holds it
  --, QK norms, biases, shared experts and MoE layer pattern): on the
  first rank of each stage, the language model's parameters are within
  1 % of what the plan charged the stage's language-model layers, and its
  routed experts' parameters are exactly the routed parameters the plan
  charged. pi0 is left out (:data:`NOT_GPT`). Everything the export
  writes is read from it: layers, experts, router, and the latent
  attention (``MLATransformerConfig`` only when the export says
  ``multi_latent_attention``, with its widths); DeepSeek-V3 is also built
  with its multi-token prediction module (``deepseek-v3+mtp``: the MTP block
  where the export's layout puts it, with the embedding copy megatron-core
  keeps there).
* **DeepSpeed** (``ds_experts.py``): DeepSpeed's ``MoE(ep_size,
  enable_expert_tensor_parallelism)`` of each expressible export builds
  its expert groups on a fake world; its local experts x one expert's
  shard, per MoE layer of a stage, are the routed parameters the plan
  charged. A refused export names why (ep must divide dp).
* **torchtitan** (``titan_ranks.py``): torchtitan's own model of the
  preset's family (``llama3``, ``qwen3`` MoE, ``deepseek_v3``;
  :func:`titan_family`) with the export's mesh degrees, built on the meta
  device and parallelized by torchtitan (its sharding configs): each
  stage's rank 0, over the modules the export's
  ``module_fqns_per_model_part`` names, holds the language-model
  parameters the plan charged (1 %) and its routed experts exactly. The
  layouts torchtitan cannot run are refused with the reason: ep x etp with
  etp > 1 (torchtitan's experts are whole under EP) and ep on tp 1 with
  ZeRO-0 (its EP ranks come from dp_shard x cp x tp). Presets no
  torchtitan family builds are listed (:data:`NO_TITAN_MODEL`).

The checks can fail: the dp 2 x tp 2 export of every MoE preset with its
expert tensor-parallel size set to 1 (DeepSpeed: without expert tensor
parallelism) builds twice the expert weights the plan charged, and the
check refuses it; torchtitan's mesh for ep 2 on tp 2, against a plan
that charged ep 2 x etp 2, is refused likewise.

Vision towers: one block of every preset's ViT, built by megatron-core's
ViT layer spec at the stage's tp 2, holds the block's charge within 1 %
(a block built at tp 1 does not); so does torchtitan's common vision block
(``VisionTransformerBlock`` with its TP sharding config) for the towers it
describes (:func:`titan_vit`). Patch embeddings and projectors are charged
on stage 0 but not built here.

A real plan per preset (``plan --target megatron`` on the node, its ZeRO
stage, EP and ETP as chosen) is checked in bytes: each stage's first rank
of the exported model, dense parameters with their optimizer states over
megatron-core's data-parallel group and routed experts' over its
expert-data-parallel group, holds the language-model weight bytes the
plan charged (1 %); reading the experts' over the dense group fails.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from unittest import mock

import pytest

from partitioner.costs import build_problem
from partitioner.costs.entry import weight_bytes_per_param
from partitioner.costs.layers import model_layers
from partitioner.costs.options import CostOptions
from partitioner.costs.variants import Knobs, parse_variant
from partitioner.frameworks.export import ExportContext, MlaHints, MoeHints, export_plan, export_result, hints_from_problem
from partitioner.plan import Plan, Stage, evaluate
from partitioner.planning.plan_model import plan_model
from partitioner.presets import list_models
from partitioner.presets.spec import ModelSpec, ModuleSpec
from partitioner.presets.workload import with_mtp
from partitioner.problem.records import Layout
from tests.frameworks.plans import NOT_INSTALLED
from tests.frameworks.scaled import scaled

pytest.importorskip("megatron.core", reason=NOT_INSTALLED)
import torch  # noqa: E402  (installed with megatron-core)

OPTIONS = {"ep_degrees": (2, 4), "etp_degrees": (1, 2), "zero1": False}
WORLD, PER_STAGE, GLOBAL_BATCH, MICROBATCHES = 8, 4, 64, 8
DENSE = ((2, 2, 1, 1),)
MOE = ((2, 2, 1, 1), (2, 2, 2, 1), (2, 2, 2, 2), (4, 1, 4, 1))  # (dp, tp, ep, etp)
PRESETS = list_models()
# presets whose framework model is not Megatron's GPT: pi0 fuses the action expert's layer into each decoder layer
# (the export says so: Megatron's layout has no such layer type), so GPTModel alone is not what the plan charges
NOT_GPT = {"pi0": "the action expert is fused into every decoder layer: no Megatron GPT layer type holds it"}


def _cases() -> list[tuple[str, tuple[int, int, int, int]]]:
    out = []
    for name in PRESETS:
        moe = scaled(name).llm is not None and scaled(name).llm.experts > 0
        out += [(name, lay) for lay in (MOE if moe else DENSE)]
    return out


CASES = _cases()
CASE_IDS = [f"{n}-dp{d}tp{t}ep{e}etp{x}" for n, (d, t, e, x) in CASES]
MEGATRON = [c for c in CASES if c[0] not in NOT_GPT]
MEGATRON_IDS = [i for c, i in zip(CASES, CASE_IDS) if c[0] not in NOT_GPT]
MOE_PRESETS = [n for n in PRESETS if (scaled(n).llm is not None and scaled(n).llm.experts > 0)]
MTP = "+mtp"  # a case name ending so: the scaled preset trains one multi-token prediction module (DeepSeek-V3's)
MTP_CASES = [(f"deepseek-v3{MTP}", lay) for lay in MOE]
MTP_IDS = [f"{n}-dp{d}tp{t}ep{e}etp{x}" for n, (d, t, e, x) in MTP_CASES]


def _spec(name: str) -> ModelSpec:
    """The scaled preset of case ``name`` (:data:`MTP`: with one multi-token prediction module)."""
    return with_mtp(scaled(name[: -len(MTP)]), 1) if name.endswith(MTP) else scaled(name)


@dataclass(frozen=True)
class Charged:
    """What the plan charged one rank of a stage: the language model's parameters, its routed experts' share."""

    llm: float
    experts: float
    moe_layers: int


@lru_cache(maxsize=None)
def _problem(name: str):
    return build_problem(_spec(name), "dgx-h100", nodes=1, global_batch=GLOBAL_BATCH, microbatches=MICROBATCHES,
                         options=OPTIONS)


def _plan(name: str, lay: tuple[int, int, int, int]) -> Plan:
    """Two stages of 4 GPUs cut after the language model's second layer; layers without experts keep ep 1."""
    dp, tp, ep, etp = lay
    layers = _problem(name).layers
    names = [layer.name for layer in layers]
    cut, emb = names.index("llm.1"), names.index("llm.embed")
    runs = len({layer.module for layer in layers[:emb]})  # the segments before the language model (one per module)
    plain, split = Layout(dp, tp, "", 1, 1, 1), Layout(dp, tp, "", 1, ep, etp)
    first = Stage.from_configs(0, cut, PER_STAGE, [plain] * runs + [split])
    return Plan((first, Stage.from_configs(cut + 1, len(names) - 1, PER_STAGE, [split]))).with_device_ids()


def _segments(problem, stage: Stage) -> dict[int, Layout]:
    return {k: lay for (a, b), lay in stage.segment_configs(problem) for k in range(a, b + 1)}


def _charged(name: str, plan: Plan) -> list[Charged]:
    """Per stage, the language model's charged parameters per rank (weight bytes / bytes per parameter, its tied
    copy counted once) and the routed experts' share the cost model charged."""
    problem, spec = _problem(name), _spec(name)
    opts = CostOptions.from_mapping(OPTIONS)
    pipeline = model_layers(spec, opts)
    evaluate(problem, plan)  # the plan is valid
    out = []
    for stage in plan.stages:
        lays = _segments(problem, stage)
        llm = experts = 0.0
        moe_layers = 0
        for k in stage.layers:
            layer, lay = problem.layers[k], lays[k]
            if not layer.module.startswith("llm"):
                continue
            per = weight_bytes_per_param(any(p.frozen for p in pipeline[k].pieces), lay.dp, Knobs(0, "none"), opts)
            tied = layer.tied_to is not None and stage.first_layer <= layer.tied_to
            cost = layer.costs[lay]
            llm += (cost.weight_bytes - (cost.tied_weight_bytes if tied else 0)) / per
            split = lay.tp if lay.ep == 1 else lay.ep * lay.etp
            experts += sum(p.moe.params for p in pipeline[k].pieces if p.moe is not None) / split
            moe_layers += sum(p.moe is not None for p in pipeline[k].pieces)
        out.append(Charged(llm, experts, moe_layers))
    return out


def _exported(name: str, plan: Plan, target: str):
    spec = _spec(name)
    return export_plan(plan, hints_from_problem(_problem(name)), target,
                       ExportContext(global_batch=GLOBAL_BATCH, microbatches=MICROBATCHES, moe=MoeHints.of_model(spec),
                                     mla=MlaHints.of_model(spec)))


# --------------------------------------------------------------------------- Megatron


def _activation(llm: ModuleSpec):
    import torch.nn.functional as F

    return {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[llm.activation]


def _megatron_config(core: dict, sizes: dict, llm: ModuleSpec):
    """megatron-core's ``TransformerConfig`` of the scaled LM: its widths from the preset, everything the export
    writes (layers, experts, router, MTP, latent attention: ``MLATransformerConfig`` when it says
    ``multi_latent_attention``) from the export."""
    import torch
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig

    exported = {k: core[k] for k in ("num_layers", "num_moe_experts", "moe_ffn_hidden_size", "moe_router_topk",
                                     "moe_shared_expert_intermediate_size", "moe_layer_freq",
                                     "pipeline_model_parallel_layout", "mtp_num_layers", "moe_router_score_function",
                                     "moe_router_num_groups", "moe_router_group_topk", "moe_router_topk_scaling_factor",
                                     "moe_router_enable_expert_bias") if k in core}
    latent = {k: core[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
              if k in core}
    common = dict(
        **sizes, **exported, hidden_size=llm.hidden, num_attention_heads=llm.heads, ffn_hidden_size=llm.ffn,
        num_query_groups=llm.n_kv_heads, kv_channels=llm.d_head, gated_linear_unit=llm.gated,
        activation_func=_activation(llm), add_bias_linear=llm.bias,
        add_qkv_bias=bool(llm.bias if llm.qkv_bias is None else llm.qkv_bias),
        qk_layernorm=core.get("qk_layernorm", llm.qk_norm),  # MLA: the norms of the query and key-value latents
        normalization="RMSNorm" if llm.norm == "rmsnorm" else "LayerNorm", use_cpu_initialization=True,
        perform_initialization=False, moe_grouped_gemm=False, moe_token_dispatcher_type="allgather",
        pipeline_dtype=torch.float32, sequence_parallel=False)
    if core.get("multi_latent_attention"):  # the latent widths as the export states them (Megatron-LM's choice too)
        return MLATransformerConfig(**common, **latent, rope_type="rope")
    return TransformerConfig(**common)


class _AttentionCore(torch.nn.Module):
    """Stands in for the attention core (softmax(QK^T)V: no parameters) of MLA layers on the CPU tier."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()


class _DuplicatedLinear(torch.nn.Module):
    """Transformer Engine's ``TELinear(parallel_mode="duplicated")`` as it holds weights: the whole ``out x in``
    matrix on every tensor-parallel rank. Megatron-Core's TE layer spec builds MLA's query and key-value
    down-projections so (``get_gpt_layer_with_transformer_engine_spec``: ``backend.linear()``); its local
    spec would split them over tp instead (``ColumnParallelLinear``), which Megatron-LM does not run by default."""

    def __init__(self, input_size: int, output_size: int, *, bias: bool = False, **kwargs) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(output_size, input_size))
        self.bias = torch.nn.Parameter(torch.empty(output_size)) if bias else None


@dataclass(frozen=True)
class Built:
    """What megatron-core built on one rank: all parameters, the routed experts', and the data-parallel and
    expert-data-parallel group sizes its distributed optimizer shards the optimizer states over."""

    params: int
    experts: int
    dp: int
    edp: int


def megatron_params(core: dict, rank: int, llm: ModuleSpec, world: int = WORLD) -> Built:
    """What megatron-core's ``GPTModel`` of ``llm`` holds on ``rank`` of ``world`` under the export's sizes (no
    output layer when the model has no LM head: the export attaches its action head there)."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.models.common.language_module.language_module import LanguageModule
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
    from torch.testing._internal.distributed.fake_pg import FakeStore

    sizes = {k: core.get(k) or 1 for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                           "expert_model_parallel_size", "expert_tensor_parallel_size")}
    if dist.is_initialized():
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        parallel_state.initialize_model_parallel(**sizes, create_gloo_process_groups=False, order="tp-cp-ep-dp-pp")
        cfg = _megatron_config(core, sizes, llm)
        # Megatron-LM's block spec: a dense or MoE layer each as moe_layer_freq says, MLA or standard attention
        spec = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization=cfg.normalization,
                                          pp_rank=parallel_state.get_pipeline_model_parallel_rank())
        if cfg.multi_latent_attention:  # the Transformer Engine spec's MLA (Megatron-LM's default --transformer-impl), on the CPU tier
            for layer in spec.layer_specs:
                attention = layer.submodules.self_attention.submodules
                attention.core_attention = _AttentionCore
                attention.linear_q_down_proj = attention.linear_kv_down_proj = _DuplicatedLinear
        # Megatron-LM's MTP block (pretrain_gpt.py): the decoder's last layer spec, on the rank the layout puts it
        mtp = get_gpt_mtp_block_spec(cfg, spec, use_transformer_engine=False) if cfg.mtp_num_layers else None
        # a tied head's first sync with the embedding (no parameter) runs on CUDA; MLA's rotary table (a buffer)
        # is placed on the current CUDA device: both are skipped or kept on the CPU tier; no Transformer Engine
        # (its FP8 hook in MLA's constructor checks for a TE linear layer)
        with mock.patch.object(LanguageModule, "_is_in_embd_group", lambda self: False), \
                mock.patch("torch.cuda.current_device", lambda: "cpu"), \
                mock.patch("megatron.core.transformer.multi_latent_attention.HAVE_TE", False), \
                mock.patch("megatron.core.transformer.multi_latent_attention.TELinear", _DuplicatedLinear):
            model = GPTModel(cfg, spec, vocab_size=llm.vocab, max_sequence_length=llm.text_tokens,
                             pre_process=parallel_state.is_pipeline_first_stage(),
                             post_process=parallel_state.is_pipeline_last_stage(), position_embedding_type="rope",
                             share_embeddings_and_output_weights=llm.tie_embeddings, mtp_block_spec=mtp)
        named = [(n, p) for n, p in model.named_parameters() if llm.lm_head or not n.startswith("output_layer.")]
        return Built(sum(p.numel() for _, p in named), sum(p.numel() for n, p in named if ".mlp.experts." in n),
                     parallel_state.get_data_parallel_world_size(),
                     parallel_state.get_expert_data_parallel_world_size())
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def check_megatron(core: dict, charged: list[Charged], llm: ModuleSpec) -> None:
    """Each stage's first rank holds the language-model parameters the plan charged (AssertionError naming the stage)."""
    for s, want in enumerate(charged):
        built = megatron_params(core, s * PER_STAGE, llm)
        total, experts = built.params, built.experts
        assert experts == pytest.approx(want.experts, abs=0.5), \
            f"stage {s}: megatron-core holds {experts} expert parameters, the plan {want.experts}"
        assert total == pytest.approx(want.llm, rel=0.01), f"stage {s}: megatron-core {total}, the plan {want.llm}"


def _megatron_core(name: str, plan: Plan) -> dict:
    exp = _exported(name, plan, "megatron")
    assert exp.expressible, exp.reasons
    return exp.settings["transformer_config"]


@pytest.mark.parametrize("name,lay", MEGATRON, ids=MEGATRON_IDS)
def test_megatron_model_holds_what_the_plan_charged(name, lay):
    plan = _plan(name, lay)
    core = _megatron_core(name, plan)
    dp, tp, ep, etp = lay
    assert core.get("expert_tensor_parallel_size", 1) == (tp if ep == 1 else etp) or not scaled(name).llm.experts
    check_megatron(core, _charged(name, plan), scaled(name).llm)


@pytest.mark.parametrize("name,lay", MTP_CASES, ids=MTP_IDS)
def test_megatron_model_with_latent_attention_and_mtp_holds_what_the_plan_charged(name, lay):
    """DeepSeek-V3 (scaled) with its multi-token prediction module on the last stage: megatron-core's
    ``MLATransformerConfig`` from the export's latent widths, and its MTP block (built by
    ``get_gpt_mtp_block_spec`` where the export's layout puts the ``m``: the projection, norms, one MoE block
    and the embedding copy megatron-core keeps on an MTP stage) hold what the plan charged each stage."""
    plan = _plan(name, lay)
    core = _megatron_core(name, plan)
    llm = _spec(name).llm
    assert core["multi_latent_attention"] and core["mtp_num_layers"] == 1
    assert (core["q_lora_rank"], core["kv_lora_rank"], core["qk_head_dim"], core["qk_pos_emb_head_dim"],
            core["v_head_dim"]) == (llm.q_lora_rank, llm.kv_lora_rank, llm.d_head, llm.rope_head_dim, llm.v_dim)
    check_megatron(core, _charged(name, plan), llm)


LATENT_FIELDS = ("multi_latent_attention", "qk_layernorm", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
                 "qk_pos_emb_head_dim", "v_head_dim")


def test_megatron_check_fails_without_the_latent_attention_flags():
    """The check can fail: the export's settings without the latent-attention fields build standard attention
    (megatron-core's ``TransformerConfig``), 2.8-4 % off what the plan charged each stage at tp 2 (at tp 1 the two
    attentions happen to be within 1 % of each other at the scaled widths, so tp 2 is the case that tells)."""
    name = f"deepseek-v3{MTP}"
    plan = _plan(name, (2, 2, 2, 1))
    core = {k: v for k, v in _megatron_core(name, plan).items() if k not in LATENT_FIELDS}
    with pytest.raises(AssertionError, match="megatron-core"):
        check_megatron(core, _charged(name, plan), _spec(name).llm)


def test_megatron_check_fails_without_the_mtp_module():
    """The check can fail: the export's settings without ``mtp_num_layers`` (and without the ``m`` of the layout)
    build no MTP block, and the last stage holds less than the plan charged it."""
    name = f"deepseek-v3{MTP}"
    plan = _plan(name, (2, 2, 2, 1))
    core = dict(_megatron_core(name, plan))
    core.pop("mtp_num_layers")
    core["pipeline_model_parallel_layout"] = core["pipeline_model_parallel_layout"].replace("m", "")
    with pytest.raises(AssertionError, match="stage 1"):
        check_megatron(core, _charged(name, plan), _spec(name).llm)


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_megatron_check_fails_when_the_export_writes_etp_1_for_experts_charged_sharded_by_tp(name):
    plan = _plan(name, (2, 2, 1, 1))  # ep 1 on tp 2: the plan holds each expert over the 2 TP ranks
    core = dict(_megatron_core(name, plan), expert_tensor_parallel_size=1)
    with pytest.raises(AssertionError, match="expert parameters"):
        check_megatron(core, _charged(name, plan), scaled(name).llm)



VIT_CASES = [(n, m.name) for n in PRESETS for m in scaled(n).modules if m.kind == "vit"]


def megatron_vit_block_params(vit: ModuleSpec, tp: int) -> int:
    """Parameters one rank holds of one ViT block of ``vit`` built by megatron-core (its ViT layer spec, the
    block Megatron-LM's vision encoders stack) under tensor parallelism ``tp`` on a fake world of 8 ranks."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.models.vision.vit_layer_specs import get_vit_layer_with_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.spec_utils import build_module
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    try:
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, create_gloo_process_groups=False)
        cfg = TransformerConfig(
            num_layers=1, hidden_size=vit.hidden, num_attention_heads=vit.heads, ffn_hidden_size=vit.ffn,
            tensor_model_parallel_size=tp, gated_linear_unit=vit.gated, add_bias_linear=vit.bias,
            add_qkv_bias=bool(vit.bias if vit.qkv_bias is None else vit.qkv_bias),
            normalization="RMSNorm" if vit.norm == "rmsnorm" else "LayerNorm", use_cpu_initialization=True,
            perform_initialization=False, pipeline_dtype=torch.float32)
        layer = build_module(get_vit_layer_with_local_spec(), config=cfg, layer_number=1)
        return sum(p.numel() for p in layer.parameters())
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def _vit_block_charged(name: str, vit: str, dp: int, tp: int) -> float:
    """Parameters the plan charged one rank for the vision tower's second block (no embedding or final norm)."""
    problem, opts = _problem(name), CostOptions.from_mapping(OPTIONS)
    k = [layer.name for layer in problem.layers].index(f"{vit}.1")
    frozen = any(p.frozen for p in model_layers(scaled(name), opts)[k].pieces)
    return problem.layers[k].costs[Layout(dp, tp, "", 1, 1, 1)].weight_bytes / weight_bytes_per_param(
        frozen, dp, Knobs(0, "none"), opts)


@pytest.mark.parametrize("name,vit", VIT_CASES, ids=[f"{n}-{v}" for n, v in VIT_CASES])
def test_megatron_vit_block_holds_what_the_plan_charged(name, vit):
    """Megatron-LM runs the vision encoder on the first stage at the language model's tp: one block per rank
    within 1 % of the charge (the remainder: norms and row-parallel biases whole on every TP rank, which the
    cost model divides by tp; layer scales and InternViT's QK norms are not in Megatron's generic ViT block)."""
    spec = next(m for m in scaled(name).modules if m.name == vit)
    assert megatron_vit_block_params(spec, 2) == pytest.approx(_vit_block_charged(name, vit, 2, 2), rel=0.01)


def test_megatron_vit_block_check_fails_when_built_without_the_planned_tp():
    spec = next(m for m in scaled("llava-1.5-7b").modules if m.kind == "vit")
    assert megatron_vit_block_params(spec, 1) != pytest.approx(_vit_block_charged("llava-1.5-7b", "vision", 2, 2),
                                                               rel=0.01)


REAL_OPTIONS = {"ep_degrees": (2, 4), "etp_degrees": (1, 2)}  # the default knobs (ZeRO-1 offered), EP up to 4


@lru_cache(maxsize=None)
def _real(name: str):
    """``partitioner plan --target megatron`` of the scaled preset on one 8-GPU node (1F1B, at most 2 stages)."""
    result = plan_model(_spec(name), "dgx-h100", nodes=1, global_batch=GLOBAL_BATCH, microbatches=MICROBATCHES,
                        target="megatron", schedule="1f1b", max_stages=2, options=REAL_OPTIONS)
    assert result.plan is not None, result.message
    return result


def _real_charged_bytes(result) -> list[float]:
    """Per stage of a planned result, the language model's weight bytes the plan charged one rank (tied copy once)."""
    problem, out = result.problem, []
    for stage in result.plan.stages:
        lays = _segments(problem, stage)
        total = 0.0
        for k in stage.layers:
            layer, cost = problem.layers[k], problem.layers[k].costs[lays[k]]
            if layer.module.startswith("llm"):
                tied = layer.tied_to is not None and stage.first_layer <= layer.tied_to
                total += cost.weight_bytes - (cost.tied_weight_bytes if tied else 0)
        out.append(total)
    return out


@pytest.mark.slow  # plans each preset (~1 s) and builds its stages' models
@pytest.mark.parametrize("name", [n for n in PRESETS if n not in NOT_GPT] + [f"deepseek-v3{MTP}"])
def test_megatron_model_of_a_real_plan_holds_the_weight_bytes_it_charged(name):
    """A real ``plan --target megatron`` (its ZeRO stage, EP and ETP as chosen): each stage's first rank of the
    exported Megatron-LM model holds the weight bytes the plan charged its language-model layers, within 1 %:
    dense parameters with their optimizer states over Megatron's data-parallel group, routed experts' over its
    expert-data-parallel group (the distributed optimizer's groups), at the plan's bytes per parameter."""
    check_real_megatron(name, _real(name))


def check_real_megatron(name: str, result, expert_group: str = "edp") -> None:
    """Each stage's first rank holds the language-model weight bytes ``result`` (a plan of preset ``name``,
    scaled) charged (AssertionError naming the stage); ``expert_group`` names the Megatron group whose size
    shards the experts' optimizer states."""
    exp = export_result(result, "megatron")
    assert exp.expressible and exp.settings["path"] == "megatron-lm", exp.reasons
    core, opts = exp.settings["transformer_config"], CostOptions.from_mapping(REAL_OPTIONS)
    llm = _spec(name).llm
    world = sum(s.devices for s in result.plan.stages)
    for s, (stage, want) in enumerate(zip(result.plan.stages, _real_charged_bytes(result))):
        built = megatron_params(core, min(stage.device_ids), llm, world)
        knobs = parse_variant(stage.variant)
        got = ((built.params - built.experts) * weight_bytes_per_param(False, built.dp, knobs, opts)
               + built.experts * weight_bytes_per_param(False, getattr(built, expert_group), knobs, opts))
        assert got == pytest.approx(want, rel=0.01), \
            f"stage {s} ({stage.dp}x{stage.tp} ep {stage.ep} etp {stage.etp} {stage.variant}): megatron-core {got} B, the plan {want} B"


@pytest.mark.slow
def test_real_plan_check_fails_when_expert_optimizer_states_are_sharded_over_the_dense_dp():
    """deepseek-v3's real plan puts ep 4 on dp 4 with ZeRO-1: its experts' optimizer states are sharded over the
    expert-data-parallel group (size 1), not dp 4; reading them over dp 4 misses bytes the plan charged."""
    result = _real("deepseek-v3")
    assert any(s.ep > 1 and s.ep * s.etp == s.dp * s.tp and "zero1" in s.variant for s in result.plan.stages)
    with pytest.raises(AssertionError, match="megatron-core"):
        check_real_megatron("deepseek-v3", result, expert_group="dp")

# --------------------------------------------------------------------------- DeepSpeed

DS_HELPER = Path(__file__).with_name("ds_experts.py")
MOE_CASES = [c for c in CASES if c[0] in MOE_PRESETS]
MOE_IDS = [i for c, i in zip(CASES, CASE_IDS) if c[0] in MOE_PRESETS]


def _ds_job(job_id: str, name: str, lay: tuple[int, int, int, int], moe: dict) -> dict:
    dp, tp, _, _ = lay
    llm = scaled(name).llm
    return {"id": job_id, "world": WORLD, "pp": 2, "tp": tp, "dp": dp, "hidden": llm.hidden, "moe_ffn": llm.moe_ffn,
            "moe": moe}


@pytest.fixture(scope="module")
def deepspeed_built(tmp_path_factory):
    """DeepSpeed's experts per MoE layer on rank 0 for every expressible MoE export (one subprocess), the reasons
    of the refused ones, and each preset's ep 1 tp 2 export without expert tensor parallelism (``old-<preset>``)."""
    jobs, refused = [], {}
    for (name, lay), case_id in zip(MOE_CASES, MOE_IDS):
        exp = _exported(name, _plan(name, lay), "deepspeed")
        if not exp.expressible:
            refused[case_id] = exp.reasons
            continue
        jobs.append(_ds_job(case_id, name, lay, exp.settings["moe"]))
        if lay == (2, 2, 1, 1):
            assert exp.settings["moe"]["enable_expert_tensor_parallelism"], exp.settings["moe"]
            jobs.append(_ds_job(f"old-{name}", name, lay, dict(exp.settings["moe"], enable_expert_tensor_parallelism=False)))
    path = tmp_path_factory.mktemp("ds_experts") / "jobs.json"
    path.write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(DS_HELPER), str(path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {r["id"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}, refused


def check_deepspeed(ds: dict, charged: list[Charged], experts: int, ep: int) -> None:
    """DeepSpeed's local experts x one expert's shard, per MoE layer of each stage, are the routed parameters the plan
    charged the stage's ranks (AssertionError naming the stage if not)."""
    assert ds["local_experts"] == experts // ep, ds
    for s, want in enumerate(charged):
        assert ds["expert_params"] * want.moe_layers == pytest.approx(want.experts, abs=0.5), \
            f"stage {s}: DeepSpeed holds {ds['expert_params'] * want.moe_layers} expert parameters, the plan {want.experts}"


@pytest.mark.slow  # one subprocess builds every case's model: ~10-20 s on 2 cores
@pytest.mark.parametrize("name,lay", MOE_CASES, ids=MOE_IDS)
def test_deepspeed_moe_holds_the_experts_the_plan_charged(deepspeed_built, name, lay):
    built, refused = deepspeed_built
    case_id = MOE_IDS[MOE_CASES.index((name, lay))]
    dp, tp, ep, etp = lay
    if case_id in refused:  # DeepSpeed's expert groups split the data-parallel ranks: ep must divide dp
        assert any("does not divide dp" in r for r in refused[case_id]), refused[case_id]
        return
    check_deepspeed(built[case_id], _charged(name, _plan(name, lay)), scaled(name).llm.experts, ep)


@pytest.mark.slow  # one subprocess builds every case's model: ~10-20 s on 2 cores
@pytest.mark.parametrize("name", MOE_PRESETS)
def test_deepspeed_check_fails_without_expert_tensor_parallelism_for_experts_charged_sharded_by_tp(deepspeed_built,
                                                                                                  name):
    built, _ = deepspeed_built
    assert built[f"old-{name}"]["expert_tp"] == 1
    with pytest.raises(AssertionError, match="expert parameters"):
        check_deepspeed(built[f"old-{name}"], _charged(name, _plan(name, (2, 2, 1, 1))), scaled(name).llm.experts, 1)


# --------------------------------------------------------------------------- torchtitan

TITAN_HELPER = Path(__file__).with_name("titan_ranks.py")


def titan_family(llm: ModuleSpec) -> str | None:
    """torchtitan 0.3's model family whose layers are the preset's decoder layers, or None when none has them:
    ``deepseek_v3`` (MLA, shared experts, dense first layers), ``qwen3`` MoE (every layer MoE, QK norms, no
    shared experts), ``llama3`` (dense, gated SiLU, no biases, no QK norms, untied)."""
    plain = not llm.bias and not llm.qkv_bias and llm.norm == "rmsnorm" and llm.gated and llm.activation == "silu"
    if llm.mla and plain:
        return "deepseek_v3"
    if llm.experts and plain and llm.qk_norm and not llm.shared_ffn and not llm.first_dense and llm.moe_every == 1:
        return "qwen3"
    if not llm.experts and plain and not llm.qk_norm and not llm.tie_embeddings:
        return "llama3"
    return None


TITAN = [c for c in CASES if titan_family(scaled(c[0]).llm) is not None and c[0] not in NOT_GPT]
TITAN_IDS = [i for c, i in zip(CASES, CASE_IDS) if c in TITAN]
NO_TITAN_MODEL = sorted({n for n, _ in CASES} - {n for n, _ in TITAN})


def titan_vit(vit: ModuleSpec) -> bool:
    """Whether torchtitan's common vision block (LayerNorms with biases, a GELU MLP, no layer scale) is the tower's."""
    return vit.norm == "layernorm" and not vit.gated and not vit.layerscale and not vit.qk_norm and \
        vit.activation in ("gelu", "gelu_tanh", "quick_gelu")


TITAN_VIT = [(n, v) for n, v in VIT_CASES if titan_vit(next(m for m in scaled(n).modules if m.name == v))]


def _titan_job(job_id: str, name: str, settings: dict) -> dict:
    llm = scaled(name).llm
    fields = {k: getattr(llm, k) for k in ("hidden", "heads", "ffn", "layers", "vocab", "experts", "top_k", "moe_ffn",
                                           "shared_ffn", "first_dense", "q_lora_rank", "kv_lora_rank", "rope_head_dim",
                                           "router_score")}
    fields.update(kv_heads=llm.n_kv_heads, head_dim=llm.d_head, v_head_dim=llm.v_dim)
    return {"id": job_id, "family": titan_family(llm), "llm": fields, "parallelism": settings["config"]["parallelism"],
            "parts": settings["module_fqns_per_model_part"]}


@pytest.fixture(scope="module")
def titan_built(tmp_path_factory):
    """What rank 0 of each stage of torchtitan's model holds, per expressible export (one subprocess); the reasons of
    the refused ones; and (``wrong-<preset>``) the ep 2 etp 1 export's mesh for a MoE preset's ep 2 etp 2 plan."""
    jobs, refused = [], {}
    for (name, lay), case_id in zip(TITAN, TITAN_IDS):
        exp = _exported(name, _plan(name, lay), "torchtitan")
        if not exp.expressible:
            refused[case_id] = exp.reasons
            continue
        jobs.append(_titan_job(case_id, name, exp.settings))
        if lay == (2, 2, 2, 1):
            jobs.append(_titan_job(f"wrong-{name}", name, exp.settings))
    for name, vit in TITAN_VIT:  # one block at dp 2 x tp 2, as the first stage runs it
        m = next(m for m in scaled(name).modules if m.name == vit)
        jobs.append({"id": f"vit-{name}-{vit}", "family": "vit", "parts": [],
                     "llm": {"hidden": m.hidden, "heads": m.heads, "ffn": m.ffn, "bias": m.bias,
                             "qkv_bias": bool(m.bias if m.qkv_bias is None else m.qkv_bias)},
                     "parallelism": {"data_parallel_replicate_degree": 2, "tensor_parallel_degree": 2}})
    path = tmp_path_factory.mktemp("titan") / "jobs.json"
    path.write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(TITAN_HELPER), str(path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {r["id"]: r["stages"] for r in json.loads(proc.stdout.strip().splitlines()[-1])}, refused


def check_titan(stages: list[dict], charged: list[Charged]) -> None:
    """Each stage's rank 0 holds the language-model parameters the plan charged (of the modules the export names
    for it: no ``lm_head`` when the model has none), its routed experts exactly (AssertionError naming the stage)."""
    assert len(stages) == len(charged), (stages, charged)
    for s, (got, want) in enumerate(zip(stages, charged)):
        assert got["experts"] == pytest.approx(want.experts, abs=0.5), \
            f"stage {s}: torchtitan holds {got['experts']} expert parameters, the plan {want.experts}"
        assert got["params"] == pytest.approx(want.llm, rel=0.01), f"stage {s}: torchtitan {got['params']}, the plan {want.llm}"


@pytest.mark.slow  # one subprocess builds every case's model: ~10-20 s on 2 cores
@pytest.mark.parametrize("name,lay", TITAN, ids=TITAN_IDS)
def test_torchtitan_model_holds_what_the_plan_charged_or_the_export_refuses(titan_built, name, lay):
    built, refused = titan_built
    case_id = TITAN_IDS[TITAN.index((name, lay))]
    dp, tp, ep, etp = lay
    if ep > 1 and etp > 1:  # torchtitan 0.3 holds experts whole under EP (its sparse placement has no TP axis)
        assert any("torchtitan 0.3 splits them over 1" in r for r in refused[case_id]), refused.get(case_id)
        return
    if ep > 1 and tp == 1:  # torchtitan takes the EP ranks from dp_shard x cp x tp; ZeRO-0 replicates over dp
        assert any("does not divide dp_shard" in r for r in refused[case_id]), refused.get(case_id)
        return
    assert case_id not in refused, refused[case_id]
    check_titan(built[case_id], _charged(name, _plan(name, lay)))


@pytest.mark.slow  # one subprocess builds every case's model: ~10-20 s on 2 cores
@pytest.mark.parametrize("name", [n for n in MOE_PRESETS if any(c[0] == n for c in TITAN)])
def test_torchtitan_check_fails_for_experts_charged_split_over_etp(titan_built, name):
    """Why ep 2 etp 2 is refused: torchtitan's mesh for ep 2 on tp 2 holds each expert whole, the plan charged
    it split over etp 2, and the check catches the difference."""
    built, _ = titan_built
    with pytest.raises(AssertionError, match="expert parameters"):
        check_titan(built[f"wrong-{name}"], _charged(name, _plan(name, (2, 2, 2, 2))))


def test_presets_without_a_torchtitan_model_family_are_named():
    """The presets whose decoder no torchtitan 0.3 family builds (QKV biases, GLM's shared experts, pi0's fused
    action expert): their torchtitan export is not checked here, and the list says which."""
    assert NO_TITAN_MODEL == ["glm-4.5v", "pi0", "qwen2-vl-72b", "qwen2-vl-7b", "qwen2-vl-7b-video", "qwen2.5-vl-72b",
                              "qwen2.5-vl-7b-video-64f"]


@pytest.mark.slow  # in the torchtitan subprocess
@pytest.mark.parametrize("name,vit", TITAN_VIT, ids=[f"{n}-{v}" for n, v in TITAN_VIT])
def test_torchtitan_vit_block_holds_what_the_plan_charged(titan_built, name, vit):
    """torchtitan's common vision block at tp 2 holds the block's charge within 1 % (norms and the row-parallel
    biases stay whole on every TP rank, ``vision_scaled_bias_rowwise_config``; the cost model divides them)."""
    built, _ = titan_built
    assert built[f"vit-{name}-{vit}"][0]["params"] == pytest.approx(_vit_block_charged(name, vit, 2, 2), rel=0.01)
