"""FP8 training in the cost model (issue 34): the option's door, what stays BF16, the FP8 rate, the casts,
the amax reductions, the fp8 weight copies and the fp8-saved activations, each against its closed form."""
from __future__ import annotations

import dataclasses
import math

import pytest

from partitioner.costs import CostOptions, Knobs, block_time_terms, build_problem, load_cluster, model_layers
from partitioner.costs.compute.fp8 import FP8_RECIPES, RECIPES, fp8_gemm_efficiency, fp8_problem, gpu_capability
from partitioner.costs.compute.precision import (
    block_quant_bytes,
    cast_bytes,
    fp8_activation_delta,
    fp8_weight_extra_bytes,
    fp8_weight_params,
    param_gather,
)
from partitioner.costs.entry import layer_cost, layer_terms
from partitioner.costs.memory.activations import block_activation_bytes
from partitioner.presets import ModelSpec, ModuleSpec, load_model
from partitioner.problem import Layout, ProblemError

H100, B200, A100 = load_cluster("dgx-h100"), load_cluster("dgx-b200"), load_cluster("dgx-a100-80g")
FP8 = CostOptions.from_mapping({"precision": "fp8"})
BF16 = CostOptions()


def llama(layers: int = 4, h: int = 4096, ffn: int = 14336, s: int = 4096) -> ModelSpec:
    llm = ModuleSpec(name="llm", kind="llm", layers=layers, hidden=h, heads=32, kv_heads=8, ffn=ffn, gated=True,
                     norm="rmsnorm", activation="silu", vocab=128256, text_tokens=s)
    return ModelSpec("llama", (llm,))


def moe(layers: int = 3) -> ModelSpec:
    llm = ModuleSpec(name="llm", kind="llm", layers=layers, hidden=2048, heads=16, kv_heads=4, ffn=6144, gated=True,
                     norm="rmsnorm", activation="silu", vocab=32000, text_tokens=4096, experts=64, top_k=4,
                     moe_ffn=768, shared_ffn=768, first_dense=1)
    return ModelSpec("moe", (llm,))


def layer(role: str, opts: CostOptions, model: ModelSpec | None = None, index: int = 0):
    return [la for la in model_layers(model or llama(), opts) if la.role == role][index]


# --------------------------------------------------------------------------- the door


@pytest.mark.parametrize("options, field", [
    ({"precision": "fp16"}, "options.precision"),
    ({"precision": "fp8", "fp8_recipe": "nvfp4"}, "options.fp8_recipe"),
    ({"fp8_recipe": "mxfp8"}, "options.fp8_recipe"),  # an FP8 field without precision fp8
    ({"precision": "bf16", "fp8_param_gather": True}, "options.fp8_param_gather"),
    ({"precision": "fp8", "fp8_param_gather": "yes"}, "options.fp8_param_gather"),
    ({"precision": "fp8", "fp8_bf16_layers": -1}, "options.fp8_bf16_layers"),
    ({"precision": "fp8", "fp8_bf16_layers": 1, "fp8_recipe": "delayed"}, "options.fp8_bf16_layers"),
    ({"precision": "fp8", "fp8_gemm_efficiency": 1.5}, "options.fp8_gemm_efficiency"),
])
def test_bad_precision_options_name_their_field(options, field):
    with pytest.raises(ProblemError) as err:
        CostOptions.from_mapping(options)
    assert err.value.path == field


def test_bf16_options_write_no_fp8_field_and_fp8_options_round_trip():
    """A BF16 problem's meta.options is what it was before FP8 existed; an FP8 one reads back the same."""
    assert CostOptions.from_mapping({"precision": "bf16"}).to_dict() == BF16.to_dict()
    assert not {"precision", "fp8_recipe", "fp8_param_gather"} & set(BF16.to_dict())
    opts = CostOptions.from_mapping({"precision": "fp8", "fp8_recipe": "blockwise", "fp8_bf16_layers": 2})
    assert CostOptions.from_mapping(opts.to_dict()) == opts


