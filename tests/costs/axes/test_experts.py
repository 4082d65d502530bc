"""MoE and expert parallelism: Megatron's FLOPs, EDP, dispatch volume, weights + optimizer, tied embeddings."""
from __future__ import annotations

import argparse

import pytest

from partitioner.costs import CostOptions, forward_flops, model_layers
from partitioner.costs.axes.experts import (
    dispatch_buffer,
    ep_problem,
    expert_activation_bytes,
    expert_configs,
    expert_data_parallel,
    expert_gemm_shape,
    expert_grad_sync_ms,
    expert_rank_flops,
    expert_weight_bytes,
    moe_comm_ms,
    moe_layer_flops,
    routed_copies,
    routed_mlp_tensors,
    router_flops,
    tokens_per_rank,
)
from partitioner.costs.axes.groups import GroupSpan, group_span
from partitioner.costs.memory.tied import embedding_sync_ms, tied_copy_bytes
from partitioner.presets import ModelSpec, ModuleSpec, is_moe_layer, load_cluster

# Qwen3-VL-30B-A3B's text model (research note 4.1): 48 layers, h 2048, 128 experts, top-8, f 768
QWEN3_30B = ModuleSpec(name="llm", kind="llm", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn=6144,
                       gated=True, norm="rmsnorm", qk_norm=True, qk_norm_dim=128, vocab=151936, text_tokens=4096,
                       experts=128, top_k=8, moe_ffn=768, activation="silu")


def test_moe_flops_equal_megatron_moe_layer_flops():
    # Megatron: moe_layer_flops = 4 T h f k (3/2 if swiglu) + the same for the shared expert with f_s
    T, h, f, k, fs = 4096, 2048, 768, 8, 1408
    assert moe_layer_flops(T, h, f, k, fs, gated=True) == 4 * T * h * f * k * 1.5 + 4 * T * h * fs * 1.5
    assert moe_layer_flops(T, h, f, k, 0, gated=False) == 4 * T * h * f * k
    assert router_flops(T, h, 128) == 2 * T * h * 128
    # the layer model's MoE block: attention + router + the same routed and shared terms
    spec = ModuleSpec(**{**QWEN3_30B.__dict__, "shared_ffn": fs, "layers": 2})
    layers = model_layers(ModelSpec("m", (spec,)))
    block = layers[1].pieces[0]
    attn = 2.0 * T * (h * (spec.attn_dim + 2 * spec.kv_dim) + spec.attn_dim * h)
    assert block.gemm_flops == pytest.approx(attn + router_flops(T, h, 128) + moe_layer_flops(T, h, f, k, fs), rel=1e-12)
    assert forward_flops(layers[1:2]) == pytest.approx(block.gemm_flops + block.attn_flops)


def test_expert_rank_work_is_the_rank_tokens_share_whatever_ep():
    T = tokens_per_rank(samples=2, tokens=4096, tp=2, cp=2)
    assert T == 2048
    assert expert_rank_flops(T, 2048, 768, 8) == moe_layer_flops(T, 2048, 768, 8)
    assert expert_rank_flops(T, 2048, 768, 8, imbalance=1.25) == pytest.approx(1.25 * moe_layer_flops(T, 2048, 768, 8))
    rows, width = expert_gemm_shape(4096, 8, 128, ep=8, etp=1, moe_ffn=768)
    assert rows == 8 * 4096 * 8 / 128 and width == 768
    rows2, width2 = expert_gemm_shape(4096, 8, 128, ep=8, etp=2, moe_ffn=768)
    assert rows2 == 2 * rows and width2 == 384


