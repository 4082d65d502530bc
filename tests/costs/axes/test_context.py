"""Context parallelism: closed forms of the research note's section 6.6 (Ulysses volume, ring bytes, load factor)."""
from __future__ import annotations

import numpy as np
import pytest

from partitioner.costs import CostOptions, model_layers
from partitioner.costs.axes.context import (
    allgather_bytes,
    causal_load_factor,
    cp_algorithms,
    cp_attention_ms,
    cp_problem,
    dense_sync_ranks,
    kv_bytes,
    ring_bytes,
    shard_piece,
    ulysses_bytes,
)
from partitioner.costs.axes.groups import GroupSpan, alltoall_volume, group_span
from partitioner.costs.axes.options import AxisOptions
from partitioner.costs.entry import layer_terms
from partitioner.presets import load_cluster, load_model
from partitioner.problem import ProblemError

BF16 = 2


def causal_pairs_per_rank(s: int, cp: int, balanced: bool) -> np.ndarray:
    """Brute force: unmasked (query, key) pairs each rank computes, from the causal mask itself."""
    owner = np.empty(s, dtype=int)
    if balanced:  # 2 cp chunks, rank i holds chunks i and 2cp-1-i
        u = s // (2 * cp)
        for j in range(2 * cp):
            owner[j * u:(j + 1) * u] = j if j < cp else 2 * cp - 1 - j
    else:
        c = s // cp
        for i in range(cp):
            owner[i * c:(i + 1) * c] = i
    mask = np.tril(np.ones((s, s), dtype=bool))  # query q sees keys k <= q
    per_query = mask.sum(axis=1)
    return np.array([per_query[owner == i].sum() for i in range(cp)])