def test_recipes_run_where_transformer_engine_runs_them():
    """TE's support checks: FP8 from compute capability 8.9, block scaling from 9.0, MXFP8 on 10.x (Blackwell)."""
    assert gpu_capability(H100) == (9, 0) and gpu_capability(B200) == (10, 0) and gpu_capability(A100) == (8, 0)
    assert gpu_capability(load_cluster("gb200-nvl72")) == (10, 0)
    for recipe in FP8_RECIPES:
        assert fp8_problem(recipe, B200) is None
        assert (fp8_problem(recipe, H100) is None) == (recipe != "mxfp8")
        assert "peak_tflops_fp8" in (fp8_problem(recipe, A100) or "")  # Ampere: no FP8 tensor cores
    unknown = dataclasses.replace(H100, gpu="some accelerator")
    assert fp8_problem("tensorwise", unknown) is None and "not one whose capability is known" in fp8_problem("mxfp8", unknown)


@pytest.mark.parametrize("cluster, bf16, fp8", [("dgx-h100", 794.5, 1402.6), ("dgx-b200", 1745.0, 3432.5)])
def test_fp8_gemm_ratio_is_the_measured_matmul_ceilings(cluster, bf16, fp8):
    """The ratio of the two fractions of peak the fastest dense matmul reaches (ml-engineering's MAMF table)."""
    c = load_cluster(cluster)
    assert fp8_gemm_efficiency(c) == pytest.approx((fp8 / c.peak_tflops_fp8) / (bf16 / c.peak_tflops), rel=1e-3)


@pytest.mark.parametrize("cluster, recipe, field", [("dgx-h100", "mxfp8", "options.fp8_recipe"),
                                                    ("dgx-a100-80g", "tensorwise", "options.precision")])
def test_build_refuses_a_recipe_the_gpus_cannot_run(cluster, recipe, field):
    with pytest.raises(ProblemError) as err:
        build_problem(llama(2), cluster, nodes=1, global_batch=8, microbatches=8,
                      options={"precision": "fp8", "fp8_recipe": recipe})
    assert err.value.path == field


def test_bf16_problem_unchanged_by_an_explicit_bf16():
    a = build_problem(llama(2), "dgx-h100", nodes=1, global_batch=16, microbatches=4)
    b = build_problem(llama(2), "dgx-h100", nodes=1, global_batch=16, microbatches=4, options={"precision": "bf16"})
    assert a.to_dict() == b.to_dict() and "precision" not in a.meta


def test_fp8_problem_says_its_precision():
    p = build_problem(llama(2), "dgx-h100", nodes=1, global_batch=16, microbatches=4,
                      options={"precision": "fp8", "variants": ["all"]})
    assert p.meta["precision"]["fp8_recipe"] == "tensorwise" and p.meta["options"]["precision"] == "fp8"
    assert all("FP8" in text for text in p.variants.values())


# --------------------------------------------------------------------------- what stays BF16


def test_block_parameters_outside_the_linears_are_the_bf16_ones():
    """A Llama block: only its two RMSNorm weights are outside its linear layers."""
    p = layer("decoder", BF16).pieces[0]
    assert p.bf16_params == 2 * 4096 and p.bf16_gemm_flops == 0.0
    assert fp8_weight_params(p) == 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336


def test_moe_router_stays_bf16():
    p = layer("decoder", BF16, moe(), index=1).pieces[0]
    assert p.moe is not None
    assert p.bf16_gemm_flops == 2.0 * 4096 * 2048 * 64  # the router's hidden x experts matmul
    assert p.bf16_params == 2 * 2048 + 2048 * 64  # norms and the router; every expert's weights are FP8 linears


def test_embedding_head_and_edge_layers_stay_bf16():
    opts = CostOptions.from_mapping({"precision": "fp8", "fp8_bf16_layers": 1})
    decoders = [la for la in model_layers(llama(4), opts) if la.role == "decoder"]
    assert [la.pieces[0].bf16_gemm_flops == la.pieces[0].gemm_flops for la in decoders] == [True, False, False, True]
    for role in ("embedding", "loss"):
        la = layer(role, FP8)
        bf = layer_terms(layer(role, BF16).pieces, 1, 2.0, "none", H100, BF16)
        assert layer_terms(la.pieces, 1, 2.0, "none", H100, FP8) == bf  # the same entry, every term
    edge = layer_terms(decoders[0].pieces, 2, 1.0, "none", H100, opts)
    assert edge == layer_terms(layer("decoder", BF16).pieces, 2, 1.0, "none", H100, BF16)


# --------------------------------------------------------------------------- time