def test_parameters_and_edp_of_the_published_layouts():
    # routed parameters: 3 h f E per layer
    assert 3 * 2048 * 768 * 128 * 48 == pytest.approx(28.99e9, rel=1e-3)  # Qwen3-VL-30B-A3B
    assert 3 * 4096 * 1536 * 128 * 94 == pytest.approx(227.1e9, rel=1e-3)  # Qwen3-VL-235B-A22B
    # Megatron-Bridge perf layouts: edp = 1
    # 256 GPUs, TP2 PP8 EP32 ETP1: a stage of 32 ranks, dp 16
    assert expert_data_parallel(dp=16, tp=2, cp=1, ep=32, etp=1) == 1
    # 16 GPUs, TP1 PP2 EP8 ETP1: a stage of 8, dp 8
    assert expert_data_parallel(dp=8, tp=1, cp=1, ep=8, etp=1) == 1
    # folding: CP 8 and EP 8 on the same 8 GPUs (Megatron's MoE README)
    assert expert_data_parallel(dp=1, tp=1, cp=8, ep=8) == 1
    assert expert_data_parallel(dp=4, tp=2, cp=2, ep=4, etp=2) == 2


def test_validation_cases():
    # TP4 PP1 EP32 with ETP = TP on 32 GPUs: etp*ep = 128 does not divide 32
    assert "128" in ep_problem(128, dp=8, tp=4, cp=1, ep=32, etp=4)
    assert ep_problem(128, dp=8, tp=4, cp=1, ep=32, etp=1) is None
    # ep = 3 with E = 128
    assert "ep=3" in ep_problem(128, dp=3, tp=1, cp=1, ep=3)
    with pytest.raises(ValueError):
        expert_data_parallel(dp=8, tp=4, cp=1, ep=32, etp=4)
    configs = expert_configs(128, dp=4, tp=2, cp=1, etp_degrees=(1, 2))
    assert (1, 1) in configs and (8, 1) in configs and (4, 2) in configs
    assert (8, 2) not in configs and (16, 1) not in configs  # 16 does not divide 8 devices
    assert all(128 % ep == 0 and 8 % (ep * etp) == 0 for ep, etp in configs)


def test_dispatch_volume_worked_example():
    # research note 3.2: s 4096, b 1, tp = cp = 1, ep 8, dropless: one a2a sends 7/8 x 4096 x 8 x 2048 x 2 B = 117.4 MB
    copies = routed_copies(4096, 8, 128)
    assert copies == 8 * 4096
    span = group_span(8, 1, 8, 8)
    # ideal links: no latency, NVLink and the NICs at their line rates
    opts = CostOptions.from_mapping({"collective_latency_us": 0.0, "nvlink_efficiency": 1.0,
                                     "alltoall_network_efficiency": 1.0})
    fwd, bwd = moe_comm_ms(copies, 2048, 8, 1, span, GroupSpan(1, 1), intra_GBps=450.0, inter_GBps=50.0, opts=opts,
                           probs_bytes=0.0)
    one = 7 / 8 * 4096 * 8 * 2048 * 2
    assert one == pytest.approx(117.4e6, rel=1e-3)
    assert fwd == pytest.approx(2 * one / 450e6) and bwd == pytest.approx(fwd)
    assert fwd + bwd == pytest.approx(1.04, rel=0.01)  # "four per layer per micro-batch give 1.04 ms on NVLink"
    # over two nodes the NIC part dominates; probabilities ride along with the dispatch
    span16 = group_span(16, 1, 16, 8)
    f16, b16 = moe_comm_ms(copies, 2048, 16, 1, span16, GroupSpan(1, 1), intra_GBps=450.0, inter_GBps=50.0, opts=opts,
                           probs_bytes=4.0)
    assert b16 == pytest.approx(2 * 8 / 16 * dispatch_buffer(copies, 2048) / 50e6)
    assert f16 > b16
    # ETP adds an all-gather and a reduce-scatter each way (no free overlap fraction any more: see test_wiring)
    f2, b2 = moe_comm_ms(copies, 2048, 8, 2, span, GroupSpan(2, 2), intra_GBps=450.0, inter_GBps=50.0, opts=opts,
                         probs_bytes=0.0)
    etp = (2 - 1) / 2 * 2 * copies * 2048 * 2 / 450e6
    assert f2 == pytest.approx(fwd + 2 * etp) and b2 == pytest.approx(f2)
    assert moe_comm_ms(copies, 2048, 1, 1, GroupSpan(1, 1), GroupSpan(1, 1), intra_GBps=1, inter_GBps=1,
                       opts=opts) == (0.0, 0.0)


