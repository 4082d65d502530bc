"""The routed experts as GPUs run them: grouped GEMMs, permutation, router, host sync, imbalance, dispatchers.

Closed forms from the module's own derivations (DESIGN.md, "2026-12-03: MoE physics"), and the issue-32
behaviour they exist for: ep = 1 pays the same physics with E local experts, so EP wins where Megatron's
MoE guide says it does ("EP yields larger local GEMMs").
"""
from __future__ import annotations

import math

import pytest

from partitioner.costs import CostOptions, build_problem, efficiency, load_cluster
from partitioner.costs.axes.experts import flex_dedup, rank_dedup
from partitioner.costs.axes.groups import GroupSpan
from partitioner.costs.axes.moe_kernels import (
    MAIN_GRAD_BYTES,
    ExpertWork,
    default_imbalance,
    expert_gemm_ms,
    host_sync_ms,
    permutation_traffic,
    router_traffic,
    tile_fill,
)
from partitioner.costs.comm import overlapped_ms
from partitioner.problem import Layout, ProblemError

H100 = load_cluster("dgx-h100")
SINGLE = CostOptions.from_mapping({"grouped_gemm": "single_launch"})


def test_tile_fill_pads_each_expert_to_whole_row_tiles():
    assert tile_fill(64, 128) == pytest.approx(0.5)  # less than half a tile still runs a whole one
    assert tile_fill(1024, 128) == pytest.approx(1024 / 1088)  # on average half a tile more
    assert tile_fill(10**6, 128) > 0.9999
    assert tile_fill(0, 128) == 1.0


def test_few_rows_per_expert_are_memory_bound_on_the_experts_weights():
    # Qwen3-30B-A3B's experts (h 2048, f 768) at ep 1: 128 local experts, 4096 tokens x top-8 -> 256 rows each
    work = ExpertWork(rows=8 * 4096, local_experts=128, hidden=2048, width=768)
    fwd, dgrad, wgrad = expert_gemm_ms(work, H100, SINGLE)
    hbm = H100.hbm_GBps * 1e6 * SINGLE.hbm_efficiency
    acts = 2 * work.rows * (2 * 2048 + 3 * 768)
    assert wgrad == pytest.approx((MAIN_GRAD_BYTES * work.params + acts) / hbm)  # fp32 main_grad read and written
    flops = 2 * work.rows * 2048 * 768 * 3
    compute = flops / (H100.peak_tflops * 1e9 * efficiency(768, work.rows, SINGLE, H100, grouped=True) *
                      tile_fill(256, 128))
    assert fwd == pytest.approx(max(compute, (2 * work.params + acts) / hbm)) and dgrad == fwd
    assert wgrad > 1.5 * compute  # the weight traffic, not the FLOPs, sets the backward
    # the same FLOPs on 16 local experts (ep 8): 2048 rows each, compute-bound at the grouped GEMM's full rate
    big = ExpertWork(rows=8 * 4096, local_experts=16, hidden=2048, width=768)
    f8, d8, w8 = expert_gemm_ms(big, H100, SINGLE)
    full = flops / (H100.peak_tflops * 1e9 * efficiency(768, big.rows, SINGLE, H100, grouped=True))
    # (an H100 runs 768-wide GEMMs at 0.35 of peak, its half-efficiency width scaled by its ops:byte ratio, so
    # the weight traffic EP removes is a smaller share of ep 1's time than on the A100 curve: 0.65, not < 0.6)
    assert f8 == pytest.approx(full / tile_fill(2048, 128)) and f8 + d8 + w8 < 0.7 * (fwd + dgrad + wgrad)


def test_multi_stream_grouped_gemm_has_a_host_floor_per_expert():
    tiny = ExpertWork(rows=128 * 8, local_experts=128, hidden=512, width=128)
    multi = expert_gemm_ms(tiny, H100, CostOptions())
    single = expert_gemm_ms(tiny, H100, SINGLE)
    floor = 2 * 128 * CostOptions().axes.kernel_launch_us * 1e-3  # two cuBLAS calls per local expert
    assert multi == pytest.approx((floor, floor, floor)) and max(single) < floor