def test_fp8_gemm_runs_at_the_fp8_peak_times_the_measured_ratio():
    """The weighted matmuls: BF16 time x peak_bf16 / (peak_fp8 x ratio); the attention core unchanged."""
    pieces_b, pieces_f = layer("decoder", BF16).pieces, layer("decoder", FP8).pieces
    for cluster in (H100, B200):
        tb = block_time_terms(pieces_b, 2, 1.0, "none", cluster, BF16)
        tf = block_time_terms(pieces_f, 2, 1.0, "none", cluster, FP8)
        speed = cluster.peak_tflops_fp8 / cluster.peak_tflops * fp8_gemm_efficiency(cluster)
        for term in ("fwd.gemm", "bwd.gemm", "wgrad.gemm"):
            assert tf[term] == pytest.approx(tb[term] / speed, rel=1e-12)
        for term in ("fwd.attention", "bwd.attention"):
            assert tf[term] == tb[term]
    opts = CostOptions.from_mapping({"precision": "fp8", "fp8_gemm_efficiency": 0.5})
    tb = block_time_terms(pieces_b, 1, 1.0, "none", H100, BF16)
    assert block_time_terms(pieces_f, 1, 1.0, "none", H100, opts)["fwd.gemm"] == pytest.approx(
        tb["fwd.gemm"] / (H100.peak_tflops_fp8 / H100.peak_tflops * 0.5))


def test_moe_block_blends_the_bf16_router_with_the_fp8_experts():
    p_b, p_f = layer("decoder", BF16, moe(), 1).pieces, layer("decoder", FP8, moe(), 1).pieces
    tb = block_time_terms(p_b, 1, 1.0, "none", H100, BF16)["fwd.gemm"]
    tf = block_time_terms(p_f, 1, 1.0, "none", H100, FP8)["fwd.gemm"]
    share = 1.0 - p_f[0].bf16_gemm_flops / p_f[0].gemm_flops
    speed = H100.peak_tflops_fp8 / H100.peak_tflops * fp8_gemm_efficiency(H100)
    assert tf == pytest.approx(tb * (share / speed + 1.0 - share), rel=1e-12)


def test_casts_are_memory_bound_bytes_of_each_fp8_operand():
    """Forward: QKV, projection, fc1, fc2 inputs; backward: their output gradients; each read in BF16, written as
    two fp8 copies, once more read for the amax under current scaling (tensorwise)."""
    p = layer("decoder", FP8).pieces[0]
    s, h, t, b = 4096.0, 4096, 2, 1.0
    inputs = 2 * s * h / t + s * 32 * 128 / t + s * 14336 / t
    grads = s * (32 + 2 * 8) * 128 / t + 2 * s * h / t + 2 * s * 14336 / t
    per = 2 + 2 * 1 + 2  # read bf16, write two fp8 copies, amax pass
    assert block_quant_bytes(p, b, t, FP8, H100) == pytest.approx((inputs * per, grads * per))
    delayed = CostOptions.from_mapping({"precision": "fp8", "fp8_recipe": "delayed"})
    assert block_quant_bytes(p, b, t, delayed, H100) == pytest.approx((inputs * 4, grads * 4))
    mx = CostOptions.from_mapping({"precision": "fp8", "fp8_recipe": "mxfp8"})
    assert block_quant_bytes(p, b, t, mx, B200)[0] == pytest.approx(inputs * (2 + 2 * (1 + 1 / 32)))
    # Blackwell takes any FP8 GEMM layout: a per-tensor cast writes one copy (TE makes no transpose there)
    assert block_quant_bytes(p, b, t, delayed, B200) == pytest.approx((inputs * 3, grads * 3))
    tb = block_time_terms(layer("decoder", BF16).pieces, t, b, "none", H100, BF16)
    tf = block_time_terms([p], t, b, "none", H100, FP8)
    hbm = H100.hbm_GBps * 1e6 * CostOptions().hbm_efficiency
    assert tf["fwd.memory"] - tb["fwd.memory"] == pytest.approx(inputs * per / hbm)
    assert tf["bwd.memory"] - tb["bwd.memory"] == pytest.approx(grads * per / hbm)