def test_capacity_factor_pads_every_expert():
    # Megatron get_capacity: ceil(k T / E x cf) per expert, E experts
    assert routed_copies(1000, 2, 64, capacity_factor=1.0) == 64 * 32  # ceil(2000/64) = 32
    assert routed_copies(1000, 2, 64, capacity_factor=1.25) == 64 * 40  # ceil(39.06) = 40
    act_padded = expert_activation_bytes(64 * 40, 2048, 768, 1, padded=True, imbalance=1.5)
    act_dropless = expert_activation_bytes(64 * 40, 2048, 768, 1, imbalance=1.5)
    assert act_dropless == pytest.approx(1.5 * act_padded)
    # Megatron's fused SwiGLU (the default): input h, fc1 output 2f, fc2 input f per copy; unfused: gate, up, act, product
    assert act_padded == 64 * 40 * (2048 + 3 * 768) * 2
    unfused = expert_activation_bytes(64 * 40, 2048, 768, 1, padded=True, fused_glu=False)
    assert unfused == 64 * 40 * (2048 + 4 * 768) * 2


def test_weights_and_optimizer_bytes_megatron_formula():
    # Megatron's estimator: 18 B/param, 6 + 12/d with the distributed optimizer; experts: / (ep etp), 6 + 12/edp
    routed = 3 * 2048 * 768 * 128
    for ep, etp, edp in ((8, 1, 1), (8, 1, 4), (4, 2, 2)):
        got = expert_weight_bytes(routed, ep, etp, edp, bytes_per_param=18, optimizer_bytes_per_param=12,
                                  distributed_optimizer=True)
        assert got == pytest.approx(routed / (ep * etp) * (6 + 12 / edp), rel=1e-12)
        plain = expert_weight_bytes(routed, ep, etp, edp, bytes_per_param=18, optimizer_bytes_per_param=12,
                                    distributed_optimizer=False)
        assert plain == pytest.approx(routed / (ep * etp) * 18, rel=1e-12)
    assert expert_weight_bytes(routed, 8, 1, 1, bytes_per_param=18, optimizer_bytes_per_param=12,
                               distributed_optimizer=True, frozen=True) == routed / 8 * 2


def _megatron_args(ep: int, edp: int, dp: int) -> argparse.Namespace:
    s = QWEN3_30B
    return argparse.Namespace(
        kv_channels=s.d_head, num_attention_heads=s.heads, hidden_size=s.hidden, group_query_attention=True,
        num_query_groups=s.n_kv_heads, num_experts=s.experts, swiglu=True, moe_shared_expert_intermediate_size=None,
        moe_layer_freq=1, num_layers=s.layers, moe_ffn_hidden_size=s.moe_ffn, ffn_hidden_size=s.ffn, mtp_num_layers=None,
        normalization="RMSNorm", multi_latent_attention=False, padded_vocab_size=s.vocab,
        untie_embeddings_and_output_weights=True, pipeline_model_parallel_size=1, tensor_model_parallel_size=1,
        use_distributed_optimizer=True, data_parallel_size=dp, expert_model_parallel_size=ep,
        expert_tensor_parallel_size=1, context_parallel_size=1,
    )


def test_parity_with_megatron_estimator_where_installed():
    """Weights + optimizer of one MoE layer against Megatron-LM's own ``compute_weight_and_optimizer_memory``.

    megatron-core's wheel does not ship ``megatron.training``; the test runs
    where a Megatron-LM checkout is importable.
    """
    tm = pytest.importorskip("megatron.training.theoretical_memory_usage")
    s = QWEN3_30B
    dp = 8
    routed_layer = 3 * s.hidden * s.moe_ffn * s.experts
    args = _megatron_args(ep=1, edp=dp, dp=dp)
    theirs = tm.compute_weight_and_optimizer_memory(args)
    # ours: every part of the model at 6 + 12/dp, experts whole (ep = 1); Megatron counts no QK-norm, no router
    ours_per_param = 6 + 12 / dp
    attn = 2 * s.hidden * s.hidden * (1 + s.n_kv_heads / s.heads) * (s.attn_dim / s.hidden)
    layer = attn + routed_layer + 2 * s.hidden
    total = s.layers * layer + s.hidden + 2 * s.vocab * s.hidden
    assert theirs == pytest.approx(total * ours_per_param, rel=1e-9)
    ours_experts = expert_weight_bytes(routed_layer, 1, 1, dp, bytes_per_param=18, optimizer_bytes_per_param=12,
                                       distributed_optimizer=True)
    assert ours_experts == pytest.approx(routed_layer * ours_per_param, rel=1e-12)