def test_permutation_sorts_by_local_expert_only_when_tokens_arrive_from_other_ranks():
    h, f, T = 4096, 1408, 8192.0
    R = 8 * T
    one = permutation_traffic(T, R, R, h, f, local_experts=128, exchanged=False)
    assert one.fwd == pytest.approx(2 * 2 * h * (T + R) + 6 * R * f) and one.bwd == pytest.approx(one.fwd + 4 * R * f)
    ep8 = permutation_traffic(T, R, R, h, f, local_experts=16, exchanged=True)
    assert ep8.fwd - one.fwd == pytest.approx(4 * 2 * h * R)  # sort chunks by local expert and back
    # "when EP = num_experts, local token permutation is eliminated" (Megatron's MoE guide)
    assert permutation_traffic(T, R, R, h, f, local_experts=1, exchanged=True) == one


def test_router_and_host_sync():
    assert router_traffic(1000, 128).fwd == 30.0 * 128_000 and router_traffic(1000, 128).bwd == 20.0 * 128_000
    assert host_sync_ms(CostOptions()) == pytest.approx(0.030)
    assert host_sync_ms(CostOptions.from_mapping({"capacity_factor": 1.25})) == 0.0  # padded: no host copy


def test_default_imbalance_grows_with_ep_and_shrinks_with_experts_per_rank():
    assert default_imbalance(1, 128, 0.125) == 1.0
    assert default_imbalance(8, 16, 0.125) == pytest.approx(1 + 0.125 * math.sqrt(2 * math.log(8) / 16))
    values = [default_imbalance(ep, 128 // ep, 0.125) for ep in (2, 4, 8, 16, 32, 64, 128)]
    assert values == sorted(values) and values[0] > 1.0
    assert default_imbalance(8, 16, 0.0) == 1.0


def test_flex_dedup_sends_a_token_once_per_other_node():
    assert flex_dedup(128, 8, GroupSpan(8, 8)) == 1.0
    # two nodes: the other node holds one of a token's 8 experts unless all 8 fall on this one
    miss = math.comb(64, 8) / math.comb(128, 8)
    assert flex_dedup(128, 8, GroupSpan(16, 8)) == pytest.approx((1 - miss) / (8 / 2))
    assert flex_dedup(128, 8, GroupSpan(16, 8)) < flex_dedup(128, 8, GroupSpan(32, 8)) < 1.0


def test_deepep_sends_a_token_once_per_destination_rank_over_nvlink():
    # 8 ranks of 16 experts: the expected distinct ranks of a token's 8 experts, over its 8 copies
    miss = math.comb(112, 8) / math.comb(128, 8)
    assert rank_dedup(128, 8, 8) == pytest.approx(8 * (1 - miss) / 8)
    assert rank_dedup(128, 8, 1) == rank_dedup(8, 2, 8) == 1.0  # one rank; one expert per rank: every copy
    assert rank_dedup(128, 8, 8) < rank_dedup(128, 8, 32) < 1.0


def test_consecutive_experts_cross_the_network_and_nvlink_once():
    # NeMo AutoModel's FakeBalancedGate: token t to experts t k .. t k + k - 1 (mod E), all on one rank here
    assert rank_dedup(128, 8, 8, "consecutive") == pytest.approx(1 / 8)
    assert flex_dedup(256, 8, GroupSpan(64, 8), "consecutive") == pytest.approx(1 / 8)
    # 4 experts per rank: a token's 8 span two ranks of one node
    assert rank_dedup(256, 8, 64, "consecutive") == pytest.approx(2 / 8)
    assert flex_dedup(256, 8, GroupSpan(64, 8), "consecutive") < flex_dedup(256, 8, GroupSpan(64, 8))


def test_consecutive_routing_makes_a_flex_dispatch_cheaper_and_is_validated():
    opts = {"ep_degrees": [16], "moe_imbalance": 1.0, "ep_dispatcher": "flex"}
    key = Layout(32, 1, ep=16)
    random = build_problem("glm-4.5v", "dgx-h100", nodes=4, global_batch=256, microbatches=8, options=opts)
    local = build_problem("glm-4.5v", "dgx-h100", nodes=4, global_batch=256, microbatches=8,
                          options={**opts, "moe_routing": "consecutive"})
    assert _total(local, key) < _total(random, key)
    with pytest.raises(ProblemError, match="moe_routing"):
        CostOptions.from_mapping({"moe_routing": "sorted"})


def test_overlapped_collective_closed_form():
    assert overlapped_ms(2.0, 0.0, 0.15) == 2.0
    assert overlapped_ms(2.0, 5.0, 0.15) == pytest.approx(0.3)  # hidden, but its SMs slow the compute
    assert overlapped_ms(5.0, 2.0, 0.15) == pytest.approx(3.0 + 0.3)


@pytest.fixture(scope="module")
def glm():
    # forced balance: the physics of the split alone (the routing imbalance is checked below)
    return build_problem("glm-4.5v", "dgx-h100", nodes=4, global_batch=256, microbatches=8,
                         options={"ep_degrees": [2, 4, 8, 16, 32], "moe_imbalance": 1.0})


def _total(problem, key: Layout) -> float:
    costs = next(layer for layer in problem.layers if layer.name == "llm.5").costs
    return costs[key].fwd_ms + costs[key].bwd_ms


def test_ep1_pays_the_same_physics_and_ep_inside_a_node_wins(glm):
    """Issue 32: ep = 1 priced as one dense MLP made EP look slower at every degree."""
    ep1, ep8 = _total(glm, Layout(32, 1)), _total(glm, Layout(32, 1, ep=8))
    assert ep8 < 0.8 * ep1
    # across nodes NCCL's all-to-all runs over one NIC per GPU: EP 16 and 32 cost more than EP 8
    assert _total(glm, Layout(32, 1, ep=16)) > ep8 and _total(glm, Layout(32, 1, ep=32)) > ep8
    # the ep = 1 key holds every expert whole on each rank (ETP = TP): the expert weights / tp
    costs = next(layer for layer in glm.layers if layer.name == "llm.5").costs
    routed = 3 * 4096 * 1408 * 128
    held = costs[Layout(32, 1)].weight_bytes - costs[Layout(32, 1, ep=8)].weight_bytes
    assert held == pytest.approx(routed * 18 * (1 - 1 / 8), rel=1e-6)


def test_a_trained_routers_imbalance_weighs_on_wide_ep():
    """Dropless with the derived imbalance: the busiest rank holds fewer experts as ep grows (default_imbalance)."""
    p = build_problem("glm-4.5v", "dgx-h100", nodes=4, global_batch=256, microbatches=8,
                      options={"ep_degrees": [2, 4, 8, 16, 32]})
    balanced = build_problem("glm-4.5v", "dgx-h100", nodes=4, global_batch=256, microbatches=8,
                             options={"ep_degrees": [2, 4, 8, 16, 32], "moe_imbalance": 1.0})
    cost = {e: _total(p, Layout(32, 1, ep=e)) / _total(balanced, Layout(32, 1, ep=e)) for e in (2, 8, 32)}
    assert 1.0 < cost[2] < cost[8] < cost[32]
    assert _total(p, Layout(32, 1)) == pytest.approx(_total(balanced, Layout(32, 1)))  # one rank: nothing to wait for
    assert min(_total(p, Layout(32, 1, ep=e)) for e in (2, 4)) < _total(p, Layout(32, 1))


def test_an_optional_host_floor_bounds_a_small_moe_layer():
    """moe_host_ms: a MoE layer runs no faster than its host launches it (a third forward, the rest backward)."""
    base = build_problem("qwen3-vl-30b-a3b", "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    floored = build_problem("qwen3-vl-30b-a3b", "dgx-h100", nodes=1, global_batch=64, microbatches=8,
                            options={"moe_host_ms": 60.0})
    key = Layout(8, 1, ep=8)
    a = next(layer for layer in base.layers if layer.name == "llm.3").costs[key]
    b = next(layer for layer in floored.layers if layer.name == "llm.3").costs[key]
    assert a.fwd_ms < 20.0 and b.fwd_ms == pytest.approx(20.0) and b.bwd_ms == pytest.approx(40.0)
    head = Layout(8, 1)
    assert next(layer for layer in floored.layers if layer.name == "llm.head").costs[head] == \
        next(layer for layer in base.layers if layer.name == "llm.head").costs[head]  # dense layers: no floor