def test_sequence_parallel_all_gathers_move_fp8_and_current_scaling_reduces_amaxes():
    """Under SP half of each TP collective is an fp8 all-gather; tensorwise adds 2 + 2 one-float all-reduces."""
    from partitioner.costs.comm import allreduce_ms

    pb, pf = layer("decoder", BF16).pieces, layer("decoder", FP8).pieces
    t, b = 4, 1.0
    rows = b * 4096 * 4096
    latency = allreduce_ms(4.0, t, H100.intra_node_GBps, BF16)
    bf_comm = 2 * allreduce_ms(rows * 2, t, H100.intra_node_GBps, BF16)
    f8_comm = 2 * allreduce_ms(rows * 1.5, t, H100.intra_node_GBps, BF16)
    tb = block_time_terms(pb, t, b, "none", H100, BF16)
    assert tb["fwd.tp_comm"] == pytest.approx(bf_comm)
    assert block_time_terms(pf, t, b, "none", H100, FP8)["fwd.tp_comm"] == pytest.approx(f8_comm + 2 * latency)
    delayed = CostOptions.from_mapping({"precision": "fp8", "fp8_recipe": "delayed"})
    assert block_time_terms(pf, t, b, "none", H100, delayed)["fwd.tp_comm"] == pytest.approx(f8_comm)
    rowwise = CostOptions.from_mapping({"precision": "fp8", "fp8_recipe": "rowwise"})  # torchtitan: TP gathers in BF16
    assert block_time_terms(pf, t, b, "none", H100, rowwise)["fwd.tp_comm"] == pytest.approx(bf_comm)
    no_sp = CostOptions.from_mapping({"precision": "fp8", "sequence_parallel": False})
    no_sp_bf = CostOptions.from_mapping({"sequence_parallel": False})
    assert block_time_terms(pf, t, b, "none", H100, no_sp)["fwd.tp_comm"] == pytest.approx(
        block_time_terms(pb, t, b, "none", H100, no_sp_bf)["fwd.tp_comm"])


def test_weights_cast_once_per_iteration_unless_torchao():
    """TE caches the fp8 weight across microbatches: its cast is spread over m; torchao's rowwise casts per pass."""
    la_b, la_f = layer("decoder", BF16), layer("decoder", FP8)
    lay = Layout(1, 1)
    nograd = CostOptions.from_mapping({"precision": "fp8", "fp8_param_gather": False})
    rowwise = CostOptions.from_mapping({"precision": "fp8", "fp8_recipe": "rowwise"})
    w = fp8_weight_params(la_f.pieces[0])
    hbm = H100.hbm_GBps * 1e6 * CostOptions().hbm_efficiency
    for opts, per in ((FP8, 2.0), (nograd, cast_bytes(RECIPES["tensorwise"], 2, weight=True))):
        one = layer_cost(la_f, lay, 1.0, H100, opts, microbatches=1)
        eight = layer_cost(la_f, lay, 1.0, H100, opts, microbatches=8)
        assert one.fwd_ms - eight.fwd_ms == pytest.approx(w * per / hbm * (1 - 1 / 8))
    quant = block_quant_bytes(la_f.pieces[0], 1.0, 1, rowwise, H100)
    plain = block_quant_bytes(la_f.pieces[0], 1.0, 1, dataclasses.replace(rowwise, fp8_recipe="tensorwise"), H100)
    assert quant[0] - plain[0] == pytest.approx(w * cast_bytes(RECIPES["rowwise"], 1, weight=True))
    assert la_b.pieces[0].params == la_f.pieces[0].params


def test_fp8_is_faster_on_a_large_block_and_the_embedding_is_not_touched():
    p = build_problem(llama(2), "dgx-h100", nodes=1, global_batch=16, microbatches=8)
    f = build_problem(llama(2), "dgx-h100", nodes=1, global_batch=16, microbatches=8, options={"precision": "fp8"})
    for lb, lf in zip(p.layers, f.layers):
        for key, eb in lb.costs.items():
            ef = lf.costs[key]
            if lb.name.startswith("llm.") and lb.name[4:].isdigit():
                assert ef.fwd_ms < eb.fwd_ms and ef.bwd_ms < eb.bwd_ms
            else:
                assert ef == eb


# --------------------------------------------------------------------------- memory


def test_saved_activations_keep_fp8_copies_of_the_linear_inputs():
    la = layer("decoder", FP8)
    p = la.pieces[0]
    s, h, a, d, f, t, b = 4096.0, 4096, 32, 128, 14336, 2, 1.0
    want = -(2 - 1) * (2 * s * h / t + s * f / t) + 1 * s * a * d / t  # QKV, MLP, fc2 inputs halve; the
    assert fp8_activation_delta(p, b, t, FP8, "none") == pytest.approx(want)  # projection's gains an fp8 copy
    bf = block_activation_bytes(p.shape, b, t, flash_attention=True, sequence_parallel=True)
    assert layer_terms(la.pieces, t, b, "none", H100, FP8)[3] == pytest.approx(bf + want)
    assert fp8_activation_delta(p, b, t, FP8, "full") == 0.0  # full recompute keeps the BF16 block input only
    mx = CostOptions.from_mapping({"precision": "fp8", "fp8_recipe": "mxfp8"})
    q = 1 + 1 / 32
    assert fp8_activation_delta(p, b, t, mx, "none") == pytest.approx(
        -(2 - q) * (2 * s * h / t + s * f / t) + q * s * a * d / t)