@pytest.mark.slow
@pytest.mark.parametrize("cp", [2, 4, 8])
def test_load_factor_contiguous_is_exactly_the_brute_force_count(cp):
    s = 64 * cp
    pairs = causal_pairs_per_rank(s, cp, balanced=False)
    assert causal_load_factor(cp, balanced=False, chunk_tokens=s // cp) == pytest.approx(pairs.max() / pairs.mean(), rel=1e-12)
    # long chunks: 2 - 1/cp
    long = causal_pairs_per_rank(4096 * 2, cp, balanced=False)
    assert long.max() / long.mean() == pytest.approx(2 - 1 / cp, rel=2e-3)
    assert causal_load_factor(cp, balanced=False) == 2 - 1 / cp


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_load_factor_head_tail_split_is_one(cp):
    pairs = causal_pairs_per_rank(48 * cp, cp, balanced=True)
    assert (pairs == pairs[0]).all()
    assert causal_load_factor(cp, balanced=True) == 1.0
    assert causal_load_factor(1, balanced=False) == 1.0


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_ulysses_volume_is_4Nh_over_P(cp):
    # MHA, heads x head_dim = h: the forward all-to-alls send (P-1)/P x 4 N h / P elements per rank (DeepSpeed Ulysses)
    s, b, h, heads = 8192, 2, 4096, 32
    N = s * b
    fwd, bwd = ulysses_bytes(cp, s / cp, b, heads, heads, h // heads, tp=1)
    assert fwd == pytest.approx((cp - 1) / cp * 4 * N * h / cp * BF16, rel=1e-12)
    assert bwd == fwd
    # tensor parallelism divides every head count, so the volume too
    fwd_tp, _ = ulysses_bytes(cp, s / cp, b, heads, heads, h // heads, tp=4)
    assert fwd_tp == pytest.approx(fwd / 4, rel=1e-12)


@pytest.mark.parametrize("cp, tp, G", [(2, 1, 8), (4, 2, 8), (8, 1, 4), (8, 8, 4)])
def test_ring_bytes_forward_and_twice_backward(cp, tp, G):
    s, b, d = 16384, 1, 128
    c = s / cp
    kv = kv_bytes(c, b, G, d, tp)
    kv_local = G / tp if G >= tp else 1  # fewer KV heads than tp: one replicated per rank
    assert kv == 2 * c * b * kv_local * d * BF16
    fwd, bwd = ring_bytes(cp, kv)
    assert fwd == (cp - 1) * 2 * c * b * kv_local * d * BF16
    assert bwd == 2 * fwd
    assert allgather_bytes(cp, kv) == (fwd, bwd)
    assert ring_bytes(1, kv) == (0.0, 0.0)


def test_ring_is_hidden_exactly_when_the_chunk_is_long_enough():
    # c >= 2 (G/H) F / B with beta = 2: the half-block step's attention outlasts the KV send
    cl = load_cluster("dgx-h100")
    opts = CostOptions(collective_latency_us=0.0, nvlink_efficiency=1.0)
    H, G, d, b, cp = 64, 4, 128, 1, 8
    F, B = cl.peak_tflops * 1e12, cl.intra_node_GBps * 1e9
    c_min = 2 * (G / H) * F / B
    span = GroupSpan(cp, cp)
    for c, hidden in ((1.1 * c_min, True), (0.9 * c_min, False)):
        # balanced causal attention on one rank: cp steps of 2 c^2 H d FLOPs each
        attn_fwd = cp * 2 * c * c * H * d / F * 1e3
        kv = kv_bytes(c, b, G, d, 1)
        fwd, _ = cp_attention_ms("p2p", cp, span, kv=kv, ulysses=(0.0, 0.0), attn_fwd_ms=attn_fwd,
                                 attn_bwd_ms=2 * attn_fwd, intra_GBps=cl.intra_node_GBps,
                                 inter_GBps=cl.inter_node_GBps, opts=opts)
        assert (fwd == 0.0) == hidden, (c, c_min, fwd)
    assert c_min == pytest.approx(275, rel=0.01)  # the research note's table, G/H = 1/16 on NVLink


def test_allgather_and_ulysses_are_exposed():
    opts = CostOptions(collective_latency_us=0.0, nvlink_efficiency=1.0)
    span = GroupSpan(4, 4)
    kv = 1e8
    fwd, bwd = cp_attention_ms("all_gather", 4, span, kv=kv, ulysses=(0.0, 0.0), attn_fwd_ms=1e9, attn_bwd_ms=1e9,
                               intra_GBps=100.0, inter_GBps=10.0, opts=opts)
    assert fwd == pytest.approx(3 * kv / 100e6) and bwd == pytest.approx(2 * fwd)
    sent = 3e8
    fwd, bwd = cp_attention_ms("a2a", 4, span, kv=kv, ulysses=(sent, sent), attn_fwd_ms=1e9, attn_bwd_ms=1e9,
                               intra_GBps=100.0, inter_GBps=10.0, opts=opts)
    assert fwd == pytest.approx(sent / 100e6) and bwd == fwd
    with pytest.raises(ValueError, match="unknown"):
        cp_attention_ms("ring", 4, span, kv=kv, ulysses=(0, 0), attn_fwd_ms=1, attn_bwd_ms=1, intra_GBps=1,
                        inter_GBps=1, opts=opts)


def test_layers_get_only_the_algorithms_they_can_run():
    assert cp_algorithms() == ("p2p", "a2a", "all_gather")
    assert "p2p" not in cp_algorithms(windowed=True)  # Gemma 3 sliding layers: a2a or all_gather (TE assert)
    assert cp_algorithms(cross=True) == ()  # mllama cross-attention: cp = 1 only


def test_validation_cases():
    # s = 4097 with cp = 2 (2 cp chunks needed)
    assert "4097" in cp_problem(2, 4097, 32, 8, 1, "p2p")
    assert cp_problem(2, 4096, 32, 8, 1, "p2p") is None
    assert cp_problem(2, 4098, 32, 8, 1, "p2p", balanced=False) is None
    # a2a with H/tp = 28 heads per rank and cp = 8 (Qwen2.5-VL-7B: 28 heads, 4 KV heads)
    assert "a2a" in cp_problem(8, 8192, 28, 4, 1, "a2a")
    assert cp_problem(4, 8192, 28, 4, 1, "a2a") is None
    assert cp_problem(4, 8192, 28, 4, 1, "p2p") is None
    assert cp_problem(1, 4097, 28, 4, 1, "a2a") is None


def test_alltoall_volume_and_spans():
    span = GroupSpan(8, 8)
    assert alltoall_volume(800.0, span) == (700.0, 0.0)
    two_nodes = group_span(16, 1, 16, 8)
    assert (two_nodes.ranks, two_nodes.per_node, two_nodes.nodes) == (16, 8, 2)
    assert alltoall_volume(1600.0, two_nodes) == (700.0, 800.0)
    assert alltoall_volume(1600.0, two_nodes, dedup=0.5) == (700.0, 400.0)
    # a cp group at stride tp = 4 in a 32-rank stage: two per node, over 4 nodes
    cp_group = group_span(8, 4, 32, 8)
    assert (cp_group.per_node, cp_group.nodes) == (2, 4)
    assert group_span(8, 4, 8, 8).inside_node  # a stage inside one node
    assert dense_sync_ranks(4, 2) == 8


def test_shard_piece_divides_work_and_activations_by_cp():
    cl = load_cluster("dgx-h100")
    opts = CostOptions()
    llm = load_model("qwen2-vl-7b-video").module("llm")
    layer = next(layer for layer in model_layers(load_model("qwen2-vl-7b-video")) if layer.name == "llm.3")
    piece = layer.pieces[0]
    for cp in (2, 4):
        sharded = shard_piece(piece, cp, load_factor=1.0)
        assert sharded.gemm_flops == pytest.approx(piece.gemm_flops / cp)
        assert sharded.attn_flops == pytest.approx(piece.attn_flops / cp)
        assert sharded.params == piece.params
        f1, b1, w1, a1 = layer_terms((piece,), 1, 1.0, "none", cl, opts)
        fc, bc, wc, ac = layer_terms((sharded,), 1, 1.0, "none", cl, opts)
        assert ac == pytest.approx(a1 / cp, rel=1e-9)  # every stored tensor is sequence-sharded
        assert fc < f1 and wc < w1
        unbalanced = shard_piece(piece, cp, load_factor=causal_load_factor(cp, balanced=False))
        assert unbalanced.attn_flops == pytest.approx(piece.attn_flops * (2 - 1 / cp) / cp)
    assert llm.heads == 28


def test_axis_options_validate_with_field_paths():
    assert AxisOptions.from_mapping({"cp_algorithm": "a2a"}).cp_algorithm == "a2a"
    assert AxisOptions.from_mapping({"cp_degrees": "1,2,4"}).cp_degrees == (1, 2, 4)
    for bad, field in (({"cp_algorithm": "ring"}, "cp_algorithm"), ({"moe_imbalance": 0.5}, "moe_imbalance"),
                       ({"capacity_factor": 0}, "capacity_factor"), ({"cp_degrees": [2, 4]}, "cp_degrees"),
                       ({"nope": 1}, "nope"), ({"ep_overlap": 2}, "ep_overlap"), ({"ep_overlap": 0.5}, "ep_overlap"),
                       ({"ep_dispatcher": "deepep"}, "ep_dispatcher"), ({"grouped_gemm": "loop"}, "grouped_gemm")):
        with pytest.raises(ProblemError, match=f"options.{field}"):
            AxisOptions.from_mapping(bad)
    assert AxisOptions.from_mapping(AxisOptions().to_dict()) == AxisOptions()