def test_expert_grad_sync_over_edp():
    opts = CostOptions(collective_latency_us=0.0, nvlink_efficiency=1.0)
    routed = 3 * 2048 * 768 * 128
    # edp 4 at stride ep*etp = 8 in a 32-rank stage: one rank per node, over the network
    span = group_span(4, 8, 32, 8)
    assert (span.per_node, span.nodes) == (1, 4)
    ms = expert_grad_sync_ms(routed, 8, 1, span, intra_GBps=450.0, inter_GBps=50.0, opts=opts)
    assert ms == pytest.approx(2 * 3 / 4 * routed / 8 * opts.grad_bytes_per_param / 50e6)
    assert expert_grad_sync_ms(routed, 8, 1, GroupSpan(1, 1), intra_GBps=450.0, inter_GBps=50.0, opts=opts) == 0.0


def test_tied_embedding_copy_and_sync():
    V, h = 257152, 2048  # PaliGemma's Gemma-2B vocabulary
    opts = CostOptions(collective_latency_us=0.0, nvlink_efficiency=1.0)
    assert tied_copy_bytes(V * h, 2, 16.0) == V * h / 2 * 16
    # two ranks: an all-reduce sends (2-1)/2 x 2 x the slice
    ms = embedding_sync_ms(V * h, 2, inside_node=False, intra_GBps=450.0, inter_GBps=50.0, opts=opts)
    assert ms == pytest.approx(V * h / 2 * opts.grad_bytes_per_param / 50e6)
    assert embedding_sync_ms(0, 2, inside_node=True, intra_GBps=450.0, inter_GBps=50.0, opts=opts) == 0.0


def test_moe_layer_pattern_follows_the_config():
    spec = ModuleSpec(name="llm", kind="llm", layers=6, hidden=64, heads=4, ffn=128, experts=8, top_k=2, moe_ffn=32,
                      first_dense=1, moe_every=2)
    assert [is_moe_layer(spec, i) for i in range(6)] == [False, True, False, True, False, True]
    assert load_cluster("dgx-h100").gpus_per_node == 8


def test_routed_copy_keeps_what_megatron_grouped_mlp_saves():
    """Closed form per routed copy (Megatron-Core 0.16.1 TEGroupedMLP): fc1's saved input h, then the MLP's f-wide
    tensors: fused weighted SwiGLU saves its input (gate and up, 2f) and fc2 saves its input (f): 3; unfused
    glu(x) * probs keeps gate, up, act(gate), product: 4; a plain MLP its activation input and fc2 input: 2."""
    assert (routed_mlp_tensors(True), routed_mlp_tensors(True, fused_glu=False), routed_mlp_tensors(False)) == (3, 4, 2)
    # GLM-4.5V on one rank: 8 x 8192 copies of h 4096, f 1408, etp 1, plus the router's fp32 logits and probabilities
    copies, h, f, tokens, experts = 8 * 8192, 4096, 1408, 8192, 128
    got = expert_activation_bytes(copies, h, f, 1, router_tokens=tokens, experts=experts)
    assert got == copies * (h + 3 * f) * 2 + 2 * 4 * tokens * experts
    # etp 2: the gathered input whole on each rank, the MLP's tensors over f / 2 columns
    assert expert_activation_bytes(copies, h, f, 2) == 2 * copies * (h + 3 * f / 2) * 2