@pytest.mark.parametrize("cluster, recipe, gather, extra", [
    (H100, "tensorwise", None, 0.0), (H100, "tensorwise", False, 2.0), (H100, "blockwise", None, 2 * (1 + 4 / 128**2)),
    (H100, "delayed", None, 0.0), (H100, "rowwise", None, 0.0),
    (B200, "tensorwise", None, -1.0), (B200, "delayed", False, 1.0),  # Blackwell: no transpose for per-tensor scales
    (B200, "mxfp8", None, 2 * (1 + 1 / 32) - 2), (B200, "blockwise", False, 2 * (1 + 4 / 128**2))])
def test_fp8_weight_copies(cluster, recipe, gather, extra):
    """TE keeps an fp8 weight and its transpose (the weight alone where the GPU's FP8 GEMMs take any layout and
    the scale is per tensor); --fp8-param-gather drops the BF16 weight; torchao keeps none."""
    opts = CostOptions.from_mapping({"precision": "fp8", "fp8_recipe": recipe, "fp8_param_gather": gather})
    assert fp8_weight_extra_bytes(opts, cluster) == pytest.approx(extra)
    assert param_gather(opts) == (gather if gather is not None else recipe in ("tensorwise", "delayed", "mxfp8"))
    la = layer("decoder", opts)
    lay = Layout(2, 2, "zero1")
    knobs = Knobs(1, "none")
    eb = layer_cost(layer("decoder", BF16), lay, 1.0, cluster, BF16, knobs=knobs)
    ef = layer_cost(la, lay, 1.0, cluster, opts, knobs=knobs)
    assert ef.weight_bytes - eb.weight_bytes == pytest.approx(fp8_weight_params(la.pieces[0]) / 2 * extra, abs=2)


# --------------------------------------------------------------------------- experts under ep > 1


def test_routed_experts_run_fp8_and_keep_fp8_inputs():
    """Wide experts (h 4096, f 2048) on 8 samples of 4096 tokens: the grouped GEMMs gain more than the casts cost."""
    wide = ModelSpec("moe", (dataclasses.replace(moe().modules[0], hidden=4096, heads=32, kv_heads=8, moe_ffn=2048,
                                                 shared_ffn=0),))
    b = build_problem(wide, "dgx-h100", nodes=1, global_batch=64, microbatches=8, options={"ep_degrees": [4]})
    f = build_problem(wide, "dgx-h100", nodes=1, global_batch=64, microbatches=8,
                      options={"ep_degrees": [4], "precision": "fp8", "fp8_param_gather": False})
    key = next(k for k in b.layers[2].costs if str(k) == "dp8tp1ep4")
    eb, ef = b.layers[2].costs[key], f.layers[2].costs[key]
    assert ef.fwd_ms < eb.fwd_ms and ef.act_bytes < eb.act_bytes and ef.weight_bytes > eb.weight_bytes
    assert not math.isclose(ef.bwd_ms, eb.bwd_ms)


def test_every_preset_builds_in_fp8_on_hopper():
    for name in ("llava-1.5-7b", "qwen2-vl-7b", "pi0", "glm-4.5v", "deepseek-v3"):
        spec = load_model(name)
        p = build_problem(spec, "dgx-h100", nodes=2, global_batch=64, microbatches=8, options={"precision": "fp8"})
        assert p.meta["precision"]["precision"] == "fp8"


def test_mla_block_runs_its_projections_in_fp8_and_its_router_in_bf16():
    """DeepSeek-V3: the MLA down/up projections and the experts are FP8 linears; norms and the router are not."""
    spec = load_model("deepseek-v3")
    llm = next(m for m in spec.modules if m.kind == "llm")
    p = [la for la in model_layers(spec) if la.role == "decoder"][5].pieces[0]
    h = llm.hidden
    norms = 2 * h + llm.q_lora_rank + llm.kv_lora_rank  # input and post-attention norms, the two latent norms
    assert p.bf16_params == norms + h * llm.experts
    assert p.bf16_gemm_flops == 2.0 * p.tokens * h * llm.experts
